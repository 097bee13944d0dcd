"""Safe rollout (issue 38 part 5): serve a baseline, measure the learner beside it, promote it when sure.

A model's ``rollout`` (:class:`service.config.ModelSpec`) is one of

``online``
    The learner's decisions are served and learned from (what every model did before).
``logging``
    Each request's ``baseline`` label is served (probability 1) and nothing is learned; every
    decision is logged with the learner's would-be distribution (``memo.policy``) beside it.
``apprentice``
    The served distribution is ``p = (1 - eps) onehot(baseline) + eps pi`` with ``pi`` the learner's
    own (masked) distribution: the baseline with probability ``1 - eps``, the learner's draw with
    ``eps``. The learner learns from every decision with the served ``p``, so its importance-weighted
    update is unbiased for what was served (:func:`served`).

**The estimates.** Each learn event of a decision made in logging or apprentice mode adds, in log
order, to running sums (:class:`Rollout`), so every replica at the same log position holds the same
figures (and a checkpoint carries them). With reward ``r`` in [0, 1], shown label ``a``, served
``p`` and baseline ``b``, IPS gives per decision

* the learner: ``L = r pi(a) / p(a)`` in ``[0, 1/eps]`` (``p(a) >= eps pi(a)``);
* the baseline: ``B = r 1[a = b] / p(a)`` in ``[0, 1/(1 - eps)]``;
* their difference ``D = L - B``.

In logging mode the learner's mass on labels never served (``u = pi(labels with p = 0)``) has an
unknown reward in [0, 1]: its value is only bounded, ``L`` low and ``L + u`` high (partial
identification), and so is the difference. Each bound has an anytime-valid confidence sequence,
the predictable plug-in empirical-Bernstein one of Waudby-Smith & Ramdas (2024, "Estimating means
of bounded random variables by betting", JRSS-B, Theorem 2; eqs. (13)-(15)) on the variable mapped
to [0, 1]: with probability at least ``confidence``, *every* interval it ever reports covers the
lambda-weighted average of the decisions' conditional means. So the model may be checked after
every decision and the chance that a learner that is never better than the baseline (``E[D | past]
<= 0`` at every decision, hence every weighted average <= 0) is ever promoted is at most
``(1 - confidence) / 2``: no correction for repeated looks is needed.

**Promotion.** With ``promote = "auto"``, the replica holding the model's rollout lease checks in its
sweep loop (never on the request path) whether ``n >= promote_min_decisions`` and the difference's
lower bound is above 0, and then appends a ``rollout`` event (mode online) to the model's log: every
replica switches when it applies that event, at the same log position. The event names the epoch
it was decided in and is applied only in that epoch, so a late duplicate (another replica, a lease
handover) or one racing an operator's change does nothing.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import numpy as np

from service.learners.base import Decision, Learner, sample

__all__ = ["MODES", "Mode", "Rollout", "served"]

Mode = Literal["online", "logging", "apprentice"]
MODES: tuple[Mode, ...] = ("online", "logging", "apprentice")

# The series of the confidence sequences: the learner's value (low and high bound), the baseline's,
# and their difference (low and high). Each row holds the sums of one series (_step).
LEARNER_LO, LEARNER_HI, BASELINE, DIFF_LO, DIFF_HI = range(5)
_T, _SUM, _SQ, _LAM, _LAM_X, _PENALTY = range(6)
#: The largest bet of the confidence sequence (Waudby-Smith & Ramdas use 1/2 or 3/4).
_MAX_BET = 0.5


def served(
    learner: Learner,
    x: Any,
    own: Decision,
    mode: Mode,
    baseline: int,
    epsilon: float,
    epoch: int,
    rng: np.random.Generator,
) -> Decision:
    """The decision served in ``mode`` (logging or apprentice) around the learner's ``own``.

    Logging: the ``baseline`` label with probability 1 (no draw). Apprentice: ``p = (1 - epsilon)
    onehot(baseline) + epsilon own.probs``, the label drawn with one uniform of ``rng`` (the
    decision's generator, after the learner's own draws) as :func:`~service.learners.base.sample`
    draws. The memo is the learner's for the served label (:meth:`Learner.relabel`) plus ``rollout``
    (the mode), ``baseline``, ``policy`` (the learner's own distribution) and ``rollout_epoch``.

    ``own.probs`` (``policy``) is the learner's marginal over its tie-break
    (:func:`~service.learners.base.over_ties`), and so is ``p``. Where the learner keeps its mix
    given its greedy label (:attr:`Decision.conditional`), the label is drawn from the same mix of
    that one, ``q = (1 - epsilon) onehot(baseline) + epsilon own.conditional``, which stands in
    ``memo["conditional"]``: the draw stays two-stage (tie-break, then this), so the label's
    probability is ``p`` and the learner's update divides by ``q``, as it always did.
    """
    pi = own.probs
    p = [0.0] * pi.size
    q = p
    if mode == "logging":
        p[baseline] = 1.0
        label = baseline
    else:
        p = (epsilon * pi).tolist()
        p[baseline] += 1.0 - epsilon
        if "conditional" in own.memo:
            q = (epsilon * own.conditional).tolist()
            q[baseline] += 1.0 - epsilon
        else:
            q = p
        label = sample(np.array(q), rng)
        if q[label] == 0.0:  # sample's cap at K - 1 on a zero tail: the last label with mass
            label = max(i for i, v in enumerate(q) if v > 0.0)
    memo = own.memo if label == own.label else learner.relabel(x, own, label).memo
    extra = {"rollout": mode, "baseline": baseline, "policy": pi, "rollout_epoch": epoch}
    if "conditional" in memo:
        memo = {k: v for k, v in memo.items() if k != "conditional"}
        if mode != "logging":
            extra["conditional"] = np.array(q)
    return Decision(np.array(p), label, {**memo, **extra})


def _step(row: np.ndarray, x: float, log_term: float) -> None:
    """Add the observation ``x`` in [0, 1] to the sums ``row`` of one confidence sequence
    (predictable plug-in empirical Bernstein, Waudby-Smith & Ramdas 2024, eqs. (13)-(15)): the bet
    ``lambda_t`` and the variance proxy ``v_t`` use the estimates before ``x`` only."""
    t = row[_T] + 1.0
    mean_before = (0.5 + row[_SUM]) / t
    var_before = (0.25 + row[_SQ]) / t
    lam = min(math.sqrt(2.0 * log_term / (var_before * t * math.log(1.0 + t))), _MAX_BET)
    row[_LAM] += lam
    row[_LAM_X] += lam * x
    row[_PENALTY] += 4.0 * (x - mean_before) ** 2 * (-math.log1p(-lam) - lam) / 4.0
    row[_T] = t
    row[_SUM] += x
    row[_SQ] += (x - (0.5 + row[_SUM]) / (t + 1.0)) ** 2


def _bounds(row: np.ndarray, log_term: float) -> tuple[float, float]:
    """The confidence sequence's interval in [0, 1] after the observations summed in ``row``."""
    if row[_T] == 0:
        return 0.0, 1.0
    centre = row[_LAM_X] / row[_LAM]
    half = (log_term + row[_PENALTY]) / row[_LAM]
    return max(centre - half, 0.0), min(centre + half, 1.0)


class Rollout:
    """A model's rollout mode and the running evidence of its current epoch.

    Parameters
    ----------
    mode : {"online", "logging", "apprentice"}
        The mode the model starts in (its spec's ``rollout``).
    epsilon : float
        The learner's share in apprentice mode (``apprentice_epsilon``).
    confidence : float
        Level of the intervals (``promote_confidence``).

    Attributes
    ----------
    epoch : int
        Incremented by every rollout event and every reset or import: the evidence starts over, and
        a decision counts only in the epoch it was made in (``memo.rollout_epoch``).
    sums : ndarray of shape (5, 6)
        Per series (learner low / high, baseline, difference low / high): observations, their sum,
        the sum of squared deviations, of the bets, of bets times observations, and the penalty.
    changed : dict or None
        The last rollout event applied: position, at, mode, reason, and for an automatic promotion
        the evidence it was decided on (the position it was checked at and :meth:`report`).
    """

    def __init__(self, mode: Mode, epsilon: float, confidence: float) -> None:
        self.mode: Mode = mode
        self.epsilon = epsilon
        self.log_term = math.log(2.0 / (1.0 - confidence))
        self.epoch = 0
        self.sums = np.zeros((5, 6))
        self.changed: dict[str, Any] | None = None
        # Not state: the epoch this replica last asked to promote in (asks once per epoch).
        self.requested: int | None = None
        eps = epsilon
        # Each series' range, mapped to [0, 1] for its confidence sequence (module docstring)
        value, base, diff = [0.0, 1 / eps], [0.0, 1 / (1 - eps)], [-1 / (1 - eps), 1 / eps]
        self._ranges = np.array([value, value, base, diff, diff])

    @property
    def n(self) -> int:
        """Decisions of this epoch with a known reward."""
        return int(self.sums[BASELINE, _T])

    @property
    def persistent(self) -> bool:
        """Whether checkpoints must carry this state (anything but a model online from the start)."""
        return self.mode != "online" or self.epoch > 0

    # -- log events -------------------------------------------------------------------------------

    def observe(self, decision: Decision, reward: float) -> None:
        """Add a learn event's decision (made in logging or apprentice mode) with its ``reward`` in
        [0, 1], if it was made in this epoch; a slot of a multi-slot page with its page's ratio
        (:mod:`service.page_rollout`)."""
        memo = decision.memo
        if int(memo.get("rollout_epoch", -1)) != self.epoch:
            return
        if "page_policy" in memo:  # a slot of a multi-slot page: the page's ratio (service.page_rollout)
            served = float(memo["page_served"])
            learner = reward * float(memo["page_policy"]) / served
            base = reward / served if int(memo["page_baseline"]) else 0.0
            unseen = float(memo["page_unseen"])
        else:
            p, a = decision.probs, decision.label
            pi = np.asarray(memo["policy"], dtype=np.float64)
            learner = reward * float(pi[a]) / float(p[a])
            base = reward / float(p[a]) if a == int(memo["baseline"]) else 0.0
            unseen = float(pi[p == 0.0].sum())  # the learner's mass on labels never served
        values = (learner, learner + unseen, base, learner - base, learner + unseen - base)
        for i, v in enumerate(values):
            lo, hi = self._ranges[i]
            _step(self.sums[i], min(max((v - lo) / (hi - lo), 0.0), 1.0), self.log_term)

    def restart(self) -> None:
        """A new epoch (the learner was reset or replaced): the evidence starts over."""
        self.epoch += 1
        self.sums[:] = 0.0

    def apply_event(self, payload: bytes, position: int, at: float) -> None:
        """Apply a ``rollout`` event: ``{"mode", "reason", "epoch"?}`` (JSON). One that names an epoch
        (an automatic promotion) applies only in that epoch; any other starts a new epoch."""
        doc = json.loads(payload)
        if doc.get("epoch") is not None and doc["epoch"] != self.epoch:
            return
        self.restart()
        self.mode = doc["mode"]
        self.changed = {"position": position, "at": at, "mode": self.mode, "reason": doc["reason"]}
        if doc.get("evidence") is not None:  # an automatic promotion: the figures it was decided on
            self.changed["evidence"] = doc["evidence"]

    @staticmethod
    def event(mode: Mode, reason: str, epoch: int | None = None, evidence: dict | None = None) -> bytes:
        """The payload of a rollout event (the ``state`` of ``Event(kind="rollout")``)."""
        doc = {"mode": mode, "reason": reason, "epoch": epoch, "evidence": evidence}
        return json.dumps(doc, separators=(",", ":")).encode()

    # -- checkpoints --------------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """The keys a checkpoint carries beside the learner's state (prefix ``rollout.``)."""
        return {
            "rollout.mode": self.mode,
            "rollout.epoch": self.epoch,
            "rollout.sums": self.sums.copy(),
            "rollout.changed": json.dumps(self.changed),
        }

    def load(self, state: dict[str, Any]) -> None:
        """Restore :meth:`to_state`'s keys (validated)."""
        sums = np.asarray(state["rollout.sums"])
        if sums.shape != self.sums.shape or sums.dtype != np.float64 or state["rollout.mode"] not in MODES:
            raise ValueError("bad rollout state in the checkpoint")
        self.mode = state["rollout.mode"]
        self.epoch = int(state["rollout.epoch"])
        self.sums = sums.copy()
        self.changed = json.loads(state["rollout.changed"])

    # -- reports ----------------------------------------------------------------------------------

    def _interval(self, lo_row: int, hi_row: int) -> dict[str, float | None]:
        """One quantity's value (the IPS mean; None where the log only bounds it) and interval, in
        reward units, within the range of a mean reward ([0, 1], a difference [-1, 1]).

        The interval covers the bet-weighted average of the decisions' conditional means, which
        weighs early decisions more (the bets shrink as 1 / sqrt(t log t)): for a learner that
        improves it lies below the plain mean, which may then sit above the interval. The
        promotion is then conservative, never the other way round.
        """
        lo_range, hi_range = (float(v) for v in self._ranges[lo_row])
        width = hi_range - lo_range
        floor = -1.0 if lo_row == DIFF_LO else 0.0
        low = max(lo_range + width * _bounds(self.sums[lo_row], self.log_term)[0], floor)
        high = min(lo_range + width * _bounds(self.sums[hi_row], self.log_term)[1], 1.0)
        n = float(self.sums[lo_row, _T])
        identified = self.sums[lo_row, _SUM] == self.sums[hi_row, _SUM]
        value = lo_range + width * float(self.sums[lo_row, _SUM]) / n if n and identified else None
        return {"value": value, "low": low, "high": high}

    def difference_low(self) -> float:
        """The lower confidence bound of (learner - baseline) now."""
        return self._interval(DIFF_LO, DIFF_HI)["low"]  # type: ignore[return-value]

    def due(self, promote: str, min_decisions: int) -> bool:
        """Whether an automatic promotion is due (and not yet asked for in this epoch)."""
        return (
            self.mode == "apprentice"
            and promote == "auto"
            and self.requested != self.epoch
            and self.n >= min_decisions
            and self.difference_low() > 0.0
        )

    def report(self) -> dict[str, Any]:
        """``GET /models/{name}``'s figures: n and each quantity's value and interval."""
        return {
            "n": self.n,
            "learner": self._interval(LEARNER_LO, LEARNER_HI),
            "baseline": self._interval(BASELINE, BASELINE),
            "difference": self._interval(DIFF_LO, DIFF_HI),
        }
