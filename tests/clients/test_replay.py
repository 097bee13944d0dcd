"""The replay client against real servers: parity with the offline simulator, determinism,
spreading over replicas, the rate limit, the report, the plot and the exit codes."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from clickboost_client import Client
from clickboost_client.replay import main, replay, summarize
from lab.sim.datasets import load_dataset
from lab.sim.stream import run_stream
from service.config import load_model_file
from service.learners.base import make_learner
from service.sampling import DecisionIds
from tests.clients.conftest import ADMIN_KEY, API_KEY, serve

LIMIT = 150


@pytest.fixture(scope="module")
def car() -> tuple[np.ndarray, np.ndarray]:
    return load_dataset("car").stream(7, limit=LIMIT)


def offline_clicks(X: np.ndarray, y: np.ndarray, id_seed: int) -> np.ndarray:
    """The simulator's run of the `car` model of deploy/models.toml with the server's decision ids."""
    spec = load_model_file(Path(__file__).resolve().parents[2] / "deploy" / "models.toml")["car"]
    learner = make_learner(spec.learner, 21, 4, spec.params, seed=spec.seed)
    return run_stream(learner, X, y, DecisionIds.for_seed(id_seed))


def test_replay_at_concurrency_1_is_the_offline_simulator_and_deterministic(
    car: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = car
    runs = []
    for _ in range(2):
        with serve(seed=11) as url:
            result = asyncio.run(replay([url], "car", X, y, api_key=API_KEY, progress=False))
            with Client(url, admin_key=ADMIN_KEY) as c:
                runs.append((result, c.get_model("car").checksum))
    (first, checksum1), (second, checksum2) = runs
    clicks = [v.click for v in first.visits]
    assert [v.index for v in first.visits] == list(range(LIMIT))
    assert clicks == offline_clicks(X, y, 11).tolist()
    assert [(v.index, v.label_index, v.click) for v in second.visits] == [
        (v.index, v.label_index, v.click) for v in first.visits
    ]
    assert checksum1 == checksum2
    report = summarize(first)
    assert report["n"] == LIMIT and report["accuracy"] == sum(clicks) / LIMIT
    assert report["errors"] == {"predict": {}, "feedback": {}}


def test_cli_spreads_over_replicas_and_writes_report_and_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLICKBOOST_API_KEY", API_KEY)
    out, png = tmp_path / "report.json", tmp_path / "replay.png"
    with serve(seed=1) as url1, serve(seed=2) as url2:
        # a comma list and the option repeated, as one may write either
        args = ["--url", f"{url1},", "--url", f"{url2}/", "--model", "car", "--dataset", "car"]
        args += ["--limit", "80"]
        args += ["--concurrency", "4", "--seed", "3", "--json-out", str(out), "--plot", str(png)]
        assert main(args) == 0
        counts = []
        for url in (url1, url2):
            with Client(url, admin_key=ADMIN_KEY) as c:
                counts.append(c.get_model("car").counts)
    # each replica has its own memory store here: each saw exactly its half of the visits
    assert [c.decisions for c in counts] == [40, 40]
    assert [c.clicks + c.no_clicks for c in counts] == [40, 40]
    report = json.loads(out.read_text())
    assert report["n"] == 80 and report["clicks"] == sum(c.clicks for c in counts)
    assert report["accuracy"] == report["clicks"] / 80
    assert report["urls"] == [url1, url2] and report["concurrency"] == 4 and report["dataset"] == "car"
    assert report["rps"] > 0 and report["errors"] == {"predict": {}, "feedback": {}}
    assert report["failed_visits"] == report["feedback_given_up"] == 0
    assert report["visits_by_replica"] == [40, 40] and report["sdk"] == {}
    for call in ("predict", "feedback"):
        q = report["latency_ms"][call]
        assert 0 < q["p50"] <= q["p95"] <= q["p99"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert f"accuracy (CTR) {report['accuracy']:.4f}" in printed and "errors: none" in printed


def test_rate_limit_spaces_the_visits(server: str, car: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = car
    start = time.perf_counter()
    result = asyncio.run(replay([server], "car", X[:11], y[:11], rate=25.0, api_key=API_KEY, progress=False))
    assert time.perf_counter() - start >= 10 / 25
    starts = [v.start_s for v in result.visits]
    assert all(s >= i / 25 for i, s in enumerate(starts))


def test_configuration_errors_exit_2_with_one_line(
    server: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLICKBOOST_API_KEY", API_KEY)
    base = ["--url", server, "--limit", "5"]
    assert main([*base, "--model", "nope", "--dataset", "car"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: predict on http://127.0.0.1:") and "HTTP 404" in err and "nope" in err
    assert main([*base, "--model", "car", "--dataset", "balance"]) == 2  # d = 4, the model wants 21
    assert "expected 21 values, got 4" in capsys.readouterr().err
    assert main([*base, "--model", "car", "--dataset", "no-such-dataset"]) == 2
    assert "dataset 'no-such-dataset' not found" in capsys.readouterr().err
    monkeypatch.setenv("CLICKBOOST_API_KEY", "wrong")
    assert main([*base, "--model", "car", "--dataset", "car"]) == 2
    assert "HTTP 401" in capsys.readouterr().err


def test_unreachable_replica_counts_errors_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--url", "http://127.0.0.1:1", "--model", "car", "--dataset", "car", "--limit", "3"]
    start = time.monotonic()
    assert main([*args, "--retry-budget", "0.3"]) == 1
    assert time.monotonic() - start < 20  # three visits, each retried for 0.3 s at most
    out = capsys.readouterr().out
    assert "visits 0" in out and "errors: predict transport: 3" in out
    assert "failed visits 3  feedbacks given up 0  retries " in out
