"""The SDK over several replicas, against scripted loopback servers and a port nobody listens on:
round-robin, a failing replica skipped at once and put back by the ``/readyz`` probe, feedback sent
to the replica that answered its predict, and the retry budget with ``Retry-After``.

The same against real replicas and a real Redis, killed mid-run: ``test_faults.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from clickboost_client import (
    AsyncClient,
    Client,
    FeedbackResult,
    Prediction,
    Retry,
    ServerError,
    TransportError,
)
from tests.clients.scripted import FB, PRED, Scripted, drop, reply
from tests.conftest import free_port

QUICK = Retry(budget=5.0, backoff=0.001, max_backoff=0.01)


@pytest.fixture
def pair() -> Iterator[tuple[Scripted, Scripted]]:
    a, b = Scripted(reply(200, PRED)), Scripted(reply(200, PRED))
    yield a, b
    a.close()
    b.close()


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens: connection refused


def wait_for(condition: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_round_robin_skips_a_dead_replica_without_waiting(pair: tuple[Scripted, Scripted]) -> None:
    a, b = pair
    slow = Retry(budget=5.0, backoff=1.0, max_backoff=1.0)  # a sleep would show in the timing
    with Client([a.url, dead_url(), b.url + "/"], retry=slow) as c:
        start = time.monotonic()
        preds = [c.predict([1.0]) for _ in range(6)]
        elapsed = time.monotonic() - start
        assert c.stats == {"marked_down": 1, "retries": 1}
    assert elapsed < 0.5  # failed over at once, no back-off
    assert (len(a.seen), len(b.seen)) == (3, 3)
    assert [p.server for p in preds] == [a.url, b.url] * 3


def test_a_replica_out_of_rotation_is_back_when_readyz_answers(pair: tuple[Scripted, Scripted]) -> None:
    a, b = pair
    a.script, a.ready = [drop], False  # a crash mid-request, then a restart that takes a while
    with Client([a.url, b.url], retry=QUICK) as c:
        assert c.predict([1.0]).server == b.url  # re-sent once, to the other replica
        assert c.stats["resent_predicts"] == 1 and c.stats["marked_down"] == 1
        for _ in range(4):
            assert c.predict([1.0]).server == b.url  # out of rotation meanwhile
        wait_for(lambda: a.probes >= 2)  # probed about every second, still answering 503
        assert c.predict([1.0]).server == b.url
        a.ready = True
        wait_for(lambda: c.stats["back_up"] == 1)
        servers = {c.predict([1.0]).server for _ in range(4)}
    assert servers == {a.url, b.url}
    assert len(a.seen) == 1 + 2  # the dropped predict, then two of the last four


def test_every_replica_down_is_still_tried_in_turn() -> None:
    with Client([dead_url(), dead_url()], retry=Retry(attempts=5, backoff=0.001)) as c:
        with pytest.raises(TransportError, match=r"ConnectError.*after 5 tries"):
            c.predict([1.0])
        assert c.stats["marked_down"] == 2 and c.stats["retries"] == 4


def test_feedback_goes_to_the_replica_that_answered_the_predict(pair: tuple[Scripted, Scripted]) -> None:
    a, b = pair
    a.default = reply(200, {**PRED, "decision_id": "on-a"})
    b.default = reply(200, {**PRED, "decision_id": "on-b"})
    with Client([a.url, b.url], retry=QUICK) as c:
        pa, pb = c.predict([1.0]), c.predict([1.0])
        assert (pa.server, pb.server) == (a.url, b.url)
        a.default = b.default = reply(200, FB)
        for p in (pb, pb, pa):  # the rotation would send the first one to a
            c.feedback(p.decision_id, True)
        c.feedback("not-ours", True)  # unknown to this client: the next in rotation, a
    assert [r["body"].get("decision_id") for r in a.seen] == [None, "on-a", "not-ours"]
    assert [r["body"].get("decision_id") for r in b.seen] == [None, "on-b", "on-b"]


def test_feedback_owner_down_goes_elsewhere_and_its_own_409_is_success(
    pair: tuple[Scripted, Scripted],
) -> None:
    a, b = pair
    first = {"outcome": "click", "model": "m", "model_version": 8, "at": 1.7e9}
    with Client([a.url, b.url], retry=QUICK) as c:
        p = c.predict([1.0])
        a.script = [drop]  # recorded by a, then a died before answering
        b.script = [reply(409, {"detail": "already answered", "first_outcome": first})]
        assert c.feedback(p.decision_id, True) == FeedbackResult.from_json(FB)
        assert c.stats["marked_down"] == 1


def test_feedback_rides_out_a_long_503_outage_honouring_retry_after(scripted: Scripted) -> None:
    """The old policy gave up after 3 tries; a store outage of ~1.5 s here is 15 answers of 503."""
    scripted.script = [reply(503, {"detail": "store down"}, {"retry-after": "0.1"})] * 15 + [reply(200, FB)]
    with Client(scripted.url, retry=QUICK) as c:
        start = time.monotonic()
        assert c.feedback("abc", True, wait=True).model_version == 8
        elapsed = time.monotonic() - start
    assert len(scripted.seen) == 16 and elapsed >= 15 * 0.1


def test_the_budget_bounds_the_retries(scripted: Scripted) -> None:
    scripted.default = reply(503, {"detail": "store down"}, {"retry-after": "0.1"})
    policy = Retry(budget=0.5, backoff=0.001, max_backoff=0.01)  # Retry-After sets the pace
    with Client(scripted.url, retry=policy) as c, pytest.raises(ServerError, match="503"):
        start = time.monotonic()
        c.feedback("abc", True)
    # tries start 0.1 s apart while 0.5 s are not spent: 6 on an idle machine, fewer on a busy one
    assert 0.4 <= time.monotonic() - start < 1.5 and 4 <= len(scripted.seen) <= 6
    scripted.seen.clear()
    scripted.default = reply(503, {"detail": "store down"}, {"retry-after": "30"})
    with Client(scripted.url, retry=Retry(budget=5)) as c, pytest.raises(ServerError, match="503"):
        start = time.monotonic()
        c.feedback("abc", True)  # the server asks for more than is left: give up now, not in 30 s
    assert time.monotonic() - start < 1.0 and len(scripted.seen) == 1


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    s = Scripted()
    yield s
    s.close()


def test_async_client_fails_over_and_probes_like_the_blocking_one(pair: tuple[Scripted, Scripted]) -> None:
    a, b = pair
    a.ready = False
    dead = dead_url()

    async def run() -> tuple[list[Prediction], dict[str, int]]:
        async with AsyncClient([dead, a.url, b.url], retry=QUICK) as c:
            preds = await asyncio.gather(*(c.predict([1.0]) for _ in range(9)))
            a.script = [drop]
            preds += [await c.predict([1.0]) for _ in range(3)]
            a.ready = True
            deadline = time.monotonic() + 5
            while c.stats["back_up"] < 1:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            preds += [await c.predict([1.0]) for _ in range(2)]
            return preds, dict(c.stats)

    preds, stats = asyncio.run(run())
    assert all(p.decision_id == "abc" for p in preds)
    assert {p.server for p in preds[:9]} == {a.url, b.url}
    assert stats["marked_down"] == 2 and stats["resent_predicts"] == 1 and stats["back_up"] == 1
    assert {p.server for p in preds[-2:]} == {a.url, b.url}  # a is back; the dead one never came back
