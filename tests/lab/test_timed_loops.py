"""Timed loops time the learning (issue 51, item 14): every clock of the simulator and of the
benches that report a learner's speed starts after the learner's compiled kernels are loaded.

Each case runs in a fresh process (in this one other tests have loaded the kernels already): the
module's ``time`` is replaced by a stand-in whose clock notes, at each reading, which of the
learner's kernel modules are still cold (:func:`service._jit_cache.cold`). Before the fix the first
reading found BanditBoost's modules cold: their loading was inside the timed loop. No wall-clock
threshold: the order of events is what is asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROLOGUE = """
import json, time as real_time
from service import _jit_cache
from service.learners import learners

MODULES = learners.get("banditboost").kernel_modules()
readings = []

class Clock:
    '''The ``time`` module as the timed code sees it: each reading notes the cold kernel modules.'''

    def __getattr__(self, name):
        return getattr(real_time, name)

    def _read(self, fn):
        readings.append(_jit_cache.cold(MODULES))
        return fn()

    def perf_counter(self):
        return self._read(real_time.perf_counter)

    def process_time(self):
        return self._read(real_time.process_time)
"""

CASES = {
    "simulate": """
import lab.sim.simulate as timed
timed.time = Clock()
from service.cli import main
import contextlib, io
with contextlib.redirect_stdout(io.StringIO()):
    assert main(["simulate", "--learner", "banditboost", "--dataset", "car", "--limit", "200", "--json"]) == 0
""",
    "bench quality": """
import lab.bench.quality as timed
timed.time = Clock()
system = timed.System(name="banditboost", kind="ours", setting="", source="", learner="banditboost")
timed._compute(timed.Run("car", 1, 0, 200, system), {})
""",
    "bench scaling": """
import tempfile
import lab.bench.scaling as timed
timed.time = Clock()
grid = timed.Grid(
    d=(8,), k=(3,), n=(2,), bits=(6,), nnz=2, base_d=8, base_k=3, warmup=20, rounds=40, budget=2.0
)
timed.measure("banditboost", {}, 8, 3, grid, __import__("pathlib").Path(tempfile.mkdtemp()))
""",
}


@pytest.mark.parametrize("case", list(CASES))
def test_kernels_are_loaded_before_the_clock_starts(case: str) -> None:
    script = PROLOGUE + textwrap.dedent(CASES[case]) + "\nprint(json.dumps(readings))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    readings = json.loads(done.stdout.strip().splitlines()[-1])
    assert readings, "the timed code read no clock"
    assert readings[0] == [], f"{case}: the clock started with {readings[0]} still to load"
    assert all(r == [] for r in readings)
