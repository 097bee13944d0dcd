"""Off-policy evaluation in the simulator, where the truth is known (issue 22, items 4-5).

The simulator knows every example's full label, so the true click rate of any policy on a data set
is known: exactly for a stationary policy (its pmf on every row), and by direct simulation for a
learning one. :func:`stationary_coverage` and :func:`replay_coverage` measure how often the 95 %
intervals of :mod:`service.ope` cover it (``tests/service/test_ope.py`` asserts on them);
:func:`worked_example` makes the table and plot of docs/OFFLINE_EVALUATION.md (command
``clickboost ope-example``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab.sim.datasets import load_dataset
from service import ope
from service.learners import make_learner
from service.learners.base import Learner


def log_from(
    X: np.ndarray, y: np.ndarray, pmfs: np.ndarray, rows: np.ndarray, rng: np.random.Generator
) -> ope.LoggedData:
    """A log of the stationary logging policy ``pmfs`` (one row per example) over ``rows``."""
    probs = pmfs[rows]
    actions = np.array([rng.choice(probs.shape[1], p=p) for p in probs])
    return ope.LoggedData(list(X[rows]), probs, actions, (actions == y[rows]).astype(float), X.shape[1])


def trained(
    name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray, seed: int, rounds: int
) -> Learner:
    """Learner ``name`` after ``rounds`` bandit rounds on random rows (then used frozen)."""
    rng = np.random.default_rng(seed)
    m = make_learner(name, X.shape[1], int(y.max()) + 1, params, seed=seed)
    for i in rng.integers(len(y), size=rounds):
        d = m.decide(X[i], rng)
        m.learn(X[i], d, d.label == y[i])
    return m


def stationary_coverage(runs: int = 100, n: int = 4000, dataset: str = "car") -> dict[str, Any]:
    """Coverage of IPS/SNIPS/DR intervals for three stationary targets (a frozen C-OVA, uniform, a
    constant label) over ``runs`` logs of ``n`` events of an ε-greedy logging policy (a Banditron
    with gamma 0.3 after 300 rounds). Returns the truths and the covered share per (policy, estimator)."""
    data = load_dataset(dataset)
    X, y, k = data.X, data.y, data.n_labels
    rng = np.random.default_rng(0)
    logger = trained("banditron", {"gamma": 0.3}, X, y, 0, 300)
    target = trained("cova", {}, X, y, 1, 3000)
    logging = np.array([logger.decide(x, rng).probs for x in X])
    targets = {
        "frozen cova": np.array([target.decide(x, rng).probs for x in X]),
        "uniform": np.full((len(y), k), 1 / k),
        "constant 0": np.eye(k)[np.zeros(len(y), dtype=int)],
    }
    truth = {name: float(p[np.arange(len(y)), y].mean()) for name, p in targets.items()}
    hits = {(name, est): 0 for name in targets for est in ("ips", "snips", "dr")}
    for run in range(runs):
        r = np.random.default_rng(1000 + run)
        rows = r.integers(len(y), size=n)
        res = ope.evaluate_stationary(
            log_from(X, y, logging, rows, r), {k_: v[rows] for k_, v in targets.items()}
        )
        for name, est in hits:
            e = res[name][est]
            hits[(name, est)] += e.low <= truth[name] <= e.high
    return {
        "runs": runs,
        "n": n,
        "truth": truth,
        "coverage": {f"{p}/{e}": h / runs for (p, e), h in hits.items()},
    }


def direct_click_rate(
    name: str, params: dict[str, Any], X: np.ndarray, y: np.ndarray, m: int, runs: int, seed: int = 10_000
) -> tuple[float, float]:
    """Mean and spread of learner ``name``'s click rate over its first ``m`` decisions on random
    rows, over ``runs`` direct simulations (the truth a replay estimates)."""
    rates = []
    for s in range(runs):
        r = np.random.default_rng(seed + s)
        learner = make_learner(name, X.shape[1], int(y.max()) + 1, params, seed=s)
        clicks = 0
        for i in r.integers(len(y), size=m):
            d = learner.decide(X[i], r)
            clicks += d.label == y[i]
            learner.learn(X[i], d, d.label == y[i])
        rates.append(clicks / m)
    return float(np.mean(rates)), float(np.std(rates, ddof=1))


def replay_coverage(runs: int = 100, m: int = 300, n: int = 1600, dataset: str = "car") -> dict[str, Any]:
    """Coverage of the replay interval (5 replays per log) of Banditron's click rate over its first
    ``m`` decisions, over ``runs`` uniformly logged logs of ``n`` events; truth from 400 direct runs."""
    data = load_dataset(dataset)
    X, y, k = data.X, data.y, data.n_labels
    truth, _ = direct_click_rate("banditron", {}, X, y, m, 400)
    hits, accepted = 0, []
    uniform = np.full((len(y), k), 1 / k)
    for run in range(runs):
        r = np.random.default_rng(run)
        log = log_from(X, y, uniform, r.integers(len(y), size=n), r)
        e = ope.replay(log, lambda s: make_learner("banditron", X.shape[1], k, seed=s), 5, 10 * run, m)
        accepted.append(e.n)
        hits += e.low <= truth <= e.high
    return {
        "runs": runs,
        "m": m,
        "truth": truth,
        "coverage": hits / runs,
        "accepted": (min(accepted), max(accepted)),
    }


@dataclass(frozen=True)
class Row:
    """One policy of the worked example."""

    policy: str
    estimator: str
    estimate: ope.Estimate
    truth: float
    seconds: float


#: The worked example's candidates (registered names and parameters; defaults otherwise).
CANDIDATES: Sequence[tuple[str, dict[str, Any]]] = (
    ("banditron", {}),
    ("cova", {}),
    ("banditboost", {}),
    ("adabandit", {}),
    ("banditbbm", {}),
)


def worked_example(
    dataset: str = "car",
    n: int = 20_000,
    gamma: float = 0.2,
    runs: int = 5,
    progress: Callable[[str], None] = print,
) -> tuple[list[Row], dict[str, Any]]:
    """A model (Banditron, ``gamma``) serves ``n`` visits of ``dataset`` and logs them; then every
    candidate is evaluated on that log (replay) and uniform / constant by IPS/SNIPS/DR; each truth
    by direct simulation (learning) or exactly (stationary)."""
    data = load_dataset(dataset)
    X, y, k = data.X, data.y, data.n_labels
    rng = np.random.default_rng(0)
    served = make_learner("banditron", X.shape[1], k, {"gamma": gamma}, seed=0)
    rows = rng.integers(len(y), size=n)
    probs, actions = np.empty((n, k)), np.empty(n, dtype=np.int64)
    for t, i in enumerate(rows):
        d = served.decide(X[i], rng)
        probs[t], actions[t] = d.probs, d.label
        served.learn(X[i], d, d.label == y[i])
    log = ope.LoggedData(list(X[rows]), probs, actions, (actions == y[rows]).astype(float), X.shape[1])
    info = {"dataset": dataset, "n": n, "k": k, "gamma": gamma, "logged": float(log.rewards.mean())}
    out = []
    for name, params in CANDIDATES:
        start = time.process_time()
        e = ope.replay(
            log, lambda s, name=name, params=params: make_learner(name, X.shape[1], k, params, seed=s), runs
        )
        spent = time.process_time() - start
        truth, _ = direct_click_rate(name, params, X, y, e.n, 20)
        out.append(Row(name, "replay", e, truth, spent))
        progress(
            f"{name}: replay {e.value:.4f} [{e.low:.4f}, {e.high:.4f}] on {e.n} accepted, direct {truth:.4f}"
        )
    stationary = {"uniform": np.full((n, k), 1 / k), "constant 0": np.eye(k)[np.zeros(n, dtype=int)]}
    truths = {"uniform": 1 / k, "constant 0": float((y == 0).mean())}
    start = time.process_time()
    res = ope.evaluate_stationary(log, stationary)
    spent = time.process_time() - start
    for name, by in res.items():
        for est, e in by.items():
            out.append(Row(name, est, e, truths[name], spent))
    return out, info


def render(
    rows: list[Row], info: dict[str, Any], stationary: dict[str, Any], replayed: dict[str, Any], plot: str
) -> str:
    """Markdown of the generated part of docs/OFFLINE_EVALUATION.md."""
    lines = [
        f"A Banditron (gamma {info['gamma']}) served {info['n']:,} visits of {info['dataset']} "
        f"(K={info['k']}) and logged them; its click rate was {info['logged']:.4f}. Each learner below "
        "(default parameters) was replayed over that log (5 runs) and, for the truth, simulated directly "
        "on the same data set for as many decisions as the replay accepted (20 runs); uniform and "
        "constant policies by IPS, SNIPS and DR, their truth exact.",
        "",
        "| policy | estimator | estimate | 95 % interval | events | ESS | truth | covered | CPU s |",
        "|---|---|---:|---|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        e = r.estimate
        cov = "yes" if e.low <= r.truth <= e.high else "**no**"
        ess = f"{e.ess:,.1f}" + (" **cannot tell**" if e.warning else "")
        lines.append(
            f"| {r.policy} | {r.estimator} | {e.value:.4f} | [{e.low:.4f}, {e.high:.4f}] | {e.n:,} | "
            f"{ess} | {r.truth:.4f} | {cov} | {r.seconds:.1f} |"
        )
    cov = ", ".join(f"{k} {v:.0%}" for k, v in stationary["coverage"].items())
    weak = sum(r.estimate.warning is not None for r in rows)
    told = (
        f"{weak} of the {len(rows)} estimates rest on fewer and carry the warning that they cannot tell "
        "(marked **cannot tell**)"
        if weak
        else "none rests on fewer, so none carries the warning that it cannot tell"
    )
    lines += [
        "",
        f"ESS: the effective sample size of each estimate (below {ope.MIN_ESS} it cannot tell); {told}.",
        "",
        f"![estimates and truths]({plot})",
        "",
        "**Coverage** (the validation of `tests/service/test_ope.py`, recomputed here): stationary "
        f"policies over {stationary['runs']} logs of {stationary['n']:,} events of an ε-greedy logger "
        f"on car: {cov}. Replay of Banditron over {replayed['runs']} uniformly logged logs (its click "
        f"rate over its first {replayed['m']} decisions, truth {replayed['truth']:.4f} from 400 direct "
        f"runs): {replayed['coverage']:.0%}.",
    ]
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    """Estimates with intervals beside the truths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, r in enumerate(rows):
        e = r.estimate
        ax.errorbar(i, e.value, yerr=[[e.value - e.low], [e.high - e.value]], fmt="o", color="C0", capsize=3)
        ax.plot(i, r.truth, "x", color="C3", markersize=8)
    ax.set_xticks(range(len(rows)), [f"{r.policy}\n{r.estimator}" for r in rows], fontsize=7)
    ax.set_ylabel("click rate")
    ax.set_title("off-policy estimates (o, 95 % interval) and truths (x)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
