"""A canonical, pickle-free binary encoding of flat state dictionaries.

A state is ``dict[str, np.ndarray | int | float | str | bool]``. The encoding is a JSON header
(sorted keys, one entry per value) followed by the raw little-endian bytes of every array in key
order. The same state always encodes to the same bytes, so ``sha256(encode(state))`` is a model
checksum that replicas can compare. Decoding only ever builds numeric/bool arrays and JSON scalars:
no code is executed and object arrays are refused.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

MAGIC = b"CBST1\n"
_ALLOWED_KINDS = set("biufc")  # bool, int, uint, float, complex; never object/str/void arrays

StateValue = np.ndarray | int | float | str | bool
State = dict[str, Any]


class StateFormatError(ValueError):
    """The bytes or the dictionary are not a valid serialised state."""


def _parts(state: Mapping[str, Any]) -> tuple[bytes, list[np.ndarray]]:
    """The header and the arrays of the encoding, in order: C-contiguous little-endian arrays,
    views of the state's own arrays wherever they already are (no copy)."""
    header: dict[str, Any] = {}
    arrays: list[np.ndarray] = []
    for key in sorted(state):
        value = state[key]
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _ALLOWED_KINDS:
                raise StateFormatError(f"state[{key!r}]: dtype {value.dtype} is not numeric")
            arr = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
            header[key] = {"dtype": arr.dtype.str, "shape": list(value.shape)}
            arrays.append(arr)
        elif isinstance(value, bool | int | float | str) or value is None:
            if isinstance(value, float) and not np.isfinite(value):
                header[key] = {"float": repr(value)}
            else:
                header[key] = {"value": value}
        elif isinstance(value, np.generic):
            header[key] = {"value": value.item()}
        else:
            raise StateFormatError(f"state[{key!r}]: unsupported type {type(value).__name__}")
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return MAGIC + struct.pack("<Q", len(head)) + head, arrays


def encode(state: Mapping[str, Any]) -> bytes:
    """Encode a flat state dictionary canonically (see module docstring)."""
    head, arrays = _parts(state)
    return head + b"".join(a.tobytes() for a in arrays)


def decode(data: bytes) -> State:
    """Decode bytes made by :func:`encode`; raise :class:`StateFormatError` on anything else."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise StateFormatError("not a clickboost state (bad magic)")
    (n,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    try:
        header = json.loads(data[start : start + n])
    except (ValueError, UnicodeDecodeError) as exc:
        raise StateFormatError(f"state header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise StateFormatError("state header is not an object")
    pos = start + n
    out: State = {}
    for key in sorted(header):
        entry = header[key]
        if not isinstance(entry, dict):
            raise StateFormatError(f"state[{key!r}]: malformed entry")
        if "value" in entry:
            out[key] = entry["value"]
        elif "float" in entry:
            out[key] = float(entry["float"])
        else:
            try:
                dtype = np.dtype(entry["dtype"])
                shape = tuple(int(s) for s in entry["shape"])
            except (KeyError, TypeError, ValueError) as exc:
                raise StateFormatError(f"state[{key!r}]: bad array entry ({exc})") from None
            if dtype.kind not in _ALLOWED_KINDS or any(s < 0 for s in shape):
                raise StateFormatError(f"state[{key!r}]: refused dtype {dtype} or shape {shape}")
            nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if pos + nbytes > len(data):
                raise StateFormatError(f"state[{key!r}]: truncated data")
            out[key] = (
                np.frombuffer(data, dtype=dtype, count=nbytes // dtype.itemsize, offset=pos)
                .reshape(shape)
                .astype(dtype.newbyteorder("="))
            )
            pos += nbytes
    if pos != len(data):
        raise StateFormatError("trailing bytes after the state")
    return out


def checksum(state: Mapping[str, Any]) -> str:
    """sha256 hex digest of the canonical encoding of ``state``, hashed piece by piece: the
    encoding is never built, so a large model is not copied to be checksummed."""
    head, arrays = _parts(state)
    h = hashlib.sha256(head)
    for a in arrays:
        h.update(a.reshape(-1).view(np.uint8))  # 0-d and empty arrays as plain bytes
    return h.hexdigest()
