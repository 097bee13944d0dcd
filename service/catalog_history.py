"""The rows a catalog retired, with the versions each one lived in (issue 54, item 5): what lets a
logged catalog decision's candidates be rebuilt later (:mod:`service.catalog_replay`).

A catalog decision's record keeps the chosen item alone (:mod:`service.runtime.catalog_requests`);
the other candidates, up to the whole catalog, are recovered from the catalog's version instead.
Every item's current row is a *row version*: it came in with mutation ``lo`` (the catalog's
``version`` after it) and lives until the mutation ``hi`` that replaces, removes or expires it. A
decision made at catalog version ``v`` saw the rows with ``lo <= v < hi``. The live catalog keeps
``lo`` of its rows (``Catalog._since``) and every row its registration sequence number
(``Catalog._seq``: a new item's place; a replaced item keeps it, as it keeps its slot), so the
order of the whole catalog at ``v`` is the rows' order by sequence number. :class:`History` keeps
the retired rows: id, sequence number, ``lo``, ``hi``, ``active``, ``expires``, hashed entries
(bucket and value, as the catalog hashed them) and categorical features (for filters). They are
part of the catalog's canonical state (``Catalog.to_bytes``): a checkpoint carries them, and
replicas that applied the same events hold the same history byte for byte.

**Forgetting.** Retired rows are kept while a retained decision-log record may need them: the sweep
appends an ``items`` event that forgets the rows retired at or before a version
(:meth:`History.forget`; the version is in the event, so every replica forgets the same rows and
the catalogs stay equal byte for byte: :mod:`service.runtime.items`, :mod:`service.runtime.sweeper`).
The sweeping replica picks the version from the times of the events it applied (:attr:`History.times`,
not part of the state): the last one appended before the oldest retained decision, less a slack.
``complete_from`` is the highest version forgotten: a decision at a version below it may miss rows,
and its rebuild says so.

**Cost.** A retired row holds 49 bytes of arrays, 16 bytes per hashed entry, its id (a Python
string) and its categorical features as a JSON byte string, each with a list pointer:
:meth:`History.nbytes` counts them all (spare capacity included), and ``Catalog.nbytes`` (the memory
budget) includes it. ``python -m service lab bench catalog-history`` prints the bytes per retired
row (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from service.catalog_items import HashedItems

__all__ = ["History", "Rows", "row_bytes"]

#: Array fields of a retired row, with their dtypes.
_ROW_FIELDS = {
    "seq": np.int64,
    "lo": np.int64,
    "hi": np.int64,
    "active": np.bool_,
    "expires": np.float64,
    "count": np.int64,
}


def row_bytes(item_id: str, entries: int, names: int) -> int:
    """About what :meth:`History.nbytes` grows by for a retired row of ``entries`` hashed entries
    and at most ``names`` categorical features, spare capacity aside (a budget's estimate): its
    arrays' 49 bytes, 16 per entry, its id, its categorical JSON (a name and value of about 16
    characters each) and two list pointers."""
    return 49 + 16 * entries + sys.getsizeof(item_id) + sys.getsizeof(b"") + 36 * names + 16


def _take(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Indices of the entries ``starts[i]:starts[i] + counts[i]``, row after row."""
    return np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))


def _room(arr: np.ndarray, need: int) -> np.ndarray:
    """``arr`` with room for ``need`` rows (doubling)."""
    if need <= arr.size:
        return arr
    out = np.zeros(max(need, 2 * arr.size, 16), arr.dtype)
    out[: arr.size] = arr
    return out


@dataclass(frozen=True, slots=True)
class Rows:
    """Row versions of items, in one order: what :class:`History` keeps and what a catalog's rows at a
    version are made of (:mod:`service.catalog_replay`).

    Attributes
    ----------
    items : HashedItems
        The rows' ids, hashed entries, flags, expiries and categorical features.
    seq, lo, hi : ndarray of int64
        Sequence number (place in the catalog's order) and the versions ``[lo, hi)`` each lived in.
    """

    items: HashedItems
    seq: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def __len__(self) -> int:
        return len(self.items)


class History:
    """The retired rows of a catalog (module docstring), in the order they were retired."""

    def __init__(self) -> None:
        self.complete_from = 0  # decisions at a version below it may miss forgotten rows
        self._n = 0
        self._cols = {k: np.zeros(0, t) for k, t in _ROW_FIELDS.items()}
        self._m = 0  # entries used
        self._buckets = np.zeros(0, np.int64)
        self._values = np.zeros(0)
        self._ids: list[str] = []
        self._cats: list[bytes] = []  # JSON of [[name, value], ...] per row
        self._bytes = 0  # sys.getsizeof of the ids and the categorical strings
        # (version, time) of the events applied here that retired rows, since the last forget: not
        # canonical (forget_below turns a time into a version with it); as long as the history.
        self.times: list[tuple[int, float]] = []
        self.retired = 0  # rows added since this process made it (not canonical)

    def __len__(self) -> int:
        return self._n

    def nbytes(self) -> int:
        """Bytes held: the arrays (capacity included), the ids' and categorical strings and the
        two lists' pointers."""
        arrays = sum(a.nbytes for a in self._cols.values()) + self._buckets.nbytes + self._values.nbytes
        return int(arrays) + self._bytes + sys.getsizeof(self._ids) + sys.getsizeof(self._cats)

    def add(self, rows: Rows, hi: int) -> None:
        """Keep ``rows`` (their ``hi`` ignored), retired by the mutation ``hi``."""
        it = rows.items
        k = len(it)
        if not k:
            return
        n, m = self._n + k, self._m + int(it.buckets.size)
        values = {"seq": rows.seq, "lo": rows.lo, "hi": hi, "active": it.active, "expires": it.expires}
        values["count"] = it.counts
        for name, col in self._cols.items():
            col = self._cols[name] = _room(col, n)
            col[self._n : n] = values[name]
        self._buckets, self._values = _room(self._buckets, m), _room(self._values, m)
        self._buckets[self._m : m], self._values[self._m : m] = it.buckets, it.values
        cats = [json.dumps(c, separators=(",", ":")).encode() for c in it.categorical]
        self._ids.extend(it.ids)
        self._cats.extend(cats)
        self._bytes += sum(map(sys.getsizeof, it.ids)) + sum(map(sys.getsizeof, cats))
        self._n, self._m = n, m
        self.retired += k

    def applied(self, version: int, at: float) -> None:
        """Note that the event appended at ``at`` that took the catalog to ``version`` retired rows
        (not part of the canonical state: :meth:`forget_below` turns a time into a version with it)."""
        if not self.times or self.times[-1][0] != version:
            self.times.append((version, at))

    def forget_below(self, before: float) -> int:
        """The version a forget should take so that the rows retired by events appended before
        ``before`` go: the last version this process applied an event of before then (0: none)."""
        versions = [v for v, at in self.times if at < before]
        return max(versions, default=0)

    def due(self, below: int) -> bool:
        """Whether :meth:`forget` of ``below`` would drop a row."""
        return below > self.complete_from and bool((self._cols["hi"][: self._n] <= below).any())

    def forget(self, below: int) -> int:
        """Drop the rows retired at or before version ``below``; how many. A rebuild at a version
        below ``below`` then says the history is gone."""
        if below <= self.complete_from:
            return 0
        drop = self._cols["hi"][: self._n] <= below
        gone = int(drop.sum())
        self.complete_from = below
        if gone:
            self._load(self.to_state(keep=~drop), keep_times=True)
        self.times = [(v, at) for v, at in self.times if v > below]
        return gone

    def at_version(self, version: int) -> Rows:
        """The rows that lived at ``version`` (``lo <= version < hi``), in retirement order."""
        n = self._n
        keep = (self._cols["lo"][:n] <= version) & (version < self._cols["hi"][:n])
        return self._rows(np.flatnonzero(keep))

    def _rows(self, which: np.ndarray) -> Rows:
        n = self._n
        count = self._cols["count"][:n]
        take = _take((np.cumsum(count) - count)[which], count[which])
        cols = {k: c[:n][which].copy() for k, c in self._cols.items()}
        idx = which.tolist()
        # One parse of every row's [[name, value], ...] (unpacked as the pairs, as an items event's)
        items = HashedItems(
            [self._ids[i] for i in idx], cols["count"], self._buckets[take], self._values[take],
            cols["active"], cols["expires"], json.loads(b"[" + b",".join(self._cats[i] for i in idx) + b"]"),
        )  # fmt: skip
        return Rows(items, cols["seq"], cols["lo"], cols["hi"])

    # -- canonical state -------------------------------------------------------------------------

    def to_state(self, keep: np.ndarray | None = None) -> dict[str, Any]:
        """The rows (those of the mask ``keep``) as flat arrays, for the catalog's canonical state."""
        n = self._n
        which = np.arange(n) if keep is None else np.flatnonzero(keep)
        count = self._cols["count"][:n]
        take = _take((np.cumsum(count) - count)[which], count[which])
        ids = [self._ids[i].encode() for i in which.tolist()]
        return {
            **{k: c[:n][which].copy() for k, c in self._cols.items()},
            "buckets": self._buckets[take].copy(),
            "values": self._values[take].copy(),
            "id_lengths": np.array([len(i) for i in ids], np.int64),
            "ids": np.frombuffer(b"".join(ids), np.uint8).copy(),
            "categorical": b"\n".join(self._cats[i] for i in which.tolist()).decode(),
            "complete_from": self.complete_from,
        }

    def _load(self, state: Mapping[str, Any], keep_times: bool = False) -> None:
        """Take the rows of :meth:`to_state`'s ``state``."""
        if not keep_times:
            self.times = []
        self._cols = {k: np.asarray(state[k], t).copy() for k, t in _ROW_FIELDS.items()}
        self._n = int(self._cols["seq"].size)
        self._buckets = np.asarray(state["buckets"], np.int64).copy()
        self._values = np.asarray(state["values"], np.float64).copy()
        self._m = int(self._buckets.size)
        raw = np.asarray(state["ids"], np.uint8).tobytes()
        ends = np.cumsum(np.asarray(state["id_lengths"], np.int64)).tolist()
        self._ids = [raw[a:b].decode() for a, b in zip([0, *ends][: len(ends)], ends, strict=True)]
        text = str(state["categorical"])
        self._cats = [c.encode() for c in text.split("\n")] if self._n else []
        self._bytes = sum(map(sys.getsizeof, self._ids)) + sum(map(sys.getsizeof, self._cats))
        self.complete_from = int(state["complete_from"])

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> History:
        """The history of :meth:`to_state`'s ``state``."""
        out = cls()
        out._load(state)
        return out
