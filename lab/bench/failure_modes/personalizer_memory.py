"""Failure mode: memory held through the Personalizer routes (issue 51, item 2).

One ``python -m service serve`` (memory store, API keys set) with a hashed label model as its
default. A client holding only an API key posts ranks, each with a context feature whose string
value is new, and the server's resident memory (``VmRSS`` of its process) is read before and after:

1. the issue's attack: ranks whose one context value is a unique 900 KB string (refused now: a
   value is at most :data:`~service.features.MAX_FEATURE_CHARS` characters);
2. what is still served: ranks of 100 unique values of exactly that many characters each (every
   key new to the featuriser's cache, which now holds at most
   :data:`~service.features.CACHE_BYTES`, then starts over).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import httpx

from lab.bench.failure_modes import KEY, LABELS, grocery_server
from service.features import CACHE_BYTES, MAX_FEATURE_CHARS

TITLE = "Unique long strings through the Personalizer rank (one server, memory store)"
BEFORE = (
    "on main before the fix, per issue #51: 800 ranks each carrying one unique 900 KB string, with "
    "only an API key: RSS 314 -> 1,003 MB in 19 s, never released"
)

HUGE = 900 * 1024  # characters of the attack's one unique value per rank
PER_RANK = 100  # unique values at the limit per served rank


def _rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB (``VmRSS`` of ``/proc/PID/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def _rank(i: int, context: dict[str, str]) -> bytes:
    body = {"contextFeatures": [context], "actions": [{"id": a} for a in LABELS], "eventId": f"e{i}"}
    return json.dumps(body).encode()


def _post(client: httpx.Client, bodies: list[bytes]) -> tuple[Counter[int], float]:
    """Post every body to the rank route: the answers' status counts and the seconds it took."""
    statuses: Counter[int] = Counter()
    start = time.perf_counter()
    for body in bodies:
        r = client.post("/personalizer/v1.0/rank", content=body, headers={"content-type": "application/json"})
        statuses[r.status_code] += 1
    return statuses, time.perf_counter() - start


def _counts(statuses: Counter[int]) -> str:
    return ", ".join(f"{n:,} x {code}" for code, n in sorted(statuses.items()))


def run(quick: bool) -> list[tuple[str, str]]:
    """800 attack ranks then 800 served ones (200 each with ``quick``): rows of what was measured."""
    n = 200 if quick else 800
    with (
        grocery_server(CLICKBOOST_ADMIN_KEY=KEY + "-admin") as (url, pid),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        client.headers["Ocp-Apim-Subscription-Key"] = KEY
        warm, _ = _post(client, [_rank(-1 - i, {"user": f"warm-{i}"}) for i in range(20)])
        assert warm == {201: 20}, warm
        start = _rss_mb(pid)
        # one body a time: the client holds one 900 KB string, not n of them
        attack: Counter[int] = Counter()
        seconds = 0.0
        for i in range(n):
            got, took = _post(client, [_rank(i, {"note": f"{i:08d}" + "x" * (HUGE - 8)})])
            attack += got
            seconds += took
        after_attack = _rss_mb(pid)
        served: Counter[int] = Counter()
        served_seconds = 0.0
        for i in range(n):
            pad = "y" * (MAX_FEATURE_CHARS - 12)
            context = {f"f{k}": f"{i:06d}{k:06d}{pad}" for k in range(PER_RANK)}
            got, took = _post(client, [_rank(n + i, context)])
            served += got
            served_seconds += took
        after_served = _rss_mb(pid)
    new_mb = n * PER_RANK * MAX_FEATURE_CHARS / 1e6
    return [
        ("server RSS after start (and 20 ranks)", f"{start:,.0f} MB"),
        (
            f"{n:,} ranks, each with one unique {HUGE // 1024:,} KB string",
            f"{_counts(attack)} in {seconds:.1f} s",
        ),
        ("server RSS after them", f"{after_attack:,.0f} MB ({after_attack - start:+,.0f} MB)"),
        (
            f"{n:,} ranks of {PER_RANK} unique {MAX_FEATURE_CHARS:,}-character values ({new_mb:,.0f} MB new)",
            f"{_counts(served)} in {served_seconds:.1f} s",
        ),
        (
            f"server RSS after them (feature cache at most {CACHE_BYTES / 2**20:.0f} MiB)",
            f"{after_served:,.0f} MB ({after_served - start:+,.0f} MB)",
        ),
    ]
