"""Build of the C extensions (the metadata is in pyproject.toml).

``service._features`` is the hashed featuriser's hot loop (service/_features.c), ``service._decisions``
the decision ids and per-decision generator (service/_decisions.c). Both are optional: where no C
compiler is at hand the build goes on without them and service.features and service.sampling run
the same computations in Python, slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("service._features", ["service/_features.c"], optional=True),
        Extension("service._decisions", ["service/_decisions.c"], optional=True),
    ]
)
