"""clickboost: an online recommendation service that learns from clicks.

The learners live in :mod:`service.learners` (one algorithm per module), the stream simulator and
paper protocols in :mod:`lab.sim`, reproductions in :mod:`lab.repro` and benchmarks in
:mod:`lab.bench`.
"""

from service._jit_cache import configure as _configure_jit_cache

__version__ = "0.1.0"

_configure_jit_cache()  # before any kernel module compiles or loads (service/_jit_cache.py says why)
