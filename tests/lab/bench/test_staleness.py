"""``bench staleness`` measures replication, not the poll: B's applied version is read from its
``/metrics`` (``GET /models/{name}``, polled before, catches the replica up first), so a replica
following with a long pause is seen to lag by about that pause."""

from __future__ import annotations

import re

from lab.bench import benches
from lab.bench.staleness import PAUSES


def test_quick_run_sees_the_follow_pause() -> None:
    markdown = benches.get("staleness")(True)
    row = r"^\| ([\d.]+) s \| ([\d.]+) \(\d+\) \| \d+ \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \|"
    rows = re.findall(row, markdown, re.M)
    p50 = {(float(pause), float(rate)): float(median) for pause, rate, median, _ in rows}
    assert set(p50) == {(p, r) for p in PAUSES for r in (0.0, 50.0)}, markdown
    short, long = PAUSES
    # Probes come one after another: each finds B in the pause its predecessor began (on average
    # nearly the whole pause), where a poll that caught B up would see a few ms whatever the pause.
    assert p50[(long, 50.0)] > 0.3 * long * 1000 > p50[(short, 50.0)], markdown
    assert "Target p99 < 100 ms" in markdown
