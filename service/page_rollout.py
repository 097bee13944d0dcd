"""Safe rollout of a page of several slots (issue 53 part 5): logging and apprentice modes over
:class:`~service.learners.ccb_adf.CCB`, with evidence weighted by whole pages.

A page's baseline is one candidate per slot (the slots' ``baseline`` items, distinct: a page shows
an item once), the page the caller's own policy would show. As for one decision
(:mod:`service.rollout`):

``logging``
    The baseline page is served (probability 1) and nothing is learned; each slot's decision keeps
    the learner's would-be distribution given the earlier slots' baselines (``memo.policy``).
``apprentice``
    The page served is the baseline page with probability ``1 - eps`` and the learner's own page
    (:meth:`CCB.decide`) with ``eps``. Drawn slot by slot, slot ``s`` after a prefix ``a_<s`` is drawn
    from the exact conditional of that mixture,

    ``q_s = w onehot(b_s) + (1 - w) pi_s(. | a_<s)``, ``w = (1 - eps) / ((1 - eps) + eps L(a_<s))``

    while the prefix is the baseline's (``L``: the learner's probability of the prefix, the product
    of its conditionals), and ``q_s = pi_s`` once a slot left the baseline (``w = 0``). So each slot's
    reported probability is its exact conditional given the earlier slots, what the CCB reduction
    learns with, and the page's probability is ``P(page) = (1 - eps) 1[page = b] + eps L(page)``.
    Each slot is :func:`service.rollout.served` at the slot's own mix ``1 - w``: tie-breaks and the
    learners that keep their mix given the greedy label are handled there.

**Evidence.** A multi-slot page's slots carry in their memo the page's learner probability
(``page_policy`` = ``L(page)``), served probability (``page_served``), whether it is the baseline
page (``page_baseline``) and, in logging mode, the learner's mass on pages never served
(``page_unseen`` = ``1 - L(b)``). Each slot's reward ``r_s`` adds one observation to the model's
:class:`~service.rollout.Rollout` with the page's ratio: the learner ``r_s L / P``, in ``[0, 1/eps]``
since ``P >= eps L``, and the baseline ``r_s 1[page = b] / P``, in ``[0, 1/(1 - eps)]``. By
enumeration over the pages served, their means are each slot's value under the learner's own pages
and under the baseline page: the page policies, not slot-by-slot mixes of the two (a test). The
slots of one page share their ratio, so their observations are not independent given the past; the
confidence sequences' guarantee is then for the average of the observations' conditional means,
whose expectation (not every realisation) is the difference of the two policies' values. A page of
one slot without slot features is stored as a single decision and observed as one
(:mod:`service.pages`): its decision is :func:`service.rollout.served`'s, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from service.learners.base import Decision, ParamError
from service.learners.ccb_adf import CCB, PageDecision
from service.rollout import Mode, served
from service.slots import PageInput

__all__ = ["PAGE_KEYS", "Prefix", "check_baselines", "serve_page", "serve_slot"]

#: The memo keys of a multi-slot page's evidence (module docstring), in each slot's decision.
PAGE_KEYS = ("page_policy", "page_served", "page_baseline", "page_unseen")


@dataclass
class Prefix:
    """What the slots served so far leave for the next: whether each showed its baseline, and the
    prefix's probability under the learner's own pages and under the served mixture."""

    on_baseline: bool = True
    learner: float = 1.0
    served: float = 1.0


def check_baselines(
    baselines: Sequence[int | None] | None,
    page: PageInput,
    eligible: Sequence[np.ndarray | None] | None,
    mode: Mode,
) -> list[int] | None:
    """The page's baseline candidate per slot, checked: one per slot (every one required outside
    online mode), an index among the page's candidates, allowed in its slot, and no candidate in
    two slots. :class:`ParamError` (422) saying which slot is wrong. None when none is given online."""
    n_slots, n = page.n_slots, page.n
    if baselines is None or all(b is None for b in baselines):
        if mode == "online":
            return None
        raise ParamError(
            f"slots: every slot needs a baseline in {mode} mode (the item your current policy shows in it)"
        )
    if len(baselines) != n_slots:
        raise ParamError(f"slots: one baseline per slot, {n_slots}, got {len(baselines)}")
    out: list[int] = []
    for s, b in enumerate(baselines):
        name = page.ids[s] if page.ids else str(s)
        if b is None:
            raise ParamError(f"slots.{s}: slot {name!r} has no baseline; give one for every slot or none")
        if not 0 <= b < n:
            raise ParamError(f"slots.{s}: baseline index {b} is not one of the {n} candidates")
        if eligible is not None and eligible[s] is not None and not eligible[s][b]:  # type: ignore[index]
            raise ParamError(f"slots.{s}: the baseline of slot {name!r} is not allowed in that slot")
        if b in out:
            raise ParamError(
                f"slots.{s}: slot {name!r} has the baseline of slot {out.index(b)}; a page shows an item once"
            )
        out.append(int(b))
    return out


def serve_slot(
    ccb: CCB,
    page: PageInput,
    s: int,
    taken: np.ndarray,
    rng: np.random.Generator,
    eligible: np.ndarray | None,
    mode: Mode,
    baseline: int,
    epsilon: float,
    epoch: int,
    prefix: Prefix,
) -> Decision:
    """Slot ``s``'s served decision after ``prefix`` (module docstring), updating ``prefix`` with it.

    The learner's own decision given the candidates ``taken`` by the earlier slots
    (:meth:`CCB.decide_slot`, from ``rng``), then :func:`service.rollout.served` around it: in logging
    mode the baseline, in apprentice mode the slot's conditional of the page mixture (one more
    uniform of ``rng``)."""
    own = ccb.decide_slot(page, s, taken, rng, eligible)
    x = page.slot_input(s)
    if mode == "logging":
        d = served(ccb.learner, x, own, "logging", baseline, epsilon, epoch, rng)
    else:
        if not prefix.on_baseline:
            eps = 1.0  # off the baseline page: the learner's own conditional
        elif prefix.learner == 1.0:
            eps = epsilon  # the first slot (or a certain prefix): exactly a single decision's mix
        else:
            eps = epsilon * prefix.learner / ((1.0 - epsilon) + epsilon * prefix.learner)
        d = served(ccb.learner, x, own, "apprentice", baseline, eps, epoch, rng)
    a = d.label
    prefix.learner *= float(own.probs[a])
    prefix.served *= float(d.probs[a])
    prefix.on_baseline = prefix.on_baseline and a == baseline
    return d


def serve_page(
    ccb: CCB,
    page: PageInput,
    rng: np.random.Generator,
    eligible: Sequence[np.ndarray | None] | None,
    mode: Mode,
    baselines: Sequence[int],
    epsilon: float,
    epoch: int,
) -> PageDecision:
    """The page served in logging or apprentice ``mode`` around the slots' ``baselines`` (checked,
    :func:`check_baselines`): every slot by :func:`serve_slot` in order, no candidate in two slots;
    on a page of several slots each slot's memo also carries the page's evidence (:data:`PAGE_KEYS`)."""
    n_slots = page.n_slots
    if page.n < n_slots:
        ccb.decide(page, rng, eligible)  # its clear error: fewer candidates than slots
    taken = np.zeros(page.n, dtype=np.bool_)
    prefix = Prefix()
    out = PageDecision()
    for s in range(n_slots):
        allowed = None if eligible is None else eligible[s]
        d = serve_slot(ccb, page, s, taken, rng, allowed, mode, baselines[s], epsilon, epoch, prefix)
        taken[d.label] = True
        out.slots.append(d)
    if n_slots > 1:
        unseen = 1.0 - prefix.learner if mode == "logging" else 0.0
        evidence = (prefix.learner, prefix.served, int(prefix.on_baseline), unseen)
        for d in out.slots:
            d.memo.update(zip(PAGE_KEYS, evidence, strict=True))
    return out
