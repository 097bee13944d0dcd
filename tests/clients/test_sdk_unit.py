"""SDK behaviour that the real service cannot produce on demand: error-body parsing, strict answer
parsing, back-off bounds, the import footprint, and retries after 503s and dropped connections.

The retry tests talk real HTTP over loopback to a scripted stdlib server defined here, because a
healthy service never drops a connection after recording feedback; everything the service does
answer is tested against the real server in ``test_sdk_server.py``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from clients import (
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
from clients.errors import error_for

PRED = {
    "decision_id": "abc",
    "label": "music",
    "label_index": 2,
    "probability": 0.9,
    "probabilities": [0.05, 0.05, 0.9],
    "model": "m",
    "model_version": 7,
}
FB = {"decision_id": "abc", "click": True, "model": "m", "model_version": 8}


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


def test_backoff_doubles_within_bounds_and_honours_retry_after() -> None:
    r = Retry(attempts=5, backoff=0.1, max_backoff=0.3)
    for k, cap in enumerate([0.1, 0.2, 0.3, 0.3]):
        assert all(cap / 2 <= r.delay(k) <= cap for _ in range(50))
    assert r.delay(0, "0.25") == 0.25
    assert r.delay(0, "7") == 0.3  # capped
    with pytest.raises(ValueError, match="attempts"):
        Retry(attempts=0)


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
    assert proc.stdout.strip() == "['APIError', 'AsyncClient']"


# -- retries over real HTTP ---------------------------------------------------------------------

Script = list[Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]]


def reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Callable[..., None]:
    def act(h: BaseHTTPRequestHandler, _req: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    return act


def drop(h: BaseHTTPRequestHandler, _req: dict[str, Any]) -> None:
    """Read the request, then close the connection without answering (a crash after recording)."""
    h.close_connection = True
    h.connection.close()


class Scripted:
    """A loopback HTTP server answering successive requests from a script; logs what it received."""

    def __init__(self) -> None:
        self.script: Script = []
        self.seen: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length", 0))
                req = {
                    "path": self.path,
                    "body": json.loads(self.rfile.read(n) or b"null"),
                    "key": self.headers.get("x-api-key"),
                }
                outer.seen.append(req)
                outer.script.pop(0)(self, req)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


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


def test_a_real_conflict_is_raised(scripted: Scripted) -> None:
    first_no_click = {"detail": "feedback already recorded", "first_outcome": first("no_click", 5)}
    scripted.script = [drop, reply(409, first_no_click), reply(409, first_no_click)]
    with Client(scripted.url, retry=FAST) as c:
        with pytest.raises(Conflict) as info:
            c.feedback("abc", True)  # retried, but the first outcome was a no-click
        assert info.value.first_outcome == first("no_click", 5)
        with pytest.raises(Conflict):
            c.feedback("abc", False)  # not a retry: a 409 on the first attempt is a real duplicate


def test_predict_is_not_resent_after_the_server_may_have_recorded_it(scripted: Scripted) -> None:
    scripted.script = [reply(502, {"detail": "bad gateway"})]
    with Client(scripted.url, retry=FAST) as c, pytest.raises(ServerError):
        c.predict([1.0, 2.0])
    scripted.script = [drop]
    with Client(scripted.url, retry=FAST) as c, pytest.raises(TransportError, match="RemoteProtocolError"):
        c.predict([1.0, 2.0])
    assert len(scripted.seen) == 2  # one request each


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
