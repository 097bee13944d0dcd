"""Synthetic catalog streams for action-feature models (issue 39; the generator is ours).

**World.** ``n_users`` users and a stream of items, each with a latent vector in ``R^k`` (standard
normal, ``k = latent``); each item also has a quality ``q ~ N(0, 0.5^2)``. Two fixed random
projections ``P_u, P_v`` (``4 x k``) group users into segments and items into categories.

**What a model sees** (named features, as a client would send them):

- the context (the user): ``u0 .. u{k-1}``, the latent vector plus ``N(0, noise^2)`` noise, rounded
  to 3 decimals, and ``segment`` = ``"s{argmax P_u u}"``;
- a candidate (an item): ``v0 .. v{k-1}`` likewise, ``category`` = ``"c{argmax P_v v}"`` and
  ``item`` = its id (so a model may learn an item's quality once it has seen it; a new item's id says
  nothing).

**Reward.** ``P(click | u, i) = sigmoid(bias + q_i + scale u.v_i / sqrt(k))``: a context x action
structure (the inner product is linear in the products ``u_j v_l`` that the rows of
:mod:`service.actions` and VW's ``-q`` hold) plus an item effect. Rewards are Bernoulli with common
random numbers: round ``t`` has one uniform ``U_t`` and the shown item is clicked iff
``U_t < P(click)``, so every system meets the same luck. **Graded** (``graded``): the reward is
``P(click)`` of the item shown itself, a value in (0, 1) (a dwell time or a basket's share, say).

**Prices** (``prices``, issue 50): numbers in a raw unit. Each item also has ``price``, drawn from
``prices`` (dollars), and each user ``budget``, ``round(2500 + 800 s_u)`` (dollars a month) with
``s_u ~ N(0, 1)``; the logit gains ``-price_weight s_u (price - m) / sd`` (``m``, ``sd``: the mean
and deviation of ``prices``): linear in ``budget x price``, ``price``, ``budget`` and the constant,
so the rows can hold it, in units that span four orders of magnitude.

**Dayparts** (``dayparts``, issue 50): a reward nonlinear in the features. Each round also has a
``daypart``, ``"day"`` or ``"evening"`` (one half each), and in the evening a user's taste is
``u.(R v_i)`` with ``R`` a cyclic shift of the latent coordinates: ``u_j [evening] v_l``, a product
of two context features and an action feature, which no sum of context x action products holds.

**Rounds.** A user drawn uniformly, then ``candidates`` items drawn without replacement from the
items live in that round, in random order.

**Churn** (``arrival > 0``): ``live`` items are live at any time; every ``arrival`` rounds a new item
enters and the oldest live item leaves, so new items keep arriving for the whole stream. An item's
*appearances* are the rounds in which it is a candidate (:meth:`CatalogStream.appearance`).

The tuning and evaluation variants (:data:`TUNING`, :data:`EVALUATION`, :data:`CHURN_TUNING`,
:data:`CHURN_EVALUATION`) differ in generator seeds and sizes; only the tuning ones are used to choose
settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = [
    "CHURN_EVALUATION",
    "CHURN_GRADED_EVALUATION",
    "CHURN_GRADED_TUNING",
    "CHURN_TUNING",
    "EVALUATION",
    "GRADED_EVALUATION",
    "GRADED_TUNING",
    "NONLINEAR_EVALUATION",
    "NONLINEAR_TUNING",
    "PRICE_EVALUATION",
    "PRICE_TUNING",
    "STREAMS",
    "TUNING",
    "Catalog",
    "CatalogStream",
]

SEGMENTS = 4


@dataclass(frozen=True)
class Catalog:
    """A generator setting (the world's sizes and the stream's shape).

    Parameters
    ----------
    name : str
        Name in tables.
    tuning : bool
        Whether settings may be chosen on it.
    seed0 : int
        Generator seed of stream ``s`` is ``seed0 + s``.
    rounds : int
        Rounds per stream.
    n_users : int
        Users.
    live : int
        Items live at a time (the whole catalog when ``arrival`` is 0).
    arrival : int, default 0
        Rounds between two new items (0: a fixed catalog).
    candidates : int, default 10
        Candidates per round.
    latent : int, default 4
        ``k``.
    noise : float, default 0.3
        Standard deviation of the noise on the observed latent features.
    bias, scale : float, default -1.5 and 1.5
        Of the click model.
    graded : bool, default False
        The reward is the shown item's ``P(click)``, not a click drawn from it.
    prices : tuple of float, default ()
        Items' prices (a ``price`` feature each, users a ``budget``); empty: none.
    price_weight : float, default 1.0
        Of the price term.
    dayparts : bool, default False
        Rounds have a ``daypart``; the evening's taste is shifted.
    """

    name: str
    tuning: bool
    seed0: int
    rounds: int
    n_users: int
    live: int
    arrival: int = 0
    candidates: int = 10
    latent: int = 4
    noise: float = 0.3
    bias: float = -1.5
    scale: float = 1.5
    graded: bool = False
    prices: tuple[float, ...] = ()
    price_weight: float = 1.0
    dayparts: bool = False

    def stream(self, seed: int, rounds: int | None = None) -> CatalogStream:
        """Stream ``seed`` (generator seed ``seed0 + seed``), cut at ``rounds`` if given."""
        return CatalogStream(self, self.seed0 + seed, self.rounds if rounds is None else rounds)


TUNING = Catalog("synthetic (tuning)", True, 1000, 5_000, n_users=300, live=150)
EVALUATION = Catalog("synthetic", False, 2000, 10_000, n_users=1000, live=300)
CHURN_TUNING = Catalog("churn (tuning)", True, 3000, 5_000, n_users=300, live=100, arrival=20)
CHURN_EVALUATION = Catalog("churn", False, 4000, 10_000, n_users=1000, live=100, arrival=20)
GRADED_TUNING = Catalog("synthetic, graded (tuning)", True, 5000, 5_000, n_users=300, live=150, graded=True)
GRADED_EVALUATION = Catalog("synthetic, graded", False, 6000, 10_000, n_users=1000, live=300, graded=True)
CHURN_GRADED_TUNING = Catalog(
    "churn, graded (tuning)", True, 7000, 5_000, n_users=300, live=100, arrival=20, graded=True
)
CHURN_GRADED_EVALUATION = Catalog(
    "churn, graded", False, 8000, 10_000, n_users=1000, live=100, arrival=20, graded=True
)
#: Prices as a shop's: dollars from 29 to 349.
PRICES = (29.0, 49.0, 79.0, 119.0, 199.0, 349.0)
PRICE_TUNING = Catalog("prices (tuning)", True, 9000, 5_000, n_users=300, live=150, prices=PRICES)
PRICE_EVALUATION = Catalog("prices", False, 10_000, 10_000, n_users=1000, live=300, prices=PRICES)
NONLINEAR_TUNING = Catalog("dayparts (tuning)", True, 11_000, 5_000, n_users=300, live=150, dayparts=True)
NONLINEAR_EVALUATION = Catalog("dayparts", False, 12_000, 10_000, n_users=1000, live=300, dayparts=True)
#: Every kind of stream as (tuning variant, evaluation variant).
STREAMS: tuple[tuple[Catalog, Catalog], ...] = (
    (TUNING, EVALUATION),
    (CHURN_TUNING, CHURN_EVALUATION),
    (GRADED_TUNING, GRADED_EVALUATION),
    (CHURN_GRADED_TUNING, CHURN_GRADED_EVALUATION),
    (PRICE_TUNING, PRICE_EVALUATION),
    (NONLINEAR_TUNING, NONLINEAR_EVALUATION),
)


class CatalogStream:
    """One generated stream: the world and every round's user, candidates and uniform.

    Attributes
    ----------
    users : ndarray of shape (T,)
        Round ``t``'s user.
    cands : ndarray of shape (T, candidates)
        Round ``t``'s candidate items (ids ``0 .. n_items - 1`` in order of arrival).
    uniform : ndarray of shape (T,)
        ``U_t`` (click iff ``U_t < P(click)``).
    evening : ndarray of shape (T,)
        Whether round ``t`` is in the evening (all False without ``dayparts``).
    n_items : int
        Items in the whole stream.
    """

    def __init__(self, catalog: Catalog, seed: int, rounds: int) -> None:
        self.catalog = c = catalog
        rng = np.random.default_rng(seed)
        k = c.latent
        self.n_items = c.live + (rounds // c.arrival if c.arrival else 0)
        self._u = rng.standard_normal((c.n_users, k))
        self._v = rng.standard_normal((self.n_items, k))
        self._q = 0.5 * rng.standard_normal(self.n_items)
        seg = np.argmax(self._u @ rng.standard_normal((SEGMENTS, k)).T, axis=1)
        cat = np.argmax(self._v @ rng.standard_normal((SEGMENTS, k)).T, axis=1)
        u_obs = np.round(self._u + c.noise * rng.standard_normal(self._u.shape), 3)
        v_obs = np.round(self._v + c.noise * rng.standard_normal(self._v.shape), 3)
        self._contexts = [
            {**{f"u{j}": float(x[j]) for j in range(k)}, "segment": f"s{s}"}
            for x, s in zip(u_obs, seg, strict=True)
        ]
        self._actions = [
            {"id": f"i{i}", "features": {**{f"v{j}": float(x[j]) for j in range(k)}, "category": f"c{s}"}}
            for i, (x, s) in enumerate(zip(v_obs, cat, strict=True))
        ]
        for a in self._actions:
            a["features"]["item"] = a["id"]
        # Drawn after everything above, so that a stream without prices or dayparts is the same
        # stream it was before they existed.
        self._price_term = np.zeros((c.n_users, self.n_items))
        if c.prices:
            s_u = rng.standard_normal(c.n_users)
            price = rng.choice(np.asarray(c.prices), size=self.n_items)
            z = (price - np.mean(c.prices)) / np.std(c.prices)
            self._price_term = -c.price_weight * np.outer(s_u, z)
            for x, s in zip(self._contexts, s_u, strict=True):
                x["budget"] = float(np.round(2500 + 800 * s))
            for a, p in zip(self._actions, price, strict=True):
                a["features"]["price"] = float(p)
        # the label models' dense context: the observed latent vector and the segment one-hot
        self._dense = np.hstack([u_obs, np.eye(SEGMENTS)[seg]])
        self.users = rng.integers(c.n_users, size=rounds)
        self.cands = np.empty((rounds, c.candidates), dtype=np.int64)
        for t in range(rounds):
            first = t // c.arrival if c.arrival else 0  # the oldest live item
            self.cands[t] = first + rng.choice(c.live, size=c.candidates, replace=False)
        self.uniform = rng.random(rounds)
        self.evening = rng.random(rounds) < 0.5 if c.dayparts else np.zeros(rounds, dtype=np.bool_)

    @property
    def rounds(self) -> int:
        return int(self.users.size)

    def context(self, t: int) -> dict[str, float | str]:
        """Round ``t``'s named context features (the user's, and the daypart with ``dayparts``)."""
        named = self._contexts[self.users[t]]
        if self.catalog.dayparts:
            return {**named, "daypart": "evening" if self.evening[t] else "day"}
        return named

    def context_of(self, user: int) -> dict[str, float | str]:
        """User ``user``'s named features (without the round's daypart)."""
        return self._contexts[user]

    def actions(self, t: int) -> list[dict]:
        """Round ``t``'s candidates as ``POST /predict`` takes them (``{"id", "features"}``)."""
        return [self._actions[i] for i in self.cands[t]]

    def action_of(self, item: int) -> dict:
        """Item ``item`` as a candidate (``{"id", "features"}``)."""
        return self._actions[item]

    def dense_context(self, t: int) -> np.ndarray:
        """Round ``t``'s context as a label model's dense input: ``latent + 4`` values, then the
        budget with ``prices`` and the evening's indicator with ``dayparts``."""
        x = self._dense[self.users[t]]
        named = self.context(t)
        extra = [named["budget"]] if self.catalog.prices else []
        extra += [float(self.evening[t])] if self.catalog.dayparts else []
        return np.append(x, extra) if extra else x

    def prob(self, t: int) -> np.ndarray:
        """``P(click)`` of each of round ``t``'s candidates."""
        c = self.catalog
        v = self._v[self.cands[t]]
        if self.evening[t]:
            v = np.roll(v, 1, axis=1)  # R: the evening's taste
        user = self.users[t]
        taste = c.scale * (v @ self._u[user]) / np.sqrt(c.latent)
        logit = c.bias + self._q[self.cands[t]] + taste + self._price_term[user, self.cands[t]]
        return 1.0 / (1.0 + np.exp(-logit))

    def reward(self, t: int, a: int) -> bool | float:
        """Candidate ``a``'s reward (an index into round ``t``'s candidates): whether it is clicked,
        or with ``graded`` its ``P(click)``."""
        p = float(self.prob(t)[a])
        return p if self.catalog.graded else bool(self.uniform[t] < p)

    @cached_property
    def appearance(self) -> np.ndarray:
        """``appearance[t, a]``: how many times round ``t``'s candidate ``a`` has been a candidate up to and
        including round ``t`` (1 on its first appearance)."""
        seen = np.zeros(self.n_items, dtype=np.int64)
        out = np.empty_like(self.cands)
        for t in range(self.rounds):
            seen[self.cands[t]] += 1
            out[t] = seen[self.cands[t]]
        return out
