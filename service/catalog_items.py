"""Items as a catalog takes them (issue 54, :mod:`service.catalog`): each one's fields checked and
its features hashed once (:func:`hash_items`), as :class:`HashedItems`, which
:meth:`service.catalog.Catalog.insert` registers here or, carried by an ``items`` event, on every
replica (:mod:`service.runtime.items`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.actions import MAX_ACTION_ID
from service.features import MAX_FEATURE_CHARS, FeatureError, FeatureValue, Featuriser, SparseVector

__all__ = ["CatalogError", "HashedItems", "hash_items"]

#: Feature values kept per item for filters (a boolean is categorical too).
CATEGORICAL = (str, bool)


class CatalogError(ValueError):
    """A catalog operation or lookup that cannot be done; the message names the item or the field."""


@dataclass(frozen=True, slots=True)
class HashedItems:
    """Items checked and hashed once (:meth:`service.catalog.Catalog.hash_items`), in order, for
    :meth:`service.catalog.Catalog.insert`: what a catalog event carries to every replica
    (:mod:`service.runtime.items`).

    Attributes
    ----------
    ids : list of str
        The items' ids (distinct).
    counts : ndarray of int64
        Hashed entries of each item.
    buckets, values : ndarray of int64, float64
        The entries, item after item (``counts[i]`` each): what the action featuriser gives.
    active : ndarray of bool
    expires : ndarray of float64
        ``expires_at`` of each item (``inf``: never).
    categorical : list of list of (str, str or bool)
        Each item's categorical features, for filters.
    """

    ids: list[str]
    counts: np.ndarray
    buckets: np.ndarray
    values: np.ndarray
    active: np.ndarray
    expires: np.ndarray
    categorical: list[list[tuple[str, str | bool]]]

    def __len__(self) -> int:
        return len(self.ids)

    def chunks(self, size: int) -> Iterator[HashedItems]:
        """These items in consecutive pieces of at most ``size``."""
        ends = np.concatenate(([0], np.cumsum(self.counts)))
        for lo in range(0, len(self.ids), size):
            hi = min(lo + size, len(self.ids))
            a, b = int(ends[lo]), int(ends[hi])
            yield HashedItems(
                self.ids[lo:hi], self.counts[lo:hi], self.buckets[a:b], self.values[a:b],
                self.active[lo:hi], self.expires[lo:hi], self.categorical[lo:hi],
            )  # fmt: skip


def hash_items(featuriser: Featuriser, items: Iterable[Mapping[str, Any]]) -> HashedItems:
    """``items`` (``{"id", "features", "active"?, "expires_at"?}`` each) checked and hashed by
    ``featuriser`` (a catalog's, :meth:`service.catalog.Catalog.hash_items`); :class:`CatalogError`
    naming ``items.{i}`` for the first that does not fit, or an id given twice."""
    ids: list[str] = []
    seen: set[str] = set()
    vectors: list[SparseVector] = []
    cats: list[list[tuple[str, str | bool]]] = []
    active: list[bool] = []
    expires: list[float] = []
    for i, item in enumerate(items):
        item_id, features, is_active, expires_at = _item_fields(item, i)
        if item_id in seen:
            raise CatalogError(f"items.{i}.id: {item_id!r} is given twice")
        seen.add(item_id)
        try:
            v = featuriser(features)
        except FeatureError as exc:
            raise CatalogError(f"items.{i}.{exc}") from None
        ids.append(item_id)
        vectors.append(v)  # type: ignore[arg-type]  # a hashed featuriser gives a SparseVector
        cats.append([(k, x) for k, x in features.items() if isinstance(x, CATEGORICAL)])
        active.append(is_active)
        expires.append(expires_at)
    counts = np.fromiter((v.nnz for v in vectors), np.int64, len(vectors))
    buckets = np.concatenate([v.idx for v in vectors]).astype(np.int64) if vectors else np.zeros(0, np.int64)
    values = np.concatenate([v.val for v in vectors]).astype(np.float64) if vectors else np.zeros(0)
    return HashedItems(ids, counts, buckets, values, np.array(active, np.bool_), np.array(expires), cats)


#: The fields of an item.
_FIELDS = ("id", "features", "active", "expires_at")


def _item_fields(item: Any, i: int) -> tuple[str, Mapping[str, FeatureValue], bool, float]:
    """Item ``i``'s id, features, active flag and expiry (``inf``: never); :class:`CatalogError`."""
    if not isinstance(item, Mapping):
        raise CatalogError(f"items.{i}: an object {{id, features, active?, expires_at?}} is required")
    item_id, features = item.get("id"), item.get("features", {})
    if not isinstance(item_id, str) or not 1 <= len(item_id) <= MAX_ACTION_ID:
        raise CatalogError(f"items.{i}.id: a string of 1 to {MAX_ACTION_ID} characters is required")
    if not isinstance(features, Mapping):
        raise CatalogError(f"items.{i}.features: an object {{name: value}} is required")
    extra = item.keys() - _FIELDS
    if extra:
        raise CatalogError(
            f"items.{i}: unknown field {sorted(map(str, extra))[0]!r} (an item has {', '.join(_FIELDS)})"
        )
    for name, value in features.items():  # what the featuriser takes, worded here (JSON has more)
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_FEATURE_CHARS:
            raise CatalogError(
                f"items.{i}.features: a name of 1 to {MAX_FEATURE_CHARS} characters is required"
            )
        if isinstance(value, str):
            if len(value) > MAX_FEATURE_CHARS:
                raise CatalogError(f"items.{i}.features.{name}: at most {MAX_FEATURE_CHARS} characters")
        elif not isinstance(value, int | float):  # bool is an int
            raise CatalogError(f"items.{i}.features.{name}: a number, string or bool is required")
    active = item.get("active", True)
    if not isinstance(active, bool):
        raise CatalogError(f"items.{i}.active: true or false is required")
    expires = item.get("expires_at")
    if expires is None:
        expires = math.inf
    elif isinstance(expires, bool) or not isinstance(expires, int | float) or math.isnan(expires):
        raise CatalogError(f"items.{i}.expires_at: a time in seconds since the epoch is required")
    return item_id, features, active, float(expires)
