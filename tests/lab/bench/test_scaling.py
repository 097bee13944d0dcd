"""Scaling benchmark: what it measures is what a checkpoint holds, and its quick mode writes a temp file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lab.bench import scaling
from service.cli import main
from service.learners.base import make_learner
from service.serial import decode

DOCS_MD = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"


def test_linear_stream_is_labelled_by_a_linear_teacher_dense_or_hashed() -> None:
    chunks = list(scaling.linear_stream(7, 4, 500, chunk=200, seed=2))
    assert [len(y) for _, y in chunks] == [200, 200, 100]
    X = np.concatenate([X for X, _ in chunks])
    y = np.concatenate([y for _, y in chunks])
    assert X.shape == (500, 7) and set(np.unique(y)) == {0, 1, 2, 3}
    again = np.concatenate([y for _, y in scaling.linear_stream(7, 4, 500, chunk=200, seed=2)])
    np.testing.assert_array_equal(y, again)
    (Xh, _), *_ = scaling.linear_stream(1024, 3, 50, nnz=5, chunk=50)
    assert Xh.shape == (50, 1024) and np.all((Xh != 0).sum(axis=1) <= 5) and set(np.unique(Xh)) == {0.0, 1.0}


def test_model_bytes_are_the_checkpoint_and_grow_with_k_times_d(tmp_path: Path) -> None:
    grid = scaling.QUICK
    small = scaling.measure("banditron", {}, 10, 3, grid, tmp_path)
    big = scaling.measure("banditron", {}, 20, 3, grid, tmp_path)
    # The weight matrix is K x d float64; everything else (header, rng, counters) is constant.
    assert big.model_bytes - small.model_bytes == 3 * 10 * 8
    saved = (tmp_path / "ckpt0").read_bytes()
    assert len(saved) == big.model_bytes
    restored = make_learner("banditron", 20, 3)
    restored.set_state({k: v for k, v in decode(saved).items() if k != "schema_version"})
    assert restored.t_ == grid.warmup + grid.rounds
    assert big.us_per_event > 0 and big.checkpoint_ms > 0


def test_bench_scaling_quick_writes_its_section_and_plot_into_bench_dir(
    bench_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = DOCS_MD.read_bytes() if DOCS_MD.exists() else None
    assert main(["bench", "scaling", "--quick"]) == 0
    md = capsys.readouterr().out.strip()
    written = (bench_dir / "BENCHMARKS.md").read_text()
    assert "<!-- BEGIN scaling -->" in written and md in written
    assert (bench_dir / "bench" / "scaling.png").stat().st_size > 1000
    d_axis = md.split("### Growing d, dense")[1].split("###")[0]
    for name in scaling.bandit_learners():  # every learner on the d axis, boosters with their set N too
        assert f"| {name} |" in d_axis
    assert (DOCS_MD.read_bytes() if DOCS_MD.exists() else None) == before
