"""``bench lean``'s pieces, without a timed run: the reference app answers the service's shapes, the
profile parser counts own and cumulative samples, and the report computes its ratios and verdicts."""

from __future__ import annotations

from collections import Counter

from fastapi.testclient import TestClient

from lab.bench.lean import (
    BASE,
    MODELS,
    SIDES,
    STORES,
    K,
    Results,
    Tally,
    area,
    bench_app,
    parse_collapsed,
    render,
    server_name,
)
from service.api.schemas import FeedbackResponse, PredictResponse


def test_the_app_parses_and_answers_the_shapes_of_predict_and_feedback() -> None:
    with TestClient(bench_app()) as client:
        for features in ({"f0": "v1", "f1": 2.0, "f2": True}, [0.0, 0.5, 1.0]):
            r = client.post("/predict", json={"model": "hashed", "features": features})
            assert r.status_code == 200
            answer = PredictResponse.model_validate(r.json())  # the service's own answer model
            assert len(answer.probabilities) == len(answer.ranking) == K
        r = client.post("/feedback", json={"decision_id": answer.decision_id, "click": True})
        assert r.status_code == 200
        assert FeedbackResponse.model_validate(r.json()).reward == 1.0
        assert client.post("/predict", json={"model": "hashed"}).status_code == 422  # it does validate


def test_collapsed_stacks_give_own_and_cumulative_counts_once_per_stack() -> None:
    run, f_at = "run (asyncio/runners.py:86)", "f (/x/site-packages/service/api/predict.py:1)"
    text = f"{run};{f_at};g (/x/lib/python3.11/json/decoder.py:2) 3\n{run};{f_at};{f_at} 2\ngarbage line\n"
    thread = "Thread._bootstrap (/x/lib/python3.11/threading.py:1);_worker (/x/lib/python3.11/queue.py:2)"
    own, cumulative, total, others = parse_collapsed(text + f"{thread} 4\n")
    assert total == 5 and others == 4
    f = "f (service/api/predict.py:1)"
    assert own == Counter({"g (json/decoder.py:2)": 3, f: 2})
    assert cumulative[f] == 5  # counted once in the stack where it recurs
    assert cumulative["run (asyncio/runners.py:86)"] == 5
    assert (
        area(f) == "service/api" and area("g (json/decoder.py:2)") == "json" and area("h (x.py:1)") == "other"
    )


def test_the_report_gives_the_ratios_against_the_base_commit_and_the_app() -> None:
    res = Results(fs="ext4")
    for load in MODELS:
        res.tallies[("app", load)] = Tally()
        res.tallies[("app", load)].add(1000, 1.0, 0.3)  # 300 us a pair
        for store in STORES:
            base, now = Tally(), Tally()
            base.add(500, 0.5, 0.3)  # 600 us a pair in both rounds
            base.add(500, 0.5, 0.3)
            now.add(1000, 0.5, 0.3)  # 300 then 400 us: 350 over both, round ratios 0.5 and 0.67
            now.add(1000, 0.5, 0.4)
            res.tallies[(server_name("base", store), load)] = base
            res.tallies[(server_name("now", store), load)] = now
    for side in SIDES:
        for store in STORES:
            for model, _ in MODELS.values():
                res.versions[(server_name(side, store), model)] = (7, 7)
    res.versions[(server_name("now", "redis"), "hashed")] = (6, 7)
    res.own["now memory"] = Counter(
        {"f (service/api/predict.py:1)": 600_000, "g (pydantic/main.py:2)": 400_000}
    )
    res.cumulative["now memory"] = Counter(
        {"f (service/api/predict.py:1)": 1_000_000, "g (pydantic/main.py:2)": 400_000}
    )
    markdown = render(res, quick=True, seconds=1.0, rounds=1)
    # 350 / 600 = 0.58 of the base commit (met), the app 300 / 350 = 0.86
    assert "| hashed | memory | 600 | 350 | 0.58 | 0.58 | 0.86 (≥ 0.8) | 1,000 | 2,000 |" in markdown
    assert f"memory now/{BASE} 0.58 met" in markdown and "sqlite-full app/now 0.86 met" in markdown
    assert "now redis hashed: version 6 for 7 acknowledged feedbacks" in markdown
    assert "| `f (service/api/predict.py:1)` | 60.0 | 100.0 |" in markdown
    assert "Own share by package: service/api 60.0, pydantic 40.0. Other threads: 0%" in markdown
    assert "**redis, now**\n\nnow redis: no profile" in markdown
