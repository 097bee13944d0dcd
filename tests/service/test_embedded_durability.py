"""The embedded SQLite store across restarts of a real server: ``kill -9`` mid-load, and SIGTERM.

A ``python -m service serve`` subprocess on the SQLite store (a tmp data directory, a free loopback
port, no keys) gets a model, predictions and feedback from a client thread; the server is killed
while the thread posts, restarted on the same directory, and then:

- the model is there with the same config;
- every acknowledged (200) feedback is counted (clicks + no_clicks == acknowledged + the in-flight
  ones the store committed before dying) and answers 409 with its first outcome: none lost;
- decisions still pending can be answered (200): their records and windows survived;
- the version is the number of learn events (one per stored feedback, nothing expired);
- the learned state is the replay of the log: after a kill with no event since the last reading,
  version and checksum are unchanged (through checkpoint + log tail); after the SIGTERM run, a
  replay of the whole log from a fresh learner, outside the server, gives the served checksum.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from service.config import ModelSpec
from service.runtime import ModelRuntime
from service.store import SQLITE_FILE, SQLiteStore
from tests.conftest import free_port

SPEC = {
    "learner": "banditron",
    "params": {"gamma": 0.1},
    "hashing_bits": 8,
    "labels": ["sports", "politics", "music"],
    "seed": 5,
    "reward_window_seconds": 600,
}
N_DECISIONS = 120
START_TIMEOUT = 60.0


class Server:
    """``python -m service serve`` on the SQLite store in ``data_dir``; restartable on a new port."""

    def __init__(self, data_dir: Path, log: Path, env: dict[str, str]) -> None:
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_") and k != "REDIS_URL"
        }
        self.env |= {"CLICKBOOST_STORE": "sqlite", "CLICKBOOST_DATA_DIR": str(data_dir), **env}
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "service", "serve", "--port", str(port), "--log-level", "warning"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready after {START_TIMEOUT} s:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def kill(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            pytest.fail(f"server ignored {sig.name} for 20 s")
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[type[Server]]:
    started: list[Server] = []

    class Tracked(Server):
        def __init__(self, env: dict[str, str]) -> None:
            super().__init__(tmp_path / "data", tmp_path / "server.log", env)
            started.append(self)

    try:
        yield Tracked  # type: ignore[misc]
    finally:
        for s in started:
            s.stop()


@dataclass
class Feedback:
    """What the client saw: acknowledged (200) ids with their click, and ids whose answer never came."""

    acked: dict[str, bool] = field(default_factory=dict)
    in_doubt: dict[str, bool] = field(default_factory=dict)
    stored_unanswered: dict[str, bool] = field(default_factory=dict)  # in doubt, found stored (409)
    other: list[tuple[str, int]] = field(default_factory=list)

    @property
    def learned(self) -> int:
        """Feedback the store must hold: acknowledged, or committed before the answer was lost."""
        return len(self.acked) + len(self.stored_unanswered)


def click_of(i: int) -> bool:
    return i % 3 == 0


def predict_all(url: str, n: int) -> list[str]:
    ids = []
    with httpx.Client(base_url=url, timeout=10) as c:
        for i in range(n):
            r = c.post(
                "/predict",
                json={"model": "news", "features": {"i": i, "country": "fr", "mobile": i % 2 == 0}},
            )
            assert r.status_code == 200, r.text
            ids.append(r.json()["decision_id"])
    return ids


def post_feedback(
    url: str, ids: list[tuple[int, str]], fb: Feedback, stop: threading.Event | None = None
) -> None:
    """Feedback for ``ids`` in order until done, ``stop``, or the server goes away (bounded by the list)."""
    with httpx.Client(base_url=url, timeout=10) as c:
        for i, decision_id in ids:
            if stop is not None and stop.is_set():
                return
            click = click_of(i)
            try:
                r = c.post("/feedback", json={"decision_id": decision_id, "click": click})
            except httpx.TransportError:
                fb.in_doubt[decision_id] = click  # sent; the server died before answering
                return
            if r.status_code == 200:
                fb.acked[decision_id] = click
            else:
                fb.other.append((decision_id, r.status_code))
                if r.status_code == 503:  # shutting down
                    return


def info(url: str) -> dict:
    r = httpx.get(f"{url}/models/news", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def settled(url: str, learned: int) -> dict:
    """The model info once this process has applied ``learned`` events (bounded wait)."""
    deadline = time.monotonic() + 15
    while True:
        got = info(url)
        if got["version"] >= learned or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def kill_mid_load(
    server: Server, ids: list[tuple[int, str]], fb: Feedback, sig: signal.Signals, acks: int, clients: int = 1
) -> None:
    """Post feedback for ``ids`` from ``clients`` threads at once (every ``clients``-th id each); send
    ``sig`` once ``acks`` more are acknowledged."""
    before = len(fb.acked)
    stop = threading.Event()
    threads = [
        threading.Thread(target=post_feedback, args=(server.url, ids[k::clients], fb, stop), daemon=True)
        for k in range(clients)
    ]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(fb.acked) - before < acks and all(t.is_alive() for t in threads):
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        assert all(t.is_alive() for t in threads), "a client finished before the kill: make the load longer"
        server.kill(sig)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=20)
    assert not any(t.is_alive() for t in threads)


def serving(server: Server) -> tuple[dict, list[tuple[int, str]]]:
    """Start ``server``, create the model, make ``N_DECISIONS`` predictions: (its config, numbered ids)."""
    server.start()
    r = httpx.put(f"{server.url}/models/news", json=SPEC, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()["config"], list(enumerate(predict_all(server.url, N_DECISIONS)))


def check_after_restart(url: str, fb: Feedback, config: dict, pending_ids: list[tuple[int, str]]) -> dict:
    """Everything acknowledged is stored and answers 409; pending decisions still take feedback."""
    got = info(url)
    assert got["config"] == config
    counts = got["counts"]
    answered = counts["clicks"] + counts["no_clicks"]
    # The in-flight feedback (sent, no answer) is either fully stored (409 now) or not at all (200 now).
    stored_in_doubt = 0
    with httpx.Client(base_url=url, timeout=10) as c:
        for decision_id, click in fb.in_doubt.items():
            r = c.post("/feedback", json={"decision_id": decision_id, "click": click})
            assert r.status_code in (200, 409), r.text
            if r.status_code == 409:
                stored_in_doubt += 1
                fb.stored_unanswered[decision_id] = click
                assert r.json()["first_outcome"]["outcome"] == ("click" if click else "no_click")
            else:
                fb.acked[decision_id] = click  # learned now, after the restart
        lost = []
        for decision_id, click in fb.acked.items():
            r = c.post("/feedback", json={"decision_id": decision_id, "click": not click})
            if r.status_code != 409 or r.json()["first_outcome"]["outcome"] != (
                "click" if click else "no_click"
            ):
                lost.append((decision_id, r.status_code))
    acknowledged_before = len(fb.acked) - (len(fb.in_doubt) - stored_in_doubt)
    print(
        f"acknowledged {acknowledged_before}, in flight {len(fb.in_doubt)} ({stored_in_doubt} stored), "
        f"learned {answered} (version {got['version']}), lost {len(lost)}"
    )
    assert lost == []
    assert answered == acknowledged_before + stored_in_doubt
    assert got["version"] == answered  # one learn event per stored feedback; nothing expired or reset
    assert counts["expired"] == 0
    assert counts["decisions"] == N_DECISIONS
    assert counts["pending"] == N_DECISIONS - answered
    # Pending decisions kept their records and windows: they still take feedback.
    fb2 = Feedback()
    post_feedback(url, pending_ids, fb2)
    assert len(fb2.acked) == len(pending_ids) and not fb2.other, fb2.other
    fb.acked.update(fb2.acked)
    return settled(url, fb.learned)


def replay_checksum(data_dir: Path, spec: dict) -> tuple[int, str]:
    """The whole log of ``news`` replayed from a fresh learner, outside any server: (position, checksum)."""

    async def go() -> tuple[int, str]:
        store = SQLiteStore(data_dir / SQLITE_FILE)
        try:
            config = await store.get_model("news")
            m = ModelRuntime("news", ModelSpec.model_validate(spec), config["incarnation"], 1000)
            assert await store.get_checkpoint("news") is None  # the log is whole: nothing trimmed
            while events := await store.read_log("news", m.position):
                for event in events:
                    assert event.position == m.position + 1
                    m.apply(event)
            return m.position, m.checksum()
        finally:
            await store.close()

    return asyncio.run(go())


def test_kill_9_mid_load_loses_no_acknowledged_feedback(make_server: type[Server], tmp_path: Path) -> None:
    # Checkpoints every 10 events (and the log trimmed below them): restarts go through checkpoint + tail.
    server = make_server({"CLICKBOOST_CHECKPOINT_EVERY": "10"})
    config, ids = serving(server)
    fb = Feedback()
    post_feedback(server.url, ids[:25], fb)
    assert len(fb.acked) == 25
    before = settled(server.url, 25)
    assert before["version"] == 25

    # 1. kill -9 with nothing in flight: the same version and checksum come back.
    server.kill(signal.SIGKILL)
    server.start()
    after = info(server.url)
    assert (after["version"], after["checksum"]) == (before["version"], before["checksum"])
    assert after["counts"] == before["counts"]

    # 2. kill -9 while a client posts feedback.
    kill_mid_load(server, ids[25:100], fb, signal.SIGKILL, acks=20)
    server.start()
    final = check_after_restart(server.url, fb, config, ids[100:])
    assert final["version"] == fb.learned == final["counts"]["clicks"] + final["counts"]["no_clicks"]

    # 3. and once more, quietly: the state after all that is what the restart rebuilds.
    server.kill(signal.SIGKILL)
    server.start()
    again = info(server.url)
    assert (again["version"], again["checksum"], again["counts"]) == (
        final["version"],
        final["checksum"],
        final["counts"],
    )


def test_kill_9_among_concurrent_clients_loses_no_acknowledged_feedback(
    make_server: type[Server], tmp_path: Path
) -> None:
    """Four clients post feedback at once, so their feedbacks share group commits and fsyncs; a kill -9
    in the middle loses none that was acknowledged, and each one in flight is stored whole or not at
    all (check_after_restart)."""
    server = make_server({"CLICKBOOST_CHECKPOINT_EVERY": "10"})
    config, ids = serving(server)
    fb = Feedback()
    kill_mid_load(server, ids[:100], fb, signal.SIGKILL, acks=40, clients=4)
    server.start()
    final = check_after_restart(server.url, fb, config, ids[100:])
    assert final["version"] == fb.learned == final["counts"]["clicks"] + final["counts"]["no_clicks"]


def test_sigterm_mid_load_loses_nothing_and_the_state_is_the_log_replayed(
    make_server: type[Server], tmp_path: Path
) -> None:
    # No checkpoint in this run, so the log stays whole and can be replayed from the start below.
    env = {"CLICKBOOST_CHECKPOINT_EVERY": "1000000", "CLICKBOOST_CHECKPOINT_INTERVAL_SECONDS": "100000"}
    server = make_server(env)
    config, ids = serving(server)
    fb = Feedback()
    kill_mid_load(server, ids[:100], fb, signal.SIGTERM, acks=30)
    server.start()
    final = check_after_restart(server.url, fb, config, ids[100:])
    server.kill(signal.SIGTERM)
    position, checksum = replay_checksum(tmp_path / "data", SPEC)
    assert (position, checksum) == (final["version"], final["checksum"])
    server.start()  # and the graceful restart serves the same state
    again = info(server.url)
    assert (again["version"], again["checksum"]) == (position, checksum)
