"""The retained decision log (issue 22, items 1 and 2): the record, its retention apart from the event
log's trimming, the export route and its formats, Vowpal Wabbit reading the dsjson export, and
``clickboost export``."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.api.app import create_app
from service.cli import main
from service.config import ConfigError, ModelSpec, Settings, load_settings
from service.decision_log import PAGE, LogRecord, pages
from service.runtime import Runtime
from service.store import LoggedDecision, MemoryStore, SQLiteStore, Store
from service.store.redis import RedisStore
from tests.service.api.conftest import app_client, uvicorn_server

pytestmark = pytest.mark.anyio

DAY = 86_400.0
T0 = 1_764_000_000.0  # the clock of the tests: 2025-11-24 16:00 UTC
HASHED = ModelSpec(
    learner="banditron",
    params={"gamma": 0.3},
    hashing_bits=6,
    labels=["a", "b", "c"],
    reward_window_seconds=60,
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Clock:
    """The runtime's injectable clock, moved by hand."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "memory":
        s: Store = MemoryStore()
    elif request.param == "sqlite":
        s = SQLiteStore(tmp_path / "clickboost.sqlite3", synchronous="normal")
    else:
        s = RedisStore(request.getfixturevalue("redis_url"), prefix=f"test-{uuid.uuid4().hex}:")
    try:
        yield s
    finally:
        for name in await s.list_models():
            await s.delete_model(name)
        await s.close()


async def export(
    runtime: Runtime, name: str, since: float = -math.inf, until: float = math.inf
) -> list[LogRecord]:
    return [r async for page in await runtime.decision_log(name, since, until) for r in page]


# -- the record ------------------------------------------------------------------------------------


def test_records_of_dense_and_hashed_models_round_trip_as_json_lines() -> None:
    dense = ModelSpec(learner="banditron", n_features=3, n_labels=2)
    x = np.array([0.1, 0.0, -2.5e-300])
    entry = LoggedDecision("d1", 4, T0 + 0.125, x, np.array([0.9, 0.1]), 1, "click", True, T0 + 2)
    rec = LogRecord.from_logged(entry, "m", dense)
    line = rec.to_json()
    assert list(json.loads(line)) == [
        "decision_id",
        "model",
        "model_version",
        "created_at",
        "features",
        "probs",
        "label_index",
        "label",
        "outcome",
        "reward",
        "outcome_at",
        "eligible",
        "learner_probs",
        "baseline",
        "deferred",
        "activated_at",
        "actions",
    ]
    assert json.loads(line) == {
        "decision_id": "d1",
        "model": "m",
        "model_version": 4,
        "created_at": T0 + 0.125,
        "features": [0.1, 0.0, -2.5e-300],
        "probs": [0.9, 0.1],
        "label_index": 1,
        "label": "1",
        "outcome": "click",
        "reward": 1,
        "outcome_at": T0 + 2,
        "eligible": None,
        "learner_probs": None,
        "baseline": None,
        "deferred": False,
        "activated_at": None,
        "actions": None,
    }
    assert LogRecord.from_json(line) == rec
    old = {  # exported before issue 38 (eligible labels, safe rollout, deferred decisions)
        k: v
        for k, v in json.loads(line).items()
        if k not in ("eligible", "learner_probs", "baseline", "deferred", "activated_at")
    }
    assert LogRecord.from_json(json.dumps(old)) == rec
    assert np.array(json.loads(line)["features"]).tobytes() == x.tobytes()  # exact

    packed = np.array([[3.0, 40.0], [1.0, 31.5]])  # Featuriser.pack: bucket indices, values
    pending = LoggedDecision("d2", 0, T0, packed, np.array([0.2, 0.3, 0.5]), 2)
    rec = LogRecord.from_logged(pending, "h", HASHED)
    assert rec.features == {"idx": [3, 40], "val": [1.0, 31.5], "dim": 64}
    assert (rec.label, rec.outcome, rec.reward, rec.outcome_at) == ("c", None, None, None)
    assert LogRecord.from_json(rec.to_json()) == rec
    with pytest.raises(ValueError, match="not a decision-log record"):
        LogRecord.from_json('{"decision_id": "x"}')


def test_dsjson_lines_are_vowpal_wabbit_decision_service_events() -> None:
    probs = np.array([0.2, 0.3, 0.5])
    packed = np.array([[3.0, 40.0], [1.0, 31.5]])
    click = LogRecord.from_logged(
        LoggedDecision("d", 0, T0 + 0.5, packed, probs, 1, "click", True, T0), "h", HASHED
    )
    assert json.loads(click.to_dsjson() or "") == {
        "_label_cost": -1,
        "_label_probability": 0.3,
        "_label_Action": 2,
        "_labelIndex": 1,
        "a": [2, 1, 3],
        "p": [0.3, 0.2, 0.5],
        "c": {
            "x": {"b3": 1.0, "b40": 31.5},
            "_multi": [{"a": {"id": "0"}}, {"a": {"id": "1"}}, {"a": {"id": "2"}}],
        },
        "EventId": "d",
        "Timestamp": "2025-11-24T16:00:00.500000Z",
    }
    expired = LoggedDecision("e", 0, T0, np.array([0.0, 2.0]), np.array([0.6, 0.4]), 0, "expired", False, T0)
    dense = ModelSpec(learner="banditron", n_features=2, n_labels=2)
    line = json.loads(LogRecord.from_logged(expired, "m", dense).to_dsjson() or "")
    assert (line["_label_cost"], line["a"], line["p"], line["c"]["x"]) == (0, [1, 2], [0.6, 0.4], {"f1": 2.0})
    for outcome, reward in [(None, None), ("dropped", None)]:
        entry = LoggedDecision("p", 0, T0, np.zeros(2), np.array([0.6, 0.4]), 0, outcome, reward)  # type: ignore[arg-type]
        assert LogRecord.from_logged(entry, "m", dense).to_dsjson() is None


def test_the_retention_setting_is_validated_with_its_syntax() -> None:
    assert load_settings().retention == load_settings(log_retention="100000,7d").retention
    assert load_settings(log_retention="36h").retention.max_count is None
    for bad in ["", "7", "7d,8d", "0s", "1e5", "7 days", "100,200"]:
        if bad == "7":
            assert load_settings(log_retention=bad).retention.max_count == 7
            continue
        with pytest.raises(ConfigError, match="CLICKBOOST_LOG_RETENTION"):
            load_settings(log_retention=bad)
    with pytest.raises(ConfigError, match=r"an age \(a number and s, m, h, d or w: 36h, 7d\), a count"):
        load_settings(log_retention="forever")


# -- the runtime: retention apart from the event log ------------------------------------------------


@pytest.mark.slow
async def test_decisions_of_a_day_ago_are_exportable_after_10000_checkpoints(store: Store) -> None:
    """A checkpoint after every event trims the event log 10,000 times; the decision log, under the
    default retention (a week, 100,000 decisions), still has yesterday's decisions and outcomes."""
    clock = Clock(T0)
    runtime = Runtime(store, Settings(store="memory", checkpoint_every=1), clock=clock)
    await runtime.create_model("m", HASHED)
    old = []
    for i in range(6):
        p = await runtime.predict("m", {"user": f"u{i}", "n": float(i)})
        if i < 4:
            await runtime.feedback(p.decision_id, i % 2 == 0, wait=True)
        old.append(p)
    clock.t += 120.0  # past the reward window: the sweep expires the other two
    assert await runtime.sweep() == 2

    clock.t = T0 + DAY
    rng = np.random.default_rng(0)
    for i in range(10_000):
        p = await runtime.predict("m", {"user": f"u{rng.integers(50)}"})
        _, applied = await runtime.feedback(p.decision_id, bool(rng.integers(2)), wait=True)
        assert applied
        if i % 1000 == 0:
            clock.t += 1.0
            await runtime.sweep()  # the retention runs in every sweep
    assert runtime.checkpoints_written >= 10_000
    # trimmed up to the last checkpoint, whose own event stays (Checkpoints._write)
    cp = await store.get_checkpoint("m")
    assert cp is not None and [e.position for e in await store.read_log("m", after=0)] == [cp.position]
    await runtime.sweep()

    day_old = await export(runtime, "m", until=T0 + DAY - 1)
    assert [r.decision_id for r in day_old] == [p.decision_id for p in old]
    assert [(r.outcome, r.reward) for r in day_old] == [
        ("click", 1),
        ("no_click", 0),
        ("click", 1),
        ("no_click", 0),
        ("expired", 0),
        ("expired", 0),
    ]
    assert all(r.created_at == T0 for r in day_old)
    assert [r.probs for r in day_old] == [p.decision.probs.tolist() for p in old]
    assert [r.label for r in day_old] == [p.label for p in old]
    assert len(await export(runtime, "m")) == 10_006


async def test_the_sweep_enforces_the_retention_and_a_model_may_keep_no_log(store: Store) -> None:
    clock = Clock(T0)
    settings = Settings(store="memory", log_retention="1h,5", checkpoint_every=1)
    runtime = Runtime(store, settings, clock=clock)
    await runtime.create_model("m", HASHED)
    await runtime.create_model("quiet", HASHED.model_copy(update={"log_decisions": False}))
    for i in range(8):
        clock.t = T0 + 600 * i  # every 10 minutes
        await runtime.predict("m", {"i": float(i + 1)})
        p = await runtime.predict("quiet", {"i": 1.0})
        await runtime.feedback(p.decision_id, True, wait=True)
    await runtime.sweep()  # at T0 + 70 min: 5 at most, none older than an hour
    # Redis keeps an entry while a learn event in the log names it (the expired ones' events, just
    # appended): until a checkpoint trims them; the next sweep forgets it.
    await runtime.catch_up(runtime.models["m"])
    await runtime.sweep()
    kept = await export(runtime, "m")
    assert [r.created_at for r in kept] == [T0 + 600 * i for i in range(3, 8)]
    assert [r.outcome for r in kept] == ["expired"] * 4 + [None]  # 60 s windows
    assert await export(runtime, "quiet") == []
    assert (await store.counts("quiet")).clicks == 8


# -- the route --------------------------------------------------------------------------------------


@pytest.fixture
async def served() -> AsyncIterator[tuple[httpx.AsyncClient, Runtime]]:
    # Seeded decision ids: the labels the model samples, and so what VW learns, are the same every run.
    app = create_app(Settings(store="memory", admin_key="admin", api_keys="key", decision_id_seed=7))
    async with app_client(app) as client:
        client.headers["X-API-Key"] = "admin"
        yield client, app.state.runtime


USERS = 20


async def traffic(client: httpx.AsyncClient, n: int, seed: int = 0) -> list[dict]:
    """``n`` decisions of model "m" (users u0..u19; the best label is the user's number mod 3,
    clicked with probability 0.9, the others 0.1), all answered."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        user = int(rng.integers(USERS))
        r = await client.post("/predict", json={"model": "m", "features": {"user": f"u{user}", "bias": 1.0}})
        d = r.json()
        click = bool(rng.random() < (0.9 if d["label_index"] == user % 3 else 0.1))
        assert (
            await client.post("/feedback", json={"decision_id": d["decision_id"], "click": click})
        ).status_code == 200
        out.append({**d, "click": click, "user": user})
    return out


async def test_the_route_streams_the_records_in_pages(
    served: tuple[httpx.AsyncClient, Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, runtime = served
    assert (await client.put("/models/m", json=HASHED.model_dump(exclude_none=True))).status_code == 201
    made = await traffic(client, 300)
    reads = []
    read = runtime.store.read_decision_log

    async def counted(*args: object, **kw: object) -> object:
        reads.append(args)
        return await read(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runtime.store, "read_decision_log", counted)
    async with client.stream("GET", "/models/m/log") as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
        lines = [line async for line in r.aiter_lines()]
    assert len(reads) == -(-300 // PAGE)  # pages of PAGE records
    records = [LogRecord.from_json(line) for line in lines]
    assert [r.decision_id for r in records] == [d["decision_id"] for d in made]
    assert [(r.label, r.probs, r.reward) for r in records] == [
        (d["label"], d["probabilities"], int(d["click"])) for d in made
    ]
    middle = records[100].created_at
    r = await client.get("/models/m/log", params={"since": middle, "until": records[200].created_at})
    assert [LogRecord.from_json(line).decision_id for line in r.text.splitlines()] == [
        rec.decision_id for rec in records[100:200]
    ]
    iso = "2000-01-01T00:00:00"
    assert (await client.get("/models/m/log", params={"until": iso})).text == ""
    assert len((await client.get("/models/m/log", params={"since": iso})).text.splitlines()) == 300
    assert (await client.get("/models/m/log", params={"format": "xml"})).status_code == 422
    assert (await client.get("/models/nope/log")).status_code == 404
    assert (await client.get("/models/m/log", headers={"X-API-Key": "key"})).status_code == 401


async def test_vowpal_wabbit_reads_the_dsjson_export_and_learns_from_it(
    served: tuple[httpx.AsyncClient, Runtime],
) -> None:
    vw = pytest.importorskip("vowpalwabbit")
    client, _ = served
    spec = HASHED.model_copy(update={"params": {"gamma": 0.45}})  # explores: VW sees every action
    assert (await client.put("/models/m", json=spec.model_dump(exclude_none=True))).status_code == 201
    made = await traffic(client, 1500, seed=1)
    r = await client.get("/models/m/log", params={"format": "dsjson"})
    lines = r.text.splitlines()
    assert len(lines) == len(made)

    ws = vw.Workspace("--cb_explore_adf --dsjson --quiet -q xa")
    label = vw.LabelType.CONTEXTUAL_BANDIT

    def one_pass() -> float:
        """Learn every line once; VW's average loss over the pass (cost: -1 click, 0 otherwise)."""
        before = ws.get_sum_loss()
        for line, d in zip(lines, made, strict=True):
            examples = ws.parse(line)
            assert len(examples) == 1 + 3  # the shared context, then one per action
            labelled = [(i, c) for i, e in enumerate(examples[1:]) for c in e.get_label(label).costs]
            ((index, cost),) = labelled
            assert index == d["label_index"] and cost.action == d["label_index"] + 1
            assert cost.cost == -float(d["click"])
            assert cost.probability == pytest.approx(d["probability"], rel=1e-6)  # float32 in VW
            ws.learn(examples)
            ws.finish_example(examples)
        return (ws.get_sum_loss() - before) / len(lines)

    first, second = one_pass(), one_pass()
    assert ws.get_weighted_examples() == 2 * len(lines)
    assert second < first < 0, (first, second)
    # What it learned: each user's best label, read off its greedy choice on that user's context.
    last = {d["user"]: line for line, d in zip(lines, made, strict=True)}
    best = []
    for user, line in sorted(last.items()):
        examples = ws.parse(line)
        pmf = ws.predict(examples)  # over the actions in order
        ws.finish_example(examples)
        best.append(int(np.argmax(pmf)) == user % 3)
    assert sum(best) >= 0.9 * USERS, best
    ws.finish()


# -- clickboost export ----------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[str]:
    env = {"CLICKBOOST_API_KEY": "key", "CLICKBOOST_ADMIN_KEY": "admin"}
    with uvicorn_server(env) as url:
        yield url


def test_clickboost_export_writes_what_the_route_streams(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    admin = {"X-API-Key": "admin"}
    httpx.put(
        f"{server}/models/m", json=HASHED.model_dump(exclude_none=True), headers=admin
    ).raise_for_status()
    for i in range(5):
        d = httpx.post(
            f"{server}/predict", json={"model": "m", "features": {"i": float(i + 1)}}, headers=admin
        )
        if i < 3:
            body = {"decision_id": d.json()["decision_id"], "click": i == 0}
            httpx.post(f"{server}/feedback", json=body, headers=admin).raise_for_status()
    monkeypatch.setenv("CLICKBOOST_ADMIN_KEY", "admin")
    for fmt, n in [("jsonl", 5), ("dsjson", 3)]:
        out = tmp_path / f"m.{fmt}"
        assert main(["export", "--url", server, "--model", "m", "--format", fmt, "-o", str(out)]) == 0
        streamed = httpx.get(f"{server}/models/m/log", params={"format": fmt}, headers=admin).text
        assert out.read_text() == streamed and len(streamed.splitlines()) == n
        assert f"{n} {fmt} lines" in capsys.readouterr().err
    recent = tmp_path / "recent.jsonl"
    assert main(["export", "--url", server, "--model", "m", "--since", "1h", "-o", str(recent)]) == 0
    assert len(recent.read_text().splitlines()) == 5
    assert main(["export", "--url", server, "--model", "m", "--until", "1h", "-o", str(recent)]) == 0
    assert recent.read_text() == ""

    missing = tmp_path / "missing.jsonl"
    assert main(["export", "--url", server, "--model", "nope", "-o", str(missing)]) == 2
    assert "404 unknown model 'nope'" in capsys.readouterr().err
    monkeypatch.setenv("CLICKBOOST_ADMIN_KEY", "wrong")
    assert main(["export", "--url", server, "--model", "m", "-o", str(missing)]) == 2
    assert "401" in capsys.readouterr().err
    assert not missing.exists() and not (tmp_path / "missing.jsonl.partial").exists()


async def test_pages_are_read_after_a_cursor() -> None:
    store = MemoryStore()
    runtime = Runtime(store, Settings(store="memory"), clock=Clock(T0))
    await runtime.create_model("m", HASHED)
    ids = [(await runtime.predict("m", {"i": 1.0})).decision_id for _ in range(5)]
    got = [[r.decision_id for r in page] async for page in pages(store, "m", HASHED, limit=2)]
    assert got == [ids[:2], ids[2:4], ids[4:]]
