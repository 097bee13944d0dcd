"""A shop's catalog stream (issue 54; the generator is ours): 10,000 live items, 1 % of them replaced
every 1,000 visits, clicks from the visitor's features crossed with the item's.

**World.** ``n_users`` visitors and the items of the whole stream (the first ``items`` live at the
start, ``replace`` new ones for each replacement), each with a latent vector in ``R^k`` (standard
normal, ``k = latent``). An item also has a quality ``q ~ N(0, quality^2)``, a category (the argmax
of a fixed random projection ``P_c v`` over ``categories``: items of a category share a taste), a
brand (uniform over ``brands``) and a price; a visitor has a segment (the argmax of ``P_s u`` over
``segments``) and a device. A segment x category affinity ``A ~ N(0, affinity^2)`` per pair.

**What a model sees** (named features, as a client would send them):

- the visitor (the context): ``u0 .. u{k-1}``, the latent vector plus ``N(0, noise^2)`` noise
  rounded to 3 decimals, ``segment`` = ``"s{j}"`` and ``device`` (``"mobile"`` or ``"desktop"``,
  one half each; it changes nothing: a distractor);
- an item: ``v0 .. v{k-1}`` likewise, ``category`` = ``"c{j}"``, ``brand`` = ``"b{j}"``, ``price``
  in dollars (``round(exp(N(3.5, 0.8)), 2)``: a raw unit; it changes nothing either) and
  ``rating``, ``clip(round(3 + 2 q + N(0, 0.3^2), 1), 1, 5)``: the quality seen through noise, as
  stars.

**Reward.** ``P(click | u, i) = sigmoid(bias + q_i + scale u.v_i / sqrt(k) + A[segment(u),
category(i)])``: context x item products (``u_j v_l``, which the rows of :mod:`service.actions`
hold), a categorical x categorical product (``segment x category``), and the item's own quality
(``rating``). Common random numbers: visit ``t`` has one uniform ``U_t`` and the shown item is
clicked iff ``U_t < P(click)``, so every system meets the same luck.

**Visits.** A visitor drawn uniformly; ``random`` candidates drawn without replacement from the
live items, in random order (what a caller that can send 100 candidates does today).
**Replacement**: before visit ``t`` for every ``t`` a positive multiple of ``replace_every``,
``replace`` live items drawn uniformly leave and as many new ones arrive (:meth:`ShopStream.changes`):
1 % every 1,000 visits, 2,000 new items over 20,000 visits. An item *added mid-stream* is one of
those.

Tuning and evaluation streams (:data:`TUNING`, :data:`EVALUATION`) differ in their generator seeds
only (``seed0``): settings are chosen on the tuning seeds only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["EVALUATION", "TUNING", "Shop", "ShopStream"]


@dataclass(frozen=True)
class Shop:
    """A generator setting (the world's sizes and the stream's shape).

    Parameters
    ----------
    name : str
        Name in tables.
    tuning : bool
        Whether settings may be chosen on it.
    seed0 : int
        Generator seed of stream ``s`` is ``seed0 + s``.
    visits : int, default 20,000
        Visits per stream.
    items : int, default 10,000
        Items live at any time.
    replace_every, replace : int, default 1,000 and 100
        Every ``replace_every`` visits ``replace`` live items are replaced (1 %).
    random : int, default 100
        Random live candidates per visit (for systems that are sent candidates).
    n_users : int, default 2,000
        Visitors.
    latent : int, default 4
        ``k``.
    categories, brands, segments : int, default 20, 100 and 4
        Of the items and the visitors.
    noise : float, default 0.3
        Standard deviation of the noise on the observed latent features.
    bias, scale, quality, affinity : float, default -3.5, 1.5, 0.5 and 0.75
        Of the click model.
    """

    name: str
    tuning: bool
    seed0: int
    visits: int = 20_000
    items: int = 10_000
    replace_every: int = 1_000
    replace: int = 100
    random: int = 100
    n_users: int = 2_000
    latent: int = 4
    categories: int = 20
    brands: int = 100
    segments: int = 4
    noise: float = 0.3
    bias: float = -3.5
    scale: float = 1.5
    quality: float = 0.5
    affinity: float = 0.75

    def stream(self, seed: int, visits: int | None = None) -> ShopStream:
        """Stream ``seed`` (generator seed ``seed0 + seed``), cut at ``visits`` if given."""
        return ShopStream(self, self.seed0 + seed, self.visits if visits is None else visits)


TUNING = Shop("shop (tuning)", True, 54_000)
EVALUATION = Shop("shop", False, 54_500)


class ShopStream:
    """One generated stream.

    Attributes
    ----------
    users : ndarray of shape (T,)
        Visit ``t``'s visitor.
    uniform : ndarray of shape (T,)
        ``U_t`` (click iff ``U_t < P(click)``).
    cands : ndarray of shape (T, random)
        Visit ``t``'s random live candidates (item numbers).
    initial : ndarray of shape (items,)
        The items live at the start (``0 .. items - 1``).
    n_items : int
        Items of the whole stream (numbered in order of arrival).
    """

    def __init__(self, shop: Shop, seed: int, visits: int) -> None:
        self.shop = s = shop
        rng = np.random.default_rng(seed)
        k = s.latent
        rounds = (visits - 1) // s.replace_every
        self.n_items = s.items + rounds * s.replace
        self._u = rng.standard_normal((s.n_users, k))
        self._v = rng.standard_normal((self.n_items, k))
        self._q = s.quality * rng.standard_normal(self.n_items)
        self.segment = np.argmax(self._u @ rng.standard_normal((s.segments, k)).T, axis=1)
        self.category = np.argmax(self._v @ rng.standard_normal((s.categories, k)).T, axis=1)
        self._affinity = s.affinity * rng.standard_normal((s.segments, s.categories))
        brand = rng.integers(s.brands, size=self.n_items)
        price = np.round(np.exp(3.5 + 0.8 * rng.standard_normal(self.n_items)), 2)
        rating = np.clip(np.round(3 + 2 * self._q + 0.3 * rng.standard_normal(self.n_items), 1), 1.0, 5.0)
        device = rng.random(s.n_users) < 0.5
        u_obs = np.round(self._u + s.noise * rng.standard_normal(self._u.shape), 3)
        v_obs = np.round(self._v + s.noise * rng.standard_normal(self._v.shape), 3)
        self._contexts = [
            {
                **{f"u{j}": float(x[j]) for j in range(k)},
                "segment": f"s{g}",
                "device": "mobile" if m else "desktop",
            }
            for x, g, m in zip(u_obs, self.segment, device, strict=True)
        ]
        self._features = [
            {
                **{f"v{j}": float(x[j]) for j in range(k)},
                "category": f"c{c}",
                "brand": f"b{b}",
                "price": float(p),
                "rating": float(r),
            }
            for x, c, b, p, r in zip(v_obs, self.category, brand, price, rating, strict=True)
        ]
        self.users = rng.integers(s.n_users, size=visits)
        self.uniform = rng.random(visits)
        self.initial = np.arange(s.items)
        live = self.initial.copy()
        self._changes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.cands = np.empty((visits, s.random), dtype=np.int64)
        for t in range(visits):
            if t and t % s.replace_every == 0:
                at = rng.choice(s.items, size=s.replace, replace=False)
                first = s.items + (t // s.replace_every - 1) * s.replace
                added = np.arange(first, first + s.replace)
                self._changes[t] = (live[at].copy(), added)
                live[at] = added
            self.cands[t] = live[rng.choice(s.items, size=s.random, replace=False)]

    @property
    def visits(self) -> int:
        return int(self.users.size)

    def changes(self, t: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The items leaving and arriving before visit ``t`` (None: no change then)."""
        return self._changes.get(t)

    def item_id(self, item: int) -> str:
        """Item ``item``'s id in the catalog (``"i{item}"``)."""
        return f"i{item}"

    def features(self, item: int) -> dict[str, float | str]:
        """Item ``item``'s named features."""
        return self._features[item]

    def context(self, t: int) -> dict[str, float | str]:
        """Visit ``t``'s named context features (its visitor's)."""
        return self.context_of(int(self.users[t]))

    def context_of(self, user: int) -> dict[str, float | str]:
        """Visitor ``user``'s named features."""
        return self._contexts[user]

    def prob(self, t: int, items: np.ndarray) -> np.ndarray:
        """``P(click)`` of ``items`` at visit ``t``."""
        s = self.shop
        user = self.users[t]
        taste = s.scale * (self._v[items] @ self._u[user]) / np.sqrt(s.latent)
        logit = s.bias + self._q[items] + taste + self._affinity[self.segment[user], self.category[items]]
        return 1.0 / (1.0 + np.exp(-logit))

    def click(self, t: int, item: int) -> bool:
        """Whether item ``item`` is clicked when shown at visit ``t``."""
        return bool(self.uniform[t] < self.prob(t, np.array([item]))[0])

    def added_mid_stream(self, item: int) -> bool:
        """Whether ``item`` arrived after the start."""
        return item >= self.shop.items
