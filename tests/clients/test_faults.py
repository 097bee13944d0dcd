"""The replay client (through the SDK) riding out faults, all real processes on loopback (issue 21).

Three replicas (``python -m service serve``) share one private Redis; the replay sends the `car`
dataset at concurrency 8 through one :class:`~clients.sdk.AsyncClient` over the three, rate-limited
so that the fault lands mid-run on any machine. Then:

* one replica is frozen for 0.5 s (so that requests are in flight to it), killed with ``kill -9``
  and restarted a moment later: no visit fails, every feedback is learned exactly once, and the
  restarted replica is back in rotation;
* Redis is killed with ``kill -9`` and restarted 10 s later from its AOF: no feedback is given up,
  and every acknowledged feedback is learned.

Each test reports one line of figures (printed, a junit property, and in the terminal summary).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from clickboost_client import Client, ModelInfo, NotFound
from clickboost_client.replay import ReplayResult, replay, summarize
from lab.cluster import RedisServer, Replica, start_replicas
from lab.sim.datasets import load_dataset
from tests.conftest import redis_server_binary

# deploy/models.toml's `car` (d = 21, K = 4): what the compose replay uses
CAR = {
    "learner": "banditron",
    "params": {"gamma": 0.05},
    "n_features": 21,
    "labels": ["unacc", "acc", "good", "vgood"],
    "seed": 0,
    "reward_window_seconds": 600,
    "default_reward": "no_click",
}


@contextmanager
def cluster(tmp_path: Path, aof: bool) -> Iterator[tuple[RedisServer, list[Replica]]]:
    """A private Redis (AOF with fsync always, if ``aof``) and three replicas serving `car`."""
    server = RedisServer(tmp_path, aof=aof, binary=redis_server_binary())
    server.start()
    replicas: list[Replica] = []
    try:
        replicas = start_replicas(server.url, tmp_path, 3)
        with Client(replicas[0].url) as c:
            c.create_model("car", **CAR)  # type: ignore[arg-type]
        deadline = time.monotonic() + 15
        for r in replicas:
            with Client(r.url) as c:
                while True:
                    try:
                        c.get_model("car")
                        break
                    except NotFound:
                        assert time.monotonic() < deadline, f"{r.url} never loaded car"
                        time.sleep(0.05)
        yield server, replicas
    finally:
        for r in replicas:
            r.stop()
        server.stop()


def settled(replicas: list[Replica]) -> tuple[ModelInfo, set[str]]:
    """`car` as the store counts it, once every replica applied its whole log; their checksums."""
    deadline = time.monotonic() + 20
    with Client(replicas[0].url) as c:
        info = c.get_model("car")
    sums = set()
    for r in replicas:
        with Client(r.url) as c:
            while (mine := c.get_model("car")).version < info.version:
                assert time.monotonic() < deadline, f"{r.url} stuck at {mine.version} < {info.version}"
                time.sleep(0.05)
        sums.add(mine.checksum)
    return info, sums


async def replay_with_fault(
    urls: list[str], n: int, rate: float, fault_at: float, fault: Callable[[], None]
) -> tuple[ReplayResult, float, float]:
    """Replay ``n`` visits of `car` at ``rate``; ``fault_at`` s in, run ``fault`` (in a thread).

    Returns the result and when the fault began and ended, in seconds since the replay began
    (the time base of :attr:`Visit.start_s`).
    """
    X, y = load_dataset("car").stream(5, limit=n)
    t0 = time.perf_counter()
    task = asyncio.create_task(replay(urls, "car", X, y, concurrency=8, rate=rate, progress=False))
    await asyncio.sleep(fault_at)
    assert not task.done(), "the replay ended before the fault"
    began = time.perf_counter() - t0
    await asyncio.to_thread(fault)
    ended = time.perf_counter() - t0
    assert not task.done(), "the replay ended before the fault did: too few visits for this machine"
    result = await task
    return result, began, ended


def test_replay_across_3_replicas_with_one_killed_mid_run_fails_no_visit(
    tmp_path: Path, figures: Callable[[str], None]
) -> None:
    started = time.monotonic()
    n = 1200  # 20 s at 60/s: a restart slowed by the load still leaves visits for the victim
    with cluster(tmp_path, aof=False) as (_, replicas):
        victim = replicas[1]

        def kill_and_restart() -> None:
            # Frozen first, so that requests are surely in flight to it when it dies (at this rate
            # there is often none): they were sent and will never be answered.
            assert victim.proc is not None
            victim.proc.send_signal(signal.SIGSTOP)
            time.sleep(0.5)
            victim.kill()  # kill -9: the connections of the requests in flight break
            time.sleep(0.5)
            victim.start()  # same port; the clients' probe puts it back once /readyz answers
            victim.wait_ready()

        urls = [r.url for r in replicas]
        result, killed, back = asyncio.run(replay_with_fault(urls, n, 60.0, 2.5, kill_and_restart))
        info, sums = settled(replicas)
    report = summarize(result)
    c = info.counts
    assert c is not None
    learned = c.clicks + c.no_clicks
    orphans = c.decisions - len(result.visits)
    on_victim = [v.start_s for v in result.visits if v.replica == 1]
    before, after = sum(s < killed for s in on_victim), sum(s > back for s in on_victim)
    stats = result.stats
    figures(
        f"replica frozen at {killed:.1f} s, kill -9 0.5 s later, ready again at {back:.1f} s: "
        f"visits={len(result.visits)}/{n} "
        f"failed_visits={result.failed_visits} feedback_given_up={result.feedback_given_up} "
        f"learned={learned} clicks={c.clicks} decisions={c.decisions} orphans={orphans} "
        f"victim_visits_before={before} after={after} by_replica={report['visits_by_replica']} "
        f"sdk={dict(sorted(stats.items()))} checksums={len(sums)} in {time.monotonic() - started:.1f} s"
    )
    assert result.failed_visits == 0 and result.feedback_given_up == 0 and len(result.visits) == n
    assert learned == n and c.clicks == report["clicks"]  # every feedback learned, once
    # A predict re-sent after its connection broke may have left one decision nobody answers.
    assert 0 <= orphans <= stats["resent_predicts"] and c.pending == orphans and c.expired == 0
    assert stats["marked_down"] >= 1 and stats["back_up"] >= 1
    assert before > 0 and after > 0  # the fault landed mid-run, and the victim came back into rotation
    assert len(sums) == 1


def test_replay_through_a_10_s_redis_outage_gives_up_no_feedback(
    tmp_path: Path, figures: Callable[[str], None]
) -> None:
    started = time.monotonic()
    n, outage = 500, 10.0
    with cluster(tmp_path, aof=True) as (server, replicas):

        def outage_of_redis() -> None:
            server.kill()  # kill -9: only what the AOF holds survives (fsync before every reply)
            time.sleep(outage)
            server.start()  # same port and directory: replays the AOF

        urls = [r.url for r in replicas]
        result, down, up = asyncio.run(replay_with_fault(urls, n, 50.0, 2.0, outage_of_redis))
        info, sums = settled(replicas)
    report = summarize(result)
    c = info.counts
    assert c is not None
    learned = c.clicks + c.no_clicks
    during = sum(down < v.start_s < up for v in result.visits)
    # Visits in flight while Redis was down (their predict or feedback overlapped the outage). Not
    # the visits started then: the replay's 8 workers are all stuck in feedback soon after the kill,
    # and on a loaded machine all 8 may be mid-visit at the kill, so none starts during it.
    overlapped = sum(
        v.start_s < up and v.start_s + (v.predict_ms + (v.feedback_ms or 0.0)) / 1e3 > down
        for v in result.visits
    )
    slowest = max(v.feedback_ms or 0.0 for v in result.visits) / 1e3
    figures(
        f"redis kill -9 at {down:.1f} s, back at {up:.1f} s ({up - down:.1f} s down): "
        f"visits={len(result.visits)}/{n} failed_visits={result.failed_visits} "
        f"feedback_given_up={result.feedback_given_up} learned={learned} clicks={c.clicks} "
        f"decisions={c.decisions} pending={c.pending} visits_started_while_down={during} "
        f"in_flight_while_down={overlapped} "
        f"slowest_feedback={slowest:.1f} s p99={report['latency_ms']['feedback']['p99']:.0f} ms "
        f"sdk={dict(sorted(result.stats.items()))} checksums={len(sums)} "
        f"in {time.monotonic() - started:.1f} s"
    )
    assert result.failed_visits == 0 and result.feedback_given_up == 0 and len(result.visits) == n
    # every acknowledged feedback was learned, once, with the click the replay sent
    assert learned == n and c.clicks == report["clicks"]
    assert c.decisions == n and c.pending == 0 and c.expired == 0
    assert overlapped > 0 and slowest > outage / 2  # feedback did wait the outage out
    assert up - down >= outage and len(sums) == 1
