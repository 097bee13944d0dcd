"""Featurisation: a request's ``features`` -> the dense float64 vector a learner takes.

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
    (Python's ``hash()`` is salted per process and must never be used here).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

DEFAULT_HASHING_BITS = 12
MAX_HASHING_BITS = 18  # 2**18 float64 per label row: the learners are dense
# Larger magnitudes are refused: updates like W += x / p(label) must stay finite forever.
MAX_ABS_VALUE = 1e9

FeatureValue = float | int | str | bool

__all__ = [
    "DEFAULT_HASHING_BITS",
    "MAX_ABS_VALUE",
    "MAX_HASHING_BITS",
    "FeatureError",
    "Featuriser",
    "bucket",
]


class FeatureError(ValueError):
    """The features of a request do not fit the model; the message names the problem."""


@lru_cache(maxsize=65_536)
def _digest(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def bucket(key: str, bits: int) -> int:
    """Stable bucket of the feature key ``key`` among ``2**bits``."""
    return _digest(key) & ((1 << bits) - 1)


class Featuriser:
    """Turns request features into a learner's dense input for one model.

    Parameters
    ----------
    n_features : int or None
        Dimension of a dense model.
    hashing_bits : int or None
        ``b`` of a hashed model (exactly one of the two is given).
    max_named : int
        Most named features a request may carry.
    """

    def __init__(self, n_features: int | None, hashing_bits: int | None, max_named: int) -> None:
        if (n_features is None) == (hashing_bits is None):
            raise ValueError("give exactly one of n_features and hashing_bits")
        self.hashing_bits = hashing_bits
        self.dim = n_features if hashing_bits is None else 1 << hashing_bits
        self.max_named = max_named

    def __call__(self, features: Sequence[float] | Mapping[str, FeatureValue]) -> np.ndarray:
        """The dense float64 vector of ``features``; :class:`FeatureError` if they do not fit."""
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
        x = np.zeros(self.dim)
        bits = self.hashing_bits
        for name, value in features.items():
            if isinstance(value, str):
                x[bucket(f"{name}={value}", bits)] += 1.0
            elif isinstance(value, bool):
                x[bucket(name, bits)] += float(value)
            else:
                v = float(value)
                if not abs(v) <= MAX_ABS_VALUE:
                    raise FeatureError(
                        f"features.{name}: {v!r} is not a finite number of magnitude <= {MAX_ABS_VALUE:g}"
                    )
                x[bucket(name, bits)] += v
        return x

    def pack(self, x: np.ndarray) -> np.ndarray:
        """What a decision record keeps of ``x``: ``x`` itself for dense models; for hashed ones the
        (2, nnz) float64 rows of non-zero bucket indices and values (a few entries, not 2**b)."""
        if self.hashing_bits is None:
            return x
        idx = np.flatnonzero(x)
        return np.stack([idx.astype(np.float64), x[idx]])

    def unpack(self, stored: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`pack`: the dense vector ``decide`` saw, bit for bit."""
        if self.hashing_bits is None:
            return stored
        x = np.zeros(self.dim)
        x[stored[0].astype(np.int64)] = stored[1]
        return x
