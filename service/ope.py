"""Off-policy evaluation: what another policy would have earned on logged traffic (issue 22).

A decision log holds, per decision, the context ``x_i``, the logging policy's pmf ``p_i`` (the
model's ``probs``), the shown label ``a_i`` and the reward ``r_i`` in {0, 1} (click). For a target
policy ``pi`` (its pmf ``pi_i`` on each logged context) the value ``V(pi) = E_x E_{a ~ pi(x)} r(x, a)``
(its click rate) is estimated by

* **IPS** (inverse propensity scoring; Horvitz & Thompson 1952): ``mean_i w_i r_i`` with
  ``w_i = pi_i(a_i) / p_i(a_i)``; unbiased when ``p_i(a) > 0`` wherever ``pi_i(a) > 0``;
* **SNIPS** (self-normalised IPS; Swaminathan & Joachims 2015): ``sum_i w_i r_i / sum_i w_i``;
  biased, usually far lower variance;
* **DR** (doubly robust; Dudík, Langford & Li 2011): ``mean_i [sum_a pi_i(a) q(x_i, a) +
  w_i (r_i - q(x_i, a_i))]`` with a direct-method reward model ``q`` fitted by cross-fitting
  (``q`` of fold k trained on the other folds only, so no event is scored by a model it trained);

each with a 95 % confidence interval by the normal approximation of the estimator's influence terms
(the mean of i.i.d. terms ``mean ± 1.96 s / sqrt(n)``; for SNIPS the delta method, terms
``w_i (r_i - V) / mean(w)``). These are the estimators of Open Bandit Pipeline
(``InverseProbabilityWeighting``, ``SelfNormalizedInverseProbabilityWeighting``, ``DoublyRobust``),
whose intervals are bootstrap ones; the normal ones are cheaper and, on the validation of
``tests/service/test_ope.py``, cover the truth as often as they should.

**Learning policies** (a learner that would have learned from the traffic it served) are evaluated
by rejection-sampling replay (Li, Chu, Langford & Wang, WSDM 2011; Vowpal Wabbit's
``--explore_eval``): the log is read in order; at each event the candidate decides on ``x_i`` with
its own generator; the event is *accepted* when the candidate's sampled label equals ``a_i`` and a
uniform draw is below ``c / p_i(a_i)``, with ``c = min_i p_i(a_i)``; an accepted event is the
candidate's own decision, so it learns from it (``learn(x_i, its decision, r_i)``, no change to
the learner contract) and its reward counts. Each event is accepted with probability
``sum_a p_i(a) pi_t(a) c / p_i(a) = c`` whatever the context and the candidate, so the accepted
events are a uniform thinning of the candidate's own interaction: their click rate estimates the
candidate's. The replay runs several times (other seeds: other learning paths, other accepted
events) and its interval is a prediction interval from the spread between runs (:func:`replay`).
The price is the accepted count, about ``c n``: a log of an ε-greedy policy over K labels
keeps about ``ε/K`` of its events, and a log without exploration (``p = 1`` for the shown label:
C-OVA) supports no other policy at all.

**Action-feature logs** (issue 39; ours). A decision of a model with ``"actions": "features"``
chose among the candidates its request carried, so the number of labels varies per decision and a
label index names a different item in each. The log is read with every record's candidates as an
:class:`~service.actions.ActionInput` (the context and each candidate's hashed features, as the
model saw them); the pmfs are padded with zeros to the longest candidate list and ``eligible``
marks, per record, the candidates it had (and allowed), so IPS, SNIPS, ``uniform`` (over each
record's candidates) and the replay run unchanged. Fixed policies that make sense for candidate
sets: ``first`` (the first allowed candidate of each request, as a page shows them) and
``baseline`` (the caller's own choice, logged with the decision). ``constant:K`` names a fixed label
and is refused; a learner replayed or a ``model:NAME`` snapshot must be an action-feature learner.
DR is left out: its reward model learns one regression per label index, meaningless when indices
name other items per record.

**Catalog decisions** (issue 54): their record keeps the chosen item alone, with the probability
it was drawn with among every candidate (:func:`catalog_record`); another policy's probability of
that item needs every candidate, which the model's catalog rebuilds from its history
(:mod:`service.catalog_replay`). Given the catalog (the evaluation jobs pass the model's), they are
weighed by IPS and SNIPS with the other decisions, each on its shown item
(:mod:`service.catalog_ope`); those that cannot be rebuilt, and all of them without the catalog
(``clickboost evaluate`` on a file), are left out and counted (``catalog_skipped``). Learners are
not replayed on them.

**When an estimate cannot tell** (issue 37). Every estimate carries its *effective sample size*:
for importance weights ``w`` (IPS, SNIPS, DR) Kish's ``ESS = (sum w)^2 / sum w^2``, the number of
equally weighted events that would give the same variance (``n`` when the target is the logging
policy, far fewer when a few heavy weights carry the sum); for a replay the number of events it
matched (accepted). Below :data:`MIN_ESS` the estimate has a ``warning`` saying it cannot tell.
Intervals are clipped to the reward range [0, 1], where every click rate lies; the value is the
estimator's own (IPS on a few heavy weights can exceed 1, with a warning beside it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from service.actions import ActionInput
from service.catalog import Catalog
from service.catalog_ope import CatalogLog, CatalogWeights
from service.features import SparseVector
from service.learners.base import Decision, Learner, learners, make_learner

__all__ = [
    "MIN_ESS",
    "Estimate",
    "EvaluationError",
    "LoggedData",
    "baseline_pmfs",
    "catalog_record",
    "dm_cross_fit",
    "dr",
    "effective_sample_size",
    "evaluate",
    "evaluate_stationary",
    "first_pmfs",
    "ips",
    "parse_policy",
    "read_log",
    "replay",
    "replay_once",
    "snips",
]

Z95 = 1.959963984540054  # the 97.5 % quantile of the standard normal

#: Below 100 effective events an estimate cannot tell: the 95 % interval of a click rate near 0.5
#: is then at least ±0.1 wide (1.96 sqrt(0.25 / 100)), wider than the differences between the
#: policies one compares, and the normal approximation behind it rests on a handful of heavy
#: weights (issue 37's example: learners judged on 21-23 events, an IPS upper bound of 1.08).
MIN_ESS = 100


class EvaluationError(ValueError):
    """An evaluation that cannot run (a policy that does not parse or fit the log, a log that cannot
    be read); the message says why."""


@dataclass(frozen=True)
class LoggedData:
    """Logged decisions, in the order they were made.

    Attributes
    ----------
    x : list of ndarray or SparseVector
        Contexts as a learner takes them.
    probs : ndarray of shape (n, K)
        The logging policy's pmf of each decision.
    actions : ndarray of shape (n,), int
        Shown labels.
    rewards : ndarray of shape (n,), float
        1.0 for a click, 0.0 otherwise.
    dim : int
        Dimension of the contexts.
    eligible : ndarray of shape (n, K), bool, or None
        The labels each request allowed (``eligible`` of the records); None: every label always.
        A target policy is evaluated restricted to each record's set: a model decides among them,
        ``uniform`` is uniform over them, and the replay's candidate decides among them. For an
        action-feature log, the candidates each record had (and allowed), ``K`` the most of them.
    baselines : ndarray of shape (n,), int, or None
        The caller's ``baseline`` label of each record (-1 where it gave none); None: no record has one.
    catalog : CatalogLog or None
        The catalog decisions (issue 54), kept apart: weighed on their shown item only
        (:mod:`service.catalog_ope`); None: the log has none.
    """

    x: list[np.ndarray | SparseVector | ActionInput]
    probs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    dim: int
    eligible: np.ndarray | None = None
    baselines: np.ndarray | None = None
    catalog: CatalogLog | None = None

    def mask(self, i: int) -> np.ndarray | None:
        """Record ``i``'s eligible labels (None: all); an action-feature record's, over its own
        candidates."""
        if self.eligible is None:
            return None
        x = self.x[i]
        return self.eligible[i, : x.n] if isinstance(x, ActionInput) else self.eligible[i]

    @property
    def candidates(self) -> bool:
        """Whether the log is an action-feature model's (candidates vary per record)."""
        return (bool(self.x) and isinstance(self.x[0], ActionInput)) or self.catalog is not None

    @property
    def n(self) -> int:
        return int(self.actions.size)

    @property
    def n_labels(self) -> int:
        return int(self.probs.shape[1])

    @property
    def propensities(self) -> np.ndarray:
        """``p_i(a_i)``."""
        return self.probs[np.arange(self.n), self.actions]

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], catalog: Catalog | None = None) -> LoggedData:
        """From decision-log records (``service.decision_log`` JSON lines): those with a reward
        (click or no click, or expired with a default reward); pending and dropped ones are left out,
        and so are the slot records of pages (issue 53), which :mod:`service.slot_ope` evaluates.

        ``features`` is a dense list or ``{"idx": [...], "val": [...], "dim": D}``; an action-feature
        record's ``actions`` are its candidates (``{"id", "idx", "val"}`` each, their hashed features).
        Catalog decisions go to :attr:`catalog`, to be rebuilt from ``catalog`` (the model's).
        """
        xs: list[np.ndarray | SparseVector | ActionInput] = []
        probs, actions, rewards, sets, baselines = [], [], [], [], []
        dim = 0
        catalogued: list[Mapping[str, Any]] = []
        for rec in records:
            if rec.get("reward") is None or rec.get("page") is not None:  # pages: service.slot_ope
                continue
            if catalog_record(rec):  # its other candidates are in the catalog (module docstring)
                catalogued.append(rec)
                continue
            f = rec["features"]
            x: np.ndarray | SparseVector | ActionInput
            if isinstance(f, Mapping):
                x = SparseVector(
                    np.asarray(f["idx"], dtype=np.int64),
                    np.asarray(f["val"], dtype=np.float64),
                    int(f["dim"]),
                )
                dim = int(f["dim"])
            else:
                x = np.asarray(f, dtype=np.float64)
                dim = x.size
            if rec.get("actions") is not None:
                x = _action_input(x, rec["actions"])
            if xs and isinstance(x, ActionInput) != isinstance(xs[0], ActionInput):
                raise ValueError("the log mixes decisions with candidate actions and with fixed labels")
            xs.append(x)
            probs.append(rec["probs"])
            actions.append(int(rec["label_index"]))
            rewards.append(float(rec["reward"]))
            sets.append(rec.get("eligible"))
            baselines.append(-1 if rec.get("baseline") is None else int(rec["baseline"]))
        part = CatalogLog(catalogued, catalog) if catalogued else None
        if not xs:
            if part is not None and catalog is not None:
                dim = 1 << catalog.hashing_bits
                return cls([], np.zeros((0, 1)), np.zeros(0, np.int64), np.zeros(0), dim, catalog=part)
            why = (
                f" ({len(catalogued)} catalog decisions, which keep their chosen item only: the model's "
                "catalog rebuilds them, POST /models/{name}/evaluations)"
                if catalogued
                else ""
            )
            raise ValueError(f"no logged decision with a known reward that can be evaluated{why}")
        k = max(len(p) for p in probs)
        varying = isinstance(xs[0], ActionInput)
        eligible = None
        if varying or any(e is not None for e in sets):
            eligible = np.zeros((len(xs), k), dtype=bool)
            for i, e in enumerate(sets):
                eligible[i, : len(probs[i])] = True
                if e is not None:
                    eligible[i] &= np.isin(np.arange(k), e)
        pmfs = np.zeros((len(xs), k))
        for i, p in enumerate(probs):
            pmfs[i, : len(p)] = p
        return cls(
            xs,
            pmfs,
            np.asarray(actions),
            np.asarray(rewards),
            dim,
            eligible,
            np.asarray(baselines) if any(b >= 0 for b in baselines) else None,
            part,
        )


def catalog_record(rec: Mapping[str, Any]) -> bool:
    """Whether a decision-log record is a catalog decision's (issue 54): it has ``catalog``, or (a
    record exported before it) one candidate kept with a probability below 1 (a decision over that
    one candidate alone has probability 1)."""
    if rec.get("catalog") is not None:
        return True
    actions, probs = rec.get("actions"), rec.get("probs")
    return actions is not None and len(actions) == 1 and bool(probs) and probs[0] < 1.0


def _action_input(context: np.ndarray | SparseVector, candidates: list[Mapping[str, Any]]) -> ActionInput:
    """A logged action-feature decision as its model saw it: the context and each candidate's hashed
    features (:class:`service.decision_log.LogRecord`'s ``actions``)."""
    if not isinstance(context, SparseVector) or not candidates:
        raise ValueError("an action-feature record needs hashed features and at least one candidate")
    bits = context.dim.bit_length() - 1
    sizes = [len(a["idx"]) for a in candidates]
    a_ptr = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    a_idx = np.asarray([i for a in candidates for i in a["idx"]], dtype=np.int64)
    a_val = np.asarray([v for a in candidates for v in a["val"]], dtype=np.float64)
    ids = [str(a["id"]) for a in candidates]
    return ActionInput(ids, context, a_ptr, a_idx, a_val, bits)


@dataclass(frozen=True)
class Estimate:
    """A value estimate with its 95 % interval and effective sample size.

    Attributes
    ----------
    value : float
        The estimated click rate.
    low, high : float
        The 95 % confidence interval, within [0, 1].
    n : int
        Events it rests on (logged events, or accepted ones for a replay).
    ess : float
        Effective sample size: ``(sum w)^2 / sum w^2`` of the importance weights, or the matched
        events of a replay (module docstring).
    extra : dict
        Estimator-specific figures (e.g. the replay's acceptance rate).
    """

    value: float
    low: float
    high: float
    n: int
    ess: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def warning(self) -> str | None:
        """Why the estimate cannot tell, when its effective sample size is below :data:`MIN_ESS`."""
        if self.ess >= MIN_ESS:
            return None
        return (
            f"effective sample size {self.ess:.1f} is below {MIN_ESS}: this estimate cannot tell "
            "(too few logged events support it; log more traffic, or explore more)"
        )

    def as_dict(self) -> dict[str, Any]:
        fields = {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "ess": self.ess}
        return {**fields, "warning": self.warning, **self.extra}


def effective_sample_size(w: np.ndarray) -> float:
    """Kish's ``(sum w)^2 / sum w^2`` of importance weights ``w``; 0 when every weight is 0 (the
    target never shows a logged label: no event supports it)."""
    squares = float((w * w).sum())
    return float(w.sum()) ** 2 / squares if squares > 0.0 else 0.0


def _clipped(low: float, high: float) -> tuple[float, float]:
    """An interval within the reward range [0, 1], where every click rate lies."""
    return min(max(low, 0.0), 1.0), min(max(high, 0.0), 1.0)


def _normal(terms: np.ndarray, w: np.ndarray, value: float | None = None) -> Estimate:
    """``mean(terms)`` (or ``value``) ± 1.96 sd(terms) / sqrt(n), clipped to [0, 1]; the ESS of
    the importance weights ``w``."""
    n = terms.size
    v = float(terms.mean()) if value is None else value
    half = Z95 * float(terms.std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    return Estimate(v, *_clipped(v - half, v + half), n, effective_sample_size(w))


def _weights(data: LoggedData, pi: np.ndarray) -> np.ndarray:
    """Importance weights ``pi_i(a_i) / p_i(a_i)``; a logged propensity of 0 is an error."""
    p = data.propensities
    if np.any(p <= 0.0):
        raise ValueError("a logged action has probability 0 under the logging policy")
    return pi[np.arange(data.n), data.actions] / p


def ips(data: LoggedData, pi: np.ndarray) -> Estimate:
    """Inverse propensity scoring of the target pmfs ``pi`` (shape (n, K))."""
    w = _weights(data, pi)
    return _normal(w * data.rewards, w)


def snips(data: LoggedData, pi: np.ndarray) -> Estimate:
    """Self-normalised IPS; interval by the delta method."""
    w = _weights(data, pi)
    total = float(w.sum())
    if total == 0.0:
        return Estimate(math.nan, 0.0, 1.0, data.n, 0.0)
    v = float((w * data.rewards).sum()) / total
    return _normal(w * (data.rewards - v) / w.mean() + v, w, value=v)


def dm_cross_fit(
    data: LoggedData, folds: int = 5, epochs: int = 3, lr: float = 0.1, l2: float = 1e-4
) -> np.ndarray:
    """Direct-method reward model ``q(x_i, a)`` for every logged event and label, shape (n, K).

    Per label, a logistic regression of the click on the context (plus an intercept), trained by
    plain SGD in log order over the events where that label was shown; cross-fitted: the events of
    fold k (contiguous blocks) are scored by the model trained on the other folds. Deterministic.
    """
    n, k = data.n, data.n_labels
    fold_of = np.minimum(np.arange(n) * folds // max(n, 1), folds - 1)
    q = np.empty((n, k))
    for f in range(folds):
        W = np.zeros((k, data.dim))
        b = np.zeros(k)
        train = np.flatnonzero(fold_of != f)
        for _ in range(epochs):
            for i in train.tolist():
                a, x = int(data.actions[i]), data.x[i]
                idx, val = (x.idx, x.val) if isinstance(x, SparseVector) else (slice(None), x)
                z = float(W[a, idx] @ val) + b[a]
                g = 1.0 / (1.0 + math.exp(-max(min(z, 30.0), -30.0))) - data.rewards[i]
                W[a, idx] -= lr * (g * val + l2 * W[a, idx])
                b[a] -= lr * g
        for i in np.flatnonzero(fold_of == f).tolist():
            x = data.x[i]
            z = (W[:, x.idx] @ x.val if isinstance(x, SparseVector) else W @ x) + b
            q[i] = 1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0)))
    return q


def dr(data: LoggedData, pi: np.ndarray, q: np.ndarray | None = None) -> Estimate:
    """Doubly robust estimate with the cross-fitted reward model ``q`` (fitted here if not given)."""
    q = dm_cross_fit(data) if q is None else q
    rows = np.arange(data.n)
    w = _weights(data, pi)
    terms = (pi * q).sum(axis=1) + w * (data.rewards - q[rows, data.actions])
    return _normal(terms, w)


def evaluate_stationary(
    data: LoggedData, policies: Mapping[str, np.ndarray], q: np.ndarray | None = None
) -> dict[str, dict[str, Estimate]]:
    """IPS, SNIPS and DR of every policy's pmfs (name -> (n, K)); the reward model is fitted once.
    An action-feature log gets IPS and SNIPS only (module docstring)."""
    if data.candidates:
        return {name: {"ips": ips(data, pi), "snips": snips(data, pi)} for name, pi in policies.items()}
    q = dm_cross_fit(data) if q is None else q
    return {
        name: {"ips": ips(data, pi), "snips": snips(data, pi), "dr": dr(data, pi, q)}
        for name, pi in policies.items()
    }


def policy_pmfs(
    data: LoggedData,
    decide: Callable[[np.ndarray | SparseVector, np.random.Generator, np.ndarray | None], Decision],
    seed: int = 0,
) -> np.ndarray:
    """The pmf a stationary policy (a ``decide`` that does not change its model) gives each context,
    among the labels its record allowed."""
    rng = np.random.default_rng(seed)
    pi = np.zeros_like(data.probs)
    for i, x in enumerate(data.x):
        p = decide(x, rng, data.mask(i)).probs
        pi[i, : p.size] = p  # an action-feature record's candidates: the first columns
    return pi


def uniform_pmfs(data: LoggedData) -> np.ndarray:
    """Uniform random over the K labels (over each record's eligible labels)."""
    if data.eligible is None:
        return np.full((data.n, data.n_labels), 1.0 / data.n_labels)
    return data.eligible / data.eligible.sum(axis=1, keepdims=True)


def constant_pmfs(data: LoggedData, label: int) -> np.ndarray:
    """Always ``label``."""
    pi = np.zeros((data.n, data.n_labels))
    pi[:, label] = 1.0
    return pi


def first_pmfs(data: LoggedData) -> np.ndarray:
    """Always the first label (candidate) each record allowed."""
    first = np.zeros(data.n, dtype=np.int64) if data.eligible is None else data.eligible.argmax(axis=1)
    pi = np.zeros((data.n, data.n_labels))
    pi[np.arange(data.n), first] = 1.0
    return pi


def baseline_pmfs(data: LoggedData) -> np.ndarray:
    """Always the caller's own choice (``baseline``) logged with each decision;
    :class:`EvaluationError` when a record has none."""
    missing = data.n if data.baselines is None else int((data.baselines < 0).sum())
    if missing:
        raise EvaluationError(
            f"policy 'baseline': {missing} of {data.n} logged decisions have no baseline "
            "(send baseline with /predict, or pick the records with since / until)"
        )
    assert data.baselines is not None
    pi = np.zeros((data.n, data.n_labels))
    pi[np.arange(data.n), data.baselines] = 1.0
    return pi


def replay_once(
    data: LoggedData, learner: Learner, seed: int = 0, max_accepted: int | None = None
) -> Estimate:
    """One rejection-sampling replay of a learning policy over the log (module docstring).

    ``learner`` is trained in place on the events it accepts, until the log ends or
    ``max_accepted`` were accepted. The value is its click rate over its first ``accepted``
    decisions (it learned from those only: a thinner stream than the log's), with the Wilson score
    interval of that rate given the learner's path; ``extra`` holds the acceptance rate and ``c``.
    """
    if learner.full_information:
        raise ValueError(f"{learner.name} learns from full labels: not a bandit policy to replay")
    rng = np.random.default_rng(seed)
    p = data.propensities
    if np.any(p <= 0.0):
        raise ValueError("a logged action has probability 0 under the logging policy")
    c = float(p.min())
    take = learner.accepts_sparse
    clicks = accepted = seen = 0
    for i in range(data.n):
        if max_accepted is not None and accepted >= max_accepted:
            break
        seen += 1
        x = data.x[i]
        xi = x if take or not isinstance(x, SparseVector) else x.dense()
        mask = data.mask(i)
        d = learner.decide(xi, rng) if mask is None else learner.decide(xi, rng, mask)
        if d.label != data.actions[i] or rng.random() >= c / p[i]:
            continue
        accepted += 1
        r = data.rewards[i] > 0.5
        clicks += int(r)
        learner.learn(xi, d, bool(r))
    return _wilson(clicks, accepted, {"acceptance": accepted / max(seen, 1), "c": c})


#: Two-sided 95 % Student t quantiles by degrees of freedom (1-30); the normal's beyond.
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def replay(
    data: LoggedData,
    make: Callable[[int], Learner],
    runs: int = 10,
    seed: int = 0,
    max_accepted: int | None = None,
) -> Estimate:
    """Replay a learning policy ``runs`` times (learner ``make(seed + b)``, its own draws) and
    average; the interval is a 95 % *prediction* interval of one run's click rate,
    ``mean ± t_{runs-1} s sqrt(1 + 1/runs)`` with ``s`` the spread between runs.

    Why not the binomial interval of one replay: a learner's click rate over its first m
    decisions varies from one learning path to another far more than the binomial noise of m
    clicks (Banditron on car, m = 300: 0.072 between runs against 0.029), so an interval that
    ignores the path covers the policy's expected click rate about half the time. The spread
    between replays of the same log measures that variation. ``n`` is the mean accepted count
    (rounded; ``ess`` is that mean).
    """
    if runs < 2:
        raise ValueError("replay needs at least 2 runs for its interval")
    results = [replay_once(data, make(seed + b), seed + b, max_accepted) for b in range(runs)]
    values = np.array([r.value for r in results])
    mean, sd = float(values.mean()), float(values.std(ddof=1))
    t = _T95[runs - 2] if runs - 1 <= len(_T95) else Z95
    half = t * sd * math.sqrt(1.0 + 1.0 / runs)
    accepted = float(np.mean([r.n for r in results]))
    extra = {
        "runs": float(runs),
        "spread": sd,
        "acceptance": float(np.mean([r.extra["acceptance"] for r in results])),
    }
    return Estimate(mean, *_clipped(mean - half, mean + half), round(accepted), accepted, extra)


def _wilson(k: int, n: int, extra: dict[str, float]) -> Estimate:
    if n == 0:
        return Estimate(math.nan, 0.0, 1.0, 0, 0.0, extra)
    m = k / n
    z2 = Z95 * Z95
    centre = (m + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(m * (1 - m) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return Estimate(m, centre - half, centre + half, n, float(n), extra)


# -- policies named by text, on a log file: what `clickboost evaluate` and the evaluation jobs run --


def parse_policy(text: str) -> tuple[str, dict[str, Any]]:
    """``name[:k=v,...]`` -> (name, params); values parsed as JSON where they parse (numbers,
    booleans), else kept as strings. ``constant:LABEL_INDEX`` gives ``{"label": LABEL_INDEX}``."""
    name, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    if name == "model":  # model:NAME, a service model's snapshot
        return name, {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            if name == "constant" and key.strip().isdigit():
                params["label"] = int(key)
                continue
            raise EvaluationError(f"policy {text!r}: expected constant:LABEL_INDEX or name:param=value,...")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value.strip()
    return name.strip(), params


def read_log(path: Path, catalog: Catalog | None = None) -> LoggedData:
    """The decisions of a JSON-lines decision log that have a reward; ``catalog``: the model's, which
    rebuilds its catalog decisions."""
    try:
        with path.open() as f:
            return LoggedData.from_records((json.loads(line) for line in f if line.strip()), catalog)
    except (OSError, ValueError, KeyError) as exc:
        raise EvaluationError(f"cannot read the decision log {path}: {exc}") from None


def evaluate(
    data: LoggedData,
    policies: list[str],
    runs: int,
    seed: int,
    snapshots: Mapping[str, Learner] | None = None,
) -> dict[str, dict[str, Estimate]]:
    """Estimates of the logging policy (``"logged"``) and every policy: name -> estimator -> estimate.

    ``uniform``, ``first``, ``baseline`` and ``constant:LABEL_INDEX`` are stationary (IPS, SNIPS,
    DR; an action-feature log: IPS, SNIPS, and no ``constant``); ``model:NAME`` is
    the frozen learner ``snapshots[NAME]`` (a service's model, passed by the evaluation jobs), its
    ``decide`` pmf on every logged context, the model unchanged; any other name is a learner
    (:func:`~service.learners.base.make_learner`'s name and parameters), replayed ``runs`` times.
    Catalog decisions (``data.catalog``) join the IPS and SNIPS of the stationary policies but
    ``baseline``, and are not replayed (:mod:`service.catalog_ope`).
    """
    stationary: dict[str, np.ndarray] = {}
    targets: dict[str, str | Learner] = {"logged": "logged"}  # what a catalog decision is weighed by
    learning: dict[str, tuple[str, dict[str, Any]]] = {}
    for text in policies:
        name, params = parse_policy(text)
        if name == "model":
            model = (snapshots or {}).get(text.partition(":")[2])
            if model is None:
                raise EvaluationError(
                    f"policy {text!r}: a model snapshot needs the service (POST /models/NAME/evaluations)"
                )
            if model.actions != data.candidates:
                raise EvaluationError(_kind_mismatch(text, data.candidates))
            sparse = model.accepts_sparse
            stationary[text] = policy_pmfs(
                data,
                lambda x, rng, mask, m=model, sp=sparse: m.decide(
                    x if sp or not isinstance(x, SparseVector) else x.dense(), rng, mask
                ),
                seed,
            )
            targets[text] = model
            continue
        if name in ("uniform", "first"):
            stationary[text] = uniform_pmfs(data) if name == "uniform" else first_pmfs(data)
            targets[text] = name
        elif name == "baseline" and data.catalog is not None:
            raise EvaluationError(
                f"policy {text!r}: the log's {len(data.catalog.records)} catalog decisions have no "
                "baseline (pick the records with since / until)"
            )
        elif name == "baseline":
            stationary[text] = baseline_pmfs(data)
        elif name == "constant" and data.candidates:
            raise EvaluationError(
                f"policy {text!r}: a label index names another candidate in every request of an "
                "action-feature log; evaluate first, baseline, uniform, a model or a learner"
            )
        elif name == "constant":
            label = int(params.get("label", -1))
            if not 0 <= label < data.n_labels:
                raise EvaluationError(
                    f"policy {text!r}: constant:LABEL_INDEX with 0 <= LABEL_INDEX < {data.n_labels}"
                )
            stationary[text] = constant_pmfs(data, label)
        else:
            cls = learners.get(name) if name in learners.names() else None
            if cls is not None and cls.actions != data.candidates:
                raise EvaluationError(_kind_mismatch(text, data.candidates))
            labels = 1 if data.candidates else data.n_labels  # an action learner: one scorer
            make_learner(name, data.dim, labels, params)  # a bad name or parameter fails here
            if data.n == 0:
                raise EvaluationError(
                    f"policy {text!r}: a learner is replayed on decisions that keep their candidates; "
                    "every decision of this log is a catalog decision"
                )
            learning[text] = (name, params)
    if data.catalog is not None:
        out = _with_catalog(data, {"logged": data.probs, **stationary}, data.catalog.weights(targets, seed))
    else:
        out = {"logged": evaluate_stationary(data, {"logged": data.probs})["logged"]}
        if stationary:
            out |= evaluate_stationary(data, stationary)
    for text, (name, params) in learning.items():

        def make(s: int, name: str = name, params: dict[str, Any] = params) -> Learner:
            return make_learner(name, data.dim, 1 if data.candidates else data.n_labels, params, seed=s)

        out[text] = {"replay": replay(data, make, runs=runs, seed=seed)}
        if data.catalog is not None:  # not replayed on them (service.catalog_ope)
            out[text]["replay"].extra["catalog_skipped"] = float(len(data.catalog.records))
    return out


def _with_catalog(
    data: LoggedData, pmfs: Mapping[str, np.ndarray], weights: CatalogWeights
) -> dict[str, dict[str, Estimate]]:
    """IPS and SNIPS of each policy over the log's decisions and its catalog decisions together,
    each weighed on its shown label or item: ``pmfs``, the policies' pmfs on the other decisions;
    ``weights``, their probabilities of the catalog decisions' shown items."""
    if data.n + weights.p.size == 0:
        why = ", ".join(f"{n}: {reason}" for reason, n in weights.why.items())
        raise EvaluationError(f"no catalog decision of the log could be rebuilt ({why})")
    rows = np.arange(data.n)
    p = np.concatenate((data.propensities, weights.p))
    rewards = np.concatenate((data.rewards, weights.rewards))
    flat = LoggedData([], p[:, None], np.zeros(p.size, np.int64), rewards, 1)
    out = {}
    for name, pi in pmfs.items():
        at = np.concatenate((pi[rows, data.actions], weights.pi[name]))[:, None]
        out[name] = {"ips": ips(flat, at), "snips": snips(flat, at)}
        for estimate in out[name].values():
            estimate.extra.update(weights.counts())
    return out


def _kind_mismatch(text: str, candidates: bool) -> str:
    if candidates:
        return f"policy {text!r}: the log's decisions chose among candidate actions: name an action learner"
    return f"policy {text!r}: an action-feature learner needs a log of decisions among candidate actions"
