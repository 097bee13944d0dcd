"""Bytes of the arrays and decisions the stores keep, shared by the Redis and SQLite stores.

Pickle-free; decoding never runs code. Two encodings are read (issue 40):

- **compact** (written since issue 40), first byte :data:`COMPACT` (1), a version byte: the
  features as ``ndim`` and shape (``<u4`` each) then the float64 values, little-endian, raw (bit
  for bit what the record held: a hashed model's record is already its index/value pairs,
  :meth:`service.features.Featuriser.pack`); a decision as a layout (its keys, their types, and
  the values that are not numbers: a string, a flag, an array's dtype and shape), then its numbers
  packed (``<q`` / ``<d``) and its arrays raw. Decoding the layout is cached per distinct layout,
  which a model repeats from one decision to the next, so a follower decodes an event with a few
  ``struct`` and ``frombuffer`` calls and no JSON;
- **serial** (:func:`service.serial.encode`, magic ``CBST1``): what logs, records and decision logs
  written before issue 40 hold, still read (its first byte is ``C``).

Float64 rather than float32: the learner learns the features its decision was taken on, bit for
bit, so a replica that applies the log computes what the serving one would have.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from service.serial import StateFormatError, decode

__all__ = [
    "catalog_of",
    "decode_decision",
    "decode_x",
    "eligible_of",
    "encode_decision",
    "encode_x",
    "rollout_of",
    "slot_of",
]

#: First byte of the compact encodings (a serial encoding starts with ``C``).
COMPACT = 1
_ALLOWED_KINDS = set("biufc")  # as service.serial: never object/str/void arrays
_F8 = np.dtype("<f8")
_HEAD = struct.Struct("<BI")  # version, layout length
_LAYOUTS_MAX = 4096  # distinct decision layouts kept decoded (a model has a handful)


def encode_x(x: np.ndarray) -> bytes:
    """The features of a decision record, float64 (exact), in the compact encoding."""
    arr = np.ascontiguousarray(x, dtype="<f8")
    return bytes([COMPACT, arr.ndim]) + struct.pack(f"<{arr.ndim}I", *arr.shape) + arr.tobytes()


def decode_x(data: bytes) -> np.ndarray:
    """Inverse of :func:`encode_x` (a writable float64 array); also reads the serial encoding."""
    if not data or data[0] != COMPACT:
        return decode(data)["x"]
    if len(data) < 2:
        raise StateFormatError("features: truncated")
    ndim, start = data[1], 2 + 4 * data[1]
    if len(data) < start:
        raise StateFormatError("features: truncated shape")
    shape = struct.unpack_from(f"<{ndim}I", data, 2)
    n = math.prod(shape)
    if len(data) != start + 8 * n:
        raise StateFormatError(f"features: {len(data) - start} bytes for shape {shape}")
    x = np.frombuffer(data, dtype=_F8, count=n, offset=start).astype(np.float64)  # a writable copy
    return x if ndim == 1 else x.reshape(shape)


def encode_decision(decision: Mapping[str, Any]) -> bytes:
    """A decision's state (``Decision.to_state()``), in the compact encoding: a flat dictionary of
    numbers, flags, strings, None and numeric arrays (what :func:`service.serial.encode` takes)."""
    layout: list[list[Any]] = []
    fmt, numbers, arrays = "<", [], []
    for key in sorted(decision):
        value = decision[key]
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _ALLOWED_KINDS:
                raise StateFormatError(f"decision[{key!r}]: dtype {value.dtype} is not numeric")
            arr = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
            layout.append([key, "a", arr.dtype.str, list(arr.shape)])
            arrays.append(arr.tobytes())
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            layout.append([key, "v", value])
        elif isinstance(value, int):
            layout.append([key, "q"])
            fmt += "q"
            numbers.append(value)
        elif isinstance(value, float):
            layout.append([key, "d"])
            fmt += "d"
            numbers.append(value)
        else:
            raise StateFormatError(f"decision[{key!r}]: unsupported type {type(value).__name__}")
    head = json.dumps(layout, separators=(",", ":")).encode()
    return _HEAD.pack(COMPACT, len(head)) + head + struct.pack(fmt, *numbers) + b"".join(arrays)


class _Layout:
    """A decision layout decoded once: the constant entries, the numbers' struct and keys, the
    arrays' keys, dtypes, shapes and sizes, and the encoding's total size."""

    __slots__ = ("arrays", "constants", "keys", "numbers", "size")

    def __init__(self, raw: bytes) -> None:
        try:
            entries = json.loads(raw)
            self.constants: dict[str, Any] = {}
            self.keys: list[str] = []
            self.arrays: list[tuple[str, np.dtype[Any], np.dtype[Any], tuple[int, ...], int]] = []
            fmt = "<"
            for entry in entries:
                key, kind = entry[0], entry[1]
                if not isinstance(key, str):
                    raise TypeError("key is not a string")
                if kind == "v":
                    if not (entry[2] is None or isinstance(entry[2], bool | str)):
                        raise TypeError(f"{key!r}: bad constant")
                    self.constants[key] = entry[2]
                elif kind in ("q", "d"):
                    self.keys.append(key)
                    fmt += kind
                elif kind == "a":
                    dtype, shape = np.dtype(entry[2]), tuple(int(s) for s in entry[3])
                    if dtype.kind not in _ALLOWED_KINDS or any(s < 0 for s in shape):
                        raise TypeError(f"{key!r}: refused dtype {dtype} or shape {shape}")
                    n = math.prod(shape)
                    self.arrays.append((key, dtype, dtype.newbyteorder("="), shape, n))
                else:
                    raise TypeError(f"{key!r}: unknown kind {kind!r}")
        except (ValueError, TypeError, IndexError, UnicodeDecodeError) as exc:
            raise StateFormatError(f"bad decision layout: {exc}") from None
        self.numbers = struct.Struct(fmt)
        self.size = self.numbers.size + sum(d.itemsize * n for _, d, _, _, n in self.arrays)


_layouts: dict[bytes, _Layout] = {}


def decode_decision(data: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_decision`; also reads the serial encoding."""
    if not data or data[0] != COMPACT:
        return decode(data)
    if len(data) < _HEAD.size:
        raise StateFormatError("decision: truncated")
    _, n = _HEAD.unpack_from(data)
    raw = data[_HEAD.size : _HEAD.size + n]
    layout = _layouts.get(raw)
    if layout is None:
        layout = _Layout(raw)
        if len(_layouts) >= _LAYOUTS_MAX:  # bounded: forged or churning layouts cost a re-parse only
            _layouts.clear()
        _layouts[raw] = layout
    pos = _HEAD.size + n
    if len(data) != pos + layout.size:
        raise StateFormatError(f"decision: {len(data) - pos} bytes of values, layout says {layout.size}")
    out = dict(layout.constants)
    out.update(zip(layout.keys, layout.numbers.unpack_from(data, pos), strict=True))
    pos += layout.numbers.size
    for key, dtype, native, shape, count in layout.arrays:
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=pos).astype(native)  # writable
        out[key] = arr if len(shape) == 1 else arr.reshape(shape)
        pos += dtype.itemsize * count
    return out


def rollout_of(decision: Mapping[str, Any]) -> tuple[np.ndarray | None, int | None]:
    """The learner's own distribution and the baseline label of a decision served in logging or
    apprentice mode (``memo.policy``, ``memo.baseline``: :func:`service.rollout.served`), or Nones."""
    policy = decision.get("memo.policy")
    if policy is None:
        return None, None
    return np.asarray(policy, dtype=np.float64), int(decision["memo.baseline"])


def eligible_of(decision: Mapping[str, Any]) -> np.ndarray | None:
    """The eligible-label mask a decision state carries (``memo.eligible``), or None: every label."""
    mask = decision.get("memo.eligible")
    return None if mask is None else np.asarray(mask, dtype=bool)


def catalog_of(decision: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a catalog decision's state keeps of its selection (``memo.catalog.*``,
    :mod:`service.runtime.catalog_requests`), for the decision log: ``{"version", "candidates",
    "at", "index", "sent", "select"}`` (None for what a record made before they were kept lacks);
    None for a decision that is not over the catalog."""
    version = decision.get("memo.catalog.version")
    if version is None:
        return None

    def get(key: str, kind: type) -> Any:
        value = decision.get(f"memo.catalog.{key}")
        return None if value is None else kind(value)

    select = decision.get("memo.catalog.select")
    return {
        "version": int(version),
        "candidates": get("candidates", int),
        "at": get("at", float),
        "index": get("index", int),
        "sent": get("sent", int),
        "select": None if select is None else json.loads(np.asarray(select, np.uint8).tobytes()),
    }


def slot_of(decision: Mapping[str, Any]) -> int | None:
    """The slot of a page slot's decision state (``page.slot``, :mod:`service.pages`); None for a
    single decision."""
    s = decision.get("page.slot")
    return None if s is None else int(s)
