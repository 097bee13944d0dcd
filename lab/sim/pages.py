"""Synthetic page-layout streams for multi-slot decisions (issue 53; the generator is ours).

A page shows ``S`` slots in order (a hero banner, a tile, a footer), each filled with a different
item chosen among the round's candidates; the user clicks each slot's item or not.

**World.** ``n_users`` users and ``n_items`` items, each with a latent vector in ``R^k`` (standard
normal, ``k = latent``); each item also has a quality ``q_i ~ N(0, 0.5^2)`` and a category ``c_i``
drawn uniformly among ``categories``. Slot ``s`` has an attention offset ``o_s`` (:attr:`Pages.offsets`:
the hero is seen more than the footer) and each (category, slot) pair an effect ``B[c, s] ~ N(0,
position^2)``: a category that sells in the hero slot and not in the footer.

**What a model sees** (named features, as a client sends them):

- the context (the user): ``u0 .. u{k-1}``, the latent vector plus ``N(0, noise^2)`` noise, rounded to
  3 decimals, and ``segment`` = ``"s{argmax P_u u}"`` (``P_u`` a fixed random ``4 x k`` projection);
- a candidate (an item): ``v0 .. v{k-1}`` likewise, ``category`` = ``"c{c_i}"`` and ``item`` = its id;
- a slot: ``position`` = ``"hero"``, ``"middle"`` or ``"footer"`` (:data:`POSITIONS`), its id the same.

**Reward** of item ``i`` in slot ``s`` for user ``u``:

    P(click | u, i, s) = sigmoid(bias + o_s + B[c_i, s] + q_i + scale u.v_i / sqrt(k)),

a context x item structure (the inner product, linear in the products ``u_j v_l``), an item effect,
the slot's own effect and a slot x item-category effect (linear in ``position x category``), each of
which the rows of :mod:`service.slots` hold. Slots are clicked independently given their items.
Rewards are Bernoulli with common random numbers: round ``t`` has one uniform ``U_{t,s}`` per slot
and slot ``s``'s item is clicked iff ``U_{t,s} < P``, so every system meets the same luck.
**Graded** (``graded``): slot ``s``'s reward is ``P`` itself, a value in (0, 1).

**Duplicates.** A page that shows an item in two slots (independent single-slot decisions can) gets
the reward of its first slot only: a later slot showing an item already on the page earns 0 (no
click; graded: 0), since the user has seen it. The page's reward is the sum of its slots' rewards.

**Rounds.** A user drawn uniformly, then ``n_t`` candidates, ``n_t`` uniform in ``[min_candidates,
max_candidates]`` (5 to 20), drawn without replacement from the items, in random order.

The tuning and evaluation variants (:data:`TUNING`, :data:`EVALUATION`, and graded:
:data:`GRADED_TUNING`, :data:`GRADED_EVALUATION`) differ in generator seeds and sizes; only the
tuning ones are used to choose settings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "EVALUATION",
    "GRADED_EVALUATION",
    "GRADED_TUNING",
    "POSITIONS",
    "STREAMS",
    "TUNING",
    "PageStream",
    "Pages",
]

SEGMENTS = 4
#: The slots' positions, in page order.
POSITIONS = ("hero", "middle", "footer")


@dataclass(frozen=True)
class Pages:
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
        Pages per stream.
    n_users, n_items : int
        Users and items.
    slots : int, default 3
        Slots per page (the first ``slots`` of :data:`POSITIONS`).
    min_candidates, max_candidates : int, default 5 and 20
        The range of candidates per page.
    categories : int, default 4
        Item categories.
    latent : int, default 4
        ``k``.
    noise : float, default 0.3
        Standard deviation of the noise on the observed latent features.
    bias, scale : float, default -1.5 and 1.5
        Of the click model.
    offsets : tuple of float, default (0, -0.5, -1)
        ``o_s``, each slot's attention offset.
    position : float, default 1.0
        Standard deviation of the (category, slot) effects ``B``.
    graded : bool, default False
        Each slot's reward is its item's ``P(click)``, not a click drawn from it.
    """

    name: str
    tuning: bool
    seed0: int
    rounds: int
    n_users: int
    n_items: int
    slots: int = 3
    min_candidates: int = 5
    max_candidates: int = 20
    categories: int = 4
    latent: int = 4
    noise: float = 0.3
    bias: float = -1.5
    scale: float = 1.5
    offsets: tuple[float, ...] = (0.0, -0.5, -1.0)
    position: float = 1.0
    graded: bool = False

    def stream(self, seed: int, rounds: int | None = None) -> PageStream:
        """Stream ``seed`` (generator seed ``seed0 + seed``), cut at ``rounds`` if given."""
        return PageStream(self, self.seed0 + seed, self.rounds if rounds is None else rounds)


TUNING = Pages("pages (tuning)", True, 21_000, 5_000, n_users=300, n_items=150)
EVALUATION = Pages("pages", False, 22_000, 10_000, n_users=1000, n_items=300)
GRADED_TUNING = Pages("pages, graded (tuning)", True, 23_000, 5_000, n_users=300, n_items=150, graded=True)
GRADED_EVALUATION = Pages("pages, graded", False, 24_000, 10_000, n_users=1000, n_items=300, graded=True)
#: Every kind of page stream as (tuning variant, evaluation variant).
STREAMS: tuple[tuple[Pages, Pages], ...] = ((TUNING, EVALUATION), (GRADED_TUNING, GRADED_EVALUATION))


class PageStream:
    """One generated stream: the world and every round's user, candidates and uniforms.

    Attributes
    ----------
    users : ndarray of shape (T,)
        Round ``t``'s user.
    cands : list of ndarray
        Round ``t``'s candidate items (ids ``0 .. n_items - 1``), 5 to 20 of them.
    uniform : ndarray of shape (T, S)
        ``U_{t,s}`` (slot ``s`` clicked iff ``U_{t,s} < P``).
    """

    def __init__(self, pages: Pages, seed: int, rounds: int) -> None:
        self.pages = c = pages
        if not 1 <= c.slots <= len(POSITIONS) or len(c.offsets) < c.slots:
            raise ValueError(f"slots: 1 to {len(POSITIONS)}, with an offset each")
        if not c.slots <= c.min_candidates <= c.max_candidates <= c.n_items:
            raise ValueError("candidates: slots <= min_candidates <= max_candidates <= n_items")
        rng = np.random.default_rng(seed)
        k = c.latent
        self._u = rng.standard_normal((c.n_users, k))
        self._v = rng.standard_normal((c.n_items, k))
        self._q = 0.5 * rng.standard_normal(c.n_items)
        self._cat = rng.integers(c.categories, size=c.n_items)
        self._effect = np.asarray(c.offsets[: c.slots]) + c.position * rng.standard_normal(
            (c.categories, c.slots)
        )
        seg = np.argmax(self._u @ rng.standard_normal((SEGMENTS, k)).T, axis=1)
        u_obs = np.round(self._u + c.noise * rng.standard_normal(self._u.shape), 3)
        v_obs = np.round(self._v + c.noise * rng.standard_normal(self._v.shape), 3)
        self._contexts = [
            {**{f"u{j}": float(x[j]) for j in range(k)}, "segment": f"s{s}"}
            for x, s in zip(u_obs, seg, strict=True)
        ]
        self._actions = [
            {
                "id": f"i{i}",
                "features": {
                    **{f"v{j}": float(x[j]) for j in range(k)},
                    "category": f"c{g}",
                    "item": f"i{i}",
                },
            }
            for i, (x, g) in enumerate(zip(v_obs, self._cat, strict=True))
        ]
        self._slots = [{"id": p, "features": {"position": p}} for p in POSITIONS[: c.slots]]
        self.users = rng.integers(c.n_users, size=rounds)
        sizes = rng.integers(c.min_candidates, c.max_candidates + 1, size=rounds)
        self.cands = [rng.choice(c.n_items, size=int(n), replace=False) for n in sizes]
        self.uniform = rng.random((rounds, c.slots))

    @property
    def rounds(self) -> int:
        return int(self.users.size)

    @property
    def n_slots(self) -> int:
        return self.pages.slots

    def context(self, t: int) -> dict[str, float | str]:
        """Round ``t``'s named context features (the user's)."""
        return self._contexts[self.users[t]]

    def actions(self, t: int) -> list[dict]:
        """Round ``t``'s candidates as ``POST /predict`` takes them (``{"id", "features"}``)."""
        return [self._actions[i] for i in self.cands[t]]

    def action_of(self, item: int) -> dict:
        """Item ``item`` as a candidate (``{"id", "features"}``)."""
        return self._actions[item]

    def slots(self) -> list[dict]:
        """The page's slots in order (``{"id", "features"}``), the same every round."""
        return self._slots

    def prob(self, t: int) -> np.ndarray:
        """``P(click)`` of each of round ``t``'s candidates in each slot: shape ``(n_t, S)``."""
        c = self.pages
        items = self.cands[t]
        taste = c.scale * (self._v[items] @ self._u[self.users[t]]) / np.sqrt(c.latent)
        logit = c.bias + (self._q[items] + taste)[:, None] + self._effect[self._cat[items]]
        return 1.0 / (1.0 + np.exp(-logit))

    def rewards(self, t: int, shown: list[int]) -> list[bool | float]:
        """Each slot's reward for the candidates ``shown`` (indices into round ``t``'s candidates, one
        per slot, in page order): a click (``U_{t,s} < P``) or with ``graded`` ``P``; 0 for a slot
        repeating an item an earlier slot of the page shows (module docstring)."""
        p = self.prob(t)
        out: list[bool | float] = []
        for s, a in enumerate(shown):
            if a in shown[:s]:
                out.append(0.0 if self.pages.graded else False)
            elif self.pages.graded:
                out.append(float(p[a, s]))
            else:
                out.append(bool(self.uniform[t, s] < p[a, s]))
        return out
