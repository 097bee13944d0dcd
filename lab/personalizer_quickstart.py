"""Azure Personalizer's Python quickstart loop against clickboost (issue 38, part 7).

``python -m lab.personalizer_quickstart`` starts a server (``python -m service serve``, memory
store, an API key, decision ids seeded) with the quickstart's grocery model as its default model,
and runs the quickstart's loop with its own client, ``azure-cognitiveservices-personalizer``
(installed by the ``dev`` extra), unmodified: each round a simulated user (Bill, Satya or Amy) with
a random context is ranked the five products, the chosen one is scored by that user's preference and
the score sent as the reward. It prints the reward rate over the last 20 % of the rounds beside a
uniformly random choice's (computed exactly from the same preferences) and the best possible.
``--endpoint URL --key KEY`` runs the loop against a server already running instead (its default
model, or ``URL`` ending in ``/loops/NAME``, must have the labels of :data:`ACTIONS` and hash named
features).

The users, products, context and preferences are those of the quickstart
(``personalizer-quickstart.py`` in Azure-Samples' cognitive-services-quickstart-code), with one
change of form: Amy's dietary preferences are a list, not a Python set (JSON has no sets; the
quickstart's set did not serialise).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from lab.cluster import START_TIMEOUT, free_port

ROUNDS = 2000
SEED = 0
KEY = "quickstart"
ADMIN_KEY = "quickstart-admin"  # what a bench reads the model's config with
MODEL = "grocery"
LOCATIONS = ("west", "east", "midwest")
TIMES = ("morning", "afternoon", "evening")
APPS = ("edge", "safari", "edge_mobile", "mobile_app")


def _product(company: str, qty: int, kind: tuple[str, str], price: int, diet: str) -> dict[str, Any]:
    flags = ("vegan", "low_carb", "high_protein", "vegetarian", "low_fat", "low_sodium")
    return {
        "brand_info": {"company": company},
        "attributes": {"qty": qty, kind[0]: kind[1], "price": price},
        "dietary_attributes": {flag: bit == "1" for flag, bit in zip(flags, diet, strict=True)},
    }


#: The quickstart's products and their features (dietary bits in the order of ``_product``'s flags).
ACTIONS: dict[str, dict[str, Any]] = {
    "pasta": _product("pasta_inc", 1, ("cuisine", "italian"), 12, "000011"),
    "bbq": _product("ambisco", 2, ("category", "bbq"), 20, "011000"),
    "bao": _product("bao_and_co", 4, ("category", "chinese"), 8, "011010"),
    "hummus": _product("garbanzo_inc", 1, ("category", "breakfast"), 5, "101100"),
    "veg_platter": _product("farm_fresh", 1, ("category", "produce"), 7, "110111"),
}
#: The quickstart's users.
USERS: dict[str, dict[str, Any]] = {
    "Bill": {"dietary_preferences": "low_carb", "avg_order_price": "0-20", "browser_type": "edge"},
    "Satya": {"dietary_preferences": "low_sodium", "avg_order_price": "201+", "browser_type": "safari"},
    "Amy": {
        "dietary_preferences": ["vegan", "vegetarian"],
        "avg_order_price": "21-50",
        "browser_type": "edge",
    },
}
MODELS_TOML = f"""[models.{MODEL}]
hashing_bits = 12
labels = {list(ACTIONS)!r}
""".replace("'", '"')
#: The same model as an action-feature model: the products are scored from their features (numeric
#: ``qty`` and ``price`` included) crossed with the context, not learned as fixed labels.
ACTIONS_TOML = f"""[models.{MODEL}]
actions = "features"
hashing_bits = 16
"""


def get_context(user: str, rng: random.Random) -> list[dict[str, Any]]:
    """The quickstart's context: the user's profile, a location, a time of day, an application."""
    return [
        USERS[user],
        {"location": rng.choice(LOCATIONS)},
        {"time_of_day": rng.choice(TIMES)},
        {"application_type": rng.choice(APPS)},
    ]


def get_reward_score(user: str, action_id: str, context: list[dict[str, Any]]) -> float:
    """The quickstart's preferences: Bill buys below $10 away from the midwest and low-carb in the
    midwest, Satya buys low-sodium, Amy buys vegan or vegetarian."""
    action = ACTIONS[action_id]
    diet = action["dietary_attributes"]
    if user == "Bill":
        if context[1]["location"] != "midwest":
            return 1.0 if action["attributes"]["price"] < 10 else 0.0
        return 1.0 if diet["low_carb"] else 0.0
    if user == "Satya":
        return 1.0 if diet["low_sodium"] else 0.0
    return 1.0 if diet["vegan"] or diet["vegetarian"] else 0.0


def expected_rate(choose_best: bool) -> float:
    """The expected reward of a uniformly random product (or of the best one for each context),
    over the quickstart's uniform users and contexts; only the location matters to the scores."""
    total = 0.0
    for user, location in itertools.product(USERS, LOCATIONS):
        context = [USERS[user], {"location": location}]
        scores = [get_reward_score(user, a, context) for a in ACTIONS]
        total += max(scores) if choose_best else sum(scores) / len(scores)
    return total / (len(USERS) * len(LOCATIONS))


def run_loop(endpoint: str, key: str, rounds: int, seed: int) -> list[float]:
    """The quickstart's loop with its client: ``rounds`` rank -> reward cycles; the rewards."""
    from azure.cognitiveservices.personalizer import PersonalizerClient
    from azure.cognitiveservices.personalizer.models import RankableAction, RankRequest
    from msrest.authentication import CognitiveServicesCredentials

    client = PersonalizerClient(endpoint, CognitiveServicesCredentials(key))
    actions = [RankableAction(id=action_id, features=[feat]) for action_id, feat in ACTIONS.items()]
    rng = random.Random(seed)
    rewards = []
    for _ in range(rounds):
        user = rng.choice(list(USERS))
        context = get_context(user, rng)
        response = client.rank(rank_request=RankRequest(actions=actions, context_features=context))
        score = get_reward_score(user, response.reward_action_id, context)
        client.events.reward(event_id=response.event_id, value=score)
        rewards.append(score)
    return rewards


@contextlib.contextmanager
def server(seed: int, actions: bool = False) -> Iterator[str]:
    """``python -m service serve`` on a free loopback port with the grocery model as its default
    model (memory store, key :data:`KEY`, decision ids seeded by ``seed``; ``actions``: the
    action-feature model of :data:`ACTIONS_TOML`); yields its URL."""
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models.toml"
        models.write_text(ACTIONS_TOML if actions else MODELS_TOML)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")}
        env.update(
            CLICKBOOST_STORE="memory",
            CLICKBOOST_CONFIG_FILE=str(models),
            CLICKBOOST_DEFAULT_MODEL=MODEL,
            CLICKBOOST_API_KEY=KEY,
            CLICKBOOST_ADMIN_KEY=ADMIN_KEY,
            CLICKBOOST_DECISION_ID_SEED=str(seed),
        )
        port = free_port()
        command = [sys.executable, "-m", "service", "serve", "--port", str(port), "--log-level", "warning"]
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not _ready(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    err = proc.communicate()[1].decode(errors="replace")
                    raise RuntimeError(f"the server did not start in {START_TIMEOUT:g} s:\n{err[-3000:]}")
                time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def report(rewards: list[float]) -> dict[str, float]:
    """The figures printed: reward rates of the last 20 % of rounds, of all, of random and best."""
    tail = rewards[len(rewards) - len(rewards) // 5 :]
    return {
        "last_20pct": sum(tail) / len(tail),
        "all": sum(rewards) / len(rewards),
        "random": expected_rate(choose_best=False),
        "best": expected_rate(choose_best=True),
    }


def loop_parser(prog: str, doc: str | None, seeded: str, endpoint: bool = True) -> argparse.ArgumentParser:
    """The arguments of a quickstart loop command: ``--rounds``, ``--seed`` (of ``seeded``) and with
    ``endpoint`` ``--endpoint`` and ``--key``; the description is the first paragraph of ``doc``."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0] if doc else None)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rank -> reward rounds ({ROUNDS:,})")
    parser.add_argument("--seed", type=int, default=SEED, help=seeded)
    if endpoint:
        parser.add_argument("--endpoint", help="a running server (default: start one)")
        parser.add_argument("--key", default=KEY, help="its API key (with --endpoint)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = loop_parser("python -m lab.personalizer_quickstart", __doc__, "users, contexts and decision ids")
    parser.add_argument(
        "--actions", action="store_true", help="the model scores the products' features (an action model)"
    )
    args = parser.parse_args(argv)
    try:
        import azure.cognitiveservices.personalizer  # noqa: F401
    except ImportError:
        print("needs azure-cognitiveservices-personalizer: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    with contextlib.nullcontext(args.endpoint) if args.endpoint else server(args.seed, args.actions) as url:
        started = time.monotonic()
        rewards = run_loop(url, args.key, args.rounds, args.seed)
        seconds = time.monotonic() - started
    figures = report(rewards)
    tail = len(rewards) // 5
    print(f"Personalizer quickstart loop, {len(rewards):,} rounds (seed {args.seed}), {seconds:.1f} s")
    print(f"reward rate, last {tail:,} rounds (20 %): {figures['last_20pct']:.3f}")
    print(f"reward rate, all rounds:                  {figures['all']:.3f}")
    print(f"uniformly random product (expected):      {figures['random']:.3f}")
    print(f"best product for each context:            {figures['best']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
