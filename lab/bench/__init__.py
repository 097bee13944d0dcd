"""Benchmarks: ``python -m service bench NAME [--quick]`` and ``bench all``.

Each module of this package registers a function with :data:`benches`. It takes ``quick`` (a
smaller, faster run) and returns the markdown of its results, which the command prints. Speed goals
live here, never in timed tests.
"""

from __future__ import annotations

from collections.abc import Callable

from service.registry import Registry

# A benchmark part takes (quick: bool) and returns its results as markdown.
benches: Registry[Callable[[bool], str]] = Registry("benchmark", "lab.bench")
