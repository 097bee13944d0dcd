"""``clickboost lab simulate``: the JSON contract and the one-line errors (exit code 2)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from lab.sim import metrics
from lab.sim.datasets import load_dataset
from lab.sim.simulate import run_seeds
from service.cli import main

KEYS = {
    "learner",
    "params",
    "dataset",
    "n_stream",
    "seeds",
    "error_mean",
    "error_std",
    "accuracy_last20_mean",
    "examples_per_second",
}


def simulate_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", *args, "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    return json.loads(out[0])


def test_json_contract_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    res = simulate_json(
        capsys,
        "--learner",
        "banditron",
        "--set",
        "gamma=0.2",
        "--dataset",
        "car",
        "--seeds",
        "2",
        "--limit",
        "900",
    )
    assert set(res) >= KEYS
    assert res["params"] == {"gamma": 0.2, "tie_break": "random"}  # string coerced by Params
    assert (res["learner"], res["dataset"], res["n_stream"], res["seeds"]) == ("banditron", "car", 900, 2)
    runs = run_seeds("banditron", {"gamma": 0.2}, load_dataset("car"), [0, 1], limit=900)
    errors = [metrics.online_error(c) for c in runs.correct]
    assert res["errors"] == errors
    assert res["error_mean"] == pytest.approx(np.mean(errors)) and res["error_std"] == pytest.approx(
        np.std(errors)
    )
    last20 = np.mean([metrics.last20_accuracy(c) for c in runs.correct])
    assert res["accuracy_last20_mean"] == pytest.approx(last20)
    assert res["examples_per_second"] > 0


def test_last20_duplicate_full_information_and_curve(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    stem = tmp_path / "curve"
    res = simulate_json(
        capsys,
        *("--learner", "perceptron", "--dataset", "balance", "--duplicate", "2", "--eval", "last20"),
        *("--curve", str(stem)),
    )
    assert res["n_stream"] == 1250 and res["full_information"] is True
    assert res["error_mean"] == pytest.approx(1.0 - res["accuracy_last20_mean"])
    assert stem.with_suffix(".png").is_file() and "perceptron" in stem.with_suffix(".csv").read_text()


def test_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["simulate", "--learner", "cova", "--set", "base=pa", "--dataset", "car", "--limit", "300"]) == 0
    )
    out = capsys.readouterr().out
    assert "online error" in out and "examples/s" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--learner", "nope", "--dataset", "car"], "unknown learner 'nope'"),
        (["--learner", "banditron", "--set", "gamma=2", "--dataset", "car"], "gamma"),
        (["--learner", "banditron", "--set", "colour=red", "--dataset", "car"], "colour"),
        (["--learner", "banditron", "--set", "gamma", "--dataset", "car"], "key=value"),
        (["--learner", "banditron", "--dataset", "no-such-data"], "not found"),
    ],
)
def test_expected_errors_are_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["lab", "simulate", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_real_process_exit_code() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "lab",
            "simulate",
            "--learner",
            "nope",
            "--dataset",
            "car",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1


def test_a_parameter_set_to_an_old_default_is_run_as_set(capsys: pytest.CaptureFixture[str]) -> None:
    # interactions="none" was C-OVA's default once; the dump that rebuilds the learner keeps it
    args = ("--learner", "cova", "--dataset", "car", "--limit", "1000")
    none = simulate_json(capsys, *args, "--set", "interactions=none")
    auto = simulate_json(capsys, *args, "--set", "interactions=auto")
    assert none["params"]["interactions"] == "none" and auto["params"]["interactions"] == "auto"
    assert none["errors"] != auto["errors"]
    runs = run_seeds("cova", {"interactions": "none"}, load_dataset("car"), [0], limit=1000)
    assert none["errors"] == [metrics.online_error(c) for c in runs.correct]
