"""The dashboard of replicas on one Redis (issue 23, item 3): a private redis-server and two
``python -m service serve`` processes on loopback (``lab.cluster``), talked to over HTTP.

Each replica's heartbeat is listed by both, with its applied version of the model and its lag; both
show the same per-minute history; a replica that stops reporting (SIGSTOP: stuck, not dead) is shown
stale on the other's page, in a real headless Chromium; it comes back when continued, and leaves
the list at once when it stops cleanly.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lab.cluster import RedisServer, Replica, start_groups, start_replicas
from service.placement import rendezvous
from service.runtime import HEARTBEAT_SECONDS
from tests.conftest import redis_server_binary
from tests.service.api.test_dashboard import CONTEXTS, SPEC, browser_page, needs_chromium, wait_text

TIMEOUT = 20.0  # seconds: the bound of every wait below


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[Replica]]:
    server = RedisServer(tmp_path, binary=redis_server_binary())
    server.start()
    replicas: list[Replica] = []
    try:
        replicas = start_replicas(server.url, tmp_path, 2)
        yield replicas
    finally:
        for r in replicas:
            if r.proc is not None:
                r.proc.send_signal(signal.SIGCONT)  # a stopped process would not see its SIGTERM
            r.stop()
        server.stop()


def until(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` until it returns something true (returned); fail after :data:`TIMEOUT` seconds."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"not within {TIMEOUT} s: {what}")
        time.sleep(0.2)


def listing(url: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/replicas", timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


@needs_chromium
def test_replicas_report_their_version_and_lag_and_a_stuck_one_shows(cluster: list[Replica]) -> None:
    a, b = cluster
    assert httpx.put(f"{a.url}/models/news", json=SPEC).status_code == 201
    for i in range(20):  # half the traffic through each replica
        url = (a, b)[i % 2].url
        d = httpx.post(f"{url}/predict", json={"model": "news", "features": CONTEXTS[i % 3]}).json()
        fb = {"decision_id": d["decision_id"], "click": d["label_index"] == i % 3}
        assert httpx.post(f"{url}/feedback?wait=true", json=fb).status_code == 200

    # both list both, each at the log's position with no lag, once their next heartbeats are in
    ids = {listing(a.url)["answered_by"], listing(b.url)["answered_by"]}
    assert len(ids) == 2

    def caught_up(url: str) -> dict[str, Any] | None:
        body = listing(url)
        models = {r["id"]: r["models"] for r in body["replicas"]}
        done = set(models) == ids and all(m == {"news": {"version": 20, "lag": 0}} for m in models.values())
        return body if done else None

    for r in cluster:
        until(lambda r=r: caught_up(r.url), f"both replicas at version 20 on {r.url}")

    # the same history on both: every replica adds its per-minute counts to the store
    def history(url: str) -> list[tuple[int, int, int]]:
        s = httpx.get(f"{url}/models/news/stats", params={"minutes": 3}).json()
        return [(m["decisions"], m["clicks"], m["no_clicks"]) for m in s["minutes"]]

    until(lambda: sum(d for d, _, _ in history(a.url)) == 20, "the history holds all 20 decisions")
    assert history(a.url) == history(b.url)

    with browser_page(a.url) as (page, outside, errors):
        for replica in ids:
            wait_text(page, f'tr[data-replica="{replica}"]', "news v20 (lag 0)")
        assert page.locator("#replica-rows tr.stale").count() == 0

        # b gets stuck: no heartbeat from it any more; a's page marks it stale
        (b_id,) = ids - {listing(a.url)["answered_by"]}
        assert b.proc is not None
        b.proc.send_signal(signal.SIGSTOP)
        try:
            stale = until(
                lambda: [r for r in listing(a.url)["replicas"] if r["id"] == b_id and r["stale"]],
                "the stopped replica listed as stale",
            )
            assert stale[0]["seen_seconds_ago"] > 3 * HEARTBEAT_SECONDS
            page.wait_for_selector(f'tr.stale[data-replica="{b_id}"]', timeout=10_000)
        finally:
            b.proc.send_signal(signal.SIGCONT)
        page.wait_for_selector(f'tr[data-replica="{b_id}"]:not(.stale)', timeout=10_000)
        assert outside == [], f"requests leaving the machine: {outside}"
        assert errors == [], errors

    b.stop()  # a clean stop: gone from the list at once, not after the heartbeat's TTL
    assert [r["id"] for r in listing(a.url)["replicas"]] == [listing(a.url)["answered_by"]]


@needs_chromium
def test_with_placement_the_page_names_the_models_other_groups_hold(tmp_path: Path) -> None:
    """Two groups of one replica, one copy of each model: each replica's page shows its own model's
    card and names the other group's model with a link to that group's replica. A third replica
    given other replica groups logs an error naming the others at start, and every page warns."""
    server = RedisServer(tmp_path, binary=redis_server_binary())
    server.start()
    groups: dict[str, list[Replica]] = {}
    try:
        groups = start_groups(server.url, tmp_path, {"a": 1, "b": 1}, copies=1)
        (a,), (b,) = groups["a"], groups["b"]
        names = [f"m{i}" for i in range(20)]
        on_a = next(n for n in names if rendezvous(n, ["a", "b"], 1) == ["a"])
        on_b = next(n for n in names if rendezvous(n, ["a", "b"], 1) == ["b"])
        assert httpx.put(f"{a.url}/models/{on_a}", json=SPEC).status_code == 201
        assert httpx.put(f"{b.url}/models/{on_b}", json=SPEC).status_code == 201
        until(
            lambda: [m["name"] for m in httpx.get(f"{a.url}/models").json()["elsewhere"]] == [on_b],
            "a lists b's model as held elsewhere",
        )
        with browser_page(a.url) as (page, outside, errors):
            wait_text(page, "#models", on_a)
            wait_text(page, "#elsewhere", f"{on_b} — group b: {b.url}")
            assert page.locator(f'#elsewhere a[href="{b.url}/dashboard"]').count() == 1
            agreed = listing(a.url)
            assert agreed["placement_agrees"] is True
            fingerprints = {r["placement"] for r in agreed["replicas"]}
            assert len(fingerprints) == 1 and None not in fingerprints, agreed
            assert {r["group"] for r in agreed["replicas"]} == {"a", "b"}
            mark = fingerprints.pop()
            row = f'tr[data-replica="{agreed["answered_by"]}"]'
            wait_text(page, f'{row} td[data-field="group"]', f"a ({mark})")
            assert page.locator("#placement-warning").is_hidden()
            # a replica whose settings name a third group: it would place models otherwise
            settings = {k: v for k, v in a.env.items() if k.startswith("CLICKBOOST_")}
            settings["CLICKBOOST_REPLICA_GROUPS"] = json.dumps({"a": [a.url], "b": [b.url], "c": [a.url]})
            odd = Replica(server.url, tmp_path, settings)
            groups["odd"] = [odd]
            odd.start()
            odd.wait_ready()
            logged = odd.log.read_text()
            others = [line for line in logged.splitlines() if "has other replica-group settings" in line]
            assert all(any(r["id"] in line for line in others) for r in agreed["replicas"]), logged
            disagreed = until(lambda: (got := listing(b.url))["placement_agrees"] is False and got, "b warns")
            assert len({r["placement"] for r in disagreed["replicas"]}) == 2
            page.locator("#placement-warning").wait_for(state="visible", timeout=TIMEOUT * 1000)
            assert outside == [], f"requests leaving the machine: {outside}"
            assert errors == [], errors
    finally:
        for reps in groups.values():
            for r in reps:
                r.stop()
        server.stop()
