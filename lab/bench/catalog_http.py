"""``lab bench catalog-http``: a catalog's bulk registration over HTTP (issue 54: 100,000 items <= 10 s).

One ``python -m service serve`` per store: ``memory``, the default embedded SQLite (fsync on every
commit) and Redis (a private ``redis-server`` of :mod:`lab.cluster`). On each, an action-feature
model (``squarecb-adf``, ``hashing_bits`` 18, as ``bench catalog``) and 100,000 items of the shop
stream (:mod:`lab.sim.shop`, eight features each, as ``bench catalog``'s bulk) registered by one
``POST /models/{name}/items`` as a JSON array, then the same items again as JSON lines (each replaces
itself), with the admin key. Timed from the first byte sent to the answer, which comes once the
server applied the events (checked, hashed, appended to the model's log in 100 events of 1,000,
applied); the client's encoding of the body is not in it. The catalog's memory is the listing's
``bytes`` (what the model's memory budget counts, :meth:`service.catalog.Catalog.nbytes`) over its
items: the memory per stored item, beside the default model budget. While the second bulk is
applied, a second connection sends whole-catalog predicts one after the other (every answer a 200):
their longest latency says how long a bulk holds predicts up (issue 54: catalog changes do not
stall predicts; the server applies one ``items`` event of 1,000 items between two turns of its
event loop). ``--quick``: 20,000 items, memory store only.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from lab.bench import benches, report
from lab.bench.catalog import BITS, BULK_ITEMS, LEARNER, _item
from lab.bench.http import _servers
from lab.cluster import RedisServer
from lab.sim.shop import Shop
from service.config import Settings
from service.runtime.budgets import human_bytes

ADMIN_KEY = "bench-admin-key"
TARGET_SECONDS = 10.0


def _register(url: str, body: bytes, media: str) -> tuple[float, dict[str, object]]:
    """Seconds of one bulk registration of ``body`` on ``url``'s model ``shop``, and its answer."""
    headers = {"content-type": media, "x-api-key": ADMIN_KEY}
    with httpx.Client(timeout=120) as http:
        start = time.perf_counter()
        r = http.post(f"{url}/models/shop/items", content=body, headers=headers)
        seconds = time.perf_counter() - start
    r.raise_for_status()
    return seconds, r.json()


def _predicts_during(url: str, contexts: list[dict[str, object]], done: threading.Event) -> list[float]:
    """Latencies (s) of whole-catalog predicts sent one after the other until ``done`` is set."""
    out: list[float] = []
    with httpx.Client(timeout=120, headers={"x-api-key": ADMIN_KEY}) as http:
        while not done.is_set():
            body = {"model": "shop", "features": contexts[len(out) % len(contexts)]}
            start = time.perf_counter()
            r = http.post(f"{url}/predict", json=body)
            out.append(time.perf_counter() - start)
            r.raise_for_status()
    return out


def _catalog_bytes(url: str, n: int) -> int:
    """The catalog's ``bytes`` (what the memory budget counts) of ``url``'s model ``shop`` of ``n`` items."""
    page = httpx.get(f"{url}/models/shop/items?limit=1", headers={"x-api-key": ADMIN_KEY}, timeout=60).json()
    assert page["total"] == n, page
    return int(page["bytes"])


@benches.register("catalog-http")
def bench_catalog_http(quick: bool) -> str:
    n = BULK_ITEMS // 5 if quick else BULK_ITEMS
    stream = Shop("bulk", False, 54_900, visits=1, items=n, random=10).stream(0)
    items = [_item(stream, i) for i in range(n)]
    contexts = [stream.context(t) for t in range(stream.visits)]
    array = json.dumps(items).encode()
    lines = "".join(json.dumps(item) + "\n" for item in items).encode()
    spec = {"actions": "features", "learner": LEARNER, "hashing_bits": BITS}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        redis = None if quick else RedisServer(Path(tmp))
        stores = {"memory": {"CLICKBOOST_STORE": "memory"}}
        if not quick:
            assert redis is not None
            redis.start()
            stores["sqlite"] = {"CLICKBOOST_STORE": "sqlite", "CLICKBOOST_DATA_DIR": str(Path(tmp) / "data")}
            stores["redis"] = {"REDIS_URL": redis.url}
        serve = [sys.executable, "-m", "service", "serve", "--port", "{port}", "--log-level", "warning"]
        cmds = {name: (serve, {**env, "CLICKBOOST_ADMIN_KEY": ADMIN_KEY}) for name, env in stores.items()}
        try:
            with _servers(cmds) as up:
                for name, (url, _) in up.items():
                    headers = {"x-api-key": ADMIN_KEY}
                    httpx.put(f"{url}/models/shop", json=spec, headers=headers, timeout=60).raise_for_status()
                    first, _ = _register(url, array, "application/json")
                    fresh = _catalog_bytes(url, n)
                    done = threading.Event()
                    with ThreadPoolExecutor(1) as pool:
                        sender = pool.submit(_predicts_during, url, contexts, done)
                        try:
                            again, _ = _register(url, lines, "application/x-ndjson")
                        finally:
                            done.set()
                        during = sender.result()
                    replaced = _catalog_bytes(url, n)
                    rows.append(
                        [
                            name,
                            f"{n:,}",
                            f"{first:.2f}",
                            f"{again:.2f}",
                            f"{fresh / n:.0f}",
                            human_bytes(fresh),
                            f"{replaced / n:.0f}",
                            f"{len(during):,}",
                            f"{np.median(during) * 1e3:.1f}",
                            f"{max(during) * 1e3:.0f}",
                        ]
                    )
        finally:
            if redis is not None:
                redis.stop()
    budget = Settings.model_fields["max_model_bytes"].default
    md = "\n\n".join(
        [
            "## Catalog bulk registration over HTTP (issue 54)",
            report.machine(),
            f"`python -m service lab bench catalog-http`: {n:,} shop items (8 features each) registered by "
            "one `POST /models/shop/items` with the admin key on a `python -m service serve` of each store, "
            f"then again as JSON lines (every item replaced); the array's body is {len(array) / 1e6:.1f} MB, "
            "the lines' "
            f"{len(lines) / 1e6:.1f} MB. Seconds from the request to the answer, which comes once the server "
            "applied the events. Bytes per item: the catalog's memory as the model budget counts it "
            "(the listing's `bytes`: arrays with their spare capacity, ids, dictionaries) over its items, "
            "after the first registration and after every item was replaced (a replaced item's old "
            "entries stay as holes until they outnumber the live ones); the default model budget "
            f"(`CLICKBOOST_MAX_MODEL_BYTES`) is {human_bytes(budget)}. Target: <= {TARGET_SECONDS:.0f} s. "
            "Predicts during the bulk: whole-catalog predicts sent one after the other on a second "
            "connection while the JSON lines are registered (a catalog of the same size, every item "
            "being replaced): how many, their median and their longest latency, the time a bulk "
            "holds a predict up.",
            report.table(
                [
                    "store",
                    "items",
                    "array, s",
                    "JSON lines (replacing), s",
                    "bytes per item",
                    "catalog",
                    "bytes per item, replaced",
                    "predicts during the bulk",
                    "their p50, ms",
                    "longest, ms",
                ],
                rows,
                "lrrrrrrrrr",
            ),
        ]
    )
    return md  # `bench` writes it into BENCHMARKS.md of report.out_dir(), as every part
