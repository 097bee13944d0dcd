"""``bench catalog-predict`` (issue 54): one server's five loads (a 3-slot page among them), small."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lab.bench import catalog_predict as bench


def test_one_store_runs_every_load_and_answers_stay_small(tmp_path: Path) -> None:
    r = bench.run_store("memory", 40, tmp_path)
    for key in ("whole", "ids", "page", "sent", "changing"):
        latencies, largest = r[key]
        assert len(latencies) == 40 and np.all(latencies > 0)
        assert largest > 0
    assert all(r[key][1] <= bench.TARGETS["bytes"] for key in ("whole", "ids", "page"))
    assert r["changes"] >= 0
