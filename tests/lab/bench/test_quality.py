"""Quality/speed benchmark against Vowpal Wabbit: the VW runner, the tables, and the quick mode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lab.bench import quality
from lab.bench.quality import Result, System
from lab.bench.vw import EXPLORERS, run_vw, to_lines
from service.cli import main

DOCS_MD = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"


def test_to_lines_writes_one_based_labels_and_nonzero_features_exactly() -> None:
    X = np.array([[0.0, 1.5, 0.0], [0.1, 0.0, -2.0]])
    assert to_lines(X, np.array([0, 2])) == ["1 | f1:1.5", "3 | f0:0.1 f2:-2"]


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


def _results(values: dict[str, list[float]], protocol: str = "online") -> list[Result]:
    return [
        Result("toy", protocol, 100, name, seed, v, 0.5)
        for name, vs in values.items()
        for seed, v in enumerate(vs)
    ]


SYSTEMS = [
    System("ours-a", "ours", "", ""),
    System("vw-x", "vw", "", ""),
    System("ref", "reference", "", ""),
]


def test_quality_table_marks_the_best_bandit_system_and_says_when_we_lose() -> None:
    # The reference is best but never marked; VW beats ours on online error.
    res = _results({"ours-a": [0.30, 0.34], "vw-x": [0.20, 0.22], "ref": [0.05, 0.05]})
    tab, verdicts = quality.quality_table(res, "online", SYSTEMS)
    row = tab.splitlines()[-1]
    assert row == "| toy | 100 | 2 | 32.0 ± 2.8 | **21.0 ± 1.4** | 5.0 ± 0.0 |"
    assert verdicts == ["toy: WE LOSE by 11.0 points — best of ours ours-a 32.0%, best VW vw-x 21.0%"]
    # last20 is an accuracy: higher wins.
    res = _results({"ours-a": [0.9, 0.9], "vw-x": [0.8, 0.8], "ref": [1.0, 1.0]}, "last20")
    tab, verdicts = quality.quality_table(res, "last20", SYSTEMS)
    assert "**90.0 ± 0.0**" in tab
    assert verdicts[0].startswith("toy: we win by 10.0 points")
    # Equal at the printed precision is a tie, not a loss.
    res = _results({"ours-a": [0.9341], "vw-x": [0.9338], "ref": [1.0]}, "last20")
    assert quality.quality_table(res, "last20", SYSTEMS)[1][0].startswith("toy: tie")


def test_speed_table_gives_ratios_from_the_same_run() -> None:
    res = _results({"ours-a": [0.3], "vw-x": [0.2], "ref": [0.1]})
    res = [
        Result(r.dataset, r.protocol, r.T, r.system, r.seed, r.value, 0.01 if r.system == "vw-x" else 0.04)
        for r in res
    ]
    tab, verdicts = quality.speed_table(res, SYSTEMS, anchor="vw-x")
    assert tab.splitlines()[-1] == "| toy | 2,500 | 10,000 | 2,500 | 0.25 |"
    assert verdicts == ["ours-a: slower than vw-x in the median (ratio 0.25); slower on 1 of 1 data sets"]


def test_bench_quality_quick_writes_its_tables_and_plot_into_bench_dir(
    bench_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = DOCS_MD.read_bytes() if DOCS_MD.exists() else None
    assert main(["bench", "quality", "--quick"]) == 0
    printed = capsys.readouterr().out
    written = (bench_dir / "BENCHMARKS.md").read_text()
    assert printed.strip() in written
    assert "<!-- BEGIN quality -->" in written and "## Speed vs Vowpal Wabbit" in written
    assert (bench_dir / "bench" / "quality.png").stat().st_size > 1000
    assert len(json.loads((bench_dir / "bench" / "quality.json").read_text())) > 0
    header = next(line for line in written.splitlines() if line.startswith("| dataset | T |"))
    assert header.removesuffix(" |").split(" | ")[3:] == [s.name for s in quality.systems()]
    for name in quality.QUICK.datasets:
        assert f"| {name} | {quality.QUICK.limit} | {len(quality.QUICK.seeds)} |" in written
    assert (DOCS_MD.read_bytes() if DOCS_MD.exists() else None) == before


def test_cached_run_plan_resumes_with_the_same_results_without_running_again(tmp_path: Path) -> None:
    plan = quality.Plan(("balance",), (0,), 200)
    first = list(quality.run_plan(plan, cache=tmp_path))
    stored = sorted(tmp_path.iterdir())
    assert len(stored) == len(first) > 0  # balance: one online run (x1) and one last20 run (x10) each
    for path in stored:  # a second run must read these, not recompute them
        got = json.loads(path.read_text())
        path.write_text(json.dumps({**got, "seconds": -1.0}))
    second = list(quality.run_plan(plan, cache=tmp_path))
    assert [(r.system, r.protocol, r.value) for r in second] == [
        (r.system, r.protocol, r.value) for r in first
    ]
    assert all(r.seconds == -1.0 for r in second)
