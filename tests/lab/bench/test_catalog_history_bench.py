"""``bench catalog-history`` (issue 54, item 5): the figures of a small catalog, each measured."""

from __future__ import annotations

from lab.bench import catalog_history as bench


def test_the_figures_of_a_small_catalog() -> None:
    figures = bench.measure(items=300, repeats=2)
    assert figures["items"] == 300
    assert figures["bytes per retired row (nbytes)"] >= 16 * 8  # at least the entries of 8 features
    assert figures["bytes per retired row (tracemalloc)"] > 0
    assert all(v > 0 for k, v in figures.items() if k.endswith("ms"))
