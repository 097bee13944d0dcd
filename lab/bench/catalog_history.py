"""``bench catalog-history``: what the catalog's history costs (issue 54, item 5): bytes per retired
row, and the time to rebuild a logged catalog decision's candidates over a 10,000-item catalog.

A catalog of :data:`ITEMS` shop items (:mod:`lab.sim.shop`: 8 features each, numeric and
categorical, as ``bench catalog``) registered at once, then every item replaced once, so that the
history holds :data:`ITEMS` retired rows:

- **bytes per retired row**: what ``Catalog.nbytes`` (the memory budget) counts for the history
  (:meth:`service.catalog_history.History.nbytes`, the arrays' spare capacity included) over its
  rows, and ``tracemalloc``'s count of what forgetting the history frees, over its rows;
- **a rebuild** (:func:`service.catalog_replay.rebuild` of a decision over the whole catalog): at the
  catalog's current version (the live catalog, the selection only), at an earlier version (the
  catalog as of then built from the live rows and the history: what a decision made before a change
  costs), the same from :class:`~service.catalog_replay.Snapshots` (a pass over a log whose
  decisions share a version), and the model's distribution over the rebuilt candidates
  (:meth:`~service.catalog_replay.CatalogReplay.pmf`: 10,000 items scored, IGW); medians of
  :data:`REPEATS` calls on this machine.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from lab.bench import benches, report
from lab.sim.shop import Shop
from service.catalog import Catalog
from service.catalog_replay import Snapshots, rebuild
from service.learners.base import make_learner
from service.runtime.catalog_requests import CatalogQuery, selection_memo

ITEMS = 10_000
BITS = 18
REPEATS = 20


def _items(stream: Any, lo: int, hi: int, offset: int = 0) -> list[dict[str, Any]]:
    """Items ``lo..hi`` of the stream, under the ids of items ``lo - offset..``."""
    return [{"id": stream.item_id(i - offset), "features": stream.features(i)} for i in range(lo, hi)]


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _record(cat: Catalog, version: int, at: float, context: dict[str, Any]) -> dict[str, Any]:
    """A decision-log record (JSON) of a whole-catalog decision at ``version``: its chosen item the
    first candidate (what a rebuild checks), probability 1/K."""
    live = cat.select_all(None, at)
    first = live[0] if version == cat.version else None
    view = cat if first is not None else None
    chosen_id, idx, val = "", [], []
    if view is not None:
        v = view.features(int(first))
        chosen_id, idx, val = view.id_of(int(first)), v.idx.tolist(), v.val.tolist()
    select = json.loads(selection_memo(CatalogQuery(), None, None).tobytes())
    ctx = cat._featuriser(context)
    return {
        "features": {"idx": ctx.idx.tolist(), "val": ctx.val.tolist(), "dim": 1 << BITS},
        "actions": [{"id": chosen_id, "idx": idx, "val": val}],
        "probs": [1.0 / live.size],
        "catalog": {
            "version": version,
            "candidates": live.size,
            "at": at,
            "index": 0,
            "sent": 0,
            "select": select,
        },
    }


def measure(items: int = ITEMS, repeats: int = REPEATS) -> dict[str, float]:
    """The figures of the module docstring, for a catalog of ``items``."""
    stream = Shop("catalog-history", False, 54_901, visits=10, items=2 * items).stream(0)
    cat = Catalog(BITS)
    cat.put_many(_items(stream, 0, items))
    context = stream.context(0)
    old = _record(cat, cat.version, 0.0, context)  # a decision at version 1, before the replacement
    cat.put_many(_items(stream, items, 2 * items, offset=items))  # every item replaced once
    per_row = cat.history.nbytes() / len(cat.history)  # what Catalog.nbytes counts for them
    twin = Catalog(BITS)
    twin.put_many(_items(stream, 0, items))
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.take_snapshot()
    twin.put_many(_items(stream, items, 2 * items, offset=items))
    kept = tracemalloc.take_snapshot()
    twin.history.forget(twin.version)
    gc.collect()
    forgotten = tracemalloc.take_snapshot()
    tracemalloc.stop()

    def total(a: Any, b: Any) -> int:
        return sum(s.size_diff for s in b.compare_to(a, "filename"))

    traced = (total(start, kept) - total(start, forgotten)) / items
    now = _record(cat, cat.version, 0.0, context)
    learner = make_learner("squarecb-adf", 1 << BITS, 1, {}, seed=0)
    rep = rebuild(cat, now)
    snapshots = Snapshots(cat)
    return {
        "items": float(items),
        "bytes per retired row (nbytes)": per_row,
        "bytes per retired row (tracemalloc)": traced,
        "rebuild at the current version ms": _median_ms(lambda: rebuild(cat, now), repeats),
        "rebuild at an earlier version ms": _median_ms(lambda: rebuild(cat, old), max(3, repeats // 4)),
        "rebuild at an earlier version, snapshot kept ms": _median_ms(
            lambda: rebuild(cat, old, snapshots=snapshots), repeats
        ),
        "model's distribution over the rebuilt candidates ms": _median_ms(lambda: rep.pmf(learner), repeats),
    }


def bench_catalog_history(quick: bool) -> str:
    figures = measure(2_000 if quick else ITEMS, 5 if quick else REPEATS)
    n = int(figures.pop("items"))
    rows = [[name, f"{value:,.1f}" if "bytes" in name else f"{value:.2f}"] for name, value in figures.items()]
    command = "python -m service lab bench catalog-history" + (" --quick" if quick else "")
    return (
        "## A catalog's history: retired rows and rebuilds\n\n"
        f"`{command}`. {report.machine()}\n\n"
        f"A catalog of {n:,} shop items (8 features each, `hashing_bits` {BITS}), every item replaced "
        f"once ({n:,} retired rows); a whole-catalog decision's candidates rebuilt (medians). What each "
        "row is: lab/bench/catalog_history.py's docstring.\n\n"
        + report.table(["figure", "value"], rows)
        + "\n"
    )


benches.register("catalog-history")(bench_catalog_history)
