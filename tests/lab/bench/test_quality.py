"""The quality race against Vowpal Wabbit (issue 24): the VW runner, the run store and its resume,
the keys, the tables and margins, and the quick mode."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lab import sweep
from lab.bench import quality
from lab.bench.quality import Plan, Result, Status, System
from lab.bench.vw import EXPLORERS, run_vw, to_lines
from service.cli import CLIError, main

DOCS_MD = Path(__file__).resolve().parents[3] / "docs" / "BENCHMARKS.md"


def test_to_lines_writes_one_based_labels_and_nonzero_features_exactly() -> None:
    # VW's stored runs are keyed by quality.VW_DRIVER, not by this code: change that tag along
    # with this format.
    X = np.array([[0.0, 1.5, 0.0], [0.1, 0.0, -2.0]])
    assert to_lines(X, np.array([0, 2])) == ["1 | f1:1.5", "3 | f0:0.1 f2:-2"]
    # the quality race formats each distinct row of a duplicated stream once: the same lines
    Xd, yd = np.vstack([X, X, X[::-1]]), np.array([0, 2, 0, 2, 2, 0])
    assert quality._vw_lines(Xd, yd) == to_lines(Xd, yd)


@pytest.mark.parametrize("name", sorted(EXPLORERS))
def test_vw_sampled_mistakes_equal_vws_own_loss_and_learning_happens(name: str) -> None:
    # A separable 3-class stream: one indicator feature per class. run_vw raises if our count of
    # sampled-label mistakes differs from VW's summed cbify loss.
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 1500)
    X = np.eye(3)[y]
    run = run_vw(EXPLORERS[name], 3, to_lines(X, y), y, seed=1)
    assert run.correct.shape == (1500,)
    assert run.seconds > 0
    # Learning: the last third is far better than chance (2/3 error) for every explorer.
    assert 1 - run.correct[1000:].mean() < 0.35


def test_vw_run_is_deterministic_given_the_seed() -> None:
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, 300)
    lines = to_lines(rng.normal(size=(300, 5)), y)
    a = run_vw("--epsilon 0.05", 4, lines, y, seed=7)
    b = run_vw("--epsilon 0.05", 4, lines, y, seed=7)
    np.testing.assert_array_equal(a.correct, b.correct)


# ----------------------------------------------------------------------------------------------
# The plan, the store, the keys
# ----------------------------------------------------------------------------------------------


def test_the_full_plan_is_the_race_of_issue_24() -> None:
    # the ten data sets of issue 24 and the tuning row digits (issue 41)
    assert quality.FULL.datasets == quality.ALL_DATASETS and len(quality.ALL_DATASETS) == 11
    assert quality.FULL.seeds == (0, 1, 2, 3, 4) and quality.FULL.limit is None
    compared = quality.systems()
    kinds = {s.name: s.kind for s in compared}
    bandit = {n for n, c in quality.learners.items() if not c.full_information and not c.actions}
    assert {n for n, k in kinds.items() if k == "ours"} == bandit
    assert {n for n, k in kinds.items() if k == "vw"} == set(EXPLORERS)
    # VW tuned on the tuning sets as ours are: one more VW system, at its sweep's best setting
    tuned = [s for s in compared if s.kind == "vw-sweep"]
    best = quality.sweep_best(sweep.VW)
    assert best is not None and [s.name for s in tuned] == ["vw@sweep"]
    assert tuned[0].params == sweep.vw_args(best[0]) and tuned[0].learner == "vw"
    for s in compared:  # ours and the references at the defaults of their Params
        if s.kind in ("ours", "reference"):
            assert json.loads(s.params) == quality.learners.get(s.name).Params().key()  # the runs' keys
    runs = quality.plan_runs(quality.FULL, compared)
    # every system on every data set, both streams of the duplicated ones, five seeds, no cut
    factors = sum(len({1, quality.DUPLICATE.get(d, 1)}) for d in quality.ALL_DATASETS)
    assert len(runs) == factors * 5 * len(compared) == len({r.key for r in runs})
    assert all(r.cut is None for r in runs)
    # cheap first: every VW / linear run comes before the first booster run, smallest streams first
    cheap = [r.system.kind == "vw" or r.system.learner in ("banditron", "cova", "perceptron") for r in runs]
    # (vw@sweep may pair every feature, VW's -q ::: not cheap on isolet; it runs with the boosters)
    assert cheap == sorted(cheap, reverse=True)
    assert runs[0].dataset == "balance" and runs[-1].dataset == "isolet" and runs[-1].factor == 15


TINY = Plan(("balance",), (0, 1), 60)


def _tiny_systems() -> list[System]:
    return [s for s in quality.systems() if s.name in ("cova", "banditron", "vw-eps0.05", "perceptron")]


def test_a_second_run_computes_nothing_new_and_reads_the_same_results(tmp_path: Path) -> None:
    store = tmp_path / "runs.jsonl"
    compared = _tiny_systems()
    first, runs, done = quality.run_plan(TINY, store, compared=compared)
    # balance: the online stream (x1) and the last20 stream (x10), 2 seeds, 4 systems
    assert done.planned == done.stored == done.computed == len(runs) == 16 and not done.missing
    assert len(store.read_text().splitlines()) == 16
    assert {r.protocol for r in first} == {"online", "last20"} and len(first) == 16
    before = store.read_bytes()
    second, _, again = quality.run_plan(TINY, store, compared=compared)
    assert again.computed == 0 and again.stored == 16 and store.read_bytes() == before
    assert second == first  # values and times read back from the store


def test_the_wall_time_cap_stops_starting_runs_and_the_next_call_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "runs.jsonl"
    compared = _tiny_systems()
    results, runs, done = quality.run_plan(TINY, store, compared=compared, hours=0)
    assert (
        results == []
        and done.computed == 0
        and done.stopped
        and done.missing == dict.fromkeys((s.name for s in compared), 4)
    )
    partial = Plan(("balance",), (0,), 60)
    quality.run_plan(partial, store, compared=compared)  # seed 0 only
    assert quality.status(runs, store).stored == 8
    _, _, rest = quality.run_plan(TINY, store, compared=compared)
    assert rest.computed == 8 and rest.stored == 16
    monkeypatch.setenv(quality.HOURS_ENV, "1.5")
    assert quality.hours_cap() == 1.5
    monkeypatch.setenv(quality.HOURS_ENV, "soon")
    with pytest.raises(CLIError, match=quality.HOURS_ENV):
        quality.hours_cap()


def test_the_key_changes_with_the_learners_version_only(monkeypatch: pytest.MonkeyPatch) -> None:
    def keys() -> dict[str, str]:
        runs = quality.plan_runs(Plan(("balance",), (0,), None), quality.systems())
        return {r.system.name: r.key for r in runs if r.factor == 1}

    before = keys()
    assert json.loads(before["adabandit"])[-1] == sweep.VERSION["adabandit"]  # the sweep's pinned version
    monkeypatch.setitem(sweep.VERSION, "adabandit", "moved")
    after = keys()
    assert after["adabandit"] != before["adabandit"]
    # its own systems only: the learner at its defaults and at its sweep's best setting (listed
    # when its sweep, under its version, found a setting better than the default), whose runs are
    # the learner's too
    ours = {n for n in [*before, *after] if n.split("@")[0] == "adabandit"}
    assert {n: k for n, k in after.items() if n not in ours} == {
        n: k for n, k in before.items() if n not in ours
    }
    # a learner without a pinned version (every learner has one now: unpin cova): a fingerprint of
    # its own sources, not of every learner's
    assert json.loads(before["cova"])[-1] == sweep.VERSION["cova"]
    monkeypatch.delitem(sweep.VERSION, "cova")
    files = {p.name for p in quality.learner_files("cova")}
    assert {"cova.py", "base.py", "kernels.py", "sampling.py", "stream.py"} <= files
    assert not files & {"adabandit.py", "banditron.py", "banditboost.py", "binbandit.py"}
    assert json.loads(keys()["cova"])[-1] == quality.module_fingerprint("cova")
    monkeypatch.setattr(quality, "module_fingerprint", lambda learner: f"edited {learner}")
    assert json.loads(keys()["cova"])[-1] == "edited cova"
    # the setting is in the key: another default is another run
    s = next(s for s in quality.systems() if s.name == "cova")
    run = quality.Run("balance", 1, 0, None, s)
    other = quality.Run("balance", 1, 0, None, System(**{**s.__dict__, "params": '{"C": 2.0}'}))
    assert run.key != other.key


def test_best_of_sweep_is_read_from_the_sweeps_own_stored_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sweep, "ROUNDS", 150)
    monkeypatch.setattr(sweep, "SEEDS", (0,))
    monkeypatch.setattr(sweep, "GRIDS", {"banditron": {"gamma": [0.05, 0.3]}})
    store = tmp_path / "sweep.jsonl"
    assert quality.sweep_best("banditron", store) is None  # nothing stored: nothing computed either
    assert not store.exists()
    rows = sweep.sweep("banditron", store)
    found = quality.sweep_best("banditron", store)
    assert found is not None
    best, error = found
    assert best == rows[0][0] and error == pytest.approx(rows[0][1])
    swept = [s for s in quality.systems(store) if s.learner == "banditron"]
    if best == {"gamma": 0.05}:  # the default: its runs are the default's, no extra column
        assert [s.kind for s in swept] == ["ours"] and swept[0].sweep_best
    else:
        assert [s.kind for s in swept] == ["ours", "sweep"] and swept[1].name == "banditron@sweep"


# ----------------------------------------------------------------------------------------------
# Tables, margins, standard errors
# ----------------------------------------------------------------------------------------------

SYSTEMS = [
    System("ours-a", "ours", "", "", sweep_best=True),
    System("ours-b", "ours", "", ""),
    System("vw-x", "vw", "", ""),
    System("vw-y", "vw", "", ""),
    System("ref", "reference", "", ""),
    System("vw-t", "vw-sweep", "", ""),
]


def _results(
    values: dict[str, dict[int, float]], protocol: str = "online", dataset: str = "toy"
) -> list[Result]:
    return [
        Result(dataset, protocol, 100, n, seed, v, 0.5) for n, vs in values.items() for seed, v in vs.items()
    ]


def test_margin_and_standard_errors_by_hand() -> None:
    res = _results(
        {
            "ours-a": {0: 0.30, 1: 0.34, 2: 0.32},
            "ours-b": {0: 0.40, 1: 0.40, 2: 0.40},
            "vw-x": {0: 0.20, 1: 0.22, 2: 0.24},
            "vw-y": {0: 0.50, 1: 0.50, 2: 0.50},
            "ref": {0: 0.05, 1: 0.05, 2: 0.05},
            "vw-t": {0: 0.28, 1: 0.33, 2: 0.32},
        }
    )
    # ours-a: 32 ± 2/sqrt(3); paired differences ours-a - vw-x = 10, 12, 8: 10 ± 2/sqrt(3)
    assert quality.mean_se([30.0, 34.0, 32.0]) == pytest.approx((32.0, 2 / math.sqrt(3)))
    (m,) = quality.margins(res, "online", SYSTEMS)
    assert (m.ours, m.vw, m.n) == ("ours-a", "vw-x", 3)
    assert m.diff == pytest.approx(10.0) and m.se == pytest.approx(2 / math.sqrt(3))
    assert m.lost and m.outcome() == "we lose by 10.0 ± 1.2 points"
    tab = quality.quality_table(res, "online", SYSTEMS, planned=3)
    row = tab.splitlines()[-1]
    assert row == (
        "| toy | evaluation | 100 | 32.0 ± 1.2 | 40.0 ± 0.0 | **22.0 ± 1.2** | 50.0 ± 0.0 | 5.0 ± 0.0 "
        "| 31.0 ± 1.5 | 32.0 ± 1.2 ours-a |"
    )
    mtab, main = quality.margin_table(res, "online", SYSTEMS)
    assert main == [m]
    assert mtab.splitlines()[-1] == (
        "| toy | evaluation | ours-a 32.0 | vw-x 22.0 | +10.0 ± 1.2 | 3 | we lose by 10.0 ± 1.2 points "
        "| ours-a: we lose by 10.0 ± 1.2 points "
        "| ours-a 32.0 vs 31.0: we lose by 1.0 ± 0.6 points (within 2 SE) |"
    )
    # tuned against tuned: ours at its sweep's best against VW at its own (not a contender: not bold)
    (t,) = quality.margins(res, "online", SYSTEMS, sweep_side=True, vw_sweep=True)
    assert (t.ours, t.vw) == ("ours-a", "vw-t") and t.diff == pytest.approx(1.0)
    # the SE is of the paired differences, not of either side: a constant gap has SE 0
    res = _results({"ours-a": {0: 0.9, 1: 0.7}, "vw-x": {0: 0.8, 1: 0.6}}, "last20", "car")
    (m,) = quality.margins(res, "last20", SYSTEMS)
    assert m.diff == pytest.approx(10.0) and m.se == pytest.approx(0.0)
    assert not m.lost and m.outcome() == "we win by 10.0 ± 0.0 points"
    assert "tuned on this data set" in quality.quality_table(res, "last20", SYSTEMS, planned=2)
    # a gap within two standard errors says so; a gap that rounds to 0.0 is a tie
    res = _results({"ours-a": {0: 0.30, 1: 0.20}, "vw-x": {0: 0.20, 1: 0.28}})
    assert quality.margins(res, "online", SYSTEMS)[0].outcome() == "we lose by 1.0 ± 9.0 points (within 2 SE)"
    res = _results({"ours-a": {0: 0.3001}, "vw-x": {0: 0.3}})
    assert quality.margins(res, "online", SYSTEMS)[0].outcome() == "tie (0.0 points)"


def test_rendering_partial_runs_says_how_many_seeds_and_runs_are_stored(tmp_path: Path) -> None:
    res = _results(
        {
            "ours-a": {0: 0.30, 1: 0.34, 2: 0.32},  # 3 of 5 seeds
            "vw-x": {0: 0.20, 1: 0.22, 2: 0.24, 3: 0.2, 4: 0.2},
            "vw-y": {4: 0.5},  # one seed: no SE
        }
    )
    tab = quality.quality_table(res, "online", SYSTEMS, planned=5)
    row = tab.splitlines()[-1].split(" | ")
    assert row[3] == "32.0 ± 1.2 (n=3)" and row[4] == "–" and row[6] == "50.0 (n=1)" and row[7] == "–"
    assert row[5] == "**21.2 ± 0.8**"
    (m,) = quality.margins(res, "online", SYSTEMS)
    assert m.n == 3 and m.diff == pytest.approx(10.0)  # paired over the seeds both have
    done = Status(planned=50, stored=11, seconds=5400.0, computed=0, stopped=True, missing={"ours-b": 5})
    md = quality.render(res, Plan(("toy",), (0, 1, 2, 3, 4), None), SYSTEMS, done, "cmd", tmp_path)
    assert "**Stored: 11 of the 50 planned runs**" in md and "total run time so far 1.50 h" in md
    assert "Not yet run: ours-b 5" in md and quality.HOURS_ENV in md
    assert "32.0 ± 1.2 (n=3)" in md and "only that many of the 5 planned seeds" in md
    assert "We lose on 1 of 1 data sets (toy)" in md and "*vw@sweep*: VW at the best setting" in md


def test_speed_table_gives_ratios_from_the_same_runs() -> None:
    res = _results({"ours-a": {0: 0.3}, "vw-x": {0: 0.2}, "ref": {0: 0.1}})
    res = [
        Result(r.dataset, r.protocol, r.T, r.system, r.seed, r.value, 0.01 if r.system == "vw-x" else 0.04)
        for r in res
    ]
    tab, verdicts = quality.speed_table(res, SYSTEMS, anchor="vw-x")
    assert tab.splitlines()[-1] == "| toy | 2,500 | – | 10,000 | – | 2,500 | – | 0.25 | – |"
    assert verdicts == ["ours-a: slower than vw-x in the median (ratio 0.25); slower on 1 of 1 data sets"]


def test_bench_quality_quick_writes_its_tables_plot_and_runs_into_bench_dir(
    bench_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(quality, "QUICK", Plan(("balance", "dna"), (0, 1), 60))
    before = DOCS_MD.read_bytes() if DOCS_MD.exists() else None
    committed = quality.STORE.read_bytes() if quality.STORE.exists() else None
    assert main(["bench", "quality", "--quick"]) == 0
    printed = capsys.readouterr().out
    written = (bench_dir / "BENCHMARKS.md").read_text()
    assert printed.strip() in written
    assert "<!-- BEGIN quality -->" in written and "## Speed vs Vowpal Wabbit" in written
    assert (bench_dir / "bench" / "quality.png").stat().st_size > 1000
    assert len(json.loads((bench_dir / "bench" / "quality.json").read_text())) > 0
    header = next(line for line in written.splitlines() if line.startswith("| dataset | role | T |"))
    names = [s.name for s in quality.systems()]
    assert header.removesuffix(" |").split(" | ")[3:] == [*names, "best of sweep (ours)"]
    for name, role in (("balance", "evaluation"), ("dna", "tuned on this data set")):
        assert f"| {name} | {role} | 60 |" in written
    runs = (bench_dir / "bench" / "quality-runs.jsonl").read_text().splitlines()
    assert len(runs) == 3 * 2 * len(names)  # balance x1, x10, dna; 2 seeds
    assert f"**Stored: {len(runs)} of the {len(runs)} planned runs**" in written
    # the quick runs never touch the committed tables or the committed run store
    assert (DOCS_MD.read_bytes() if DOCS_MD.exists() else None) == before
    assert (quality.STORE.read_bytes() if quality.STORE.exists() else None) == committed


def test_systems_that_learn_pairs_run_last_on_wide_streams() -> None:
    """A learner with pairs ("pairs", or "quadratic": pairs and squares) or VW with -q costs
    T d^2 K / 2: its isolet x15 runs come after every cheaper stream, its connect4 runs first."""

    def system(name: str, learner: str, params: str) -> System:
        return System(name, "ours", "", "", learner, params, "v")

    plain = system("a", "cova", json.dumps({"interactions": "none"}))
    quad = system("b", "regcb-sgd", json.dumps({"interactions": "quadratic"}))
    q = system("c", "vw", "--cb_explore_adf --regcb -q ::")
    assert [quality._pairs(s) for s in (plain, quad, q)] == [False, True, True]
    runs = quality.plan_runs(Plan(("isolet", "connect4"), (0,), None), [quad])
    assert [(r.dataset, r.factor) for r in runs] == [("connect4", 1), ("isolet", 1), ("isolet", 15)]
