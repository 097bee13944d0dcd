"""The learner contract, the shared exploration helpers and the learner registry.

Every learner follows the stack of Vowpal Wabbit's reductions: a scorer produces a greedy label, an
explorer (:func:`gamma_mix` or :func:`rho_mix`) turns it into a distribution, :func:`sample` draws
the label shown to the user, and ``learn`` turns the click bit into an unbiased update.

Contract (``../shared/DESIGN.md``, ALGORITHMS.md §1):

``decide(x, rng, eligible=None) -> Decision``
    Must not change the model. Everything ``learn`` needs from prediction time travels in
    ``Decision.memo`` so the update is exact even when other updates landed in between.
    ``eligible`` (a boolean mask of the K labels, or None for all) restricts the decision to the
    labels a request allows: the greedy label is the best eligible one, exploration spreads over
    the eligible labels only (K replaced by their number m in the mixing rule), the probabilities
    are 0 outside the set and the mask travels in ``memo["eligible"]``. Each learner's ``learn``
    divides by the probability the masked distribution gave, so its estimate stays unbiased for
    every true label in the set; it never needs the mask again. Without a mask a decision draws
    exactly what it drew before masks existed.
``learn(x, decision, reward)``
    The bandit update; a deterministic function of (state, x, decision, reward). Randomness it
    needs comes from ``self.rng_``, which is part of the state. ``reward`` is the click bit, or
    for a learner with ``graded = True`` possibly a graded reward, a float strictly between 0 and
    1 (issue 38); every other learner gets a Bernoulli(reward) bit drawn for it by the runtime
    (:func:`service.sampling.reward_bit`, seeded by the decision id), so its update stays
    unbiased in expectation. Each learner's docstring says which it does.
``state()`` / ``from_state(config, state)``
    Learned state as flat numpy arrays and scalars with a schema version; no pickle.

Hyperparameters are stored verbatim in ``self.params`` (a frozen pydantic model validated at
construction); learned state lives in attributes whose names end with ``_``.
"""

from __future__ import annotations

import abc
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, ClassVar

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
)

from service.kernels import sparse_argmax, sparse_scores
from service.registry import Registry
from service.serial import State, StateFormatError

__all__ = [
    "Decision",
    "Learner",
    "ParamError",
    "Params",
    "Stateful",
    "as_mask",
    "gamma_mix",
    "learner_from_state",
    "learners",
    "make_learner",
    "masked_argmax",
    "masked_argmax_ties",
    "masked_decision",
    "over_ties",
    "randargmax",
    "randargmax_ties",
    "randargmin",
    "rho_mix",
    "sample",
    "sample_list",
    "sparse_greedy",
    "sparse_greedy_ties",
    "tie_marginal",
]


class ParamError(ValueError):
    """A hyperparameter or a learner configuration is invalid; the message says which and why."""


# --------------------------------------------------------------------------------------------
# Exploration: the two parameterisations of ALGORITHMS.md ("Two exploration parameterisations")
# --------------------------------------------------------------------------------------------


def gamma_mix(k: int, greedy: int, gamma: float) -> np.ndarray:
    """Banditron / Chen et al. 2014 exploration: ``p(r) = (1-gamma) 1[r = greedy] + gamma / k``.

    Off-greedy mass is ``gamma (k-1) / k``; exploration may also pick the greedy label itself
    (seed 002, Algorithm 1, with the erratum of ALGORITHMS.md §5).
    """
    p = [gamma / k] * k  # a list first: cheaper than numpy for K values, same floats
    p[greedy] += 1.0 - gamma
    return np.array(p)


def rho_mix(k: int, greedy: int, rho: float) -> np.ndarray:
    """Zhang, Jung, Tewari 2019 eq. (2): ``p(greedy) = 1 - rho``, ``p(l) = rho / (k-1)`` otherwise."""
    p = [rho / (k - 1)] * k
    p[greedy] = 1.0 - rho
    return np.array(p)


# The three helpers below run once per decision on vectors of K values, where a few numpy calls
# cost more than the arithmetic: they work on Python lists (same results, same draws from ``rng``).


def _pick(s: list[float], best: float, rng: np.random.Generator) -> tuple[int, list[int]]:
    if s.count(best) == 1:
        i = s.index(best)
        return i, [i]
    ties = [i for i, a in enumerate(s) if a == best]
    return ties[int(rng.integers(len(ties)))], ties


def randargmax(v: np.ndarray, rng: np.random.Generator) -> int:
    """Index of a maximum of ``v``, uniform among ties; draws from ``rng`` only when there is a tie."""
    return randargmax_ties(v, rng)[0]


def randargmax_ties(v: np.ndarray, rng: np.random.Generator) -> tuple[int, list[int]]:
    """:func:`randargmax` (the same draw) and every maximiser of ``v``: the set it was drawn from."""
    s = v.tolist()
    return _pick(s, max(s), rng)


def sparse_greedy(W: np.ndarray, idx: np.ndarray, val: np.ndarray, rng: np.random.Generator) -> int:
    """:func:`randargmax` of the scores ``W[:, idx] @ val`` of a sparse input (compiled; the scores
    are built only on a tie, the one case that draws from ``rng``)."""
    return sparse_greedy_ties(W, idx, val, rng)[0]


def sparse_greedy_ties(
    W: np.ndarray, idx: np.ndarray, val: np.ndarray, rng: np.random.Generator
) -> tuple[int, list[int]]:
    """:func:`sparse_greedy` (the same draw) and the tied maximisers it was drawn from."""
    greedy, count = sparse_argmax(W, idx, val)
    return randargmax_ties(sparse_scores(W, idx, val), rng) if count > 1 else (greedy, [greedy])


def randargmin(v: np.ndarray, rng: np.random.Generator) -> int:
    """Index of a minimum of ``v``, uniform among ties (see :func:`randargmax`)."""
    s = v.tolist()
    return _pick(s, min(s), rng)[0]


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Draw an index from the distribution ``p`` by inverting its CDF with one uniform draw.

    The CDF is summed left to right, exactly as ``np.cumsum``; the index is the first CDF value
    strictly above ``u * total`` (``searchsorted(..., side="right")``), capped at ``K - 1``.
    """
    return sample_list(p.tolist(), rng)


def sample_list(p: list[float], rng: np.random.Generator) -> int:
    """:func:`sample` of a distribution given as a list (the same draw, without a numpy array)."""
    c = list(accumulate(p))
    return min(bisect_right(c, rng.random() * c[-1]), len(c) - 1)


# --------------------------------------------------------------------------------------------
# Eligible labels (issue 38): the same exploration restricted to a mask of the K labels
# --------------------------------------------------------------------------------------------


def as_mask(eligible: np.ndarray | None, k: int) -> np.ndarray | None:
    """``eligible`` as a boolean mask of the ``k`` labels, or None when every label is eligible (so
    such a decision takes the unmasked path and draws what it always drew); ValueError if it has
    the wrong shape or allows no label."""
    if eligible is None:
        return None
    mask = np.asarray(eligible)
    if mask.dtype != np.bool_ or mask.shape != (k,):
        raise ValueError(f"eligible must be a boolean mask of the {k} labels, got {mask.dtype} {mask.shape}")
    if not mask.any():
        raise ValueError("eligible allows no label")
    return None if mask.all() else mask


def masked_argmax(v: np.ndarray, mask: np.ndarray, rng: np.random.Generator, first: bool = False) -> int:
    """:func:`randargmax` of ``v`` over the eligible labels only (uniform among eligible ties, one
    draw from ``rng`` only on a tie; ``first``: the first eligible maximiser, no draw)."""
    return masked_argmax_ties(v, mask, rng, first)[0]


def masked_argmax_ties(
    v: np.ndarray, mask: np.ndarray, rng: np.random.Generator, first: bool = False
) -> tuple[int, list[int]]:
    """:func:`masked_argmax` (the same draw) and the set it was drawn from: the tied eligible
    maximisers, or the one label picked when nothing was drawn (``first``, a single maximiser)."""
    s = v.tolist()
    eligible = np.flatnonzero(mask).tolist()
    best = max(s[i] for i in eligible)
    ties = [i for i in eligible if s[i] == best] or eligible[:1]  # all NaN: the first eligible
    if len(ties) == 1 or first:
        return ties[0], ties[:1]
    return ties[int(rng.integers(len(ties)))], ties


def _masked_mix(mask: np.ndarray, greedy: int, rate: float, rule: str) -> np.ndarray:
    """The exploration rule ``rule`` over the m eligible labels: ``"gamma"`` (:func:`gamma_mix` with K
    replaced by m) or ``"rho"`` (:func:`rho_mix` over m labels, with ``rho`` capped at ``(m-1)/m``
    so the greedy label keeps the largest probability, as the boosters' condition asks of K). One
    eligible label: probability 1. Zero outside the mask."""
    eligible = np.flatnonzero(mask).tolist()
    m = len(eligible)
    p = [0.0] * mask.size
    if rule == "gamma":
        for i in eligible:
            p[i] = rate / m
        p[greedy] += 1.0 - rate
    else:
        rho = min(rate, (m - 1) / m)
        for i in eligible:
            p[i] = rho / (m - 1) if m > 1 else 0.0
        p[greedy] = 1.0 - rho
    return np.array(p)


def masked_decision(
    greedy: int,
    mask: np.ndarray,
    rate: float,
    rule: str,
    rng: np.random.Generator,
    memo: dict[str, Any],
    ties: Sequence[int] = (),
    keep: bool = False,
) -> Decision:
    """The decision around the eligible ``greedy`` label: :func:`_masked_mix`'s distribution, the label
    drawn with one uniform as :func:`sample` draws (never an ineligible one: where ``sample``'s cap
    at K - 1 would land outside the set, the last eligible label), and the mask in the memo.
    ``ties`` and ``keep``: the set ``greedy`` was drawn from, see :func:`over_ties`."""
    p = _masked_mix(mask, greedy, rate, rule)
    label = sample(p, rng)
    if p[label] == 0.0:
        label = int(np.flatnonzero(p)[-1])
    return over_ties(Decision(p, label, {**memo, "eligible": mask}), ties, rate, rule, mask, keep)


# --------------------------------------------------------------------------------------------
# Ties (issue 50): the reported distribution is the marginal over the tie-break
# --------------------------------------------------------------------------------------------


def tie_marginal(
    k: int, ties: Sequence[int], rate: float, rule: str, mask: np.ndarray | None = None
) -> np.ndarray:
    """The distribution of a label drawn in two stages: the greedy label uniform over ``ties``, then
    the label from the rule's mix around it (``"gamma"``: :func:`gamma_mix`, ``"rho"``:
    :func:`rho_mix`, or their forms over the eligible labels of ``mask``, :func:`_masked_mix`).

    The mean of the mixes: ``gamma``: ``rate / m`` on the m eligible labels plus ``(1 - rate) / t``
    on each of the t tied ones; ``rho``: ``rho / (m - 1)`` off the ties and ``(1 - rho) / t + rho /
    (m - 1) (t - 1) / t`` on them. ``rate = 0`` under ``"gamma"`` is the greedy label alone, so the
    uniform distribution over the ties."""
    eligible = list(range(k)) if mask is None else np.flatnonzero(mask).tolist()
    m, t = len(eligible), len(ties)
    p = [0.0] * k
    if rule == "gamma":
        for i in eligible:
            p[i] = rate / m
        for g in ties:
            p[g] += (1.0 - rate) / t
    else:
        rho = rate if mask is None else min(rate, (m - 1) / m)
        off = rho / (m - 1) if m > 1 else 0.0
        for i in eligible:
            p[i] = off
        for g in ties:
            p[g] = (1.0 - rho) / t + off * (t - 1) / t
    return np.array(p)


def over_ties(
    d: Decision,
    ties: Sequence[int],
    rate: float,
    rule: str,
    mask: np.ndarray | None = None,
    keep: bool = False,
) -> Decision:
    """``d``, drawn around a greedy label that was itself drawn uniformly from ``ties``, with the
    probabilities it reports replaced by the marginal over that tie-break (:func:`tie_marginal`):
    the probability with which each label was really drawn, what the answer, the decision log and
    off-policy evaluation need. Nothing changes with fewer than two ties, nor in the draws.

    ``keep``: the distribution given the greedy label (``d.probs``) goes to ``memo["conditional"]``
    for ``learn`` (:attr:`Decision.conditional`): the papers' importance weights condition on their
    greedy label (Banditron's ``1 / P(y~)`` is defined given ``y^``; so are BanditBoost's and
    estimator (4) of the tree boosters), and keeping it keeps every update what it was."""
    if len(ties) < 2:
        return d
    memo = {**d.memo, "conditional": d.probs} if keep else d.memo
    return Decision(tie_marginal(d.probs.size, ties, rate, rule, mask), d.label, memo)


# --------------------------------------------------------------------------------------------
# Decisions, parameters, state
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Decision:
    """What ``decide`` returns and ``learn`` consumes.

    Attributes
    ----------
    probs : ndarray of shape (K,)
        The distribution the label was sampled from: after a tie-break, the marginal over it (the
        probability with which each label was really drawn, :func:`over_ties`).
    label : int
        The sampled label (0-based), shown to the user.
    memo : dict
        Small arrays and scalars from prediction time that ``learn`` needs (greedy label, weak
        predictions, vote vectors, expert index, ...). Keys are learner-specific.
    """

    probs: np.ndarray
    label: int
    memo: dict[str, Any] = field(default_factory=dict)

    @property
    def probability(self) -> float:
        """Probability with which ``label`` was sampled."""
        return float(self.probs[self.label])

    @property
    def conditional(self) -> np.ndarray:
        """The distribution the label was drawn from given the decision's greedy label: what an
        importance-weighted ``learn`` divides by. It differs from :attr:`probs` (the marginal over
        the tie-break) only after a tie, and is then kept in ``memo["conditional"]``
        (:func:`over_ties`)."""
        cond = self.memo.get("conditional")
        return self.probs if cond is None else np.asarray(cond, dtype=np.float64)

    def to_state(self) -> State:
        """Flat dictionary for :mod:`service.serial` (decision records in the store)."""
        out: State = {"probs": np.asarray(self.probs, dtype=np.float64), "label": int(self.label)}
        for k, v in self.memo.items():
            out[f"memo.{k}"] = v
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Decision:
        """Inverse of :meth:`to_state`."""
        try:
            probs = np.asarray(state["probs"], dtype=np.float64)
            label = int(state["label"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFormatError(f"bad decision record: {exc}") from None
        memo = {k[5:]: v for k, v in state.items() if k.startswith("memo.")}
        return cls(probs, label, memo)


class Params(BaseModel):
    """Base class of every learner's hyperparameters: frozen, no unknown keys, validated.

    ``model_dump()`` gives every parameter, so ``parse(p.model_dump())`` is ``p`` for every learner
    (tests/service/test_params_stored.py). Older stored forms are read where they are read:
    :meth:`legacy` for models stored before parameters were stored complete, :meth:`key` for the
    lab's run keys.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
    #: Parameters added after runs were stored, at the values they had before they existed: left out
    #: of :meth:`key`, so a stored run of a setting that existed before them keeps its key.
    omit_at: ClassVar[dict[str, Any]] = {}

    def complete(self) -> dict[str, Any]:
        """Every parameter as JSON: what a served model is stored with, so that a later change of a
        default never changes a model that exists."""
        return self.model_dump(mode="json")

    def key(self) -> dict[str, Any]:
        """The parameters as JSON without those at their :attr:`omit_at` value: the form the lab's
        stored runs are keyed by (``bench quality``), never used to rebuild a learner."""
        out = self.complete()
        for name, value in self.omit_at.items():
            if name in out and out[name] == value:
                del out[name]
        return out

    @classmethod
    def legacy(cls, values: Mapping[str, Any] | None) -> dict[str, Any]:
        """``values`` stored before models were stored with :meth:`complete` parameters: a parameter
        they lack meant its :attr:`omit_at` value (what it was before it existed or its default moved)."""
        return {**cls.omit_at, **dict(values or {})}

    @classmethod
    def parse(cls, owner: str, values: Mapping[str, Any] | None) -> Params:
        """Validate ``values``; raise :class:`ParamError` with one readable line per problem."""
        try:
            return cls.model_validate(dict(values or {}))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                loc = ".".join(str(p) for p in err["loc"]) or "params"
                got = f" (got {err['input']!r})" if err["type"] != "missing" else ""
                problems.append(f"{loc}: {err['msg']}{got}")
            raise ParamError(f"{owner}: " + "; ".join(problems)) from None


def _pack_rng(rng: np.random.Generator) -> np.ndarray:
    st = rng.bit_generator.state
    if st["bit_generator"] != "PCG64":
        raise StateFormatError(f"only PCG64 generators are serialisable, not {st['bit_generator']}")
    s, inc = st["state"]["state"], st["state"]["inc"]
    mask = (1 << 64) - 1
    words = [s & mask, s >> 64, inc & mask, inc >> 64, st["has_uint32"], st["uinteger"]]
    return np.array(words, dtype=np.uint64)


def _unpack_rng(words: np.ndarray) -> np.random.Generator:
    if words.shape != (6,) or words.dtype != np.uint64:
        raise StateFormatError("rng state must be uint64[6]")
    w = [int(v) for v in words]
    gen = np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": w[0] | (w[1] << 64), "inc": w[2] | (w[3] << 64)},
        "has_uint32": w[4],
        "uinteger": w[5],
    }
    return gen


class Stateful:
    """Mixin: learned state = the attributes whose names end with ``_``.

    Supported values: numpy arrays, Python/numpy scalars, a ``numpy.random.Generator`` (PCG64),
    nested :class:`Stateful` objects and lists of them (flattened as ``"attr.i.key"``). Loading
    compares every value with the freshly constructed object's: same keys, same dtype and number of
    dimensions, and the same shape unless the attribute is listed in ``_growable``.
    """

    _growable: ClassVar[frozenset[str]] = frozenset()

    def get_state(self, copy: bool = True) -> State:
        """Flat dictionary of the learned state (copies of the arrays; views with ``copy=False``,
        for reading only: hashing, encoding, measuring)."""
        out: State = {}
        for key, value in vars(self).items():
            if not key.endswith("_"):
                continue
            if isinstance(value, Stateful):
                out.update({f"{key}.{k}": v for k, v in value.get_state(copy).items()})
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    out.update({f"{key}.{i}.{k}": v for k, v in item.get_state(copy).items()})
            elif isinstance(value, np.random.Generator):
                out[key] = _pack_rng(value)
            elif isinstance(value, np.ndarray):
                out[key] = value.copy() if copy else value
            elif isinstance(value, np.generic):
                out[key] = value.item()
            else:
                out[key] = value
        return out

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Overwrite the learned state from ``state`` after validating it against this object."""
        expected = self.get_state()
        if set(expected) != set(state):
            missing = sorted(set(expected) - set(state))
            extra = sorted(set(state) - set(expected))
            raise StateFormatError(f"state keys differ: missing {missing}, unexpected {extra}")
        for key, value in vars(self).items():
            if not key.endswith("_"):
                continue
            if isinstance(value, Stateful):
                value.set_state(_sub(state, f"{key}."))
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    item.set_state(_sub(state, f"{key}.{i}."))
            elif isinstance(value, np.random.Generator):
                setattr(self, key, _unpack_rng(np.asarray(state[key])))
            elif isinstance(value, np.ndarray):
                new = state[key]
                if not isinstance(new, np.ndarray) or new.dtype != value.dtype:
                    raise StateFormatError(f"state[{key!r}]: expected a {value.dtype} array")
                if new.ndim != value.ndim or (key not in self._growable and new.shape != value.shape):
                    raise StateFormatError(f"state[{key!r}]: expected shape {value.shape}, got {new.shape}")
                if new.dtype.kind == "f" and not np.all(np.isfinite(new)):
                    raise StateFormatError(f"state[{key!r}]: contains NaN or Inf")
                # The layout of the array it replaces (see use_sparse_layout).
                fortran = value.flags.f_contiguous and not value.flags.c_contiguous
                setattr(self, key, new.copy(order="F" if fortran else "C"))
            else:
                new = state[key]
                if not _same_scalar_kind(value, new):
                    raise StateFormatError(f"state[{key!r}]: expected {type(value).__name__}")
                setattr(self, key, type(value)(new))


def _same_scalar_kind(old: Any, new: Any) -> bool:
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool)
    if isinstance(old, float):
        return isinstance(new, int | float)
    return isinstance(new, type(old))


def _sub(state: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    n = len(prefix)
    return {k[n:]: v for k, v in state.items() if k.startswith(prefix)}


# --------------------------------------------------------------------------------------------
# The learner base class and registry
# --------------------------------------------------------------------------------------------

learners: Registry[type[Learner]] = Registry("learner", "service.learners")


class Learner(Stateful, abc.ABC):
    """Base class of every online multiclass learner.

    Parameters
    ----------
    n_features : int
        Dimension d of the dense feature vectors ``x`` (float64 arrays of shape (d,)).
    n_labels : int
        Number of labels K >= 2.
    params : mapping, optional
        Hyperparameters, validated by the subclass's ``Params`` model.
    seed : int, default 0
        Seed of ``rng_``, the learner's own generator (ties and other randomness in ``learn``).

    Attributes
    ----------
    t_ : int
        Number of feedback events applied (ALGORITHMS.md §1.4).
    rng_ : numpy.random.Generator
        Learn-time randomness; part of the state.
    """

    name: ClassVar[str]
    Params: ClassVar[type[Params]] = Params
    full_information: ClassVar[bool] = False
    #: ``learn`` takes a graded reward in (0, 1) itself; False: it learns a Bernoulli(reward) bit.
    graded: ClassVar[bool] = False
    #: Scores candidate actions from their features (:class:`service.learners.action_base.ActionLearner`,
    #: issue 39) rather than K fixed labels: it serves ``"actions": "features"`` models only.
    actions: ClassVar[bool] = False
    schema_version: ClassVar[int] = 1
    #: State arrays of shape (K, d) stored column-major for sparse input (:meth:`use_sparse_layout`).
    _column_major: ClassVar[tuple[str, ...]] = ()
    #: The modules of the compiled kernels the learner calls at its defaults (:meth:`kernel_modules`).
    kernels: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def kernel_modules(cls, params: Mapping[str, Any] | None = None) -> tuple[str, ...]:
        """The modules whose kernels a learner with ``params`` calls: what the server compiles (or
        loads from numba's cache) before such a model serves (:func:`service._jit_cache.warm`), so
        no request compiles. ``tests/service/test_jit_cache.py`` runs every learner after warming
        only these and checks that nothing else compiled."""
        return cls.kernels

    @property
    def accepts_sparse(self) -> bool:
        """Whether ``decide`` and ``learn`` take a :class:`service.features.SparseVector` (O(K nnz)
        per event); otherwise the runtime hands them ``x.dense()``."""
        return False

    def dropped(self) -> int:
        """How many (update, feature) pairs the learner's bounded memory turned away so far: 0 for
        the learners whose state does not fill up (BanditBoost's lazy store counts the features
        it could not keep). Shown in ``GET /models/{name}/stats`` so an operator sees a full store."""
        return 0

    def use_sparse_layout(self) -> None:
        """Arrange the learned arrays for sparse input (called once a model is known to be hashed).

        A memory layout only: no value changes, and the sparse kernels compute the same bits in
        either layout. The default does nothing; the linear learners store ``W_`` column-major, so
        the K weights of one bucket share a cache line or two instead of K lines 2**b apart (at
        2**18+ buckets the weights do not fit in cache and those misses were a third of an event).
        :meth:`set_state` keeps the layout.
        """
        for key in self._column_major:
            if hasattr(self, key):
                setattr(self, key, np.asfortranarray(getattr(self, key)))

    def __init__(
        self,
        n_features: int,
        n_labels: int,
        params: Mapping[str, Any] | Params | None = None,
        *,
        seed: int = 0,
    ) -> None:
        if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features < 1:
            raise ParamError(f"{self.name}: n_features must be a positive integer, got {n_features!r}")
        least = 1 if self.actions else 2  # an action learner has one scorer for every candidate
        if not isinstance(n_labels, int) or isinstance(n_labels, bool) or n_labels < least:
            raise ParamError(f"{self.name}: n_labels must be an integer >= {least}, got {n_labels!r}")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ParamError(f"{self.name}: seed must be a non-negative integer, got {seed!r}")
        self.n_features = n_features
        self.n_labels = n_labels
        self.seed = seed
        if isinstance(params, Params):
            params = params.model_dump()
        self.params = self.Params.parse(self.name, params)
        self.t_ = 0
        self.rng_ = np.random.default_rng(seed)
        self._init()

    # -- to implement -------------------------------------------------------------------------

    @abc.abstractmethod
    def _init(self) -> None:
        """Create the learned state (attributes ending in ``_``) from the hyperparameters."""

    @abc.abstractmethod
    def decide(self, x: np.ndarray, rng: np.random.Generator, eligible: np.ndarray | None = None) -> Decision:
        """Score ``x``, explore, sample; must not change the model. ``eligible``: the labels allowed
        (a boolean mask of K, at least one True; None for all), see the module docstring."""

    def learn(self, x: np.ndarray, decision: Decision, reward: bool | float) -> None:
        """Apply the bandit update for ``decision`` given the click bit ``reward`` (or, when
        :attr:`graded`, a reward in (0, 1))."""
        raise NotImplementedError(f"{self.name} is a full-information learner: use learn_full")

    def learn_batch(
        self, xs: Sequence[Any], decisions: Sequence[Decision], rewards: Sequence[bool | float]
    ) -> None:
        """:meth:`learn` for each ``(x, decision, reward)`` in order: what a replica applying a run of
        learn events calls (issue 40). A learner with a compiled loop over a batch overrides it,
        bit for bit the same as the events learned one by one. Must never be heavy (see
        :meth:`learn_is_heavy`: the runtime batches only learners that never are)."""
        for x, decision, reward in zip(xs, decisions, rewards, strict=True):
            self.learn(x, decision, reward)

    def relabel(self, x: np.ndarray, decision: Decision, label: int) -> Decision:
        """``decision`` as if its draw had given ``label``: what ``learn`` needs when another label of
        the same distribution is served (:func:`service.rollout.served`, apprentice mode, serves the
        baseline or the learner's draw from a mixture). Must not change the model. The default keeps
        the memo: right for every learner whose memo does not depend on the drawn label."""
        return Decision(decision.probs, label, decision.memo)

    def learn_full(self, x: np.ndarray, decision: Decision, y: int) -> None:
        """Full-information update with the true label ``y`` (reference learners only)."""
        raise NotImplementedError(f"{self.name} learns from bandit feedback: use learn")

    # -- configuration and state ----------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """Everything needed to rebuild an untrained copy: name, sizes, seed, hyperparameters."""
        return {
            "learner": self.name,
            "n_features": self.n_features,
            "n_labels": self.n_labels,
            "seed": self.seed,
            "params": self.params.complete(),  # complete: a later default must not change a copy
        }

    def state(self, copy: bool = True) -> State:
        """Learned state with the schema version (see :class:`Stateful`); read-only views with
        ``copy=False``."""
        return {"schema_version": self.schema_version, **self.get_state(copy)}

    def nbytes(self) -> int:
        """Bytes of the learned state's arrays now (no copy)."""
        return sum(v.nbytes for v in self.get_state(copy=False).values() if isinstance(v, np.ndarray))

    @classmethod
    def state_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Bytes of the state a new learner of this size allocates, computed without allocating it.

        Every state array's shape is read off learners built at a few tiny sizes (d in {1, 2},
        K in {k0, k0 + 1}) and each dimension fitted as ``a + b d + c K + e d K``; the fit is
        checked exactly on a further size (d = 3, K = k0 + 2), so a learner whose state does not
        grow that way raises :class:`NotImplementedError` and must override this method. Learners
        whose state grows as they learn (the Hoeffding trees' leaves, AdaBoost.MH's click log) add
        the bounded part of that growth in :meth:`growth_nbytes`.
        """
        k0 = _smallest_valid_k(cls, params, n_labels)
        probes = [(1, k0), (2, k0), (1, k0 + 1), (2, k0 + 1), (3, k0 + 2)]
        shapes = [_state_shapes(cls, d, k, params) for d, k in probes]
        design = np.array([[1.0, d, k, d * k] for d, k in probes])
        target = np.array([1.0, n_features, n_labels, n_features * n_labels])
        total = 0
        for key, (dtype, shape0) in shapes[0].items():
            dims = np.array([[s[key][1][i] for s in shapes] for i in range(len(shape0))], dtype=float)
            size = 1
            for column in dims:
                coef = np.linalg.solve(design[:4], column[:4])
                if not np.isclose(design[4] @ coef, column[4]):
                    raise NotImplementedError(
                        f"{cls.name}: state[{key!r}] does not grow affinely in d and K; override state_nbytes"
                    )
                size *= max(round(float(target @ coef)), 0)
            total += size * dtype.itemsize
        return total + cls.growth_nbytes(n_features, n_labels, params)

    @classmethod
    def growth_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Bytes the state may grow by as it learns, where that growth is bounded (0 by default)."""
        return 0

    def learn_is_heavy(self) -> bool:
        """Whether the next learn does work that does not belong on the event loop (a retrain); the
        runtime then applies it to a copy in a thread. False by default."""
        return False

    def prepare(self) -> None:
        """Build what this learner computes once for its sizes and keeps (tables shared by every
        learner of those sizes), so that its first event does not: the runtime calls it in a thread
        before the model serves. Nothing by default."""

    @classmethod
    def event_steps(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """An order of the work of one event (a decision and its learn, the first included), in
        steps of about a nanosecond, from the spec alone; ``n_features`` is the widest input a request
        can bring. A linear model's scores and update: ``d K``. Learners whose work grows faster
        override this (the runtime refuses a spec over ``CLICKBOOST_MAX_EVENT_STEPS``)."""
        return n_features * n_labels

    @classmethod
    def event_nbytes(cls, n_features: int, n_labels: int, params: Mapping[str, Any] | None = None) -> int:
        """Bytes one event allocates beyond the state at most, from the spec alone: by default a few
        vectors of the input's and the labels' sizes."""
        return 8 * (n_features + 2 * n_labels)

    @classmethod
    def from_state(cls, config: Mapping[str, Any], state: Mapping[str, Any]) -> Learner:
        """Rebuild a learner from :meth:`config` and :meth:`state`, validating both."""
        learner = make_learner(
            config["learner"],
            config["n_features"],
            config["n_labels"],
            config.get("params"),
            seed=config.get("seed", 0),
        )
        if not isinstance(learner, cls):
            raise ParamError(f"config names {config['learner']!r}, not a {cls.__name__}")
        version = state.get("schema_version")
        state = {k: v for k, v in state.items() if k != "schema_version"}
        if version != learner.schema_version:
            if not (isinstance(version, int) and 0 < version < learner.schema_version):
                raise StateFormatError(learner._unreadable(version))
            learner.upgrade_state(state, version)
        learner.set_state(state)
        return learner

    def upgrade_state(self, state: dict[str, Any], version: int) -> None:
        """Rewrite ``state``, stored under the older schema ``version``, into this build's schema (in
        place); a checkpoint survives an upgrade of the service. Raises :class:`StateFormatError`
        where no rewrite exists (the default)."""
        raise StateFormatError(self._unreadable(version))

    def _unreadable(self, version: object) -> str:
        return f"{self.name}: state schema version {version!r}, this build reads {self.schema_version}"

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.model_dump().items())
        return f"{type(self).__name__}(d={self.n_features}, K={self.n_labels}, {args})"


def _state_shapes(
    cls: type[Learner], d: int, k: int, params: Mapping[str, Any] | None
) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    state = cls(d, k, params).get_state(copy=False)
    return {key: (v.dtype, v.shape) for key, v in state.items() if isinstance(v, np.ndarray)}


def _smallest_valid_k(cls: type[Learner], params: Mapping[str, Any] | None, n_labels: int) -> int:
    """The smallest K >= 2 the hyperparameters accept (e.g. rho <= (K-1)/K), at most ``n_labels``."""
    for k in range(2, n_labels + 1):
        try:
            cls(1, k, params)
        except ParamError:
            continue
        return k
    cls(1, n_labels, params)  # raises the ParamError of the real size
    return n_labels


def make_learner(
    name: str,
    n_features: int,
    n_labels: int,
    params: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
) -> Learner:
    """Construct the learner registered as ``name``."""
    return learners.get(name)(n_features, n_labels, params, seed=seed)


def learner_from_state(config: Mapping[str, Any], state: Mapping[str, Any]) -> Learner:
    """Rebuild any registered learner from its config and state."""
    return Learner.from_state(config, state)
