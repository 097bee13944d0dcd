"""``clickboost lab bench failure-modes``: what one client can do to the others (issue 51), measured.

Each module of this package is one scenario, run against real servers after the fix. It has
``TITLE`` (one line), ``BEFORE`` (the figure the issue reported before the fix, with where it comes
from) and ``run(quick) -> list[(what, value)]``, the figures it measured. The part runs every
scenario (:func:`scenarios`, in name order) and writes the "Failure modes" section of
``OPERATIONS.md`` (:data:`lab.bench.report.DOCUMENTS`), not of ``BENCHMARKS.md``: what an operator
can expect when a client misbehaves.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from lab.bench import benches, report


def scenarios() -> list[ModuleType]:
    """Every scenario module of this package, in name order."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.ispkg)
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


def bench_failure_modes(quick: bool) -> str:
    """Run every scenario; the section's markdown."""
    parts = [
        "## Failure modes\n\n"
        f"`python -m service lab bench failure-modes{' --quick' if quick else ''}`. {report.machine()}\n\n"
        "Each scenario is a client misbehaving against real servers (`python -m service serve` on "
        "loopback) while others go on; what it measured after the fix, and the figure issue #51 "
        "reported before it. The scenarios are the modules of `lab/bench/failure_modes/`.\n"
    ]
    for module in scenarios():
        rows = module.run(quick)
        name = module.__name__.rsplit(".", 1)[1]
        parts.append(
            f"### {module.TITLE}\n\n"
            f"`lab/bench/failure_modes/{name}.py`. Before: {module.BEFORE}.\n\n"
            f"{report.table(['after the fix', 'measured'], rows)}\n"
        )
    return "\n".join(parts)


benches.register("failure-modes")(bench_failure_modes)
