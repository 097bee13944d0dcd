"""``bench placement``: learning throughput of 4 replicas holding every model against 4 in 2 groups.

Issue 40 part 3. Twenty Banditron d=784 K=10 models on a private Redis, served by four replicas
(``python -m service serve``, :mod:`lab.cluster`) in two deployments, one after the other in the same
run: every replica holding every model (no placement settings), then two groups of two with one copy
of each model (``CLICKBOOST_PLACEMENT_COPIES=1``: rendezvous hashing puts each model on one group).

Saturation: the replicas are stopped (SIGSTOP) while every model's log receives the same backlog of
learn events (written straight into the log streams, in the format the feedback script writes, so
that Redis's scripts are not what is measured), then continued together. The time until every
replica holding a model has applied its whole log gives the deployment's learning rate: the log
events applied by all their holders per second. Each replica's applied events are read from its
``/metrics`` (``clickboost_model_version``): with placement it applies only its group's models.
Replicas, Redis and the poller share the machine's cores.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

from lab.bench import benches, report
from lab.cluster import RedisServer, Replica, applied_versions, start_groups, start_replicas
from service.config import ModelSpec
from service.placement import rendezvous
from service.runtime import ModelRuntime
from service.store.codec import encode_decision, encode_x
from service.store.redis import RedisStore

MODELS = [f"m{i:02d}" for i in range(20)]
GROUPS = {"a": 2, "b": 2}
SPEC = {"learner": "banditron", "n_features": 784, "n_labels": 10, "reward_window_seconds": 600}
#: Issue 40's target: the deployment's applied events/s with placement over every replica holding all.
TARGET = 1.8
#: Checkpoints off: the backlog stays in the log, and a checkpoint's encoding is not what is timed.
ENV = {"CLICKBOOST_CHECKPOINT_EVERY": "1000000", "CLICKBOOST_CHECKPOINT_INTERVAL_SECONDS": "3600"}
POLL_SECONDS = 0.1


def _pool(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` learn events' stream fields, as the feedback script appends them (decided by a fresh
    model of :data:`SPEC` on uniform contexts; a click with probability 0.3)."""
    m = ModelRuntime("pool", ModelSpec.model_validate(SPEC), "pool", 1000)
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        x = m.featurise_request(rng.random(784).tolist(), None)
        decision_id = f"bench-{i}"
        click = bool(rng.random() < 0.3)
        out.append(
            {
                "kind": "learn",
                "at": repr(time.time()),
                "decision_id": decision_id,
                "x": encode_x(m.featurise.pack(x)),
                "decision": encode_decision(m.decide(x, decision_id).to_state()),
                "reward": "1" if click else "0",
                "outcome": "click" if click else "no_click",
            }
        )
    return out


def _backlog(url: str, events: int, pool: list[dict[str, Any]]) -> None:
    """Append ``events`` learn events to every model's log (positions after its last)."""
    store = RedisStore(url)  # only for its key names
    client = redis.Redis.from_url(url)
    try:
        for name in MODELS:
            meta, log = store.key(name, "meta"), store.key(name, "log")
            last = int(client.hget(meta, "last") or 0)  # type: ignore[arg-type]
            with client.pipeline(transaction=False) as pipe:
                for k in range(1, events + 1):
                    pipe.xadd(log, pool[(last + k) % len(pool)], id=f"{last + k}-0")
                pipe.hset(meta, "last", last + events)
                pipe.execute()
    finally:
        client.close()


def _signal(replicas: list[Replica], sig: signal.Signals) -> None:
    for r in replicas:
        assert r.proc is not None
        os.kill(r.proc.pid, sig)


def _run(
    url: str, replicas: list[Replica], holders: dict[str, list[Replica]], events: int, pool: list[Any]
) -> dict[str, Any]:
    """Create the models, hold the replicas, write the backlog, release them; time until every holder
    of every model applied it. Returns seconds, events and each replica's applied events."""
    with httpx.Client(timeout=60.0) as http:
        for name in MODELS:
            http.put(f"{holders[name][0].url}/models/{name}", json=SPEC).raise_for_status()
        for name in MODELS:  # every holder serves it before the backlog
            for rep in holders[name]:
                while http.get(f"{rep.url}/models/{name}").status_code != 200:
                    time.sleep(0.05)
        before = {r.url: applied_versions(http, r.url) for r in replicas}
        _signal(replicas, signal.SIGSTOP)
        try:
            _backlog(url, events, pool)
        finally:
            _signal(replicas, signal.SIGCONT)
        started = time.perf_counter()
        held = {r.url: [n for n in MODELS if r in holders[n]] for r in replicas}
        done: dict[str, float] = {}
        deadline = time.monotonic() + 600
        while len(done) < len(replicas):
            for r in replicas:
                if r.url in done:
                    continue
                now = applied_versions(http, r.url)  # one scrape per replica and poll
                if all(now.get(n, 0) >= before[r.url].get(n, 0) + events for n in held[r.url]):
                    done[r.url] = time.perf_counter() - started
            if time.monotonic() > deadline:
                raise RuntimeError("the replicas did not apply the backlog within 600 s")
            time.sleep(POLL_SECONDS)
        seconds = max(done.values())
        applied = {
            r.url: sum(applied_versions(http, r.url).get(n, 0) - before[r.url].get(n, 0) for n in MODELS)
            for r in replicas
        }
        reported = {r.url: sorted(applied_versions(http, r.url)) for r in replicas}
    return {
        "seconds": seconds,
        "events": events * len(MODELS),
        "applied": applied,
        "held": held,
        "reported": reported,
    }


@benches.register("placement")
def bench(quick: bool) -> str:
    """Applied events/s of 4 replicas holding every model against 4 in 2 groups (one copy each)."""
    events = 200 if quick else 1500
    pool = _pool(500 if quick else 2000)
    results = {}
    for mode in ("every replica", "placement"):
        with tempfile.TemporaryDirectory(prefix="clickboost-placement-") as tmp:
            server = RedisServer(Path(tmp))
            server.start()
            replicas: list[Replica] = []
            try:
                if mode == "placement":
                    groups = start_groups(server.url, Path(tmp), GROUPS, ENV, copies=1)
                    replicas = [r for g in GROUPS for r in groups[g]]
                    holders = {n: groups[rendezvous(n, list(GROUPS), 1)[0]] for n in MODELS}
                else:
                    replicas = start_replicas(server.url, Path(tmp), sum(GROUPS.values()), ENV)
                    holders = {n: replicas for n in MODELS}
                results[mode] = _run(server.url, replicas, holders, events, pool)
                results[mode]["groups"] = Counter(rendezvous(n, list(GROUPS), 1)[0] for n in MODELS)
            finally:
                for r in replicas:
                    r.stop()
                server.stop()
    return _render(results, events, quick)


def _render(results: dict[str, dict[str, Any]], events: int, quick: bool) -> str:
    rows = []
    rates = {}
    for mode, r in results.items():
        rate = r["events"] / r["seconds"]
        rates[mode] = rate
        applied = sorted(r["applied"].values())
        models = sorted(len(h) for h in r["held"].values())
        rows.append(
            [
                mode,
                f"{r['events']:,}",
                f"{r['seconds']:.2f}",
                f"{rate:,.0f}",
                f"{sum(applied) / r['seconds']:,.0f}",
                " / ".join(str(m) for m in models),
                " / ".join(f"{a:,}" for a in applied),
            ]
        )
    ratio = rates["placement"] / rates["every replica"]
    split = results["placement"]["groups"]
    only_own = all(
        set(r["reported"][url]) == set(r["held"][url]) for r in results.values() for url in r["held"]
    )
    flag = " --quick" if quick else ""
    return "\n\n".join(
        [
            f"## Model placement\n\n`python -m service bench placement{flag}`. {report.machine()}",
            f"{len(MODELS)} Banditron d=784 K=10 models, 4 replicas: every replica holding every model, "
            f"then 2 groups of 2 with one copy of each model (rendezvous hashing: {split['a']} models on "
            f"group a, {split['b']} on b). The replicas are paused while each model's log receives "
            f"{events:,} learn events (written straight into the streams), then resumed together; the "
            "time is until every holder of every model has applied its log. `deployment events/s`: log "
            "events learned by all their holders per second; `replica applications/s`: the events the "
            "replicas applied, summed. Replicas, Redis and the poller share the machine's cores.",
            report.table(
                [
                    "deployment",
                    "log events",
                    "seconds",
                    "deployment events/s",
                    "replica applications/s",
                    "models per replica",
                    "events applied per replica",
                ],
                rows,
            ),
            f"Deployment events/s, placement / every replica: **{ratio:.2f}** (target at least {TARGET}). "
            "Each replica reported (`/metrics`) exactly the models it holds: "
            f"{'yes' if only_own else 'NO'}.",
        ]
    )
