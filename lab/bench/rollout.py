"""``bench rollout``: safe rollout on car (issue 38 part 5): apprentice mode against a fixed baseline.

A stream of car's rows (shuffled, duplicated) goes through a real :class:`service.runtime.Runtime`
on the memory store: each decision is a ``predict`` with the request's ``baseline``, each reward the
click bit ``label == y`` sent back as feedback, and the runtime's own sweep (the one that promotes)
runs every ``check_every`` decisions. Two baselines: the majority label (``unacc``, right 70 % of
the time) and the oracle (the true label: no learner can beat it). Printed per learner, epsilon and
baseline over several seeds: the decisions until the automatic promotion, and the mean reward
served while in apprentice mode beside the baseline's own on the same decisions.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from lab.bench import benches, report
from lab.sim.datasets import load_dataset
from service.config import DEFAULT_LEARNER, ModelSpec, Settings
from service.runtime import Runtime
from service.store import MemoryStore

#: The learners of the table, (learner, params): the served default, which beats the majority
#: baseline, the default before issue 50 (C-OVA with its exploration floor), and C-OVA exploring
#: uniformly (epsilon = 1: a random label), which does not beat it.
GOOD: tuple[str, dict[str, Any]] = DEFAULT_LEARNER
OLD: tuple[str, dict[str, Any]] = ("cova", {"epsilon": 0.02})
UNIFORM: tuple[str, dict[str, Any]] = ("cova", {"epsilon": 1.0})


@dataclass(frozen=True)
class RolloutRun:
    """One simulated rollout.

    Attributes
    ----------
    promoted_at : int or None
        Decisions made before the model was found online (None: never promoted).
    served : float
        Mean reward of the decisions served in apprentice mode.
    baseline : float
        Mean reward the baseline would have had on those decisions (1 when it is the true label).
    decisions : int
        Decisions made in apprentice mode.
    report : dict
        The model's rollout evidence at the end (:meth:`service.rollout.Rollout.report`).
    """

    promoted_at: int | None
    served: float
    baseline: float
    decisions: int
    report: dict[str, Any]


async def _run(
    seed: int,
    system: tuple[str, dict[str, Any]],
    baseline: str,
    epsilon: float,
    n: int,
    min_decisions: int,
    check_every: int,
) -> RolloutRun:
    data = load_dataset("car")
    X, y = data.stream(seed, duplicate=-(-n // data.n), limit=n)
    majority = int(np.bincount(data.y).argmax())
    # the sweep runs only when called below: its background loop would promote at a time of its own
    settings = Settings(store="memory", decision_id_seed=seed, sweep_interval_seconds=3600)
    runtime = Runtime(MemoryStore(), settings)
    await runtime.start()
    try:
        spec = ModelSpec(
            n_features=data.d,
            n_labels=data.n_labels,
            learner=system[0],
            params=system[1],
            seed=seed,
            rollout="apprentice",
            apprentice_epsilon=epsilon,
            promote="auto",
            promote_min_decisions=min_decisions,
        )
        m = await runtime.create_model("car", spec)
        served, base = [], []
        promoted_at = None
        for t in range(n):
            b = majority if baseline == "majority" else int(y[t])
            p = await runtime.predict("car", X[t].tolist(), baseline=b)
            reward = p.decision.label == y[t]
            served.append(reward)
            base.append(b == y[t])
            _, applied = await runtime.feedback(p.decision_id, bool(reward), wait=True)
            if not applied:  # the next decision would come from an older model: not this benchmark
                raise RuntimeError(f"feedback {t} was not applied within wait_applied's timeout")
            if (t + 1) % check_every == 0:
                await runtime.sweep()
                if m.rollout.mode == "online":
                    promoted_at = t + 1
                    break
        # promoted: the evidence the promotion was decided on (the new epoch has none yet)
        evidence = m.rollout.report() if promoted_at is None else m.rollout.changed["evidence"]  # type: ignore[index]
        return RolloutRun(promoted_at, float(np.mean(served)), float(np.mean(base)), len(served), evidence)
    finally:
        await runtime.stop()


def simulate(
    seed: int,
    system: tuple[str, dict[str, Any]] | None = None,
    baseline: str = "majority",
    epsilon: float = 0.2,
    n: int = 5000,
    min_decisions: int = 1000,
    check_every: int = 50,
) -> RolloutRun:
    """One rollout of ``system`` (learner, params; default: the served default) against ``baseline``
    ("majority" or "oracle"), until promoted or ``n`` decisions."""
    return asyncio.run(_run(seed, system or GOOD, baseline, epsilon, n, min_decisions, check_every))


@benches.register("rollout")
def bench_rollout(quick: bool) -> str:
    """Decisions until promotion and the reward in apprentice mode, over seeds, per setting."""
    seeds = range(3) if quick else range(10)
    n = 3000 if quick else 8000
    default = f"{GOOD[0]} (the default)"
    settings = [(default, GOOD, "majority", eps) for eps in (0.1, 0.2, 0.3)] + [
        ("C-OVA epsilon=0.02 (the default before issue 50)", OLD, "majority", 0.2),
        ("C-OVA epsilon=1 (uniform)", UNIFORM, "majority", 0.2),
        (default, GOOD, "oracle", 0.2),
    ]
    rows = []
    for name, system, baseline, eps in settings:
        runs = [simulate(s, system, baseline, eps, n) for s in seeds]
        promoted = [r.promoted_at for r in runs if r.promoted_at is not None]
        until = f"{int(np.median(promoted)):,} ({min(promoted):,}-{max(promoted):,})" if promoted else "never"
        served = np.mean([r.served for r in runs])
        base = np.mean([r.baseline for r in runs])
        rows.append(
            [name, baseline, eps, f"{len(promoted)}/{len(runs)}", until, f"{served:.3f}", f"{base:.3f}",
             f"{served - base:+.3f}"]
        )  # fmt: skip
    flag = " --quick" if quick else ""
    header = ["learner", "baseline", "epsilon", "promoted", "decisions until promotion", "reward served"]
    header += ["baseline's reward", "gap"]
    return (
        "## Safe rollout: apprentice mode on car\n\n"
        f"`python -m service bench rollout{flag}`: car's rows shuffled and duplicated (seeds "
        f"{seeds.start}-{seeds.stop - 1}), at most {n:,} decisions each, through a real runtime on the "
        "memory store; the baseline is the majority label (`unacc`) or the true label (oracle); "
        "`promote: auto` with `promote_min_decisions` 1,000 at 95 %, checked every 50 decisions by the "
        "runtime's sweep. Decisions until promotion: median (range) over the promoted seeds. Reward: "
        "the mean click of the decisions served in apprentice mode, beside the baseline's own on the "
        "same decisions; their gap is epsilon times the learner's (at most epsilon).\n\n"
        + report.table(header, rows)
        + "\n\n"
        + report.machine()
        + "\n"
    )
