"""A canonical, pickle-free binary encoding of flat state dictionaries.

A state is ``dict[str, np.ndarray | int | float | str | bool]``. The encoding (:func:`encode`,
magic ``CBST1``) is a JSON header (sorted keys, one entry per value) followed by the raw
little-endian bytes of every array in key order. The same state always encodes to the same bytes, so
``sha256(encode(state))`` is a model checksum that replicas can compare. Decoding only ever builds
numeric/bool arrays and JSON scalars: no code is executed and object arrays are refused.

Checkpoints use the sparse variant (:func:`encode_sparse`, magic ``CBST2``): the same header and
order, but an array whose non-zero entries take less room as ``(flat index, value)`` pairs is stored
as those (its header entry adds ``nnz`` and the index dtype), so a hashed model's 2**b columns cost
only what it learned. "Non-zero" is by bit pattern, so ``-0.0`` is kept and the round trip is exact.
It is canonical too (the choice depends only on the values). :func:`decode` reads both.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

MAGIC = b"CBST1\n"
MAGIC_SPARSE = b"CBST2\n"
_ALLOWED_KINDS = set("biufc")  # bool, int, uint, float, complex; never object/str/void arrays

StateValue = np.ndarray | int | float | str | bool
State = dict[str, Any]


class StateFormatError(ValueError):
    """The bytes or the dictionary are not a valid serialised state."""


def _arrays(state: Mapping[str, Any]) -> tuple[dict[str, Any], list[tuple[str, np.ndarray]]]:
    """The header entries and the ``(key, array)`` pairs of ``state`` in key order: little-endian
    arrays, C-contiguous or 2-D column-major (a hashed linear model's weights, see
    ``Learner.use_sparse_layout``), views of the state's own arrays wherever they already are (no
    copy). The encoding is always in C order: see :func:`_c_chunks`."""
    header: dict[str, Any] = {}
    arrays: list[tuple[str, np.ndarray]] = []
    for key in sorted(state):
        value = state[key]
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _ALLOWED_KINDS:
                raise StateFormatError(f"state[{key!r}]: dtype {value.dtype} is not numeric")
            arr = value.astype(value.dtype.newbyteorder("<"), copy=False)
            if not arr.flags.c_contiguous and not (arr.ndim == 2 and arr.flags.f_contiguous):
                arr = np.ascontiguousarray(arr)
            header[key] = {"dtype": arr.dtype.str, "shape": list(value.shape)}
            arrays.append((key, arr))
        elif isinstance(value, bool | int | float | str) or value is None:
            if isinstance(value, float) and not np.isfinite(value):
                header[key] = {"float": repr(value)}
            else:
                header[key] = {"value": value}
        elif isinstance(value, np.generic):
            header[key] = {"value": value.item()}
        else:
            raise StateFormatError(f"state[{key!r}]: unsupported type {type(value).__name__}")
    return header, arrays


def _head(magic: bytes, header: Mapping[str, Any]) -> bytes:
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return magic + struct.pack("<Q", len(head)) + head


def _c_chunks(arr: np.ndarray, chunk_bytes: int = 1 << 20) -> Iterator[np.ndarray]:
    """The bytes of ``arr`` in C order as C-contiguous pieces: the array itself when it is
    C-contiguous, else (column-major 2-D) row pieces of at most ``chunk_bytes`` each, so a large
    column-major model is never copied whole."""
    if arr.flags.c_contiguous:
        yield arr.reshape(-1)
        return
    step = max(1, chunk_bytes // arr.dtype.itemsize)
    for row in arr:
        for start in range(0, row.size, step):
            yield np.ascontiguousarray(row[start : start + step])


def _parts(state: Mapping[str, Any]) -> tuple[bytes, list[np.ndarray]]:
    """The header and the arrays of the canonical encoding, in order."""
    header, arrays = _arrays(state)
    return _head(MAGIC, header), [a for _, a in arrays]


def encode(state: Mapping[str, Any]) -> bytes:
    """Encode a flat state dictionary canonically (see module docstring)."""
    head, arrays = _parts(state)
    return head + b"".join(chunk for a in arrays for chunk in _c_chunks(a))


def _nonzero(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """C-order flat indices of ``arr``'s entries that are not all zero bits, increasing, and those
    entries, when both take less room than ``arr`` (else None). ``arr`` is little-endian,
    C-contiguous or column-major 2-D (read in memory order, then the indices mapped to C order:
    no copy of the array)."""
    size = arr.dtype.itemsize
    if size not in (1, 2, 4, 8):  # complex128 and the like: always raw
        return None
    memory = arr.reshape(-1) if arr.flags.c_contiguous else arr.T.reshape(-1)  # views
    nonzero = memory.view(f"<u{size}") != 0  # by bits: -0.0 is kept
    index = np.dtype("<u4") if arr.size <= 2**32 else np.dtype("<u8")
    if np.count_nonzero(nonzero) * (index.itemsize + size) >= arr.nbytes:
        return None
    at = np.flatnonzero(nonzero)  # 3x faster on a bool mask than on the words
    if arr.flags.c_contiguous:
        return at.astype(index), memory[at]
    rows, cols = arr.shape  # memory position j * rows + k holds arr[k, j], at C position k * cols + j
    flat = (at % rows) * cols + at // rows
    order = np.argsort(flat, kind="stable")
    return flat[order].astype(index), memory[at[order]]


def encode_sparse(state: Mapping[str, Any]) -> bytes:
    """Encode ``state`` with mostly-zero arrays as (flat index, value) pairs (magic ``CBST2``).

    Canonical, and exact bit for bit through :func:`decode`; the size of a hashed model's
    checkpoint grows with the columns it learned, not with ``2**b``.
    """
    header, arrays = _arrays(state)
    data: list[np.ndarray] = []
    for key, arr in arrays:
        pairs = _nonzero(arr)
        if pairs is None:
            data += _c_chunks(arr)
        else:
            idx, values = pairs
            header[key] |= {"nnz": int(idx.size), "index": idx.dtype.str}
            data += [idx, values]
    return _head(MAGIC_SPARSE, header) + b"".join(data)


def _array(data: bytes, pos: int, key: str, entry: dict[str, Any], sparse: bool) -> tuple[np.ndarray, int]:
    """The array of header ``entry`` starting at ``data[pos]``, and the position after it."""
    try:
        dtype = np.dtype(entry["dtype"])
        shape = tuple(int(s) for s in entry["shape"])
    except (KeyError, TypeError, ValueError) as exc:
        raise StateFormatError(f"state[{key!r}]: bad array entry ({exc})") from None
    if dtype.kind not in _ALLOWED_KINDS or any(s < 0 for s in shape):
        raise StateFormatError(f"state[{key!r}]: refused dtype {dtype} or shape {shape}")
    n = int(np.prod(shape, dtype=np.int64))
    native = dtype.newbyteorder("=")
    if "nnz" not in entry:
        nbytes = dtype.itemsize * n
        if pos + nbytes > len(data):
            raise StateFormatError(f"state[{key!r}]: truncated data")
        arr = np.frombuffer(data, dtype=dtype, count=n, offset=pos).reshape(shape).astype(native)
        return arr, pos + nbytes
    nnz, index_str = entry["nnz"], entry.get("index")
    if not sparse or index_str not in ("<u4", "<u8") or type(nnz) is not int or not 0 <= nnz <= n:
        raise StateFormatError(f"state[{key!r}]: bad sparse entry")
    index = np.dtype(index_str)
    end = pos + nnz * (index.itemsize + dtype.itemsize)
    if end > len(data):
        raise StateFormatError(f"state[{key!r}]: truncated data")
    idx = np.frombuffer(data, dtype=index, count=nnz, offset=pos)
    if nnz and (idx[-1] >= n or np.any(idx[1:] <= idx[:-1])):  # in range and canonical
        raise StateFormatError(f"state[{key!r}]: sparse indices out of range or not increasing")
    try:
        flat = np.zeros(n, dtype=native)  # calloc: untouched pages cost nothing
    except (MemoryError, ValueError):  # a forged shape ("array is too big")
        raise StateFormatError(f"state[{key!r}]: shape {shape} too large") from None
    flat[idx] = np.frombuffer(data, dtype=dtype, count=nnz, offset=pos + nnz * index.itemsize)
    return flat.reshape(shape), end


def decode(data: bytes) -> State:
    """Decode bytes made by :func:`encode` or :func:`encode_sparse`; raise :class:`StateFormatError`
    on anything else."""
    magic = data[: len(MAGIC)]
    if magic not in (MAGIC, MAGIC_SPARSE) or len(data) < len(MAGIC) + 8:
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
            out[key], pos = _array(data, pos, key, entry, magic == MAGIC_SPARSE)
    if pos != len(data):
        raise StateFormatError("trailing bytes after the state")
    return out


def checksum(state: Mapping[str, Any]) -> str:
    """sha256 hex digest of the canonical encoding of ``state``, hashed piece by piece: the
    encoding is never built, so a large model is not copied to be checksummed."""
    head, arrays = _parts(state)
    h = hashlib.sha256(head)
    for a in arrays:
        for chunk in _c_chunks(a):
            h.update(chunk.view(np.uint8))  # 0-d and empty arrays as plain bytes
    return h.hexdigest()
