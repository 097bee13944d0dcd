"""SDK behaviour that the real service cannot produce on demand: error-body parsing, strict answer
parsing, back-off bounds, the import footprint, and retries after 503s and dropped connections.

The retry tests talk real HTTP over loopback to the scripted stdlib server of ``scripted.py``,
because a healthy service never drops a connection after recording feedback; everything the service
does answer is tested against the real server in ``test_sdk_server.py``, and rotation over several
replicas in ``test_sdk_failover.py``.
"""

from __future__ import annotations

import asyncio
import email.utils
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from clickboost_client import (
    ActivateResult,
    AsyncClient,
    BadRequest,
    Client,
    Conflict,
    FeedbackResult,
    Gone,
    ModelCounts,
    ModelInfo,
    NotFound,
    Prediction,
    ProtocolError,
    Retry,
    ServerError,
    TransportError,
    Unauthorized,
)
from clickboost_client.errors import error_for
from tests.clients.scripted import FB, PRED, Scripted, drop, reply


@pytest.mark.parametrize(
    ("status", "body", "cls", "message"),
    [
        (404, {"detail": "unknown decision id 'x'"}, NotFound, "unknown decision id 'x'"),
        (410, {"detail": "reward window  passed\nat 12:00"}, Gone, "reward window passed at 12:00"),
        (401, {"detail": "missing X-API-Key"}, Unauthorized, "missing X-API-Key"),
        (403, "forbidden", Unauthorized, "forbidden"),
        (413, {"detail": "body over 1000000 bytes"}, BadRequest, "body over 1000000 bytes"),
        (
            422,
            {"detail": "features.3: Input should be a finite number", "errors": [{"loc": ["body"]}]},
            BadRequest,
            "features.3: Input should be a finite number",
        ),
        (  # FastAPI's own validation body
            422,
            {"detail": [{"loc": ["body", "features", 3], "msg": "Input should be a finite number"}]},
            BadRequest,
            "features.3: Input should be a finite number",
        ),
        (502, "<html>Bad Gateway</html>", ServerError, "<html>Bad Gateway</html>"),
    ],
)
def test_error_bodies_map_to_exceptions(status: int, body: Any, cls: type, message: str) -> None:
    err = error_for(status, body)
    assert type(err) is cls
    assert (err.status, err.message, err.body) == (status, message, body)
    assert str(err) == f"HTTP {status}: {message}"


def first(outcome: str, version: int | None = 8) -> dict[str, Any]:
    return {"outcome": outcome, "model": "m", "model_version": version, "at": 1.7e9}


@pytest.mark.parametrize(("status", "cls"), [(409, Conflict), (410, Gone)])
def test_conflict_and_gone_expose_the_first_outcome(status: int, cls: type) -> None:
    err = error_for(status, {"detail": "already answered", "first_outcome": first("no_click")})
    assert isinstance(err, cls) and err.first_outcome == first("no_click")
    assert error_for(404, {"detail": "unknown"}).first_outcome is None


def test_answers_parse_strictly() -> None:
    p = Prediction.from_json(PRED)
    assert p.probabilities == (0.05, 0.05, 0.9) and p.label_index == 2
    assert FeedbackResult.from_json(FB).click is True
    with pytest.raises(ProtocolError, match="lacks 'model_version'"):
        Prediction.from_json({k: v for k, v in PRED.items() if k != "model_version"})
    with pytest.raises(ProtocolError, match="label_index=True"):
        Prediction.from_json({**PRED, "label_index": True})
    with pytest.raises(ProtocolError, match="click=1"):
        FeedbackResult.from_json({**FB, "click": 1})
    counts = {"decisions": 3, "clicks": 1, "no_clicks": 1, "expired": 0, "pending": 1, "ctr": 0.5}
    full = ModelInfo.from_json(
        {"name": "m", "version": 2, "checksum": "ab", "config": {"n_labels": 3}, "counts": counts}
    )
    assert full.counts == ModelCounts(3, 1, 1, 0, 1, 0.5) and full.config == {"n_labels": 3}
    imported = ModelInfo.from_json({"name": "m", "version": 2, "checksum": "ab"})  # PUT /models/m/state
    assert imported == ModelInfo("m", 2, "ab") and imported.counts is None
    with pytest.raises(ProtocolError, match="ctr='n/a'"):
        ModelInfo.from_json({"name": "m", "version": 2, "checksum": "ab", "counts": {**counts, "ctr": "n/a"}})


def test_backoff_is_fully_jittered_and_retry_after_is_a_floor() -> None:
    r = Retry(backoff=0.1, max_backoff=0.3)
    for k, cap in enumerate([0.1, 0.2, 0.3, 0.3, 0.3]):
        delays = [r.delay(k) for _ in range(400)]
        assert all(0 <= d <= cap for d in delays)
        assert min(delays) < cap / 4 and max(delays) > 3 * cap / 4  # spread over [0, cap]
    assert all(r.delay(0, "0.25") == 0.25 for _ in range(50))  # own draw <= 0.1: the floor wins
    assert 0.25 <= r.delay(3, "0.25") <= 0.3
    assert r.delay(0, "7") == 7.0  # honoured beyond max_backoff: the budget decides
    in_30s = email.utils.formatdate(time.time() + 30, usegmt=True)  # the HTTP-date form
    assert 28 < r.delay(0, in_30s) <= 30
    assert r.delay(0, "soon") <= 0.1  # unreadable: our own back-off
    assert r.delay(10_000) <= 0.3
    assert Retry().budget == 60.0 and Retry().attempts is None
    with pytest.raises(ValueError, match="attempts"):
        Retry(attempts=0)
    with pytest.raises(ValueError, match="budget"):
        Retry(budget=-1)
    with pytest.raises(TypeError):
        Retry(3)  # type: ignore[misc]  # keyword-only: the first field was once `attempts`


def test_sdk_imports_without_numpy_fastapi_or_pydantic() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('numpy', 'fastapi', 'pydantic', 'service'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import clients\n"
        "c = clients.Client('http://127.0.0.1:1')\n"
        "c.close()\n"
        "print(sorted(clients.__all__)[:2])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['APIError', 'ActivateResult']"


# -- retries over real HTTP ---------------------------------------------------------------------


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    s = Scripted()
    yield s
    s.close()


FAST = Retry(attempts=3, backoff=0.001, max_backoff=0.01)


def test_feedback_retries_the_same_decision_id_after_503(scripted: Scripted) -> None:
    scripted.script = [reply(503, {"detail": "not ready"}, {"retry-after": "0"}), reply(200, FB)]
    with Client(scripted.url, api_key="k1", retry=FAST) as c:
        assert c.feedback("abc", True) == FeedbackResult.from_json(FB)
    assert [r["body"] for r in scripted.seen] == [{"decision_id": "abc", "click": True}] * 2
    assert [r["key"] for r in scripted.seen] == ["k1", "k1"]


def test_feedback_whose_answer_was_lost_succeeds_on_its_own_409(scripted: Scripted) -> None:
    conflict = {"detail": "feedback already recorded", "first_outcome": first("click")}
    scripted.script = [drop, reply(409, conflict)]
    with Client(scripted.url, retry=FAST) as c:
        assert c.feedback("abc", True, wait=True) == FeedbackResult.from_json(FB)
    assert [r["path"] for r in scripted.seen] == ["/feedback?wait=true"] * 2


def test_a_graded_feedback_held_whose_answer_was_lost_succeeds_on_its_own_409(scripted: Scripted) -> None:
    conflict = {"detail": "already answered", "first_outcome": first("reward", None)}
    scripted.script = [drop, reply(409, conflict)]
    with Client(scripted.url, retry=FAST) as c:
        assert c.feedback("abc", reward=0.25) == FeedbackResult("abc", None, "m", None, 0.25, held=True)
    assert [r["body"] for r in scripted.seen] == [{"decision_id": "abc", "reward": 0.25}] * 2


def test_activate_is_retried_as_idempotent(scripted: Scripted) -> None:
    done = {"decision_id": "abc", "status": "already_active", "learned": None}
    scripted.script = [drop, reply(503, {"detail": "down"}, {"retry-after": "0"}), reply(200, done)]
    with Client(scripted.url, retry=FAST) as c:
        assert c.activate("abc", wait=True) == ActivateResult("abc", "already_active", None)
    assert [r["path"] for r in scripted.seen] == ["/decisions/abc/activate?wait=true"] * 3


def test_a_real_conflict_is_raised(scripted: Scripted) -> None:
    first_no_click = {"detail": "feedback already recorded", "first_outcome": first("no_click", 5)}
    scripted.script = [drop, reply(409, first_no_click), reply(409, first_no_click)]
    with Client(scripted.url, retry=FAST) as c:
        with pytest.raises(Conflict) as info:
            c.feedback("abc", True)  # retried, but the first outcome was a no-click
        assert info.value.first_outcome == first("no_click", 5)
        with pytest.raises(Conflict):
            c.feedback("abc", False)  # not a retry: a 409 on the first attempt is a real duplicate


def test_predict_is_re_sent_once_after_a_dropped_connection_or_a_502(scripted: Scripted) -> None:
    for first in (drop, reply(502, {"detail": "bad gateway"})):
        scripted.seen.clear()
        scripted.script = [first, reply(200, PRED)]
        with Client(scripted.url, retry=FAST) as c:
            assert c.predict([1.0, 2.0]).decision_id == "abc"
            assert c.stats["resent_predicts"] == 1
        assert len(scripted.seen) == 2
    scripted.seen.clear()
    scripted.script = [drop, drop]
    with Client(scripted.url, retry=FAST) as c, pytest.raises(TransportError) as info:
        c.predict([1.0, 2.0])
    assert "RemoteProtocolError" in str(info.value) and "not re-sent" in str(info.value)
    assert len(scripted.seen) == 2  # once, never twice
    scripted.script = [reply(502, {"detail": "bad gateway"})] * 2
    with Client(scripted.url, retry=FAST) as c, pytest.raises(ServerError, match="HTTP 502"):
        c.predict([1.0, 2.0])


def test_predict_is_not_re_sent_after_a_read_timeout(scripted: Scripted) -> None:
    """The replica is alive and most likely recording it: a second request would double the load."""
    scripted.script = [reply(200, PRED, after=0.5)]
    with Client(scripted.url, timeout=0.1, retry=FAST) as c, pytest.raises(TransportError) as info:
        c.predict([1.0, 2.0])
    assert "ReadTimeout" in str(info.value) and "after 1 try" in str(info.value)
    assert "not re-sent: the server may have recorded it" in str(info.value)
    assert len(scripted.seen) == 1


def test_predict_retries_503_and_gives_up_after_the_attempts(scripted: Scripted) -> None:
    scripted.script = [reply(503, {"detail": "warming up"}), reply(200, PRED)]
    with Client(scripted.url, retry=FAST) as c:
        assert c.predict({"country": "fr", "hour": 13, "mobile": True}, model="m").label == "music"
    assert scripted.seen[0]["body"] == {
        "features": {"country": "fr", "hour": 13, "mobile": True},
        "model": "m",
    }
    scripted.script = [reply(503, {"detail": "warming up"})] * 3
    with Client(scripted.url, retry=FAST) as c, pytest.raises(ServerError, match="HTTP 503: warming up"):
        c.predict([0.5])


def test_async_client_retries_like_the_blocking_one(scripted: Scripted) -> None:
    scripted.script = [drop, reply(200, FB), reply(503, {}), reply(200, PRED)]

    async def run() -> tuple[FeedbackResult, Prediction]:
        async with AsyncClient(scripted.url, retry=FAST) as c:
            return await c.feedback("abc", True), await c.predict([0.0, 1.0])

    fb, pred = asyncio.run(run())
    assert fb.model_version == 8 and pred.decision_id == "abc"
    assert len(scripted.seen) == 4


def test_connection_refused_is_a_transport_error() -> None:
    with Client("http://127.0.0.1:1", retry=FAST) as c, pytest.raises(TransportError, match="after 3 tries"):
        c.health()
