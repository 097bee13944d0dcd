"""Scaling benchmark: what it measures is what a checkpoint holds, and its quick mode writes a temp file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lab.bench import scaling
from lab.sim.stream import run_stream
from service.cli import main
from service.learners.base import make_learner
from service.sampling import DecisionIds
from service.serial import decode

DOCS_MD = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"


def test_dense_linear_stream_is_labelled_by_a_linear_teacher() -> None:
    chunks = list(scaling.linear_stream(7, 4, 500, chunk=200, seed=2))
    assert [len(y) for _, y in chunks] == [200, 200, 100]
    X = np.concatenate([X for X, _ in chunks])
    y = np.concatenate([y for _, y in chunks])
    assert X.shape == (500, 7) and set(np.unique(y)) == {0, 1, 2, 3}
    again = np.concatenate([y for _, y in scaling.linear_stream(7, 4, 500, chunk=200, seed=2)])
    np.testing.assert_array_equal(y, again)


def test_hashed_stream_is_sparse_and_the_same_keys_and_labels_at_every_b() -> None:
    (rows, y), *_ = scaling.linear_stream(1024, 3, 50, nnz=5, chunk=50)
    assert len(rows) == 50 and all(x.dim == 1024 and x.nnz <= 5 for x in rows)
    assert all(np.all(np.diff(x.idx) > 0) and x.val.sum() == 5 for x in rows)  # colliding keys add up
    (wide, y_wide), *_ = scaling.linear_stream(2**22, 3, 50, nnz=5, chunk=50)
    np.testing.assert_array_equal(y, y_wide)  # only the buckets depend on b
    assert all(x.dim == 2**22 and x.idx.max() < 2**22 for x in wide)


def test_hashed_rows_reach_sparse_learners_as_is_and_the_others_dense() -> None:
    ((rows, y),) = scaling.linear_stream(64, 3, 40, nnz=4, chunk=40)
    sparse, dense = make_learner("banditron", 64, 3, seed=0), make_learner("banditron", 64, 3, seed=0)
    scaling.run_hashed(sparse, rows, y, DecisionIds.for_seed(0))
    run_stream(dense, np.stack([x.dense() for x in rows]), y, DecisionIds.for_seed(0))
    np.testing.assert_allclose(sparse.W_, dense.W_)
    weak = make_learner("cova", 64, 3, {"base": "naive_bayes"}, seed=0)  # no sparse input: x.dense()
    assert not weak.accepts_sparse
    scaling.run_hashed(weak, rows, y, DecisionIds.for_seed(0))


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


def test_hashed_target_line_compares_b18_with_b12() -> None:
    def point(name: str, b: int, us: float) -> scaling.Point:
        return scaling.Point(name, 2**b, 10, None, 32, us, 100, 1, 0.1)

    pts = [point("banditboost", 12, 10.0), point("banditboost", 18, 19.0)]
    pts += [point("adabandit", 12, 100.0), point("adabandit", 18, 250.0), point("cova", 18, 1.0)]
    (line,) = scaling._hashed_target(pts, scaling.FULL)
    assert "banditboost 1.90× (met)" in line and "adabandit 2.50× (missed)" in line
    assert scaling._hashed_target(pts[:1], scaling.FULL) == []
