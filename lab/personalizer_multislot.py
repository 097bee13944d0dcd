"""Azure Personalizer's multi-slot quickstart loop against clickboost (issue 53, item 3).

``python -m lab.personalizer_multislot`` starts a server (``python -m service serve``, memory store,
an API key, decision ids seeded) with an action-feature model as its default model and runs the
loop of Personalizer's multi-slot quickstart with the official client ``azure-ai-personalizer``
(installed by the ``dev`` extra), unmodified: each round a context (a time of day and a device) is
ranked for the quickstart's two slots, ``BigHeroPosition`` and ``SmallSidebar``, over its four
products, and the answer for each slot is sent back as that slot's reward, 1 for "yes" and 0 for
"no", in one multi-slot reward call. The loop runs twice, on a fresh server each time: with the
products' price a string, as the quickstart's C# version (the one on the client library) sends it,
and a number, as its Python and Node.js versions do. It prints the reward of each slot and of the
page over the last 20 % of the rounds beside a uniformly random page's (computed exactly from the
same rule), the quickstart's baselines' and the best page's, and writes them to the section
``personalizer-multislot`` of PERSONALIZER.md (out/docs/, or docs/ with ``--write-docs``).

The products (their ids and features), the slots (their features, ``excludedActions`` and
``baselineAction``), the context features and the reward values are those of the quickstart
(``multislot-quickstart`` in Azure-Samples' cognitive-services-quickstart-code, the same in its
Python, C# and Node.js versions). The quickstart asks a person at the keyboard, slot by slot, "Is
this correct? (y/n)"; here a simulated person answers (:func:`answer`), by a rule of ours that
depends on the context and the slot: the person wants clothing in the morning, sports gear or
clothing in the afternoon, electronics in the evening, a console or clothing at night; on a phone
buys only what is on sale; and finds the large hero slot right for items of $70 or more, the small
sidebar for items of $200 or less.
"""

from __future__ import annotations

import itertools
import random
import sys
import time
from collections.abc import Sequence
from typing import Any

from lab import docs
from lab.personalizer_quickstart import KEY, loop_parser, server
from lab.repro import write_section

SECTION = "personalizer-multislot"
PAGE = "PERSONALIZER.md"
TIMES = ("morning", "afternoon", "evening", "night")
DEVICES = ("mobile", "tablet", "desktop")
#: The quickstart's products: id -> (onSale, price, category), sent as its features.
PRODUCTS: dict[str, tuple[str, int, str]] = {
    "Red-Polo-Shirt-432": ("true", 20, "Clothing"),
    "Tennis-Racket-133": ("false", 70, "Sports"),
    "31-Inch-Monitor-771": ("true", 200, "Electronics"),
    "XBox-Series X-117": ("false", 499, "Electronics"),
}
#: The quickstart's slots, in page order.
SLOTS: list[dict[str, Any]] = [
    {
        "id": "BigHeroPosition",
        "features": [{"size": "large", "position": "left"}],
        "excludedActions": ["31-Inch-Monitor-771"],
        "baselineAction": "Red-Polo-Shirt-432",
    },
    {
        "id": "SmallSidebar",
        "features": [{"size": "small", "position": "right"}],
        "excludedActions": ["Tennis-Racket-133"],
        "baselineAction": "XBox-Series X-117",
    },
]
#: What the simulated person is after at each time of day (categories).
WANTS = {
    "morning": {"Clothing"},
    "afternoon": {"Sports", "Clothing"},
    "evening": {"Electronics"},
    "night": {"Electronics", "Clothing"},
}


#: The two forms of the products' ``price`` in the quickstart: a string in its C# version (which
#: uses the client library, ``Azure.AI.Personalizer``), a number in its Python and Node.js ones.
PRICES = {"text": "price a string (C#)", "number": "price a number (Python)"}


def actions(price: str = "text") -> list[dict[str, Any]]:
    """The quickstart's ``get_actions()``, the price as :data:`PRICES` ``price`` says."""
    return [
        {
            "id": i,
            "features": [
                {"onSale": sale, "price": str(value) if price == "text" else value, "category": category}
            ],
        }
        for i, (sale, value, category) in PRODUCTS.items()
    ]


def answer(context: tuple[str, str], slot: str, action_id: str) -> float:
    """The simulated person's answer to "Is this correct? (y/n)" for ``action_id`` in ``slot`` at
    ``context`` (time, device), as the quickstart's reward: 1.0 for yes, 0.0 for no (module
    docstring: the category wanted at that time, on sale on a phone, the slot's price range)."""
    time_of_day, device = context
    on_sale, price, category = PRODUCTS[action_id]
    fits = price >= 70 if slot == "BigHeroPosition" else price <= 200
    wanted = category in WANTS[time_of_day] and (device != "mobile" or on_sale == "true")
    return 1.0 if wanted and fits else 0.0


def _eligible(slot: dict[str, Any], taken: Sequence[str]) -> list[str]:
    """The slot's actions: all less its exclusions and the earlier slots' choices."""
    return [a for a in PRODUCTS if a not in slot["excludedActions"] and a not in taken]


def expected(policy: str) -> list[float]:
    """Each slot's exact expected reward over uniform contexts: ``"random"`` (each slot uniformly
    among the actions its exclusions and the earlier slots left), ``"baseline"`` (the slots'
    ``baselineAction``) or ``"best"`` (the page of most yeses for each context)."""
    contexts = list(itertools.product(TIMES, DEVICES))
    totals = [0.0] * len(SLOTS)
    for context in contexts:
        if policy == "baseline":
            page = [answer(context, s["id"], s["baselineAction"]) for s in SLOTS]
        elif policy == "best":
            page = max(_pages(context), key=sum)
        else:
            page = _random_page(context, 0, [])
        totals = [t + r for t, r in zip(totals, page, strict=True)]
    return [t / len(contexts) for t in totals]


def _pages(context: tuple[str, str], taken: list[str] | None = None) -> list[list[float]]:
    """Every page of distinct actions the slots allow, as its slots' rewards."""
    taken = taken or []
    s = len(taken)
    if s == len(SLOTS):
        return [[answer(context, slot["id"], a) for slot, a in zip(SLOTS, taken, strict=True)]]
    return [page for a in _eligible(SLOTS[s], taken) for page in _pages(context, [*taken, a])]


def _random_page(context: tuple[str, str], s: int, taken: list[str]) -> list[float]:
    """Expected rewards of slots ``s..`` of the uniformly random page given the earlier choices."""
    if s == len(SLOTS):
        return []
    eligible = _eligible(SLOTS[s], taken)
    out = [0.0] * (len(SLOTS) - s)
    for a in eligible:
        page = [answer(context, SLOTS[s]["id"], a), *_random_page(context, s + 1, [*taken, a])]
        out = [o + r / len(eligible) for o, r in zip(out, page, strict=True)]
    return out


def run_loop(endpoint: str, key: str, rounds: int, seed: int, price: str = "text") -> list[list[float]]:
    """The quickstart's loop with ``azure-ai-personalizer``: ``rounds`` multi-slot rank -> reward
    cycles (the products' price as :data:`PRICES` ``price`` says); each round's rewards, in slot
    order."""
    from azure.ai.personalizer import PersonalizerClient
    from azure.core.credentials import AzureKeyCredential

    client = PersonalizerClient(endpoint, AzureKeyCredential(key))
    rng = random.Random(seed)
    out = []
    for _ in range(rounds):
        context = (rng.choice(TIMES), rng.choice(DEVICES))
        request = {
            "contextFeatures": [{"time": context[0]}, {"device": context[1]}],
            "actions": actions(price),
            "slots": SLOTS,
            "deferActivation": False,
        }
        response = client.rank_multi_slot(request)
        rewards = {s["id"]: answer(context, s["id"], s["rewardActionId"]) for s in response["slots"]}
        body = {"reward": [{"slotId": slot, "value": value} for slot, value in rewards.items()]}
        client.reward_multi_slot(response["eventId"], body)
        out.append([rewards[s["id"]] for s in SLOTS])
    return out


def _with_page(per_slot: list[float]) -> list[float]:
    return [*per_slot, sum(per_slot)]


def report(runs: dict[str, list[list[float]]]) -> dict[str, list[float]]:
    """Per slot, then the page (their sum): each run's (by price form) last 20 % of the rounds and
    all of them, then the exact expectations of the random page, the baselines and the best page."""
    out = {}
    for price, rewards in runs.items():
        tail = rewards[len(rewards) - len(rewards) // 5 :]
        for key, rows in (("last_20pct", tail), ("all", rewards)):
            out[f"{key} {price}"] = _with_page([sum(col) / len(rows) for col in zip(*rows, strict=True)])
    for policy in ("random", "baseline", "best"):
        out[policy] = _with_page(expected(policy))
    return out


LABELS = {
    "last_20pct": "clickboost, last {tail:,} rounds (20 %), {price}",
    "all": "clickboost, all {rounds:,} rounds, {price}",
    "random": "uniformly random page (expected)",
    "baseline": "the slots' baselineAction (expected)",
    "best": "best page for each context (expected)",
}


def markdown(figures: dict[str, list[float]], rounds: int, seed: int) -> str:
    """The section written to PERSONALIZER.md: the command, then the table it prints."""
    header = ["reward per round", *(s["id"] for s in SLOTS), "page"]
    lines = [
        f"`python -m lab.personalizer_multislot --rounds {rounds} --seed {seed}`:",
        "",
        "| " + " | ".join(header) + " |",
        "|---" + "|---:" * (len(header) - 1) + "|",
    ]
    for key, values in figures.items():
        what, _, price = key.partition(" ")
        text = LABELS[what].format(tail=rounds // 5, rounds=rounds, price=PRICES.get(price, ""))
        lines.append("| " + " | ".join([text, *(f"{v:.3f}" for v in values)]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = loop_parser("python -m lab.personalizer_multislot", __doc__, "contexts and decision ids", False)
    docs.add_out_arguments(parser, PAGE)
    args = parser.parse_args(argv)
    try:
        import azure.ai.personalizer  # noqa: F401
    except ImportError:
        print("needs azure-ai-personalizer: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    runs = {}
    for price in PRICES:  # a fresh server (and model) for each
        with server(args.seed, actions=True) as url:
            started = time.monotonic()
            runs[price] = run_loop(url, KEY, args.rounds, args.seed, price)
            seconds = time.monotonic() - started
        print(f"multi-slot loop, {PRICES[price]}: {args.rounds:,} rounds (seed {args.seed}), {seconds:.1f} s")
    text = markdown(report(runs), args.rounds, args.seed)
    print(text)
    out = docs.out_dir(args)
    page = out / PAGE
    if not page.exists() and (docs.DOCS / PAGE).exists():  # out/docs/ starts from the committed page
        out.mkdir(parents=True, exist_ok=True)
        page.write_text((docs.DOCS / PAGE).read_text())
    write_section(SECTION, text, page)
    print(f"written to {page}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
