"""``bench slots``: pages of several slots (issue 53) against ``vw --ccb_explore_adf``.

**Streams** (:mod:`lab.sim.pages`, ours; its docstring documents the generator): pages of 3 slots
(``hero``, ``middle``, ``footer``, each a ``position`` feature) over 5 to 20 candidates with
features and a category, click probabilities from context x item, the item, the slot and a slot x
category effect; clicks per slot (``pages``) or the click probabilities as graded rewards (``pages,
graded``); a tuning variant (other generator seeds and sizes, marked "(tuning)") and an evaluation
variant of each; :data:`SEEDS` seeds. Every system meets the same rounds and the same luck (one
uniform per slot and round).

**Systems**, each at its defaults:

- **ours**: the CCB reduction (:class:`service.learners.ccb_adf.CCB`) over the served action
  default (:data:`service.config.DEFAULT_ACTION_LEARNER`, ``squarecb-adf``) at its defaults, with
  ``hashing_bits`` :data:`BITS`: one decision per page (one decision id, one generator), slot ``s``
  among the candidates the earlier slots left, the slot's features joined to the context, every
  slot's reward learned with its conditional decision;
- **independent slots**: the same learner deciding each slot alone, as a page of today's single-slot
  predicts does (one decision id per slot, each on the slot's input with its features, so it may
  learn the slot's effects too, and no exclusion: it may show an item twice, and the stream gives
  a repeated item's later slot 0); every slot's reward learned;
- ``vw --ccb_explore_adf`` with ``--squarecb`` and with ``--epsilon 0.05`` (``--cb_explore_adf``'s
  default explorer spelled out) at VW's defaults, in-process through pyvw: a ``ccb shared |u`` line
  of the context, a ``ccb action |a`` line per candidate, a ``ccb slot |s`` line per slot, ``-q ua
  -q sa`` (the shared and the slot namespaces crossed with the actions; VW adds the slot index and
  its interactions itself), VW's own sampling of each slot (its ``cb_sample``, seeded with the
  stream's seed) and every slot labelled with its action, cost ``1 - reward`` and probability.

**Defaults**: ours runs ``squarecb-adf`` at the defaults ``bench actions`` chose on its tuning
catalog streams; nothing is chosen on these pages' evaluation seeds. The tuning streams show the same
systems and ours with ``gamma_scale`` swept (:data:`GAMMAS`): whether pages would want another
setting (the reduction has none of its own, and the learner's defaults serve single-slot requests
too).

Runs are stored as they finish in :data:`STORE` (:mod:`lab.runcache`, keyed by the stream, seed,
system and a fingerprint of the code they ran), so the command resumes; ``--quick`` runs short
streams, 2 seeds, into ``out/bench-quick/``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from lab.bench import benches, report
from lab.bench.actions import _learned
from lab.bench.quality import code_digest, learner_files, mean_se
from lab.bench.vw import vw_version
from lab.runcache import cached, progress
from lab.sim.pages import POSITIONS, STREAMS, Pages, PageStream
from lab.sim.stream import ready
from service.config import DEFAULT_ACTION_LEARNER
from service.learners.base import make_learner
from service.learners.ccb_adf import CCB
from service.sampling import DecisionIds, decision_rng
from service.slots import PageFeaturiser

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "docs" / "repro" / "slots-runs.jsonl"
BITS = 18
SEEDS = 5
TUNE_SEEDS = 2
#: ``vw --ccb_explore_adf``'s explorers at their defaults, with the namespaces crossed.
VW_EXPLORERS: dict[str, str] = {"squarecb": "--squarecb", "epsilon": "--epsilon 0.05"}
VW_Q = "-q ua -q sa"
OURS = "ours"
#: SquareCB-ADF's ``gamma_scale`` tried under the reduction on the page tuning streams only (its
#: default, 300, was chosen on ``bench actions``' tuning catalog streams): whether pages want another.
GAMMAS = (100.0, 300.0, 1000.0, 3000.0)
INDEPENDENT = "independent"
#: The systems in table order: name -> row label.
SYSTEMS: dict[str, str] = {
    OURS: "**ours**: CCB over `{learner}` (defaults)",
    INDEPENDENT: "`{learner}` deciding each slot alone (defaults)",
    **{f"vw {n}": f"`vw --ccb_explore_adf {a} {VW_Q}` (defaults)" for n, a in VW_EXPLORERS.items()},
}


def _version(system: str) -> str:
    """What a run's numbers depend on: the generator, this driver's code and the learner's sources
    (ours), or VW's version (VW)."""
    files = [ROOT / "lab" / "sim" / "pages.py", Path(__file__)]
    if not system.startswith("vw"):
        name = DEFAULT_ACTION_LEARNER[0]
        files += [*learner_files(name), *(ROOT / "service" / f for f in ("actions.py", "slots.py"))]
        files.append(ROOT / "service" / "learners" / "ccb_adf.py")
    h = hashlib.sha256()
    for path in sorted(set(files)):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + code_digest(path))
    prefix = f"vowpalwabbit {vw_version()} " if system.startswith("vw") else ""
    return prefix + h.hexdigest()[:16]


def _score(stream: PageStream, rewards: np.ndarray, repeats: int, seconds: float) -> dict[str, Any]:
    """Mean reward per slot and per page (the sum of the slots'), the share of pages showing an
    item twice, and the seconds."""
    return {
        "slots": rewards.mean(axis=0).tolist(),
        "page": float(rewards.sum(axis=1).mean()),
        "repeats": repeats / stream.rounds,
        "seconds": seconds,
    }


def _learner(seed: int, params: dict[str, Any] | None = None) -> Any:
    """The served action default, at its defaults or with ``params``."""
    name, defaults = DEFAULT_ACTION_LEARNER
    model = make_learner(name, 1 << BITS, 1, defaults if params is None else params, seed=seed)
    ready(model)  # kernels loaded before the clock
    return model


def run_ours(stream: PageStream, seed: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """The CCB reduction over the default action learner (with ``params``): one decision per page."""
    f = PageFeaturiser(BITS, 1000, 1000)
    ccb = CCB(_learner(seed, params))
    ids = DecisionIds.for_seed(seed)
    rewards = np.empty((stream.rounds, stream.n_slots))
    start = time.perf_counter()
    for t in range(stream.rounds):
        page = f(stream.context(t), stream.actions(t), stream.slots())
        did = ids.new()
        d = ccb.decide(page, decision_rng(did))
        got = stream.rewards(t, d.labels)
        for s, r in enumerate(got):
            ccb.learn_slot(page, d, s, _learned(ccb.graded, f"{did}.{s}", r))
        rewards[t] = got
    return _score(stream, rewards, 0, time.perf_counter() - start)


def run_independent(stream: PageStream, seed: int) -> dict[str, Any]:
    """The same learner deciding each slot alone (a decision id per slot, no exclusion)."""
    f = PageFeaturiser(BITS, 1000, 1000)
    model = _learner(seed)
    ids = DecisionIds.for_seed(seed)
    rewards = np.empty((stream.rounds, stream.n_slots))
    repeats = 0
    start = time.perf_counter()
    for t in range(stream.rounds):
        page = f(stream.context(t), stream.actions(t), stream.slots())
        inputs = [page.slot_input(s) for s in range(page.n_slots)]
        dids = [ids.new() for _ in inputs]
        decisions = [model.decide(x, decision_rng(did)) for x, did in zip(inputs, dids, strict=True)]
        labels = [d.label for d in decisions]
        got = stream.rewards(t, labels)
        for x, d, did, r in zip(inputs, decisions, dids, got, strict=True):
            model.learn(x, d, _learned(model.graded, did, r))
        repeats += len(set(labels)) < len(labels)
        rewards[t] = got
    return _score(stream, rewards, repeats, time.perf_counter() - start)


def _vw_features(named: dict[str, Any]) -> str:
    return " ".join(f"{k}:{v:.9g}" if isinstance(v, float) else f"{k}={v}" for k, v in named.items())


def run_vw(args: str, stream: PageStream, seed: int) -> dict[str, Any]:
    """``vw --ccb_explore_adf <args>`` over ``stream``: VW samples each slot, learns every slot."""
    from vowpalwabbit import Workspace

    vw = Workspace(f"--ccb_explore_adf {args} --random_seed {seed} --quiet")
    items: dict[int, str] = {}
    slots = ["|s " + _vw_features(s["features"]) for s in stream.slots()]
    rewards = np.empty((stream.rounds, stream.n_slots))
    start = time.perf_counter()
    for t in range(stream.rounds):
        lines = ["ccb shared |u " + _vw_features(stream.context(t))]
        for i in stream.cands[t].tolist():
            if i not in items:
                items[i] = "ccb action |a " + _vw_features(stream.action_of(i)["features"])
            lines.append(items[i])
        pred = vw.predict([*lines, *(f"ccb slot {s}" for s in slots)])
        shown = [int(p[0][0]) for p in pred]  # each slot's first action is the one VW sampled
        got = stream.rewards(t, shown)
        labels = [
            f"ccb slot {a}:{1.0 - float(r):.9g}:{p[0][1]:.9g} {s}"
            for a, r, p, s in zip(shown, got, pred, slots, strict=True)
        ]
        vw.learn([*lines, *labels])
        rewards[t] = got
    seconds = time.perf_counter() - start
    vw.finish()
    return _score(stream, rewards, 0, seconds)


def _run(
    store: Path | None, pages: Pages, rounds: int, seed: int, system: str, params: dict | None = None
) -> dict[str, Any]:
    """A stored run (computed and stored if missing) of ``system`` (a key of :data:`SYSTEMS`; ours
    with the learner's ``params`` if given: the tuning sweep)."""
    named = [system] if params is None else [system, params]
    key = json.dumps(["slots", pages.name, rounds, seed, *named, _version(system)], sort_keys=True)

    def compute() -> dict[str, Any]:
        stream = pages.stream(seed, rounds)
        if system == OURS:
            got = run_ours(stream, seed, params)
        elif system == INDEPENDENT:
            got = run_independent(stream, seed)
        else:
            got = run_vw(f"{VW_EXPLORERS[system.removeprefix('vw ')]} {VW_Q}", stream, seed)
        slots = " ".join(f"{100 * r:.2f}" for r in got["slots"])
        progress(f"{pages.name} seed {seed} {system} {params or ''}: slots {slots}, page {got['page']:.4f}")
        return got

    return cached(store, key, compute)


def _cell(values: list[float], scale: float = 100.0, digits: int = 2, sign: str = "") -> str:
    m, se = mean_se(values)
    text = f"{scale * m:{sign}.{digits}f}"
    return f"{text} ± {scale * se:.{digits}f}" if len(values) > 1 else text


def _label(system: str) -> str:
    return SYSTEMS[system].format(learner=DEFAULT_ACTION_LEARNER[0])


def results_table(runs: dict[str, list[dict]], n_slots: int) -> str:
    """Every system's mean reward per slot (%) and per page (the sum), ± standard errors."""
    rows = []
    for system, rs in runs.items():
        cells = [_cell([r["slots"][s] for r in rs]) for s in range(n_slots)]
        page = _cell([r["page"] for r in rs], 1.0, 4)
        repeats = f"{100 * np.mean([r['repeats'] for r in rs]):.1f}"
        rows.append([_label(system), *cells, page, repeats, f"{np.mean([r['seconds'] for r in rs]):.1f}"])
    head = [
        "system",
        *(f"{p}: reward %" for p in POSITIONS[:n_slots]),
        "page: reward per page",
        "pages showing an item twice %",
        "seconds per run",
    ]
    return report.table(head, rows)


def margins(runs: dict[str, list[dict]], n_slots: int) -> tuple[list[list[str]], bool, bool]:
    """Ours minus each other system, paired by seed (same rounds, same luck): per slot in points and
    per page; whether ours is ahead of both VW explorers on every slot, and of the independent
    slots on the page."""
    ours = runs[OURS]
    rows, vw_ahead, page_ahead = [], True, True
    for system, rs in runs.items():
        if system == OURS:
            continue
        slot_cells = []
        for s in range(n_slots):
            diff = [a["slots"][s] - b["slots"][s] for a, b in zip(ours, rs, strict=True)]
            slot_cells.append(_cell(diff, sign="+"))
            if system.startswith("vw"):
                vw_ahead &= mean_se(diff)[0] > 0
        page = [a["page"] - b["page"] for a, b in zip(ours, rs, strict=True)]
        if system == INDEPENDENT:
            page_ahead &= mean_se(page)[0] > 0
        rows.append([f"minus {_label(system)}", *slot_cells, _cell(page, 1.0, 4, "+")])
    return rows, vw_ahead, page_ahead


def bench_slots(quick: bool, log: Callable[[str], None] = progress) -> str:
    out = report.out_dir(quick)
    store = out / "bench" / "slots-runs.jsonl" if quick else STORE
    rounds, seeds, tune_seeds = (600, 2, 1) if quick else (None, SEEDS, TUNE_SEEDS)
    sections, verdicts = [], []
    tuning_tables = []
    sweep: dict[float, list[float]] = {}
    for tuning, evaluation in STREAMS:
        log(f"{evaluation.name}")
        n_slots = evaluation.slots
        runs = {
            system: [_run(store, evaluation, rounds or evaluation.rounds, s, system) for s in range(seeds)]
            for system in SYSTEMS
        }
        rows, vw_ahead, page_ahead = margins(runs, n_slots)
        verdicts.append(
            f"- `{evaluation.name}`: ours ahead of `vw --ccb_explore_adf` (squarecb and epsilon) on every "
            f"slot: **{'yes' if vw_ahead else 'NO'}**; ahead of the independent slots on the page: "
            f"**{'yes' if page_ahead else 'NO'}**."
        )
        head = ["ours", *(f"{p}: points" for p in POSITIONS[:n_slots]), "page: reward per page"]
        sections.append(
            f"### {evaluation.name}\n\nOurs minus each system, paired by seed (mean ± standard error over "
            f"{seeds} seeds):\n\n{report.table(head, rows)}\n\n{results_table(runs, n_slots)}"
        )
        tune = {
            system: [_run(store, tuning, rounds or tuning.rounds, s, system) for s in range(tune_seeds)]
            for system in SYSTEMS
        }
        tuning_tables.append(f"#### {tuning.name}\n\n{results_table(tune, tuning.slots)}")
        for gamma in GAMMAS:
            params = None if gamma == _default_gamma() else {"gamma_scale": gamma}  # None: the runs above
            sweep[gamma] = sweep.get(gamma, []) + [
                _run(store, tuning, rounds or tuning.rounds, s, OURS, params)["page"]
                for s in range(tune_seeds)
            ]
    command = "python -m service lab bench slots" + (" --quick" if quick else "")
    size = f" `--quick`: {rounds} pages per stream, {seeds} seeds." if quick else ""
    body = "\n\n".join(sections)
    return (
        "## Multi-slot pages against vw --ccb_explore_adf\n\n"
        f"`{command}`. {report.machine([f'vowpalwabbit {vw_version()}'])}{size}\n\n"
        "Page streams of lab/sim/pages.py (its docstring documents the generator): 3 slots (hero, "
        "middle, footer) over 5 to 20 candidates, clicks that depend on context x item, the item, the "
        "slot and a slot x category effect; a repeated item earns nothing in its later slot. Reward "
        "per slot in %, per page the sum of the slots' (expected clicks per page), mean ± standard "
        f"error over {seeds} seeds; ours with `hashing_bits` {BITS}. What every system is: "
        "lab/bench/slots.py's docstring. Defaults: ours is the served action default at the defaults "
        "`bench actions` chose on its tuning catalog streams, VW at its own; nothing was chosen on "
        "these evaluation seeds.\n\n"
        "### Must show\n\n" + "\n".join(verdicts) + f"\n\n{body}\n\n"
        f"### Tuning streams ({tune_seeds} seed{'s' if tune_seeds > 1 else ''} each)\n\n"
        "Other generator seeds and sizes than the evaluation streams'; the same systems at their "
        "defaults.\n\n" + "\n\n".join(tuning_tables) + "\n\n"
        f"Ours with `{DEFAULT_ACTION_LEARNER[0]}`'s `gamma_scale` swept (the tuning streams only; "
        f"mean reward per page over both and {tune_seeds} seed{'s' if tune_seeds > 1 else ''}):\n\n"
        f"{gamma_table(sweep)}\n"
    )


def _default_gamma() -> float:
    return make_learner(DEFAULT_ACTION_LEARNER[0], 1, 1, DEFAULT_ACTION_LEARNER[1]).params.gamma_scale


def gamma_table(sweep: dict[float, list[float]]) -> str:
    """The sweep's mean reward per page per ``gamma_scale``, the default's row marked."""
    rows = [
        [f"{g:g}" + (" (default)" if g == _default_gamma() else ""), f"{np.mean(v):.4f}"]
        for g, v in sweep.items()
    ]
    return report.table(["gamma_scale", "reward per page"], rows)


benches.register("slots")(bench_slots)
