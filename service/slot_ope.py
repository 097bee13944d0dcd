"""Off-policy evaluation of slot policies on logged pages (issue 53): per-slot IPS and SNIPS with the
logged conditional probabilities, with their effective sample sizes.

A logged page (:mod:`service.pages`; its decision-log records, one per slot, :mod:`service.decision_log`)
holds per slot ``s`` the logging policy's distribution ``p_s(. | a_<s)`` given the items the earlier
slots showed, the item ``a_s`` drawn from it and the slot's reward ``r_s``. A target slot policy
``pi`` gives, for the same page and prefix, its own ``pi_s(. | a_<s)`` (:func:`logging_pmfs`,
:func:`uniform_pmfs`, :func:`policy_pmfs` for a learner under the CCB reduction, frozen). The reward
of slot ``s`` under ``pi`` (which chooses the earlier slots too) is estimated with the weight of the
whole prefix, a product of conditional ratios (the chain rule over the slots; VW's CCB logs carry
exactly these probabilities):

    w_{i,s} = prod_{t <= s} pi_t(a_t | a_<t) / p_t(a_t | a_<t),

* **IPS** ``mean_i w_{i,s} r_{i,s}``: unbiased when ``p`` covers ``pi`` (the exact enumeration of
  ``tests/service/learners/test_ccb_adf.py`` checks the one-factor case);
* **SNIPS** ``sum_i w r / sum_i w``, interval by the delta method,

each with the normal 95 % interval and Kish's effective sample size of the weights, as
:mod:`service.ope` computes them for single decisions (its :class:`~service.ope.Estimate`; below
:data:`~service.ope.MIN_ESS` an estimate says it cannot tell). The page's value is the sum of its
slots' (:func:`evaluate_slots` reports both).

Pages over catalog candidates (issue 54) are left out, as :mod:`service.ope` leaves out single
catalog decisions: their records keep the chosen items alone (:func:`catalog_page`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.features import SparseVector
from service.learners.base import Learner
from service.ope import Estimate, _action_input, _normal
from service.sampling import decision_rng
from service.slots import PageInput

__all__ = [
    "PageLog",
    "catalog_page",
    "evaluate_slots",
    "logging_pmfs",
    "policy_pmfs",
    "slot_ips",
    "slot_snips",
    "uniform_pmfs",
]

#: A target slot policy's pmfs: ``pmfs[i][s]`` over page ``i``'s candidates given its logged prefix.
SlotPmfs = list[list[np.ndarray]]


@dataclass(frozen=True)
class PageLog:
    """Logged pages whose every slot has a reward, in the order they were made.

    Attributes
    ----------
    pages : list of PageInput
        Each page as its model saw it (context, candidates, slots' features and ids).
    ids : list of str
        Each page's decision id.
    shown : ndarray of shape (n, S), int
        The candidate each slot showed.
    probs : list of list of ndarray
        ``probs[i][s]``: the logging policy's distribution of slot ``s`` over page ``i``'s candidates,
        given the earlier slots' items (0 on those).
    rewards : ndarray of shape (n, S), float
        Each slot's reward (a click bit, a graded reward, or the default reward of an expiry).
    allowed : list of list of ndarray of bool
        ``allowed[i][s]``: the candidates slot ``s`` of page ``i`` could show, given the earlier slots'
        items and the request's eligible set (the record's ``eligible``; else every one not taken).
    """

    pages: list[PageInput]
    ids: list[str]
    shown: np.ndarray
    probs: list[list[np.ndarray]]
    rewards: np.ndarray
    allowed: list[list[np.ndarray]]

    @property
    def n(self) -> int:
        return len(self.pages)

    @property
    def n_slots(self) -> int:
        return int(self.shown.shape[1])

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]]) -> PageLog:
        """From decision-log records (JSON lines of :mod:`service.decision_log`): the slot records of
        pages (``page`` set), grouped by page; single decisions, pages with a slot pending or
        dropped, and pages over catalog candidates (:func:`catalog_page`) are left out. ValueError
        when no page is left or the pages' slot counts differ."""
        open_pages: dict[str, dict[int, Mapping[str, Any]]] = {}
        done: list[list[Mapping[str, Any]]] = []
        for rec in records:
            page = rec.get("page")
            if page is None:
                continue
            slots = open_pages.setdefault(page["id"], {})
            slots[int(page["slot"])] = rec
            if len(slots) == int(page["slots"]):
                del open_pages[page["id"]]
                done.append([slots[s] for s in range(len(slots))])
        done = [p for p in done if all(r.get("reward") is not None for r in p)]
        kept = [p for p in done if not catalog_page(p)]  # their other candidates are not in the log
        if not kept:
            skipped = len(done) - len(kept)
            why = f" ({skipped} pages over catalog candidates, which keep their chosen items only)"
            raise ValueError("no logged page with a reward in every slot" + (why if skipped else ""))
        done = kept
        if len({len(p) for p in done}) > 1:
            raise ValueError("the log holds pages of different slot counts: evaluate each layout apart")
        pages, ids, shown, probs, rewards, allowed = [], [], [], [], [], []
        for recs in done:
            f = recs[0]["features"]
            context = SparseVector(
                np.asarray(f["idx"], dtype=np.int64), np.asarray(f["val"], dtype=np.float64), int(f["dim"])
            )
            slots = [
                SparseVector(
                    np.asarray(r["page"]["slot_features"]["idx"], dtype=np.int64),
                    np.asarray(r["page"]["slot_features"]["val"], dtype=np.float64),
                    context.dim,
                )
                for r in recs
            ]
            ids.append(str(recs[0]["page"]["id"]))
            pages.append(
                PageInput(
                    _action_input(context, recs[0]["actions"]), slots, [r["page"]["slot_id"] for r in recs]
                )
            )
            shown.append([int(r["label_index"]) for r in recs])
            probs.append([np.asarray(r["probs"], dtype=np.float64) for r in recs])
            rewards.append([float(r["reward"]) for r in recs])
            allowed.append(
                [
                    _allowed(len(recs[0]["actions"]), r.get("eligible"), shown[-1][:s])
                    for s, r in enumerate(recs)
                ]
            )
        return cls(
            pages,
            ids,
            np.asarray(shown, dtype=np.int64),
            probs,
            np.asarray(rewards, dtype=np.float64),
            allowed,
        )


def catalog_page(slots: list[Mapping[str, Any]]) -> bool:
    """Whether a logged page's slot records are a page over catalog candidates' (issue 54,
    :mod:`service.runtime.catalog_pages`): each slot keeps its own item's probability alone, so a
    slot's ``probs`` sums below 1 (a page of sent actions keeps each slot's whole distribution)."""
    return any(sum(r["probs"]) < 1.0 - 1e-9 for r in slots)


def _allowed(n: int, eligible: list[int] | None, taken: list[int]) -> np.ndarray:
    """A slot's candidates: its record's ``eligible`` ones, else all; never those ``taken`` before it."""
    mask = np.ones(n, dtype=bool) if eligible is None else np.isin(np.arange(n), eligible)
    mask[taken] = False
    return mask


def logging_pmfs(log: PageLog) -> SlotPmfs:
    """The logging policy itself (every weight 1: the estimate is the log's own mean reward)."""
    return [list(p) for p in log.probs]


def uniform_pmfs(log: PageLog) -> SlotPmfs:
    """Uniform over the candidates each slot could show (:attr:`PageLog.allowed`)."""
    return [[mask / mask.sum() for mask in row] for row in log.allowed]


def policy_pmfs(log: PageLog, learner: Learner) -> SlotPmfs:
    """A learner under the CCB reduction, frozen (it learns nothing here): slot ``s``'s distribution
    on the slot's input among the candidates the logged prefix left (its decision's ``probs``, its
    draws seeded by the page id so the result is reproducible)."""
    out = []
    for i, page in enumerate(log.pages):
        rng = decision_rng(log.ids[i])
        row = []
        for s in range(log.n_slots):
            left = log.allowed[i][s]
            d = learner.decide(page.slot_input(s), rng, None if left.all() else left)
            row.append(np.asarray(d.probs, dtype=np.float64))
        out.append(row)
    return out


def _weights(log: PageLog, pmfs: SlotPmfs) -> np.ndarray:
    """``w[i, s]``: the product over slots ``t <= s`` of ``pi_t(a_t) / p_t(a_t)`` (module docstring)."""
    ratio = np.empty((log.n, log.n_slots))
    for i in range(log.n):
        for s in range(log.n_slots):
            a = log.shown[i, s]
            p = log.probs[i][s][a]
            if p <= 0.0:
                raise ValueError(
                    f"page {log.ids[i]!r} slot {s}: its item has probability 0 under the logging policy"
                )
            ratio[i, s] = pmfs[i][s][a] / p
    return np.cumprod(ratio, axis=1)


def slot_ips(log: PageLog, pmfs: SlotPmfs) -> list[Estimate]:
    """Per-slot IPS of the target slot policy ``pmfs``, in slot order."""
    w = _weights(log, pmfs)
    return [_normal(w[:, s] * log.rewards[:, s], w[:, s]) for s in range(log.n_slots)]


def slot_snips(log: PageLog, pmfs: SlotPmfs) -> list[Estimate]:
    """Per-slot self-normalised IPS (delta-method interval), in slot order."""
    w = _weights(log, pmfs)
    out = []
    for s in range(log.n_slots):
        ws, r = w[:, s], log.rewards[:, s]
        total = float(ws.sum())
        if total == 0.0:
            out.append(Estimate(float("nan"), 0.0, 1.0, log.n, 0.0))
            continue
        v = float((ws * r).sum()) / total
        out.append(_normal(ws * (r - v) / ws.mean() + v, ws, value=v))
    return out


def evaluate_slots(
    log: PageLog, policies: Mapping[str, Callable[[PageLog], SlotPmfs]]
) -> dict[str, dict[str, Any]]:
    """Every policy's per-slot IPS and SNIPS (``{"ips": [...], "snips": [...]}`` of
    :meth:`Estimate.as_dict` per slot, ``"slots"`` the slot ids of the first page) and the page's
    IPS value, the sum of its slots'."""
    out = {}
    for name, make in policies.items():
        pmfs = make(log)
        ips, sn = slot_ips(log, pmfs), slot_snips(log, pmfs)
        out[name] = {
            "slots": log.pages[0].ids,
            "ips": [e.as_dict() for e in ips],
            "snips": [e.as_dict() for e in sn],
            "page_ips": sum(e.value for e in ips),
        }
    return out
