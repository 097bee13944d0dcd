"""``bench actions``: action-feature models (issue 39) against ``vw --cb_explore_adf``.

Parts, one run:

1. **Catalog streams** (:mod:`lab.sim.catalog`, ours, :data:`lab.sim.catalog.STREAMS`): a fixed
   catalog (``synthetic``), a **churn** stream (new items keep arriving, old ones leave), both again
   with **graded** rewards (the shown item's click probability itself, issue 50), a catalog with
   **prices** in dollars and users' budgets in dollars a month (numbers in a raw unit), and
   **dayparts** (a taste that changes in the evening: a reward nonlinear in the features, context x
   context x action); each with a tuning variant (other generator seeds and sizes, marked
   "(tuning)") and an evaluation variant; 5 seeds; online reward (mean reward over the stream: clicks,
   or the graded values; mean ± standard error over the seeds). Systems:

   - ours at the defaults of their ``Params`` (``squarecb-adf``, ``cova-adf``), over the rows of
     :mod:`service.actions` (``hashing_bits`` :data:`BITS`), driven as the service drives them
     (decision ids and sampling of :mod:`service.sampling`; a graded reward given to a learner that
     takes it, else the Bernoulli bit the runtime draws, :func:`service.sampling.reward_bit`);
   - ``vw --cb_explore_adf`` with each explorer of :data:`VW_EXPLORERS` at VW's defaults, in-process
     through pyvw: ADF text examples, a ``shared |u`` line of the context and one ``|a`` line per
     candidate, ``-q ua`` (our rows hold the same products; the shared and action features are in
     every line on their own, as our rows' ``c x 1`` and ``1 x a`` parts), cost ``1 - reward`` (a
     graded reward's value too), the action sampled from VW's pmf by a generator of the seed;
   - **fixed-label models** of the same traffic (protocol, ours): a label model whose labels are
     every item id of the whole stream, created up front (a fixed-label model cannot name an item
     it was not created with, so it is given them all), restricted each round to the candidates with
     ``eligible``; its input is the context as dense features (the observed latent vector and the
     segment one-hot, :meth:`CatalogStream.dense_context`); SquareCB and the served default C-OVA at
     their defaults. Every label, a new item's included, is learned from scratch.

   On the churn stream also the **reward on new items' first 100 appearances**: the mean reward of
   the rounds whose shown item is a candidate for at most the 100th time (an appearance is a round
   in which the item is a candidate), with how many rounds that is.

   **Tuning** (tuning streams only, :data:`TUNE_SEEDS` seeds each): a VW sweep (learning rate ``-l``,
   ``-q ua`` on / off, each explorer's own scale, :func:`vw_sweep`) whose best setting per explorer
   is then run on the evaluation streams ("tuned on the tuning streams"), and a sweep of our
   learners' parameters (:data:`OURS_SWEEP`). The must-show table: the served action default
   (:data:`service.config.DEFAULT_ACTION_LEARNER`) minus each VW explorer at its defaults, per
   evaluation stream, paired by seed.
2. **Label data sets as action problems**: each label an action whose only feature is its id
   (``{"label": "k"}``), the context the data set's features as named numeric features (zeros left
   out); click iff the shown action is the true label, so online error = 1 - reward. Beside it the
   label models at their defaults on the same shuffles (:func:`lab.sim.simulate.run_seeds`).
3. **HTTP rate**: one server (memory store), a hashed label model (30 named features, K=10, the
   served default learner) and an action-feature model (the default action learner; 30 context
   features, 10 candidates of 10 features each), predict+feedback pairs over 8 keep-alive
   connections, the two loads alternated; target (issue 39): action pairs/s >= 0.5 x label pairs/s.

Runs of parts 1 and 2 are stored as they finish in :data:`STORE` (:mod:`lab.runcache`, keyed by
the stream, seed, system, setting and a fingerprint of the code they ran), so the command resumes;
``--quick`` runs short streams, 2 seeds, into ``out/bench-quick/``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lab.bench import benches, report
from lab.bench.http import CONNECTIONS, _hashed_bodies, _load, _pair, _servers
from lab.bench.quality import code_digest, learner_files, mean_se
from lab.bench.vw import vw_version
from lab.runcache import cached, progress
from lab.sim.catalog import CHURN_EVALUATION, STREAMS, Catalog, CatalogStream
from lab.sim.datasets import Dataset, load_dataset
from lab.sim.metrics import online_error
from lab.sim.simulate import run_seeds
from lab.sim.stream import ready
from service.actions import ActionFeaturiser, ActionInput
from service.config import DEFAULT_ACTION_LEARNER
from service.learners.base import learners, make_learner
from service.sampling import DecisionIds, decision_rng, reward_bit

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "docs" / "repro" / "actions-runs.jsonl"
BITS = 18
SEEDS = 5
TUNE_SEEDS = 2
NEW = 100  # an item's first NEW appearances
OURS: dict[str, dict[str, Any]] = {"squarecb-adf": {}, "cova-adf": {}}
TUNING_STREAMS: tuple[Catalog, ...] = tuple(t for t, _ in STREAMS)
EVALUATION_STREAMS: tuple[Catalog, ...] = tuple(e for _, e in STREAMS)
#: VW's explorers at its defaults (``--cover`` and ``--bag`` have none: 4 as bench quality, and
#: ``--bag 5`` as VW's documentation; ``--epsilon`` 0.05 is ``--cb_explore_adf``'s default explorer
#: spelled out).
VW_EXPLORERS: dict[str, str] = {
    "squarecb": "--squarecb",
    "epsilon": "--epsilon 0.05",
    "bag": "--bag 5",
    "regcb": "--regcb",
    "cover": "--cover 4",
}
#: The explorers run on the evaluation streams, at their defaults and at their best of the sweep: the
#: three issue 50 names (regcb and cover at their defaults: the tuning table).
VW_EVALUATED = ("squarecb", "epsilon", "bag")
#: The explorers' own scales swept on the tuning streams (beside ``-l`` and ``-q``).
VW_SCALES: dict[str, tuple[str, ...]] = {
    "squarecb": (
        "--squarecb",
        "--squarecb --gamma_scale 100",
        "--squarecb --gamma_scale 1000",
    ),
    "epsilon": ("--epsilon 0.01", "--epsilon 0.05", "--epsilon 0.2"),
    "bag": ("--bag 5",),
    "regcb": ("--regcb", "--regcbopt"),
    "cover": ("--cover 4",),
}
#: VW's learning rates swept (its default only: the sweep of issue 39 found ``-l`` 0.5 best or level
#: for every explorer on the click streams, and the explorers' scales matter more).
VW_RATES = (0.5,)
#: Context pairs tried on the tuning streams (their contexts have 5 to 6 non-zeros, so any bound from 6
#: on builds every pair), each row of the sweep table with them shown beside the best. SquareCB-ADF's
#: bound is 16: a request with a wider context (the HTTP load's 30 features) gets no pairs.
PAIRS_SWEPT = 64
SQUARECB_PAIRS = 16
OURS_SWEEP: dict[str, list[dict[str, Any]]] = {
    "squarecb-adf": [
        {"gamma_scale": g} | ({"context_pairs": SQUARECB_PAIRS} if pairs else {})
        for g in (100.0, 300.0, 1000.0, 3000.0)
        for pairs in (False, True)
    ]
    + [{"eta": e, "gamma_scale": 1000.0} for e in (0.25, 1.0)],
    "cova-adf": [{"C": c, "epsilon": 0.01} for c in (0.01, 0.1)]
    + [{"context_pairs": PAIRS_SWEPT}, {"C": 0.1, "context_pairs": PAIRS_SWEPT}],
}
#: Ours on the label data sets: each at its defaults (issue 39's variants of cova-adf with context
#: pairs are in the git history of this section; issue 50 moved the served default to squarecb-adf).
LABEL_SET_SYSTEMS: dict[str, tuple[str, dict[str, Any]]] = {
    "squarecb-adf": ("squarecb-adf", {}),
    "cova-adf": ("cova-adf", {}),
}
LABELS: dict[str, tuple[str, dict[str, Any]]] = {
    "label squarecb": ("squarecb", {}),
    "label cova": ("cova", {}),
}
TUNING_SETS = ("car", "dna", "nursery", "digits")
#: bench quality's two smallest other data sets: the label models' runs on the others (isolet,
#: connect4, synsep, synnonsep, mnist) are not stored and took most of this bench's hour.
EVALUATION_SETS = ("balance", "mice")
HTTP_SECONDS = 10.0
HTTP_TARGET = 0.5
CONTEXT_FEATURES, ACTION_FEATURES, CANDIDATES = 30, 10, 10


def _fingerprint(paths: list[Path]) -> str:
    """The code of ``paths`` and of the stream generator (:func:`lab.bench.quality.code_digest`:
    docstrings and comments left out)."""
    h = hashlib.sha256()
    for path in [*paths, ROOT / "lab" / "sim" / "catalog.py"]:
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + code_digest(path))
    return h.hexdigest()[:16]


def _version(kind: str, learner: str = "") -> str:
    """What a run's numbers depend on: the generator and the learner's sources (ours, label models;
    :func:`lab.bench.quality.learner_files`), or VW's version and this driver's revision."""
    if kind == "vw":
        return f"vowpalwabbit {vw_version()} adf-2 " + _fingerprint([])
    return _fingerprint([*learner_files(learner), ROOT / "service" / "actions.py"])


# -- catalog streams ------------------------------------------------------------------------------


def _score(stream: CatalogStream, shown: np.ndarray, seconds: float) -> dict[str, Any]:
    """Reward of the shown candidates (clicks, or on a graded stream the values), overall and on
    rounds showing an item among its first :data:`NEW` appearances."""
    t = np.arange(stream.rounds)
    p = np.array([stream.prob(i)[a] for i, a in zip(t.tolist(), shown.tolist(), strict=True)])
    reward = p if stream.catalog.graded else stream.uniform < p
    new = stream.appearance[t, shown] <= NEW
    return {
        "reward": float(reward.mean()),
        "new_reward": float(reward[new].mean()) if new.any() else math.nan,
        "new_rounds": int(new.sum()),
        "seconds": seconds,
    }


def _learned(graded: bool, decision_id: str, reward: bool | float) -> bool | float:
    """What a learner learns from ``reward``, as the runtime hands it over: a graded reward itself
    to a learner that takes one, else the Bernoulli bit the decision id draws
    (:func:`service.sampling.reward_bit`)."""
    if isinstance(reward, bool) or graded:
        return reward
    return reward_bit(decision_id, reward)


def run_ours(learner: str, params: dict[str, Any], stream: CatalogStream, seed: int) -> dict[str, Any]:
    """One pass of our action learner over ``stream`` (decision ids of ``seed``, as the service)."""
    f = ActionFeaturiser(BITS, 1000, 1000)
    model = make_learner(learner, 1 << BITS, 1, params, seed=seed)
    ids = DecisionIds.for_seed(seed)
    shown = np.empty(stream.rounds, dtype=np.int64)
    ready(model)  # kernels loaded before the clock
    start = time.perf_counter()
    for t in range(stream.rounds):
        x = f(stream.context(t), stream.actions(t))
        did = ids.new()
        d = model.decide(x, decision_rng(did))
        model.learn(x, d, _learned(model.graded, did, stream.reward(t, d.label)))
        shown[t] = d.label
    return _score(stream, shown, time.perf_counter() - start)


def run_label(learner: str, params: dict[str, Any], stream: CatalogStream, seed: int) -> dict[str, Any]:
    """A fixed-label model of every item id of ``stream``, each round restricted to its candidates."""
    x0 = stream.dense_context(0)
    model = make_learner(learner, x0.size, stream.n_items, params, seed=seed)
    ids = DecisionIds.for_seed(seed)
    shown = np.empty(stream.rounds, dtype=np.int64)
    eligible = np.zeros(stream.n_items, dtype=np.bool_)
    ready(model)  # kernels loaded before the clock
    start = time.perf_counter()
    for t in range(stream.rounds):
        cands = stream.cands[t]
        eligible[cands] = True
        x = stream.dense_context(t)
        did = ids.new()
        d = model.decide(x, decision_rng(did), eligible)
        eligible[cands] = False
        a = int(np.flatnonzero(cands == d.label)[0])
        model.learn(x, d, _learned(model.graded, did, stream.reward(t, a)))
        shown[t] = a
    return _score(stream, shown, time.perf_counter() - start)


def _vw_features(named: dict[str, Any]) -> str:
    return " ".join(f"{k}:{v:.9g}" if isinstance(v, float) else f"{k}={v}" for k, v in named.items())


def run_vw(args: str, stream: CatalogStream, seed: int) -> dict[str, Any]:
    """``vw --cb_explore_adf <args>`` over ``stream`` (``args`` includes ``-q ua`` when wanted)."""
    from vowpalwabbit import Workspace

    vw = Workspace(f"--cb_explore_adf {args} --random_seed {seed} --quiet")
    rng = np.random.default_rng(seed)
    shared: dict[str, str] = {}
    items: dict[int, str] = {}
    shown = np.empty(stream.rounds, dtype=np.int64)
    start = time.perf_counter()
    for t in range(stream.rounds):
        named = stream.context(t)
        key = json.dumps(named, sort_keys=True)
        if key not in shared:
            shared[key] = "shared |u " + _vw_features(named)
        lines = [shared[key]]
        for i in stream.cands[t].tolist():
            if i not in items:
                items[i] = "|a " + _vw_features(stream.action_of(i)["features"])
            lines.append(items[i])
        pmf = np.asarray(vw.predict(lines), dtype=np.float64)
        a = min(int(np.searchsorted(np.cumsum(pmf), rng.random() * pmf.sum(), side="right")), pmf.size - 1)
        cost = 1.0 - float(stream.reward(t, a))  # a graded reward's value, as ours learn it
        lines[1 + a] = f"0:{cost:.9g}:{pmf[a]:.9g} {lines[1 + a]}"
        vw.learn(lines)
        shown[t] = a
    seconds = time.perf_counter() - start
    vw.finish()
    return _score(stream, shown, seconds)


def _run(store: Path | None, catalog: Catalog, rounds: int, seed: int, system: str, setting: Any) -> dict:
    """A stored run (computed and stored if missing): ``system`` is ``ours``, ``label`` or ``vw``."""
    kind, learner = system.split(":", 1) if ":" in system else (system, "")
    key = json.dumps(
        ["actions", catalog.name, rounds, seed, system, setting, _version(kind, learner)], sort_keys=True
    )

    def compute() -> dict[str, Any]:
        stream = catalog.stream(seed, rounds)
        if kind == "ours":
            got = run_ours(learner, setting, stream, seed)
        elif kind == "label":
            got = run_label(learner, setting, stream, seed)
        else:
            got = run_vw(setting, stream, seed)
        progress(f"{catalog.name} seed {seed} {system} {setting}: reward {got['reward']:.4f}")
        return got

    return cached(store, key, compute)


def _cell(values: list[float]) -> str:
    m, se = mean_se(values)
    return f"{100 * m:.2f} ± {100 * se:.2f}" if len(values) > 1 else f"{100 * m:.2f}"


def _vw_args(explorer: str, rate: float | None = None, q: bool = True) -> str:
    return explorer + (f" -l {rate:g}" if rate is not None else "") + (" -q ua" if q else "")


def vw_sweep(store: Path | None, rounds: int | None, seeds: int) -> tuple[str, dict[str, str]]:
    """The VW sweep on the tuning streams: per explorer, every scale x ``-l`` x ``-q``; the table of
    each explorer's default and best setting (mean reward over both tuning streams and ``seeds``), and
    the best setting's arguments per explorer (every tuning stream of :data:`TUNING_STREAMS`)."""
    best: dict[str, str] = {}
    rows = []
    for name, scales in VW_SCALES.items():
        scored = []
        for scale in scales:
            for rate in VW_RATES:
                for q in (True,):
                    args = _vw_args(scale, rate, q)
                    vals = [
                        _run(store, c, rounds or c.rounds, s, "vw", args)["reward"]
                        for c in TUNING_STREAMS
                        for s in range(seeds)
                    ]
                    scored.append((float(np.mean(vals)), args))
        default = _vw_args(VW_EXPLORERS[name], 0.5, True)
        default_mean = next(m for m, a in scored if a == default)
        top, args = max(scored)
        best[name] = args
        rows.append([name, f"`{default}`", f"{100 * default_mean:.2f}", f"`{args}`", f"{100 * top:.2f}"])
    table = report.table(["explorer", "default", "reward %", "best of sweep", "reward %"], rows, "llrlr")
    return table, best


def _complete(learner: str, params: dict[str, Any]) -> str:
    """``params`` with every default filled in, as JSON: two spellings of one setting compare equal."""
    return json.dumps(learners.get(learner).Params.parse(learner, params).complete(), sort_keys=True)


def ours_sweep(store: Path | None, rounds: int | None, seeds: int) -> tuple[str, dict[str, dict]]:
    """Our learners' sweep on the tuning streams, as :func:`vw_sweep`: per learner the best setting,
    the best with and without context pairs, and the defaults (run too if not in the grid)."""
    best: dict[str, dict] = {}
    rows = []
    for learner, grid in OURS_SWEEP.items():
        scored = []
        for params in [*grid, OURS[learner]]:
            vals = [
                _run(store, c, rounds or c.rounds, s, f"ours:{learner}", params)["reward"]
                for c in TUNING_STREAMS
                for s in range(seeds)
            ]
            scored.append((float(np.mean(vals)), json.dumps(params, sort_keys=True)))
        default = _complete(learner, OURS[learner])
        top, params_json = max(scored)
        best[learner] = json.loads(params_json)
        shown = [("best of sweep", top, params_json)]
        for what, has in (("best with context pairs", True), ("best without context pairs", False)):
            m, p = max((m, p) for m, p in scored if ("context_pairs" in p) == has)
            shown.append((what, m, p))
        m, p = next((m, p) for m, p in scored if _complete(learner, json.loads(p)) == default)
        shown.append(("defaults", m, json.dumps(OURS[learner])))
        rows += [[learner, what, f"`{p}`", f"{100 * m:.2f}"] for what, m, p in shown]
        for m, p in sorted(scored, reverse=True)[:3]:
            progress(f"  {learner} {p}: {100 * m:.2f}")
    table = report.table(["learner", "which", "setting", "reward %"], rows, "lllr")
    return table, best


def _served() -> tuple[str, dict[str, Any]]:
    """The served action default: its learner and the row label it has in the tables."""
    name, params = DEFAULT_ACTION_LEARNER
    if _complete(name, params) != _complete(name, OURS.get(name, {})):
        raise ValueError(f"the served default {DEFAULT_ACTION_LEARNER} is not one of OURS at its defaults")
    return f"**{name}** (ours, defaults)", dict(params)


def tuning_table(store: Path | None, rounds: int | None, seeds: int) -> str:
    """Ours at defaults and every VW explorer at its defaults on each tuning stream (the runs of
    the sweeps), and the mean over them: the evidence the defaults are chosen on."""
    systems = [(f"{n} (ours, defaults)", f"ours:{n}", p) for n, p in OURS.items()]
    systems += [(f"vw {n} (defaults)", "vw", _vw_args(a, 0.5, True)) for n, a in VW_EXPLORERS.items()]
    rows = []
    for label, system, setting in systems:
        cells = [
            [_run(store, c, rounds or c.rounds, s, system, setting)["reward"] for s in range(seeds)]
            for c in TUNING_STREAMS
        ]
        rows.append([label, *(f"{100 * np.mean(v):.2f}" for v in cells), f"{100 * np.mean(cells):.2f}"])
    head = ["system", *(c.name.removesuffix(" (tuning)") for c in TUNING_STREAMS), "mean"]
    return report.table(head, rows)


def catalog_tables(
    store: Path | None, rounds: int | None, seeds: int, vw_best: dict[str, str], ours_best: dict[str, dict]
) -> tuple[str, str, dict[str, Any]]:
    """The evaluation streams' table (every system, ``seeds`` seeds), the table of the served
    default's margins over each VW explorer at its defaults (paired by seed), and the figures."""
    systems: list[tuple[str, str, Any]] = [
        (f"**{n}** (ours, defaults)", f"ours:{n}", p) for n, p in OURS.items()
    ]
    systems += [
        (f"{n} (ours, best of sweep)", f"ours:{n}", p)
        for n, p in ours_best.items()
        if _complete(n, p) != _complete(n, OURS[n])
    ]
    systems += [(f"vw {n} (defaults)", "vw", _vw_args(VW_EXPLORERS[n])) for n in VW_EVALUATED]
    systems += [
        (f"vw {n} (best of sweep)", "vw", vw_best[n])
        for n in VW_EVALUATED
        if vw_best[n] != _vw_args(VW_EXPLORERS[n], 0.5)
    ]
    systems += [(f"{n} (fixed labels)", f"label:{learner}", p) for n, (learner, p) in LABELS.items()]
    results: dict[str, dict[str, list[dict]]] = {}
    for catalog in EVALUATION_STREAMS:
        results[catalog.name] = {
            label: [_run(store, catalog, rounds or catalog.rounds, s, system, setting) for s in range(seeds)]
            for label, system, setting in systems
        }
    churn_name = CHURN_EVALUATION.name
    rows = []
    for label, *_ in systems:
        runs = [results[c.name][label] for c in EVALUATION_STREAMS]
        churn = results[churn_name][label]
        rows.append(
            [
                label,
                *(_cell([r["reward"] for r in rs]) for rs in runs),
                _cell([r["new_reward"] for r in churn]),
                f"{np.mean([r['seconds'] for rs in runs for r in rs]):.1f}",
            ]
        )
    table = report.table(
        [
            "system",
            *(f"{c.name}: reward %" for c in EVALUATION_STREAMS),
            f"churn: reward % on new items' first {NEW} appearances",
            "seconds per run",
        ],
        rows,
    )
    served, _ = _served()
    margins, ahead = [], True
    for catalog in EVALUATION_STREAMS:
        res = results[catalog.name]
        ours = np.array([r["reward"] for r in res[served]])
        cells = []
        for n in VW_EVALUATED:
            diff = ours - np.array([r["reward"] for r in res[f"vw {n} (defaults)"]])  # same stream, same luck
            m, se = mean_se(diff.tolist())
            ahead &= m > 0
            cells.append(f"{100 * m:+.2f} ± {100 * se:.2f}")
        margins.append([catalog.name, *cells])
    margin_table = report.table(["stream", *(f"minus vw {n}" for n in VW_EVALUATED)], margins)
    figures = {
        "ahead": ahead,
        "new": {k: [r["new_reward"] for r in v] for k, v in results[churn_name].items()},
    }
    return table, margin_table, figures


# -- label data sets as action problems -----------------------------------------------------------


def _label_inputs(name: str) -> tuple[list, np.ndarray]:
    """Every row of data set ``name`` as an action input (its labels the candidates), and the labels."""
    return dataset_inputs(load_dataset(name))


def dataset_inputs(data: Dataset, bits: int = BITS) -> tuple[list, np.ndarray]:
    """Every row of ``data`` as an action input (its labels the candidates, the row's non-zero
    columns the context as named numbers), and the labels."""
    f = ActionFeaturiser(bits, max(1000, data.d), max(1000, data.n_labels))
    actions = [{"id": str(k), "features": {"label": str(k)}} for k in range(data.n_labels)]
    inputs = []
    for x in data.X:
        nz = np.flatnonzero(x)
        a = f({f"f{j}": float(x[j]) for j in nz.tolist()}, actions)
        inputs.append((a.ids, a.context, a.a_ptr, a.a_idx, a.a_val, a.bits))
    return inputs, data.y


def run_label_set(
    learner: str,
    params: dict[str, Any],
    seed: int,
    limit: int | None,
    inputs: list,
    y: np.ndarray,
    bits: int = BITS,
) -> dict:
    """Online error of our action learner on a data set posed as an action problem (``inputs``,
    ``y``: :func:`dataset_inputs` at the same ``bits``; the shuffle of ``seed``, as
    :meth:`Dataset.stream`), its seconds and the share of events whose rows held context pairs
    (:meth:`ActionInput.pairs`)."""
    order = np.random.default_rng(seed).permutation(len(inputs))[:limit]
    model = make_learner(learner, 1 << bits, 1, params, seed=seed)
    ids = DecisionIds.for_seed(seed)
    correct = np.empty(order.size, dtype=bool)
    pairs, block = getattr(model.params, "context_pairs", 0), getattr(model.params, "context_block", True)
    paired = 0
    ready(model)  # kernels loaded before the clock
    start = time.perf_counter()
    for t, i in enumerate(order.tolist()):
        # A fresh input per event: its rows are built for this event only (kept on every stored
        # input, the rows with pairs of 100,000 rows would not fit in memory).
        x = ActionInput(*inputs[i])
        d = model.decide(x, decision_rng(ids.new()))
        correct[t] = d.label == int(y[i])
        model.learn(x, d, bool(correct[t]))
        paired += x.pairs(pairs, block)
    return {
        "error": online_error(correct),
        "seconds": time.perf_counter() - start,
        "paired": paired / max(order.size, 1),
    }


def label_set_table(store: Path | None, sets: tuple[str, ...], limit: int | None, seeds: int) -> str:
    """Online error (%) of ours posed as action problems beside the label models, every set, and
    the seconds per run of ours."""
    rows = []
    for name in sets:
        data = load_dataset(name)
        loaded: list[tuple[list, np.ndarray]] = []  # the inputs, built once and only if a run is missing

        def compute(
            learner: str, params: dict, seed: int, name: str = name, loaded: list = loaded
        ) -> dict[str, float]:
            if not loaded:
                loaded.append(_label_inputs(name))
            got = run_label_set(learner, params, seed, limit, *loaded[0])
            progress(
                f"{name} seed {seed} {learner} {params}: error {got['error']:.4f}, {got['seconds']:.1f} s"
            )
            return got

        cells, seconds = [], []
        for learner, params in LABEL_SET_SYSTEMS.values():
            runs = [
                cached(
                    store,
                    json.dumps(
                        ["actions-labels", name, limit, s, learner, params, _version("ours", learner)],
                        sort_keys=True,
                    ),
                    lambda s=s, learner=learner, params=params: compute(learner, params, s),
                )
                for s in range(seeds)
            ]
            cells.append(_cell([r["error"] for r in runs]))
            seconds.append(f"{np.mean([r['seconds'] for r in runs]):.2f}")
        for learner, params in LABELS.values():
            got = run_seeds(learner, params, data, range(seeds), limit=limit)
            cells.append(_cell([online_error(c) for c in got.correct]))
        role = "tuning" if name in TUNING_SETS else "evaluation"
        nnz = int((data.X != 0).sum(axis=1).max())
        rows.append(
            [
                f"{name} ({role})",
                f"{data.n_labels}",
                f"{nnz}",
                *cells,
                " / ".join(seconds),
            ]
        )
        progress(" ".join(map(str, rows[-1])))
    head = [
        "data set",
        "K",
        "most non-zeros",
        *(f"{n} as actions" for n in LABEL_SET_SYSTEMS),
        *(f"{n} (labels)" for n in LABELS),
        "seconds per run as actions",
    ]
    return report.table(head, rows)


# -- HTTP ------------------------------------------------------------------------------------------


def _action_bodies(n: int) -> tuple[list[bytes], np.ndarray]:
    """``n`` predict bodies of the model ``actions`` (30 context features ``"f{j}": "v{0..99}"``, 10
    candidates of 10 features ``"g{j}": "w{0..99}"``, seeded) and the index of the candidate whose
    ``g0`` matches the context's ``f0`` mod 10 (the click), or -1."""
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, 100, size=(n, CONTEXT_FEATURES))
    acts = rng.integers(0, 100, size=(n, CANDIDATES, ACTION_FEATURES))
    ids = rng.integers(0, 10_000, size=(n, CANDIDATES))
    bodies, good = [], np.full(n, -1)
    for t in range(n):
        actions = [
            {"id": f"a{t}-{a}-{ids[t, a]}", "features": {f"g{j}": f"w{v}" for j, v in enumerate(acts[t, a])}}
            for a in range(CANDIDATES)
        ]
        body = {
            "model": "actions",
            "features": {f"f{j}": f"v{v}" for j, v in enumerate(ctx[t])},
            "actions": actions,
        }
        bodies.append(json.dumps(body).encode())
        hits = np.flatnonzero(acts[t, :, 0] % 10 == ctx[t, 0] % 10)
        good[t] = hits[0] if hits.size else -1
    return bodies, good


def http_rate(quick: bool) -> tuple[str, float]:
    """Pairs/s of the hashed label model and the action model on one server, loads alternated."""
    seconds, repeats = (1.0, 1) if quick else (HTTP_SECONDS, 2)
    label_step = _pair(*_hashed_bodies(2000))
    action_step = _pair(*_action_bodies(2000))
    env = {"CLICKBOOST_STORE": "memory"}
    cmd = [sys.executable, "-m", "service", "serve", "--port", "{port}", "--log-level", "warning"]
    counts = {"label": [0, 0.0], "action": [0, 0.0]}
    with _servers({"server": (cmd, env)}) as up:
        url = up["server"][0]
        httpx.put(f"{url}/models/hashed", json={"hashing_bits": BITS, "n_labels": 10}).raise_for_status()
        httpx.put(
            f"{url}/models/actions", json={"actions": "features", "hashing_bits": BITS}
        ).raise_for_status()
        spec = {
            m: httpx.get(f"{url}/models/{m}").raise_for_status().json()["config"]
            for m in ("hashed", "actions")
        }
        asyncio.run(_load(url, label_step, 0.5))  # warm both paths (the kernels compile on first use)
        asyncio.run(_load(url, action_step, 0.5))
        for _ in range(repeats):
            for kind, step in (("label", label_step), ("action", action_step)):
                n, elapsed, _ = asyncio.run(_load(url, step, seconds))
                counts[kind][0] += n
                counts[kind][1] += elapsed
    rate = {k: n / s for k, (n, s) in counts.items()}
    ratio = rate["action"] / rate["label"]
    table = report.table(
        ["model", "learner", "pairs/s"],
        [
            [
                f"hashed label model, b={BITS}, K=10, {CONTEXT_FEATURES} named features",
                f"`{spec['hashed']['learner']}`",
                f"{rate['label']:,.0f}",
            ],
            [
                f"action model, b={BITS}, {CONTEXT_FEATURES} context features, {CANDIDATES} candidates x "
                f"{ACTION_FEATURES} features",
                f"`{spec['actions']['learner']}`",
                f"{rate['action']:,.0f}",
            ],
        ],
        "llr",
    )
    verdict = "met" if ratio >= HTTP_TARGET else "MISSED"
    return (
        f"{table}\n\nRatio action / label pairs/s: **{ratio:.2f}** (target >= {HTTP_TARGET}: {verdict}).",
        ratio,
    )


# -- the bench -------------------------------------------------------------------------------------


def bench_actions(quick: bool, log: Callable[[str], None] = progress) -> str:
    out = report.out_dir(quick)
    store = out / "bench" / "actions-runs.jsonl" if quick else STORE
    rounds, seeds, tune_seeds = (600, 2, 1) if quick else (None, SEEDS, TUNE_SEEDS)
    sets, set_limit = (("car",), 300) if quick else (TUNING_SETS + EVALUATION_SETS, None)
    log("VW sweep on the tuning streams")
    vw_table, vw_best = vw_sweep(store, rounds, tune_seeds)
    log("our sweep on the tuning streams")
    ours_table, ours_best = ours_sweep(store, rounds, tune_seeds)
    tuning = tuning_table(store, rounds, tune_seeds)
    log("evaluation streams")
    table, margins, figures = catalog_tables(store, rounds, seeds, vw_best, ours_best)
    log("label data sets as action problems")
    sets_table = label_set_table(store, sets, set_limit, seeds)
    log("HTTP")
    http_table, _ = http_rate(quick)
    served, _ = _served()
    name = served.split("**")[1]
    lines = [
        f"- The served action default (`{name}` at its defaults, service/config.py "
        "`DEFAULT_ACTION_LEARNER`) minus each VW explorer at its defaults, points of mean reward, "
        f"paired by seed (mean ± standard error over {seeds} seeds, table below); ahead of every "
        f"one on every stream: **{'yes' if figures['ahead'] else 'NO'}**."
    ]
    new = figures["new"]
    for n in (*(f"**{n}** (ours, defaults)" for n in OURS), *(f"{n} (fixed labels)" for n in LABELS)):
        lines.append(
            f"- churn, reward on new items' first {NEW} appearances, {n.replace('**', '')}: {_cell(new[n])} %"
        )
    command = "python -m service bench actions" + (" --quick" if quick else "")
    size = "" if not quick else f" `--quick`: {rounds} rounds per stream, {seeds} seeds, sweeps on 1 seed."
    return (
        "## Action-feature models against vw --cb_explore_adf\n\n"
        f"`{command}`. {report.machine([f'vowpalwabbit {vw_version()}'])}{size}\n\n"
        "Streams of lab/sim/catalog.py (its docstring documents the generator): a fixed catalog "
        "(`synthetic`), new items arriving (`churn`), both with the reward the shown item's click "
        "probability itself (`graded`), prices in dollars beside budgets in dollars a month (`prices`) "
        "and a taste that changes with the time of day (`dayparts`, a reward nonlinear in the features: "
        "context x context x action). Reward in %, mean ± standard error over "
        f"{seeds} seeds; ours with `hashing_bits` {BITS}. What every system is and the fixed-label "
        "protocol: lab/bench/actions.py's docstring.\n\n"
        "### Must show\n\n" + "\n".join(lines) + f"\n\n{margins}\n\n"
        f"### Evaluation streams\n\n{table}\n\n"
        f"### Tuning streams ({tune_seeds} seed{'s' if tune_seeds > 1 else ''} each)\n\n"
        "The defaults are chosen on these streams only (other generator seeds and sizes than the "
        "evaluation streams'). Ours at defaults and VW at its defaults, reward %:\n\n"
        f"{tuning}\n\n"
        f"VW's sweep: every explorer's scale at `-l` {', '.join(map(str, VW_RATES))} with `-q ua`, "
        f"mean over every tuning stream:\n\n{vw_table}\n\n"
        f"Ours (lab/bench/actions.py `OURS_SWEEP`), mean over every tuning stream:\n\n{ours_table}\n\n"
        "### Label data sets posed as action problems (online error %)\n\n"
        "Each label an action whose only feature is its id; "
        f"{'whole streams' if set_limit is None else f'{set_limit} rows'}, "
        f"{seeds} shuffles, the label models at their defaults on the same shuffles.\n\n{sets_table}\n\n"
        "`cova-adf` leaves the rows' context-only block (`c x 1`, the same in every candidate's row) "
        "out: a PA-I step on a no-click spends part of its length there and pushes every candidate of "
        "that context below the margin. `squarecb-adf` keeps it, as VW's shared features are in every "
        "action's line.\n\n"
        f"### HTTP predict+feedback, one server (memory store), {CONNECTIONS} connections\n\n{http_table}\n"
    )


benches.register("actions")(bench_actions)
