"""The two evaluation protocols and the learning-curve helpers."""

from __future__ import annotations

import numpy as np

from lab.sim import metrics
from lab.sim.curves import save_curves


def test_online_and_last20() -> None:
    correct = np.array([False] * 80 + [True] * 15 + [False] * 5)
    assert metrics.online_error(correct) == 0.85
    assert metrics.last20_accuracy(correct) == 0.75  # last int(0.2 * 100) = 20 rounds
    assert metrics.error(correct, "last20") == 0.25
    assert metrics.last20_accuracy(np.array([True, False])) == 0.0  # at least one round


def test_cumulative_error_and_slope() -> None:
    correct = np.array([False, True, False, True])
    assert np.allclose(metrics.cumulative_error(correct, np.array([1, 2, 3, 4])), [1.0, 0.5, 2 / 3, 0.5])
    pts = metrics.curve_points(10**6)
    assert pts[0] == 1 and pts[-1] == 10**6 and np.all(np.diff(pts) > 0)
    assert np.isclose(metrics.loglog_slope(pts, 3.0 * pts**-0.55, 10**4, 10**6), -0.55)


def test_save_curves_writes_csv_and_png(tmp_path) -> None:
    pts = np.array([1, 10, 100])
    csv_path, png_path = save_curves(
        tmp_path / "sub" / "c", pts, {"a": np.array([[1.0, 0.5, 0.1], [1.0, 0.3, 0.1]])}, title="t"
    )
    lines = csv_path.read_text().splitlines()
    assert lines[0] == "curve,t,mean,std,seeds" and lines[2] == "a,10,0.4,0.1,2"
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
