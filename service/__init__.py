"""clickboost: an online recommendation service that learns from clicks.

The learners live in :mod:`service.learners` (one algorithm per module), the stream simulator and
paper protocols in :mod:`lab.sim`, reproductions in :mod:`lab.repro` and benchmarks in
:mod:`lab.bench`.
"""

__version__ = "0.1.0"
