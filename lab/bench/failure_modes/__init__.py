"""``clickboost lab bench failure-modes``: what one client can do to the others (issue 51), measured.

Each module of this package is one scenario, run against real servers after the fix. It has
``TITLE`` (one line), ``BEFORE`` (the figure the issue reported before the fix, with where it comes
from) and ``run(quick) -> list[(what, value)]``, the figures it measured. The part runs every
scenario (:func:`scenarios`, in name order) and writes the "Failure modes" section of
``OPERATIONS.md`` (:data:`lab.bench.report.DOCUMENTS`), not of ``BENCHMARKS.md``: what an operator
can expect when a client misbehaves.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import pkgutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from lab.bench import benches, report
from lab.bench.http import _server

#: The Personalizer scenarios' server: one label model, the default, behind an API key.
KEY = "bench-key"
LABELS = ["pasta", "bao", "hummus", "salad"]
MODELS = f"""
[models.grocery]
hashing_bits = 16
labels = {json.dumps(LABELS)}
"""


@contextlib.contextmanager
def grocery_server(**extra: str) -> Iterator[tuple[str, int]]:
    """``python -m service serve`` (memory store) whose default model is :data:`MODELS`' grocery,
    with API key :data:`KEY` and the settings ``extra``; yields (url, pid)."""
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models.toml"
        models.write_text(MODELS)
        settings = {
            "CLICKBOOST_STORE": "memory",
            "CLICKBOOST_CONFIG_FILE": str(models),
            "CLICKBOOST_DEFAULT_MODEL": "grocery",
            "CLICKBOOST_API_KEY": KEY,
            **extra,
        }
        cmd = [sys.executable, "-m", "service", "serve", "--port", "{port}", "--log-level", "warning"]
        with _server(cmd, settings) as up:
            yield up


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
