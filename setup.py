"""Build of the one C extension (the metadata is in pyproject.toml).

``service._features`` is the hashed featuriser's hot loop (service/_features.c). It is optional: where
no C compiler is at hand the build goes on without it and service.features runs the same
computation in Python, slower.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("service._features", ["service/_features.c"], optional=True)])
