"""The generated parts of README.md and docs/CLIENTS.md, made by running every command they show.

    .venv/bin/python scripts/readme.py               # prints them
    .venv/bin/python scripts/readme.py --write-docs  # rewrites them in README.md and docs/CLIENTS.md

Starts ``python -m service serve --demo --config deploy/models.toml`` on a free loopback port and a
fresh data directory (the text shows port 8000, where ``make run`` listens), runs the quick start's
curl commands and executes its SDK snippet verbatim, runs the replay client (its plot copied to
docs/replay-car.png with ``--write-docs``) and scripts/demo-local, and renders the choosing-a-learner
table from ``bench quality``'s stored runs (docs/bench/quality.json) and each learner's
``state_nbytes``. Only the text between each section's markers is rewritten.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLIENTS = ROOT / "docs" / "CLIENTS.md"
QUALITY = ROOT / "docs" / "bench" / "quality.json"
SHOWN = "http://127.0.0.1:8000"

QUICKSTART = """\
import random

from clickboost_client import Client

# Simulated visitors: each country's readers click one section.
likes = {"fr": "music", "de": "politics", "us": "sports", "jp": "music"}
rng = random.Random(0)
with Client("http://127.0.0.1:8000") as c:
    clicks = []
    for visit in range(1, 2001):
        country = rng.choice(list(likes))
        p = c.predict({"country": country, "hour": rng.randrange(24)}, model="demo")
        click = p.label == likes[country]
        c.feedback(p.decision_id, click=click)
        clicks.append(click)
        if visit % 500 == 0:
            print(f"visits {visit - 499}-{visit}: click rate {sum(clicks[-500:]) / 500:.2f}")
"""

SDK_SNIPPET = """\
from clickboost_client import Client, Conflict

with Client("http://127.0.0.1:8000") as c:  # api_key=..., admin_key=... when the server has keys
    p = c.predict({"country": "fr", "hour": 13, "mobile": True}, model="demo")
    print(p.label, round(p.probability, 3), p.decision_id)
    print(c.feedback(p.decision_id, click=p.label == "music", wait=True))
    try:
        c.feedback(p.decision_id, click=True)
    except Conflict as exc:
        print(exc.status, exc.first_outcome["outcome"])
    info = c.get_model("demo")
    print(info.version, info.checksum[:16], info.counts)
"""

SERVE = ".venv/bin/python -m service serve --demo --config deploy/models.toml"
# The predict and its feedback in one POSIX sh block: the decision id goes from one to the other in
# a shell variable, so the block pastes as it is (scripts/readme_check.py runs each block alone).
PREDICT_FEEDBACK = f"""\
answer=$(curl -s {SHOWN}/predict -H 'content-type: application/json' \\
  -d '{{"model": "demo", "features": {{"country": "fr", "hour": 13, "mobile": true}}}}')
printf '%s\\n' "$answer" | python3 -m json.tool
id=$(printf '%s' "$answer" | python3 -c 'import json, sys; print(json.load(sys.stdin)["decision_id"])')
curl -s '{SHOWN}/feedback?wait=true' -H 'content-type: application/json' \\
  -d "{{\\"decision_id\\": \\"$id\\", \\"click\\": true}}" | python3 -m json.tool"""
# The candidates of the README's action-feature model (its examples with and without slots).
SHOP_ACTIONS = """\
  "actions": [
    {"id": "sku-1", "features": {"brand": "acme", "category": "shoes", "price": 59}},
    {"id": "sku-2", "features": {"brand": "zeta", "category": "shoes", "price": 89}},
    {"id": "sku-3", "features": {"brand": "acme", "category": "socks", "price": 9}}
  ]"""
# An action-feature model (README, "Candidates with features"): created, then asked with candidates.
ACTIONS = f"""\
curl -sf -o /dev/null -X PUT {SHOWN}/models/shop -H 'content-type: application/json' \\
  -d '{{"actions": "features", "hashing_bits": 16}}'
curl -s {SHOWN}/predict -H 'content-type: application/json' -d '{{
  "model": "shop",
  "features": {{"country": "fr", "mobile": true}},
{SHOP_ACTIONS}}}' | python3 -m json.tool"""
# A page of several slots on the same model (README, "Pages of several slots", issue 53): one decision
# id, an item per slot, a reward per slot.
PAGES = f"""\
answer=$(curl -s {SHOWN}/predict -H 'content-type: application/json' -d '{{
  "model": "shop",
  "features": {{"country": "fr", "mobile": true}},
{SHOP_ACTIONS},
  "slots": [
    {{"id": "hero", "features": {{"position": "top", "size": "large"}}}},
    {{"id": "tile", "features": {{"position": "side"}}}}
  ]}}')
printf '%s\\n' "$answer" | python3 -m json.tool
id=$(printf '%s' "$answer" | python3 -c 'import json, sys; print(json.load(sys.stdin)["decision_id"])')
curl -s '{SHOWN}/feedback?wait=true' -H 'content-type: application/json' \\
  -d "{{\\"decision_id\\": \\"$id\\", \\"slot\\": \\"hero\\", \\"click\\": true}}" | python3 -m json.tool"""
REPLAY = (
    f".venv/bin/python -m clickboost_client.replay --url {SHOWN} --model car --dataset car \\\n"
    "  --json-out out/replay.json --plot out/replay-car.png"
)
DEMO = "scripts/demo-local"

SDK_TEXT = (
    "`clickboost_client.Client` (and `clickboost_client.AsyncClient`, the same methods as "
    "coroutines) needs only httpx: `pip install ./clients` (from a checkout) installs the SDK "
    "(the distribution `clickboost-client`, imported as `clickboost_client`) and httpx, nothing of "
    "the server; the import name of the release before, `clients`, still works for one release "
    "(a `DeprecationWarning`). `predict` takes what `POST /predict` takes: `model`, `eligible` or "
    "`excluded`, `baseline`, `defer`, `decision_id`, and for an action-feature model its "
    'candidates, `actions=[{"id": ..., "features": {...}}, ...]`. '
    "Keys: `api_key=` / `admin_key=`, by default read from `CLICKBOOST_API_KEY` "
    "(its first key) and `CLICKBOOST_ADMIN_KEY`, the variables the server reads. Errors are "
    "typed from the status (`BadRequest`, `Unauthorized`, `NotFound`, "
    "`Conflict`, `Gone`, `ServerError`, `TransportError`). Admin calls: `create_model`, "
    "`list_models`, `get_model`, `reset_model`, `delete_model`, `export_state`, "
    "`import_state`, `model_stats` (the dashboard's numbers of a model), `set_rollout`, "
    "`list_replicas`, `get_placement` and `move_model` (model placement), `start_evaluation`, "
    "`get_evaluation` and `cancel_evaluation` (off-policy evaluation: a job lives in the replica "
    "that started it, and the SDK sends its later calls there). With model placement, the calls "
    "about one model follow a 421 to the model's group once and remember the route.\n\n"
    "Riding out faults: a client takes one base URL or several (`Client([url1, url2, "
    "url3])`) and sends calls round-robin over the replicas that are up. A replica whose "
    "connection fails, or whose proxy answers 502/504, is skipped at once (the call moves "
    "on without waiting) and probed on `/readyz` every second in the background, back in "
    "rotation when it answers 200; a decision's feedback goes first to the replica that "
    "answered its predict. Failed calls are retried within a budget, "
    "`Retry(budget=60.0)` by default, enough for a 30 s Redis outage, with exponential "
    "back-off, full jitter and the server's `Retry-After` as a floor. Feedback is always "
    "re-sent with the same decision id: the service records it exactly once, and a retry "
    "that meets its own earlier attempt (409 with the same outcome) counts as success. "
    "A predict is retried freely only when it cannot have been recorded (connection "
    "never made, 429, 503: a replica still starting answers 503). When its connection broke after "
    "it was sent, or a proxy answered 502, it may have been recorded; it is re-sent once, to another "
    "replica, because a page is waiting for a label. The cost: if the first attempt was "
    "recorded, that decision never gets feedback and is learned as the model's default "
    "reward (`no_click`) when its window ends. A read timeout is not re-sent: the replica "
    "is alive and most likely recording it. `client.stats` counts retries, re-sent "
    "predicts and replicas taken out of rotation. `tests/clients/test_faults.py` replays "
    "`car` at concurrency 8 over three replicas with one killed mid-run (0 failed "
    "visits) and through a 10 s Redis outage (0 feedbacks given up)."
)
REPLAY_TEXT = (
    "`python -m clickboost_client.replay` sends each example of a labelled dataset as a visit: predict, "
    "then click iff the sampled label is the true one (so CTR = online accuracy), spread over "
    "the replicas given in `--url` (comma-separated or repeated) by one SDK client, so a "
    "failed replica is skipped and calls are retried within `--retry-budget` seconds "
    "(default 60), with `--concurrency` and `--rate`. The report ends with the failed "
    "visits (no label shown), the feedbacks given up and the visits by replica. "
    "It needs a model of the dataset's shape: `deploy/models.toml` declares `car`. At "
    "concurrency 1 on one replica a replay is deterministic and equals the offline "
    "simulator's run mistake for mistake when the server draws its decision ids from a seed "
    "(`CLICKBOOST_DECISION_ID_SEED`, for tests only: such ids are guessable); "
    "`tests/clients/test_replay.py` checks both. The replay reads the benchmark data sets "
    "(`../shared/datasets`, README: Research) with the lab: `make test` installs it; its key "
    "comes from `CLICKBOOST_API_KEY`."
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def split_json(text: str) -> tuple[str, str]:
    """The two JSON documents ``python3 -m json.tool`` printed one after the other, as printed."""
    _, end = json.JSONDecoder().raw_decode(text)
    return text[:end], text[end:].strip()


def block(lang: str, text: str) -> str:
    return f"```{lang}\n{text.rstrip()}\n```"


def sh(command: str, url: str, env: dict[str, str]) -> str:
    """Stdout of the shell ``command`` run in the repository against the server at ``url``."""
    return subprocess.run(
        ["bash", "-c", command.replace(SHOWN, url)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout


# What each learner's exploration is and when to pick it (the numbers come from the stored runs).
LEARNERS = {
    "cova": (
        "none (seed 004); `epsilon` adds a floor of epsilon / K",
        "small one-hot or hashed inputs of strings and booleans (the default until issue 50)",
    ),
    "squarecb": (
        "inverse gap weighting, 1 / (K + gamma_t gap): fades as it learns",
        "dense numeric inputs of up to a few hundred features, where K (d+1)^2 floats fit",
    ),
    "squarecb-sgd": (
        "inverse gap weighting over VW's SGD regression with hashed pairs (VW's `--squarecb -q ::`)",
        "any input: numbers in their own units, strings, wide or hashed inputs; graded rewards as values",
    ),
    "regcb-sgd": (
        "uniform over the labels whose cost bounds overlap the best (VW's `--regcb -q ::`)",
        "as `squarecb-sgd`; explores only where the regression is unsure (3x its work per decision)",
    ),
    "banditron": ("gamma / K per label (0.05 / K)", "a linear baseline; the least state"),
    "banditboost": ("gamma / K (0.1 / K)", "an ensemble of 100 linear learners, hashed input"),
    "adabandit": ("rho / (K - 1) (0.01 / (K - 1))", "categorical inputs of tens of features"),
    "banditbbm": ("rho / (K - 1) (0.01 / (K - 1))", "as AdaBandit, with boost-by-majority costs"),
    "binbandit": ("gamma / K (0.1 / K)", "research: seed 001's BinBandit"),
    "adaboost-mh": ("epsilon / K (0.05 / K)", "research: retrains stumps from the click log"),
}


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.0f} PiB"


def choosing_table() -> str:
    """Every bandit learner at its defaults: the quality race's online error and speed, its memory."""
    import numpy as np

    from service.learners import learners

    runs = [r for r in json.loads(QUALITY.read_text()) if r["protocol"] == "online"]
    mean: dict[str, dict[str, float]] = {}
    for r in runs:
        mean.setdefault(r["system"], {}).setdefault(r["dataset"], []).append(r["value"])  # type: ignore[arg-type]
    mean = {s: {d: float(np.mean(v)) for d, v in by.items()} for s, by in mean.items()}
    every = sorted({r["dataset"] for r in runs})
    # the data sets where every learner of the table has runs (bench quality resumes across sessions)
    sets = [d for d in every if all(d in mean.get(s, {}) for s in LEARNERS)]
    best = {d: min(LEARNERS, key=lambda s: mean[s][d]) for d in sets}
    from lab.bench.invariance import BOUND, largest_difference
    from service.config import DEFAULT_LEARNER

    scale = largest_difference()
    rows = [
        f"| learner | online error, mean of the {len(sets)} data sets | best of ours at defaults on | "
        "examples/s (median, one core) | state: car (d=21, K=4) | state: hashed 2^16, K=10 | "
        "any feature scale | exploration | pick it for |",
        "|---|---:|---|---:|---:|---:|---|---|---|",
    ]
    speeds = {
        n: float(np.median([r["T"] / r["seconds"] for r in runs if r["system"] == n])) for n in LEARNERS
    }
    fastest = max(speeds, key=speeds.__getitem__)
    for name, (explore, when) in LEARNERS.items():
        speed = speeds[name]
        if name == fastest:
            when += "; the fastest of the table"
        if name == DEFAULT_LEARNER[0]:
            when = "**the default** (no `learner` given): " + when
        if name not in scale:
            any_scale = "not measured"
        elif scale[name] <= BOUND:
            any_scale = f"yes ({scale[name]:.2f})"
        else:
            any_scale = f"no ({scale[name]:.1f}): scale its input"
        cls = learners.get(name)
        small = human(cls.state_nbytes(21, 4))
        try:
            hashed = human(cls.state_nbytes(1 << 16, 10))
        except Exception as exc:  # a learner that refuses the size says so
            hashed = f"refused ({type(exc).__name__})"
        won = ", ".join(d for d in sets if best[d] == name) or "none"
        err = 100 * float(np.mean([mean[name][d] for d in sets]))
        rows.append(
            f"| `{name}` | {err:.1f} % | {won} | {speed:,.0f} | {small} | {hashed} | {any_scale} | {explore} "
            f"| {when} |"
        )
    missing = [d for d in every if d not in sets]
    lacking = (
        f" Not yet in the mean, where not every learner has stored runs: {', '.join(missing)}."
        if missing
        else ""
    )
    return "\n".join(rows) + (
        f"\n\nOnline error and speed: `bench quality`'s stored runs ({len(sets)} data sets, up to five "
        "shuffles, whole "
        "streams, [docs/BENCHMARKS.md](docs/BENCHMARKS.md#quality-vs-vowpal-wabbit)), each learner at its "
        "own defaults (C-OVA without a floor). State: each learner's `state_nbytes`, what a new model of "
        "that shape "
        "allocates (the tree boosters and AdaBoost.MH then grow as they learn, within bounds: "
        "docs/ARCHITECTURE.md); the budget is 512 MiB per model (`CLICKBOOST_MAX_MODEL_BYTES`). Any "
        "feature scale: `bench invariance` ([docs/BENCHMARKS.md]"
        "(docs/BENCHMARKS.md#invariance-to-the-unit-of-a-feature)), the largest change of online error, "
        "in points, on car, dna, nursery and digits when "
        f"every column is multiplied by its own constant in [1e-3, 1e4] (yes: at most {BOUND})." + lacking
    )


def replace(path: Path, name: str, body: str) -> None:
    """Put ``body`` between the markers of section ``name`` in ``path``."""
    begin = f"<!-- BEGIN {name}: generated by scripts/readme.py, do not edit by hand -->"
    end = f"<!-- END {name} -->"
    text = path.read_text()
    head, rest = text.split(begin, 1)
    path.write_text(head + begin + "\n" + body.strip() + "\n" + end + rest.split(end, 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description="the generated parts of README.md and docs/CLIENTS.md")
    parser.add_argument("--write-docs", action="store_true", help="rewrite them (else print them)")
    args = parser.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_") and k != "REDIS_URL"}
    env["PYTHON"] = sys.executable
    # The embedded SQLite store, as `make run` has it, but in a fresh directory: the outputs below
    # start from untrained models, and the repository's ./data is left alone.
    data_dir = tempfile.mkdtemp(prefix="clickboost-readme-")
    env["CLICKBOOST_DATA_DIR"] = data_dir
    py = shlex.quote(sys.executable)
    server = subprocess.Popen(
        [*shlex.split(SERVE.replace(".venv/bin/python", py)), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    out_dir = ROOT / "out"
    try:
        for _ in range(3000):
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz").status_code == 200:
                    break
            if server.poll() is not None:
                raise SystemExit(f"the server exited with {server.returncode}: {SERVE}")
            time.sleep(0.1)
        else:
            raise SystemExit(f"the server was not ready after 300 s: {SERVE}")
        predict_out, feedback_out = split_json(sh(PREDICT_FEEDBACK, url, env))
        actions_out = sh(ACTIONS, url, env)
        page_out, slot_out = split_json(sh(PAGES, url, env))
        quick_out = io.StringIO()
        with contextlib.redirect_stdout(quick_out):
            exec(compile(QUICKSTART.replace(SHOWN, url), "README quick start", "exec"), {})
        sdk_out = io.StringIO()
        with contextlib.redirect_stdout(sdk_out):
            exec(compile(SDK_SNIPPET.replace(SHOWN, url), "SDK snippet", "exec"), {})
        replay_out = sh(REPLAY.replace(".venv/bin/python", py), url, env)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(data_dir, ignore_errors=True)
    demo_out = sh(DEMO, url, env)

    quickstart = "\n\n".join(
        [
            block("sh", PREDICT_FEEDBACK),
            "The predict's answer, then the feedback's:",
            block("json", predict_out),
            block("json", feedback_out),
            "From Python with the SDK (installed by `make run`), simulated visitors whose country "
            "decides what they click: the model learns it within a few hundred visits.",
            block("sh", ".venv/bin/python - <<'EOF'\n" + QUICKSTART + "EOF"),
            block("text", quick_out.getvalue()),
            "Outputs above are real: `scripts/readme.py` runs these commands and writes what they print. "
            "Decision ids are 128 random bits, so yours differ.",
        ]
    )
    clients = "\n\n".join(
        [
            "Outputs below are real: `.venv/bin/python scripts/readme.py --write-docs` runs every command "
            "and rewrites this section (timings come from a shared 2-core development machine).",
            "Start the service as `make run` does (127.0.0.1:8000, the `demo` model: named features, "
            "labels sports / politics / music), plus the `car` model of `deploy/models.toml` that the "
            "replay below uses:",
            block("sh", SERVE),
            "## Python SDK",
            SDK_TEXT,
            block("python", SDK_SNIPPET),
            block("text", sdk_out.getvalue()),
            "## Replay a dataset as traffic",
            REPLAY_TEXT,
            block("sh", REPLAY),
            block("text", replay_out),
            "![replay learning curve and latency](replay-car.png)",
            "## Two replicas and Redis as local processes",
            "The topology of `docker-compose.yml` without Docker (redis-server, two replicas on two "
            "ports, the replay client against both):",
            block("sh", DEMO),
            block("text", demo_out),
        ]
    )
    actions = "\n\n".join(
        [
            block("sh", ACTIONS),
            block("json", actions_out),
            "The output is real (`scripts/readme.py` runs the commands).",
        ]
    )
    pages = "\n\n".join(
        [
            block("sh", PAGES),
            "The page's answer, then the feedback of its hero slot:",
            block("json", page_out),
            block("json", slot_out),
            "The output is real (`scripts/readme.py` runs the commands).",
        ]
    )
    choosing = choosing_table()
    if not args.write_docs:
        shown = (
            ("quickstart", quickstart),
            ("actions", actions),
            ("pages", pages),
            ("choosing", choosing),
            ("docs/CLIENTS.md", clients),
        )
        for title, text in shown:
            print(f"--- {title}\n{text}\n")
        return
    replace(README, "quickstart", quickstart)
    replace(README, "actions", actions)
    replace(README, "pages", pages)
    replace(README, "choosing", choosing)
    replace(CLIENTS, "clients", clients)
    # The replay writes under out/ (ignored by git); the page shows the plot from docs/.
    shutil.copyfile(out_dir / "replay-car.png", ROOT / "docs" / "replay-car.png")


if __name__ == "__main__":
    main()
