"""``clickboost evaluate`` on a decision log in the export's JSON-lines format (issue 22, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lab.sim.datasets import load_dataset
from service.cli import main
from service.learners import make_learner


def write_log(path: Path, n: int = 3000) -> float:
    """A log of Banditron (gamma 0.3) learning on car, as ``clickboost export`` writes it; returns
    the true click rate of the uniform policy on those contexts (1/K)."""
    car = load_dataset("car")
    rng = np.random.default_rng(0)
    m = make_learner("banditron", car.d, car.n_labels, {"gamma": 0.3})
    with path.open("w") as f:
        for t, i in enumerate(rng.integers(car.n, size=n)):
            x = car.X[i]
            d = m.decide(x, rng)
            click = d.label == car.y[i]
            m.learn(x, d, click)
            rec = {
                "decision_id": f"d{t}",
                "model": "car",
                "model_version": t,
                "created_at": 1.7e9 + t,
                "features": x.tolist(),
                "probs": d.probs.tolist(),
                "label_index": d.label,
                "label": str(d.label),
                "outcome": "click" if click else "no_click",
                "reward": int(click),
                "outcome_at": 1.7e9 + t + 1,
            }
            f.write(json.dumps(rec) + "\n")
        f.write(json.dumps({**rec, "decision_id": "pending", "outcome": None, "reward": None}) + "\n")
    return 1 / car.n_labels


def test_evaluate_prints_estimates_for_stationary_and_learning_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "log.jsonl"
    uniform_truth = write_log(log)
    args = ["evaluate", "--log", str(log), "--policy", "uniform", "--policy", "constant:0"]
    args += ["--policy", "cova:base=pa", "--runs", "3", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"logged", "uniform", "constant:0", "cova:base=pa"}
    rewards = [json.loads(line)["reward"] for line in log.read_text().splitlines()][:-1]
    assert out["logged"]["ips"]["value"] == pytest.approx(np.mean(rewards))  # weights 1: the observed rate
    u = out["uniform"]
    assert all(u[e]["low"] <= uniform_truth <= u[e]["high"] for e in ("ips", "snips", "dr"))
    r = out["cova:base=pa"]["replay"]
    assert 0 < r["n"] < 3000 and r["runs"] == 3 and r["low"] <= r["value"] <= r["high"]
    # weights 1: every event counts; a replay's ESS is the events it accepted (about 225 here)
    assert out["logged"]["ips"]["ess"] == pytest.approx(3000) and out["logged"]["ips"]["warning"] is None
    assert r["ess"] == pytest.approx(r["n"], abs=0.5) and r["warning"] is None
    assert main(["evaluate", "--log", str(log), "--policy", "uniform"]) == 0  # the table
    table = capsys.readouterr().out
    assert "uniform" in table and "dr" in table and "95% interval" in table and "ESS" in table
    assert "!" not in table
    short = tmp_path / "short.jsonl"  # 300 events: a replay accepts about 22, too few to tell
    write_log(short, 300)
    assert main(["evaluate", "--log", str(short), "--policy", "cova:base=pa", "--runs", "2"]) == 0
    table = capsys.readouterr().out
    (row,) = [line for line in table.splitlines() if line.startswith("cova:base=pa ")]
    assert row.endswith(" !") and "! cova:base=pa replay: effective sample size" in table
    assert "cannot tell" in table


def test_evaluate_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "log.jsonl"
    write_log(log, 50)
    assert main(["evaluate", "--log", str(log), "--policy", "constant:9"]) == 2
    assert "LABEL_INDEX" in capsys.readouterr().err
    assert main(["evaluate", "--log", str(log), "--policy", "nosuchlearner"]) == 2
    assert main(["evaluate", "--log", str(tmp_path / "missing.jsonl"), "--policy", "uniform"]) == 2
    assert "cannot read" in capsys.readouterr().err
