"""``bench catalog``: deciding over a whole catalog on the server (issue 54) against candidates sent.

Parts, one run:

1. **The shop stream** (:mod:`lab.sim.shop`, ours, its docstring documents the generator): 10,000
   live items, 1 % replaced every 1,000 visits, 20,000 visits, :data:`SEEDS` seeds of the
   evaluation variant; online reward (clicks per visit, %, mean ± standard error over the seeds).
   Systems, each at its defaults, driven as the service drives them (decision ids of the seed,
   :mod:`service.sampling`; the Bernoulli click learned as is):

   - **ours, whole catalog**: ``squarecb-adf`` deciding over every live item registered in a
     :class:`service.catalog.Catalog` (:func:`service.catalog_explore.decide`, default
     :class:`~service.catalog_explore.CatalogExploration`), items removed and added as the stream
     replaces them, each decision learned as its shown item sent alone;
   - **ours, 100 random candidates**: ``squarecb-adf`` on the visit's 100 random live items sent with
     their features (:class:`service.actions.ActionFeaturiser`), what a caller does today;
   - **vw --cb_explore_adf** at its defaults (epsilon 0.05) with ``-q ua``, in-process through pyvw,
     on the same 100 random candidates: a ``shared |u`` line of the context and one ``|a`` line per
     candidate (as ``bench actions``), cost ``1 - click``, the action sampled from VW's pmf by a
     generator of the seed;
   - the **oracle** (the live item of highest click probability; not a system: the ceiling).

   **New items' fair share.** Over the visits from the first replacement on, the share of all
   clicks that went to items added mid-stream, divided by the share of the live catalog those items
   were (averaged over the same visits). New items are drawn from the same distribution as the
   initial ones, so a policy that judged every item by its true click probability gets a ratio of 1
   in expectation; below 1 a policy under-serves new items, above 1 it over-serves them. Clicks go
   to few items (the best ones for many visitors), so one stream's ratio is noisy, the oracle's
   included; the table also gives each system's new-item click share divided by the oracle's on the
   same stream (paired by seed: 1 means new items get the clicks they would get if every item's
   click probability were known). The 100-random systems are shown new items in proportion to the
   catalog (their candidates are drawn uniformly), so for them the ratios measure only what they
   choose among those.

   **Tuning** (the tuning variant's seeds only, :data:`TUNE_SEEDS`): the exponent of gamma's growth
   with the candidates (``k_exponent``, :data:`K_EXPONENTS`) of the whole-catalog decision.
2. **Timing**: the scores of 10,000 catalog items for one context (``Catalog.scores``, one compiled
   call) and a whole decision over them, against parsing a predict body of 10 candidates (the shop's
   items; ``service.api.predict.parse``) and featurising it (``ActionFeaturiser``), medians of
   repeated calls on this machine; bulk registration of 100,000 shop items (8 features each,
   featurising included, ``Catalog.put_many``) and the memory per item (``tracemalloc``: what the
   registration keeps allocated, ids and dictionaries included, divided by the items; the arrays'
   own bytes as ``Catalog.array_bytes``, and what ``Catalog.nbytes`` counts for a memory budget).

Runs of part 1 are stored as they finish in :data:`STORE` (:mod:`lab.runcache`, keyed by stream,
seed, system, setting and a fingerprint of the code they ran), so the command resumes; ``--quick``
runs 3,000 visits, 1 seed, into ``out/bench-quick/``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import statistics
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lab.bench import benches, report
from lab.bench.quality import code_digest, learner_files, mean_se
from lab.bench.vw import vw_version
from lab.runcache import cached, progress
from lab.sim.shop import EVALUATION, TUNING, Shop, ShopStream
from lab.sim.stream import ready
from service import _jit_cache
from service.actions import ActionFeaturiser
from service.catalog import Catalog
from service.catalog_explore import CatalogExploration, decide
from service.learners.base import make_learner
from service.sampling import DecisionIds, decision_rng

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "docs" / "repro" / "catalog-runs.jsonl"
BITS = 18
LEARNER = "squarecb-adf"
SEEDS = 3
TUNE_SEEDS = 4
#: gamma's growth with K above the reference swept on the tuning seeds (0: VW's gamma whatever K).
K_EXPONENTS = (0.0, 0.125, 0.25, 0.375, 0.5, 1.0)
VW_ARGS = "-q ua"
#: The driver's revision (what a stored run means); bump when the protocol changes.
DRIVER = "catalog-1"
BULK_ITEMS = 100_000
TIMED_ITEMS = 10_000
REQUEST_CANDIDATES = 10


def _version(system: str) -> str:
    """What a run's numbers depend on: the generator, the driver, and ours' sources or VW's version."""
    h = hashlib.sha256(DRIVER.encode())
    paths = [ROOT / "lab" / "sim" / "shop.py"]
    if system.startswith("ours"):
        paths += [
            *learner_files(LEARNER),
            *(
                ROOT / "service" / name
                for name in ("actions.py", "catalog.py", "catalog_items.py", "catalog_explore.py")
            ),
        ]
    for path in paths:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + code_digest(path))
    if system == "vw":
        h.update(vw_version().encode())
    return h.hexdigest()[:16]


# -- the systems -----------------------------------------------------------------------------------


def _item(stream: ShopStream, i: int) -> dict[str, Any]:
    return {"id": stream.item_id(i), "features": stream.features(i)}


def run_catalog(stream: ShopStream, seed: int, exploration: dict[str, Any]) -> dict[str, Any]:
    """Ours over every live item of a server-side catalog."""
    catalog = Catalog(BITS)
    catalog.put_many([_item(stream, i) for i in stream.initial.tolist()])
    model = make_learner(LEARNER, 1 << BITS, 1, {}, seed=seed)
    context = ActionFeaturiser(BITS, 1000, 1000).context
    settings = CatalogExploration(**exploration)
    ids = DecisionIds.for_seed(seed)
    shown = np.empty(stream.visits, dtype=np.int64)
    ready(model)
    _jit_cache.warm(["service.catalog", "service.catalog_explore"])
    start = time.perf_counter()
    for t in range(stream.visits):
        change = stream.changes(t)
        if change is not None:
            for i in change[0].tolist():
                catalog.remove(stream.item_id(i))
            catalog.put_many([_item(stream, i) for i in change[1].tolist()])
        ctx = context(stream.context(t))
        d = decide(model, catalog, ctx, catalog.select_all(), decision_rng(ids.new()), settings)
        item = int(d.item_id[1:])
        x, dec = d.learn_input(catalog, ctx)
        model.learn(x, dec, stream.click(t, item))
        shown[t] = item
    return _score(stream, shown, time.perf_counter() - start)


def run_random(stream: ShopStream, seed: int) -> dict[str, Any]:
    """Ours on the visit's random live candidates sent with their features."""
    f = ActionFeaturiser(BITS, 1000, 1000)
    model = make_learner(LEARNER, 1 << BITS, 1, {}, seed=seed)
    ids = DecisionIds.for_seed(seed)
    shown = np.empty(stream.visits, dtype=np.int64)
    ready(model)
    start = time.perf_counter()
    for t in range(stream.visits):
        cands = stream.cands[t]
        x = f(stream.context(t), [_item(stream, i) for i in cands.tolist()])
        d = model.decide(x, decision_rng(ids.new()))
        model.learn(x, d, stream.click(t, int(cands[d.label])))
        shown[t] = cands[d.label]
    return _score(stream, shown, time.perf_counter() - start)


def _vw_features(named: dict[str, Any]) -> str:
    return " ".join(f"{k}:{v:.9g}" if isinstance(v, float) else f"{k}={v}" for k, v in named.items())


def run_vw(stream: ShopStream, seed: int) -> dict[str, Any]:
    """``vw --cb_explore_adf -q ua`` (its defaults otherwise) on the visit's random candidates."""
    from vowpalwabbit import Workspace

    vw = Workspace(f"--cb_explore_adf {VW_ARGS} --random_seed {seed} --quiet")
    rng = np.random.default_rng(seed)
    shared = {u: "shared |u " + _vw_features(stream.context_of(u)) for u in range(stream.shop.n_users)}
    lines_of: dict[int, str] = {}
    shown = np.empty(stream.visits, dtype=np.int64)
    start = time.perf_counter()
    for t in range(stream.visits):
        cands = stream.cands[t].tolist()
        for i in cands:
            if i not in lines_of:
                lines_of[i] = "|a " + _vw_features(stream.features(i))
        lines = [shared[int(stream.users[t])], *(lines_of[i] for i in cands)]
        pmf = np.asarray(vw.predict(lines), dtype=np.float64)
        a = min(int(np.searchsorted(np.cumsum(pmf), rng.random() * pmf.sum(), side="right")), pmf.size - 1)
        cost = 0.0 if stream.click(t, cands[a]) else 1.0
        lines[1 + a] = f"0:{cost:g}:{pmf[a]:.9g} {lines[1 + a]}"
        vw.learn(lines)
        shown[t] = cands[a]
    seconds = time.perf_counter() - start
    vw.finish()
    return _score(stream, shown, seconds)


def run_oracle(stream: ShopStream) -> dict[str, Any]:
    """The live item of highest click probability at every visit."""
    live = stream.initial.copy()
    where = {int(i): j for j, i in enumerate(live.tolist())}
    shown = np.empty(stream.visits, dtype=np.int64)
    start = time.perf_counter()
    for t in range(stream.visits):
        change = stream.changes(t)
        if change is not None:
            for old, new in zip(change[0].tolist(), change[1].tolist(), strict=True):
                j = where.pop(old)
                live[j] = new
                where[new] = j
        shown[t] = live[int(np.argmax(stream.prob(t, live)))]
    return _score(stream, shown, time.perf_counter() - start)


def _new_share(stream: ShopStream) -> np.ndarray:
    """At each visit, the share of the live catalog added mid-stream."""
    s = stream.shop
    share = np.zeros(stream.visits)
    new = 0
    for t in range(stream.visits):
        change = stream.changes(t)
        if change is not None:
            new += int(np.sum(change[1] >= s.items)) - int(np.sum(change[0] >= s.items))
        share[t] = new / s.items
    return share


def _score(stream: ShopStream, shown: np.ndarray, seconds: float) -> dict[str, Any]:
    """Clicks per visit, and the new items' fair-share ratio (module docstring)."""
    clicks = np.array([stream.click(t, int(i)) for t, i in enumerate(shown.tolist())])
    after = np.arange(stream.visits) >= stream.shop.replace_every
    new = shown >= stream.shop.items
    share = _new_share(stream)
    click_share = float(clicks[after & new].sum() / max(clicks[after].sum(), 1))
    catalog_share = float(share[after].mean()) if after.any() else math.nan
    return {
        "reward": float(clicks.mean()),
        "new_click_share": click_share,
        "new_catalog_share": catalog_share,
        "fair_share": click_share / catalog_share if catalog_share > 0 else math.nan,
        "seconds": seconds,
    }


def _run(store: Path | None, shop: Shop, visits: int, seed: int, system: str, setting: Any) -> dict[str, Any]:
    """A stored run (computed and stored if missing): ``system`` is ``ours-catalog``, ``ours-random``,
    ``vw`` or ``oracle``."""
    key = json.dumps(["catalog", shop.name, visits, seed, system, setting, _version(system)], sort_keys=True)

    def compute() -> dict[str, Any]:
        stream = shop.stream(seed, visits)
        if system == "ours-catalog":
            got = run_catalog(stream, seed, setting)
        elif system == "ours-random":
            got = run_random(stream, seed)
        elif system == "vw":
            got = run_vw(stream, seed)
        else:
            got = run_oracle(stream)
        progress(f"{shop.name} seed {seed} {system} {setting}: reward {got['reward']:.4f}")
        return got

    return cached(store, key, compute)


# -- timing ----------------------------------------------------------------------------------------


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timing(quick: bool) -> tuple[str, dict[str, float]]:
    """The scoring and parsing medians, bulk registration and memory per item (module docstring)."""
    from service.api.predict import parse
    from service.api.schemas import PredictRequest

    repeats = 50 if quick else 500
    shop = Shop(
        "timing", False, 54_900, visits=1, items=max(TIMED_ITEMS, BULK_ITEMS), random=REQUEST_CANDIDATES
    )
    stream = shop.stream(0)
    catalog = Catalog(BITS)
    catalog.put_many([_item(stream, i) for i in range(TIMED_ITEMS)])
    model = make_learner(LEARNER, 1 << BITS, 1, {}, seed=0)
    model.w_[:] = np.random.default_rng(0).normal(size=model.w_.size)  # the time does not depend on them
    f = ActionFeaturiser(BITS, 1000, 1000)
    ctx = f.context(stream.context(0))
    slots = catalog.select_all()
    _jit_cache.warm(["service.catalog", "service.catalog_explore", *type(model).kernel_modules()])
    score = _median_seconds(lambda: catalog.scores(model.w_, ctx, slots), repeats)
    rng = np.random.default_rng(1)
    whole = _median_seconds(lambda: decide(model, catalog, ctx, catalog.select_all(), rng), repeats)
    bodies = [
        json.dumps(
            {
                "model": "shop",
                "features": stream.context(0),
                "actions": [
                    _item(stream, int(i)) for i in rng.choice(TIMED_ITEMS, REQUEST_CANDIDATES, replace=False)
                ],
            }
        ).encode()
        for _ in range(200)
    ]
    for b in bodies:  # warm the featuriser's cache of keys, as a serving model's is
        body = parse(PredictRequest, b)
        f(body.features, body.actions)
    it = iter(bodies * (repeats // len(bodies) + 1))
    parse_only = _median_seconds(lambda: parse(PredictRequest, next(it)), repeats)

    def parse_featurise() -> None:
        body = parse(PredictRequest, next(it))
        f(body.features, body.actions)

    it = iter(bodies * (repeats // len(bodies) + 1))
    parse_feat = _median_seconds(parse_featurise, repeats)
    n_bulk = BULK_ITEMS // 5 if quick else BULK_ITEMS
    bulk = [_item(stream, i) for i in range(n_bulk)]
    gc.collect()
    start = time.perf_counter()
    Catalog(BITS).put_many(bulk)
    register = time.perf_counter() - start
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = Catalog(BITS)
    kept.put_many(bulk)
    gc.collect()
    per_item = (tracemalloc.get_traced_memory()[0] - before) / n_bulk
    tracemalloc.stop()
    arrays = kept.array_bytes() / n_bulk
    counted = kept.nbytes() / n_bulk
    entries = kept.entries / n_bulk
    figures = {
        "score": score,
        "decide": whole,
        "parse": parse_only,
        "parse_featurise": parse_feat,
        "register": register,
        "per_item": per_item,
    }
    rows = [
        [
            f"scores of {TIMED_ITEMS:,} catalog items, one context (`Catalog.scores`)",
            f"{1e6 * score:,.0f} µs",
        ],
        [
            f"a decision over the {TIMED_ITEMS:,} items (scores, inverse gap weighting, draw, top 10)",
            f"{1e6 * whole:,.0f} µs",
        ],
        [f"parsing a predict body of {REQUEST_CANDIDATES} candidates", f"{1e6 * parse_only:,.0f} µs"],
        ["parsing and featurising it (today's cost of the candidates)", f"{1e6 * parse_feat:,.0f} µs"],
        [
            f"bulk registration of {n_bulk:,} items of 8 features (`Catalog.put_many`, featurising included)",
            f"{register:.2f} s",
        ],
        [
            f"memory per item ({n_bulk:,} registered; tracemalloc: arrays, ids, dictionaries)",
            f"{per_item:,.0f} B",
        ],
        [
            f"of which the arrays (`Catalog.array_bytes`; {entries:.1f} hashed entries per item)",
            f"{arrays:,.0f} B",
        ],
        ["what `Catalog.nbytes` counts per item (for a memory budget)", f"{counted:,.0f} B"],
    ]
    table = report.table(["what", "median"], rows)
    ratio = score / parse_feat
    text = (
        f"{table}\n\nScores of {TIMED_ITEMS:,} items cost **{ratio:.1f}x** parsing and featurising a "
        f"{REQUEST_CANDIDATES}-candidate body ({score / parse_only:.1f}x parsing alone); the issue asks "
        f"for about 1x. Bulk registration of {n_bulk:,} items: {register:.2f} s (target <= 10 s for "
        f"100,000). A 100,000-item catalog at {per_item:,.0f} B per item: "
        f"{per_item * 100_000 / 2**20:,.0f} MiB, within the default model budget of 512 MiB beside "
        "the model's own 2**18 x 3 float64 arrays (6 MiB)."
    )
    return text, figures


# -- the bench -------------------------------------------------------------------------------------


def _cell(values: list[float]) -> str:
    m, se = mean_se(values)
    return f"{100 * m:.2f}" if math.isnan(se) else f"{100 * m:.2f} ± {100 * se:.2f}"


def _ratio(values: list[float]) -> str:
    m, se = mean_se(values)
    return f"{m:.2f}" if math.isnan(se) else f"{m:.2f} ± {se:.2f}"


def bench_catalog(quick: bool, log: Callable[[str], None] = progress) -> str:
    out = report.out_dir(quick)
    store = out / "bench" / "catalog-runs.jsonl" if quick else STORE
    visits, seeds, tune_seeds = (3_000, 1, 1) if quick else (EVALUATION.visits, SEEDS, TUNE_SEEDS)
    default = CatalogExploration()
    log("tuning: gamma's growth with K")
    tune_rows, best = [], (-1.0, 0.0)
    for e in K_EXPONENTS:
        setting = {"k_exponent": e}
        runs = [_run(store, TUNING, visits, s, "ours-catalog", setting) for s in range(tune_seeds)]
        m = float(np.mean([r["reward"] for r in runs]))
        best = max(best, (m, e))
        mark = " (default)" if e == default.k_exponent else ""
        tune_rows.append(
            [f"{e:g}{mark}", _cell([r["reward"] for r in runs]), _ratio([r["fair_share"] for r in runs])]
        )
    tuning = report.table(["k_exponent", "reward %", "new items' fair-share ratio"], tune_rows)
    log("evaluation seeds")
    systems = [
        ("**ours, whole catalog** (`squarecb-adf`, defaults)", "ours-catalog", {}),
        ("ours, 100 random candidates (`squarecb-adf`, defaults)", "ours-random", None),
        (f"vw --cb_explore_adf {VW_ARGS} (defaults), 100 random candidates", "vw", VW_ARGS),
        ("oracle: the live item of highest click probability", "oracle", None),
    ]
    results = {
        label: [_run(store, EVALUATION, visits, s, system, setting) for s in range(seeds)]
        for label, system, setting in systems
    }
    oracle = [r["new_click_share"] for r in results[systems[-1][0]]]
    rows = [
        [
            label,
            _cell([r["reward"] for r in runs]),
            _ratio([r["fair_share"] for r in runs]),
            _ratio([r["new_click_share"] / o for r, o in zip(runs, oracle, strict=True)]),
            f"{100 * np.mean([r['new_click_share'] for r in runs]):.1f} / "
            f"{100 * np.mean([r['new_catalog_share'] for r in runs]):.1f}",
            f"{np.mean([r['seconds'] for r in runs]):.1f}",
        ]
        for label, runs in results.items()
    ]
    table = report.table(
        [
            "system",
            "reward %",
            "new items' fair-share ratio",
            "new items' clicks ÷ the oracle's",
            "their clicks % / catalog %",
            "seconds per run",
        ],
        rows,
    )
    ours = np.array([r["reward"] for r in results[systems[0][0]]])
    margins, ahead = [], True
    for label, _, _ in systems[1:3]:
        diff = ours - np.array([r["reward"] for r in results[label]])
        m, se = mean_se(diff.tolist())
        ahead &= m > 0
        margins.append(
            f"{100 * m:+.2f}" + ("" if math.isnan(se) else f" ± {100 * se:.2f}") + f" over {label}"
        )
    log("timing")
    timing_text, _ = timing(quick)
    command = "python -m service lab bench catalog" + (" --quick" if quick else "")
    size = f" `--quick`: {visits:,} visits, {seeds} seed." if quick else ""
    return (
        "## A catalog on the server\n\n"
        f"`{command}`. {report.machine([f'vowpalwabbit {vw_version()}'])}{size}\n\n"
        "The shop stream of lab/sim/shop.py (its docstring documents the generator): 10,000 live items "
        "with numeric and categorical features, 1 % replaced every 1,000 visits, clicks from the "
        f"visitor's features crossed with the item's; {visits:,} visits, {seeds} evaluation seed"
        f"{'s' if seeds > 1 else ''} (mean ± standard error); ours with `hashing_bits` {BITS}. What every "
        "system is and the fair-share measure: lab/bench/catalog.py's docstring.\n\n"
        "### Must show\n\n"
        f"- Ours over the whole catalog, points of reward, paired by seed: {'; '.join(margins)}. Ahead of "
        f"both: **{'yes' if ahead else 'NO'}**.\n\n"
        f"{table}\n\n"
        f"### Tuning ({tune_seeds} tuning seed{'s' if tune_seeds > 1 else ''}; other generator seeds)\n\n"
        "The whole-catalog decision's `k_exponent` (gamma grows as (K / 10)^k_exponent above 10 "
        f"candidates; 0 is VW's gamma whatever K). Best on the tuning seeds: {best[1]:g}; the default: "
        f"{default.k_exponent:g}.\n\n{tuning}\n\n"
        f"### Timing (this machine, shared)\n\n{timing_text}\n"
    )


benches.register("catalog")(bench_catalog)
