"""``bench invariance --quick``: the rescaled copies' scales lie in [1e-3, 1e4], differ per column and
per scale seed, and the served label default's rows show no difference (issue 50)."""

from __future__ import annotations

import numpy as np
import pytest

from lab.bench import benches, invariance
from lab.sim.datasets import load_dataset


@pytest.mark.parametrize("scale_seed", invariance.SCALE_SEEDS)
def test_scales_span_the_range_per_column(scale_seed: int) -> None:
    s = invariance.scales(500, scale_seed)
    assert s.min() >= 1e-3 and s.max() <= 1e4 and s.min() < 1e-2 and s.max() > 1e3
    assert not np.array_equal(s, invariance.scales(500, scale_seed + 1000))
    car = load_dataset("car")
    np.testing.assert_array_equal(
        invariance.rescaled(car, scale_seed).X, car.X * invariance.scales(car.d, scale_seed)
    )


@pytest.mark.slow
def test_quick_invariance_bench_label_default_rows() -> None:
    markdown = benches.get("invariance")(True)
    rows = [line for line in markdown.splitlines() if line.startswith("| label default")]
    assert len(rows) == len(invariance.TUNING)
    assert all(line.endswith("| +0.00 | yes |") for line in rows)
    assert "- label default: largest difference 0.00 points (met)" in markdown
