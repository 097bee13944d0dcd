"""``bench raw-numbers``: the served defaults over HTTP, as a web app uses them, with raw numbers.

Three loops against a real server (memory store, decision ids seeded), each model created without
a learner, so each gets the served default of its kind, then driven for :data:`ROUNDS` rounds
(predict, then the reward of the served choice); a row reports the reward over the last 20 % of
the rounds, over :data:`SEEDS` seeds (issue 50's target: at least :data:`TARGET` on each):

1. **A label model with a raw number.** Named features ``{"country": one of 4, "x": uniform in
   [0, 1000)}``, three labels; each country's visitors click one label, ``x`` is irrelevant.
2. **Shoes with a price on an action model.** Context ``{"activity": one of 4}``; the four
   candidates ``{"kind": runner | hiker | loafer | heel, "price": one of 29, 49, 79, 119}`` (the
   prices drawn anew each round, so the price is an irrelevant raw number on every candidate);
   each activity's visitors click one kind.
3. **Personalizer's quickstart on an action model**: :mod:`lab.personalizer_quickstart`'s loop
   with the official ``azure-cognitiveservices-personalizer`` client, unmodified, against a server
   whose default model is an action-feature model; the products carry their numeric ``qty`` and
   ``price``.
"""

from __future__ import annotations

import json
import sys

import httpx
import numpy as np

from lab import personalizer_quickstart as quickstart
from lab.bench import benches, report
from lab.bench.http import _server

ROUNDS = 2000
SEEDS = (0, 1, 2)
TARGET = 0.95
COUNTRIES = {"fr": "music", "de": "politics", "us": "sports", "jp": "music"}
ACTIVITIES = {"running": "runner", "hiking": "hiker", "office": "loafer", "party": "heel"}
PRICES = (29, 49, 79, 119)


def _tail(rewards: list[float]) -> float:
    return float(np.mean(rewards[len(rewards) - len(rewards) // 5 :]))


def label_loop(url: str, seed: int, rounds: int) -> tuple[float, str]:
    """Loop 1; the last 20 %'s click rate and the learner the model got."""
    rng = np.random.default_rng(seed)
    name = f"visits-{seed}"
    with httpx.Client(base_url=url, timeout=30) as c:
        spec = {"hashing_bits": 16, "labels": ["sports", "politics", "music"]}
        learner = c.put(f"/models/{name}", json=spec).raise_for_status().json()["config"]["learner"]
        clicks = []
        for _ in range(rounds):
            country = str(rng.choice(list(COUNTRIES)))
            features = {"country": country, "x": float(rng.uniform(0, 1000))}
            d = c.post("/predict", json={"model": name, "features": features}).raise_for_status().json()
            click = d["label"] == COUNTRIES[country]
            c.post("/feedback", json={"decision_id": d["decision_id"], "click": click}).raise_for_status()
            clicks.append(float(click))
    return _tail(clicks), learner


def shoes_loop(url: str, seed: int, rounds: int) -> tuple[float, str]:
    """Loop 2; the last 20 %'s click rate and the learner the model got."""
    rng = np.random.default_rng(seed)
    name = f"shoes-{seed}"
    with httpx.Client(base_url=url, timeout=30) as c:
        spec = {"actions": "features", "hashing_bits": 16}
        learner = c.put(f"/models/{name}", json=spec).raise_for_status().json()["config"]["learner"]
        clicks = []
        for _ in range(rounds):
            activity = str(rng.choice(list(ACTIVITIES)))
            actions = [
                {"id": kind, "features": {"kind": kind, "price": int(rng.choice(PRICES))}}
                for kind in ACTIVITIES.values()
            ]
            body = {"model": name, "features": {"activity": activity}, "actions": actions}
            d = c.post("/predict", json=body).raise_for_status().json()
            click = d["label"] == ACTIVITIES[activity]
            c.post("/feedback", json={"decision_id": d["decision_id"], "click": click}).raise_for_status()
            clicks.append(float(click))
    return _tail(clicks), learner


def quickstart_loop(seed: int, rounds: int) -> tuple[float, str]:
    """Loop 3; the last 20 %'s reward rate and the learner the default model got."""
    with quickstart.server(seed, actions=True) as url:
        rewards = quickstart.run_loop(url, quickstart.KEY, rounds, seed)
        headers = {"X-API-Key": quickstart.ADMIN_KEY}
        config = httpx.get(f"{url}/models/{quickstart.MODEL}", headers=headers).raise_for_status().json()
    return _tail(rewards), config["config"]["learner"]


def bench_raw_numbers(quick: bool) -> str:
    rounds, seeds = (300, SEEDS[:1]) if quick else (ROUNDS, SEEDS)
    env = {"CLICKBOOST_STORE": "memory", "CLICKBOOST_DECISION_ID_SEED": "0"}
    cmd = [sys.executable, "-m", "service", "serve", "--port", "{port}", "--log-level", "warning"]
    results: dict[str, list[tuple[float, str]]] = {"label": [], "shoes": [], "quickstart": []}
    with _server(cmd, env) as (url, _):
        for seed in seeds:
            results["label"].append(label_loop(url, seed, rounds))
            results["shoes"].append(shoes_loop(url, seed, rounds))
    for seed in seeds:
        results["quickstart"].append(quickstart_loop(seed, rounds))
    what = {
        "label": "label model: country + a number x in [0, 1000)",
        "shoes": "action model: shoes with a price in {29, 49, 79, 119}",
        "quickstart": "action model: Personalizer's quickstart (official client), numeric qty and price",
    }
    rows = []
    for key, runs in results.items():
        tails = [t for t, _ in runs]
        ok = min(tails) >= TARGET
        rows.append(
            [
                what[key],
                f"`{runs[0][1]}`",
                ", ".join(f"{t:.3f}" for t in tails),
                f"{np.mean(tails):.3f}",
                "met" if ok else f"MISSED (lowest {min(tails):.3f})",
            ]
        )
        print(json.dumps({key: tails}), file=sys.stderr, flush=True)
    table = report.table(
        ["loop", "learner the model got", "reward, last 20 %, per seed", "mean", f"target >= {TARGET}"],
        rows,
        "lllrl",
    )
    return (
        "## Raw numbers over HTTP: the served defaults as a web app uses them\n\n"
        f"`python -m service bench raw-numbers{' --quick' if quick else ''}`. {report.machine()}\n\n"
        f"{rounds:,} rounds per loop and seed (seeds {', '.join(map(str, seeds))}), models created without a "
        "learner on a real server; the loops are described in lab/bench/raw_numbers.py.\n\n"
        f"{table}\n"
    )


benches.register("raw-numbers")(bench_raw_numbers)
