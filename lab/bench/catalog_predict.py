"""``bench catalog-predict``: latency of ``POST /predict`` over a model's catalog through a real server
(issue 54's "Must show": one replica, sequential predicts).

One server (``python -m service serve``, one uvicorn worker) per store of :data:`STORES`, an
action-feature model ``shop`` (``squarecb-adf``, ``hashing_bits`` 18) whose catalog holds the
:data:`ITEMS` items of the shop stream (:mod:`lab.sim.shop`: 8 features each, numeric and
categorical), registered by one bulk ``POST /models/shop/items``. One keep-alive connection sends
predicts one after the other (each waits for the previous answer), the visitors' contexts of the
stream in turn; every answer is checked (200, the candidates' count, the top 10) and its size
kept. Loads:

- **whole catalog**: ``{"model", "features"}``, no candidates: every active item is scored, the
  answer carries the chosen item and the top 10;
- **100 catalog ids**: ``"candidates"``: 100 random live item ids per request;
- **a 3-slot page over the whole catalog** (issue 54 item 5, :mod:`service.runtime.catalog_pages`):
  ``"slots"`` of :data:`PAGE_SLOTS` slots with a ``position`` feature each, no candidates: each
  slot scores every item the earlier slots left, the answer carries per slot its item and top 10;
- **whole catalog while the catalog changes**: the same, while a second connection replaces 1 % of
  the items every 100 ms through the item routes (100 ``DELETE /models/shop/items/{id}``, one bulk
  ``POST`` of 100 new items; the changes are applied on the server's event loop between predicts:
  no scoring sees half a change);
- **100 candidates sent with their features** (today's request, for comparison).

Latency is the client's (request written to answer read), on loopback; the client runs in this
process on the same 2 cores. Targets (issue 54): whole catalog p50 <= 10 ms, p99 <= 30 ms, answer
<= 5 KB; 100 catalog ids p50 <= 3 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lab.bench import benches, report
from lab.bench.http import _request, _roundtrip, _server, store_settings
from lab.sim.shop import Shop

ITEMS = 10_000
BITS = 18
STORES = ("memory", "sqlite-full")
IDS_PER_REQUEST = 100
CHANGE_EVERY = 0.1  # seconds between two catalog changes of the changing load
CHANGE_ITEMS = 100  # 1 % of the catalog
PAGE_SLOTS = [{"id": p, "features": {"position": p}} for p in ("hero", "tile", "footer")]
TARGETS = {"whole p50": 10.0, "whole p99": 30.0, "ids p50": 3.0, "bytes": 5_000}
SPEC = {"actions": "features", "learner": "squarecb-adf", "hashing_bits": BITS, "seed": 1}


def _shop() -> Any:
    return Shop("catalog-predict", False, 54_900, visits=2_000, items=ITEMS + 100 * CHANGE_ITEMS).stream(0)


def _item(stream: Any, i: int) -> dict[str, Any]:
    return {"id": stream.item_id(i), "features": stream.features(i)}


async def _sequential(url: str, bodies: list[bytes], check: Any) -> tuple[np.ndarray, int]:
    """Each body in turn on one connection: latencies (s) and the largest answer (bytes)."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    out = np.empty(len(bodies))
    largest = 0
    try:
        for i, body in enumerate(bodies):
            t0 = time.perf_counter()
            status, answer = await _roundtrip(reader, writer, _request("/predict", body))
            out[i] = time.perf_counter() - t0
            if status != 200:
                raise RuntimeError(f"predict answered {status}: {answer[:300]!r}")
            check(json.loads(answer))
            largest = max(largest, len(answer))
    finally:
        writer.close()
    return out, largest


async def _changing(url: str, stream: Any, stop: asyncio.Event) -> int:
    """Replace :data:`CHANGE_ITEMS` items every :data:`CHANGE_EVERY` s until ``stop``; changes made."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        live = list(range(ITEMS))
        fresh = iter(range(ITEMS, stream.n_items))
        rng = np.random.default_rng(1)
        n = 0
        while not stop.is_set():
            gone = rng.choice(len(live), CHANGE_ITEMS, replace=False)
            new = [next(fresh) for _ in range(CHANGE_ITEMS)]
            for j in gone.tolist():
                (await c.delete(f"/models/shop/items/{stream.item_id(live[j])}")).raise_for_status()
            (await c.post("/models/shop/items", json=[_item(stream, i) for i in new])).raise_for_status()
            for j, i in zip(gone.tolist(), new, strict=True):
                live[j] = i
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHANGE_EVERY)
        return n


def _figures(lat: np.ndarray) -> tuple[float, float]:
    return float(np.percentile(lat, 50) * 1e3), float(np.percentile(lat, 99) * 1e3)


def run_store(store: str, requests: int, data_dir: Path) -> dict[str, Any]:
    """The five loads on one server of ``store``."""
    stream = _shop()
    cmd = [sys.executable, "-m", "service", "serve", "--port", "{port}", "--log-level", "warning"]
    with _server(cmd, store_settings(store, data_dir)) as (url, _):
        httpx.put(f"{url}/models/shop", json=SPEC, timeout=60).raise_for_status()
        items = [_item(stream, i) for i in range(ITEMS)]
        httpx.post(f"{url}/models/shop/items", json=items, timeout=120).raise_for_status()
        rng = np.random.default_rng(0)
        contexts = [stream.context(t) for t in range(stream.visits)]

        def bodies(n: int, field: str | None, each: Any = None) -> list[bytes]:
            """``n`` predict bodies, with ``field`` holding ``each(item)`` of 100 random items."""
            out = []
            for t in range(n):
                body: dict[str, Any] = {"model": "shop", "features": contexts[t % len(contexts)]}
                if field is not None:
                    picked = rng.choice(ITEMS, IDS_PER_REQUEST, replace=False).tolist()
                    body[field] = [each(i) for i in picked]
                out.append(json.dumps(body).encode())
            return out

        whole = bodies(requests, None)
        ids = bodies(requests, "candidates", stream.item_id)
        pages = [json.dumps({**json.loads(b), "slots": PAGE_SLOTS}).encode() for b in whole]
        sent = bodies(min(requests, 1_000), "actions", lambda i: _item(stream, i))

        def catalog_answer(a: dict[str, Any]) -> None:
            assert a["label"] in {r["label"] for r in a["ranking"]} or len(a["ranking"]) == 10

        def whole_answer(a: dict[str, Any]) -> None:
            assert a["candidates"] >= ITEMS - CHANGE_ITEMS and len(a["ranking"]) == 10
            catalog_answer(a)

        def ids_answer(a: dict[str, Any]) -> None:
            assert a["candidates"] == IDS_PER_REQUEST
            catalog_answer(a)

        def page_answer(a: dict[str, Any]) -> None:
            assert [s["candidates"] for s in a["slots"]] == [ITEMS - s for s in range(len(PAGE_SLOTS))]
            assert len({s["label"] for s in a["slots"]}) == len(PAGE_SLOTS)
            assert all(len(s["ranking"]) == 10 for s in a["slots"])

        async def loads() -> dict[str, Any]:
            await _sequential(url, whole[:200], whole_answer)  # warm: kernels, caches, allocator
            await _sequential(url, ids[:200], ids_answer)
            await _sequential(url, pages[:200], page_answer)
            out: dict[str, Any] = {}
            out["whole"] = await _sequential(url, whole, whole_answer)
            out["ids"] = await _sequential(url, ids, ids_answer)
            out["page"] = await _sequential(url, pages, page_answer)
            out["sent"] = await _sequential(url, sent, lambda a: None)
            stop = asyncio.Event()
            changer = asyncio.create_task(_changing(url, stream, stop))
            out["changing"] = await _sequential(url, whole, whole_answer)
            stop.set()
            out["changes"] = await changer
            return out

        return asyncio.run(loads())


def bench_catalog_predict(quick: bool) -> str:
    requests = 300 if quick else 3_000
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for store in STORES:
            results[store] = run_store(store, requests, Path(tmp) / store)
    rows, verdicts = [], []
    names = {
        "whole": f"whole catalog ({ITEMS:,} items), top 10",
        "page": f"{len(PAGE_SLOTS)}-slot page over the whole catalog, top 10 per slot",
        "ids": f"{IDS_PER_REQUEST} catalog ids",
        "changing": f"whole catalog while 1 % of it is replaced every {CHANGE_EVERY * 1e3:.0f} ms",
        "sent": f"{IDS_PER_REQUEST} candidates sent with their features (today)",
    }
    for store, r in results.items():
        for key, label in names.items():
            lat, size = r[key]
            p50, p99 = _figures(lat)
            extra = f" ({r['changes']} changes)" if key == "changing" else ""
            rows.append([store, label + extra, f"{len(lat):,}", f"{p50:.2f}", f"{p99:.2f}", f"{size:,}"])
        w50, w99 = _figures(r["whole"][0])
        i50, _ = _figures(r["ids"][0])
        c50, c99 = _figures(r["changing"][0])
        g50, g99 = _figures(r["page"][0])
        ok = (
            w50 <= TARGETS["whole p50"]
            and w99 <= TARGETS["whole p99"]
            and r["whole"][1] <= TARGETS["bytes"]
            and i50 <= TARGETS["ids p50"]
        )
        verdicts.append(
            f"- {store}: whole catalog p50 {w50:.2f} ms (<= 10), p99 {w99:.2f} ms (<= 30), answer at most "
            f"{r['whole'][1]:,} B (<= 5,000); 100 catalog ids p50 {i50:.2f} ms (<= 3); while the catalog "
            f"changes p50 {c50:.2f} ms, p99 {c99:.2f} ms. Met: **{'yes' if ok else 'NO'}**. A "
            f"{len(PAGE_SLOTS)}-slot page over the whole catalog: p50 {g50:.2f} ms, p99 {g99:.2f} ms "
            f"({g50 / w50:.1f}x the single decision's p50)."
        )
    table = report.table(["store", "load", "requests", "p50 ms", "p99 ms", "largest answer B"], rows)
    command = "python -m service lab bench catalog-predict" + (" --quick" if quick else "")
    return (
        "## A catalog on the server: predict latency over HTTP\n\n"
        f"`{command}`. {report.machine()}\n\n"
        f"One uvicorn server per store, a `squarecb-adf` model (`hashing_bits` {BITS}) with a catalog "
        f"of {ITEMS:,} shop items (8 features each), one connection sending predicts one after the "
        "other; client latency on loopback, the client in the same machine's 2 cores. What each load "
        "is: lab/bench/catalog_predict.py's docstring.\n\n"
        "### Must show\n\n" + "\n".join(verdicts) + f"\n\n{table}\n"
    )


benches.register("catalog-predict")(bench_catalog_predict)
