"""``python -m service adaboost-mh`` and ``reproduce seed003-adaboost --quick`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lab.repro import reproductions
from service.cli import main


@pytest.fixture
def npz(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    X = rng.random((300, 8)).astype(np.float32)
    y = (X[:, 0] > 0.5).astype(np.int64) + (X[:, 3] > 0.3)
    path = tmp_path / "toy.npz"
    np.savez(path, X=X, y=y)
    return path


@pytest.mark.parametrize("search", ["full", "ucb", "exp3p"])
def test_adaboost_mh_command_prints_errors_time_and_evaluations(
    npz: Path, search: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["adaboost-mh", "--dataset", str(npz), "--search", search, "--iterations", "40", "--json"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["n_train"] == 240 and out["n_test"] == 60 and "seeded random split" in out["split"]
    assert out["train_error"] < 0.1 and out["test_error"] < 0.2
    assert out["seconds"] > 0
    per_iteration = 239  # continuous features: n_train - 1 thresholds per feature
    expected = {"full": 40 * 8 * per_iteration, "ucb": 8 * per_iteration + 40 * per_iteration}
    assert out["stump_evaluations"] == expected.get(search, 40 * per_iteration)
    assert main(["adaboost-mh", "--dataset", str(npz), "--search", search, "--iterations", "3"]) == 0
    text = capsys.readouterr().out
    assert "training error" in text and "held-out error" in text and "stump evaluations" in text


def test_adaboost_mh_command_refuses_bad_input(npz: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["adaboost-mh", "--dataset", str(npz), "--search", "ucb", "--iterations", "0"]) == 2
    assert "--iterations" in capsys.readouterr().err
    assert main(["adaboost-mh", "--dataset", "no-such-data", "--search", "ucb", "--iterations", "5"]) == 2
    assert "not found" in capsys.readouterr().err


def test_quick_reproduction_returns_its_section_and_writes_plots_under_the_given_directory(
    tmp_path: Path,
) -> None:
    markdown = reproductions.get("seed003-adaboost")(True, tmp_path)
    assert (tmp_path / "repro" / "seed003-adaboost-dna.png").stat().st_size > 1000
    assert "](repro/seed003-adaboost-dna.png)" in markdown
    for search in ("| full |", "| ucb |", "| exp3p |"):
        assert search in markdown
    assert "order of magnitude" in markdown
