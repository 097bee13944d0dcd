"""Featurisation: a request's ``features`` -> the vector a learner takes.

Two kinds of models (fixed by the model config):

dense (``n_features = d``)
    ``features`` is a list of exactly d finite numbers, used as is. JSON numbers are float64
    reprs, so a vector sent over HTTP arrives bit for bit.
hashed (``hashing_bits = b``)
    ``features`` is an object ``{"name": number | string | bool}``, mapped into ``2**b`` buckets
    by the feature hashing trick (Weinberger et al., ICML 2009): a number ``v`` adds ``v`` to the
    bucket of ``"name"``, a bool adds 0 or 1 there, a string one-hot encodes as ``"name=value"``
    (adds 1 to that bucket). Colliding features add up. The bucket is the first 8 bytes of
    ``blake2b(key)`` modulo ``2**b``: stable across processes, machines and Python versions
    (Python's ``hash()`` is salted per process and must never be used here). The result is a
    :class:`SparseVector` (the few non-zero buckets): learners that take sparse input
    (``Learner.accepts_sparse``) work in O(K nnz) per event, the others get ``x.dense()``.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from service.kernels import merge_buckets, sort_distinct

try:  # the compiled loop (service/_features.c), built by `pip install` where a C compiler is at hand
    from service._features import featurise as _compiled
except ImportError:  # pragma: no cover - the Python path below computes the same vectors
    _compiled = None

DEFAULT_HASHING_BITS = 12
MAX_HASHING_BITS = 22  # 2**22 float64 weights per label: K 2**b x 8 bytes of model (the budget)
# Larger magnitudes are refused: updates like W += x / p(label) must stay finite forever.
MAX_ABS_VALUE = 1e9
#: The longest feature name and the longest string value, in characters, on every route (``POST
#: /predict``'s context and action features, the Personalizer ranks' ``contextFeatures`` and action
#: features): refused with a 4xx naming it beyond (issue 51).
MAX_FEATURE_CHARS = 1000
#: Most feature keys a featuriser remembers the bucket of (then it starts over).
CACHE_SIZE = 1 << 16
#: Most bytes a featuriser's cache holds, as :meth:`Featuriser._cost` accounts them (then it starts
#: over): the entry count alone let long unique strings hold a gigabyte (issue 51). 65,536 keys of
#: a few dozen characters fit.
CACHE_BYTES = 16 * 2**20
# What a cached key costs beside its strings (measured with tracemalloc, rounded up): one slot of a
# dict with its bucket int, and for a string feature's new name its own inner dict.
_ENTRY_BYTES = 100
_NAME_BYTES = 300

FeatureValue = float | int | str | bool

__all__ = [
    "CACHE_BYTES",
    "DEFAULT_HASHING_BITS",
    "MAX_ABS_VALUE",
    "MAX_FEATURE_CHARS",
    "MAX_HASHING_BITS",
    "FeatureError",
    "Featuriser",
    "SparseVector",
    "bucket",
]


@dataclass(slots=True, eq=False)
class SparseVector:
    """A vector of dimension ``dim`` given by its non-zero entries.

    Read-only by contract: nothing writes into ``idx``, ``val`` or the attributes (the featuriser
    hands out views of one shared array of ones). Not ``frozen``: a frozen dataclass builds through
    ``object.__setattr__``, which is a tenth of a hashed request's featurising time.

    Attributes
    ----------
    idx : ndarray of int64
        Indices of the non-zero entries, strictly increasing.
    val : ndarray of float64
        Their values (none is zero).
    dim : int
        The dimension.
    """

    idx: np.ndarray
    val: np.ndarray
    dim: int

    def dense(self) -> np.ndarray:
        """The same vector as a dense float64 array of length ``dim``."""
        x = np.zeros(self.dim)
        x[self.idx] = self.val
        return x

    @property
    def nnz(self) -> int:
        return int(self.idx.size)


class FeatureError(ValueError):
    """The features of a request do not fit the model; the message names the problem."""


def bucket(key: str, bits: int) -> int:
    """Stable bucket of the feature key ``key`` among ``2**bits``."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << bits) - 1)


class Featuriser:
    """Turns request features into a learner's input for one model.

    Parameters
    ----------
    n_features : int or None
        Dimension of a dense model.
    hashing_bits : int or None
        ``b`` of a hashed model (exactly one of the two is given).
    max_named : int
        Most named features a request may carry.
    cache_bytes : int, default CACHE_BYTES
        Most bytes the cache of buckets holds (:meth:`_cost`); it starts over when the next key
        would pass it, and a key costing more alone is hashed each time, never cached.
    """

    def __init__(
        self, n_features: int | None, hashing_bits: int | None, max_named: int, cache_bytes: int = CACHE_BYTES
    ) -> None:
        if (n_features is None) == (hashing_bits is None):
            raise ValueError("give exactly one of n_features and hashing_bits")
        self.hashing_bits = hashing_bits
        self.dim = n_features if hashing_bits is None else 1 << hashing_bits
        self.max_named = max_named
        self._strings: dict[str, dict[str, int]] = {}  # name -> value -> bucket of "name=value"
        self._numbers: dict[str, int] = {}  # name -> bucket of a number or bool feature
        self._cached = 0
        self.cache_bytes = cache_bytes
        self.cached_bytes = 0  # what the cache holds now, as _cost accounts it
        self._compiled = _compiled  # None: the Python path only (the tests compare the two)
        # Values of the fast path: views of one array of ones (no learner writes into its input),
        # one per length, made once.
        ones = np.ones(max_named)
        self._ones = [ones[:n] for n in range(max_named + 1)]

    def __call__(self, features: Sequence[float] | Mapping[str, FeatureValue]) -> np.ndarray | SparseVector:
        """The vector of ``features`` (dense float64 for a dense model, a :class:`SparseVector` of
        the non-zero buckets for a hashed one); :class:`FeatureError` if they do not fit."""
        if self.hashing_bits is None:
            if isinstance(features, Mapping):
                raise FeatureError(
                    f"features: this model takes a list of {self.dim} numbers, not named features"
                )
            if len(features) != self.dim:
                raise FeatureError(f"features: expected {self.dim} values, got {len(features)}")
            x = np.array(features, dtype=np.float64)
            ok = np.abs(x) <= MAX_ABS_VALUE  # False for NaN too
            if not ok.all():
                i = int(np.argmin(ok))
                raise FeatureError(
                    f"features.{i}: {x[i]!r} is not a finite number of magnitude <= {MAX_ABS_VALUE:g}"
                )
            return x

        if not isinstance(features, Mapping):
            raise FeatureError("features: this model hashes named features: send an object {name: value}")
        if len(features) > self.max_named:
            raise FeatureError(f"features: {len(features)} named features, at most {self.max_named} allowed")
        # Featurising is most of the cost of a hashed request (a few dozen features): buckets come
        # from per-model dictionaries, not from blake2b each time. Compiled: one C call looks every
        # key up and sorts and merges the pairs; it declines (a negative count) on a key not seen
        # before or on a value to reject, which the Python path below remembers or words.
        strings, numbers = self._strings, self._numbers
        if self._compiled is not None:
            n = len(features)
            idx, val = np.empty(n, dtype=np.int64), np.empty(n)
            kept = self._compiled(features, strings, numbers, idx, val, MAX_ABS_VALUE)
            if kept == n:
                return SparseVector(idx, val, self.dim)
            if kept >= 0:
                return SparseVector(idx[:kept].copy(), val[:kept].copy(), self.dim)
        else:
            # Without the C loop: every value a string whose key was seen before (a number never
            # matches: the inner keys are strings) and no two keys in one bucket, so the vector is
            # the sorted buckets with ones (sorted and checked in one numba call).
            try:
                idx = np.array([strings[name][value] for name, value in features.items()], dtype=np.int64)
            except (KeyError, TypeError):
                pass
            else:
                if sort_distinct(idx):
                    return SparseVector(idx, self._ones[idx.size], self.dim)
        buckets = []
        values: list[float] = []
        for name, value in features.items():
            if value.__class__ is str or isinstance(value, str):
                per = strings.get(name)
                b = per.get(value) if per is not None else None
                if b is None:
                    b = self._remember(name, value)
                buckets.append(b)
                values.append(1.0)
                continue
            if isinstance(value, bool):
                v = 1.0 if value else 0.0
            else:
                v = float(value)
                if not abs(v) <= MAX_ABS_VALUE:  # False for NaN too
                    raise FeatureError(
                        f"features.{name}: {v!r} is not a finite number of magnitude <= {MAX_ABS_VALUE:g}"
                    )
            b = numbers.get(name)
            if b is None:
                b = self._remember(name, None)
            buckets.append(b)
            values.append(v)
        idx, val = merge_buckets(np.array(buckets, dtype=np.int64), np.array(values, dtype=np.float64))
        return SparseVector(idx, val, self.dim)

    def _remember(self, name: str, value: str | None) -> int:
        """Bucket of ``name=value`` (a string feature) or of ``name`` (a number), cached. The cache is
        emptied when it reaches ``CACHE_SIZE`` entries or when the key would take it over
        ``cache_bytes``: memory stays bounded whatever names and values arrive."""
        bits: int = self.hashing_bits  # type: ignore[assignment]
        key = name if value is None else f"{name}={value}"
        cost = self._cost(name, value)
        if self._cached >= CACHE_SIZE or self.cached_bytes + cost > self.cache_bytes:
            self._strings.clear()
            self._numbers.clear()
            self._cached = 0
            self.cached_bytes = 0
            cost = self._cost(name, value)  # the name is new again
            if cost > self.cache_bytes:
                return bucket(key, bits)
        self._cached += 1
        self.cached_bytes += cost
        if value is None:
            b = self._numbers[name] = bucket(key, bits)
        else:
            b = self._strings.setdefault(name, {})[value] = bucket(key, bits)
        return b

    def _cost(self, name: str, value: str | None) -> int:
        """Bytes that caching the bucket of ``name`` (``value`` None) or ``name=value`` adds: the
        strings the cache keeps (``sys.getsizeof``: 1 to 4 bytes a character) and the slots holding
        them; a string feature's name already cached is not counted again."""
        if value is None:
            return sys.getsizeof(name) + _ENTRY_BYTES
        cost = sys.getsizeof(value) + _ENTRY_BYTES
        if name not in self._strings:
            cost += sys.getsizeof(name) + _NAME_BYTES
        return cost

    def pack(self, x: np.ndarray | SparseVector) -> np.ndarray:
        """What a decision record keeps of ``x``: ``x`` itself for dense models; for hashed ones the
        (2, nnz) float64 rows of non-zero bucket indices and values (a few entries, not 2**b)."""
        if isinstance(x, SparseVector):
            return np.stack([x.idx.astype(np.float64), x.val])
        if self.hashing_bits is None:
            return x
        idx = np.flatnonzero(x)
        return np.stack([idx.astype(np.float64), x[idx]])

    def unpack(self, stored: np.ndarray) -> np.ndarray | SparseVector:
        """Inverse of :meth:`pack`: the vector ``decide`` saw, bit for bit."""
        if self.hashing_bits is None:
            return stored
        return SparseVector(stored[0].astype(np.int64), stored[1].copy(), self.dim)
