"""The sparse state encoding of checkpoints (``CBST2``): exact round trip, canonical bytes, size
proportional to the non-zero entries, the old encoding still read, and forged entries refused."""

from __future__ import annotations

import json
import struct
from functools import partial

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service import serial
from service.serial import MAGIC, MAGIC_SPARSE, StateFormatError, checksum, decode, encode, encode_sparse

DTYPES = [
    np.float64,
    np.float32,
    np.float16,
    np.int64,
    np.uint32,
    np.int8,
    np.bool_,
    np.complex64,
    np.complex128,
]

# Mostly zeros (hypothesis fills most of an array with ``fill``), with -0.0 among the values.
sparse_arrays = st.sampled_from(DTYPES).flatmap(
    lambda dtype: hnp.arrays(
        dtype=dtype,
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=12),
        elements=hnp.from_dtype(np.dtype(dtype), allow_nan=False),
        fill=st.just(np.zeros((), dtype)[()]),
    )
)
states = st.dictionaries(
    st.text(min_size=1, max_size=6),
    st.one_of(sparse_arrays, st.integers(-(2**62), 2**62), st.floats(allow_nan=False), st.booleans()),
    max_size=5,
)


def header(data: bytes) -> dict:
    (n,) = struct.unpack_from("<Q", data, len(MAGIC))
    return json.loads(data[len(MAGIC) + 8 : len(MAGIC) + 8 + n])


def payload(data: bytes) -> int:
    """Bytes after the header."""
    return len(data) - len(MAGIC) - 8 - struct.unpack_from("<Q", data, len(MAGIC))[0]


def forge(data: bytes, key: str, **changes: object) -> bytes:
    """``data`` with the header entry of ``key`` changed (the array bytes kept)."""
    head = header(data)
    head[key] |= changes
    old = len(MAGIC) + 8 + struct.unpack_from("<Q", data, len(MAGIC))[0]
    new = json.dumps(head, sort_keys=True, separators=(",", ":")).encode()
    return data[: len(MAGIC)] + struct.pack("<Q", len(new)) + new + data[old:]


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


@given(states)
def test_roundtrip_is_bit_exact_and_canonical(state: dict) -> None:
    data = encode_sparse(state)
    back = decode(data)
    assert set(back) == set(state)
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            assert back[key].dtype == value.dtype and back[key].shape == value.shape
            assert bits(back[key]) == bits(value)  # -0.0 stays -0.0
        else:
            assert back[key] == value and type(back[key]) is type(value)
    assert encode_sparse(back) == data
    assert checksum(back) == checksum(state)  # the checksum is the canonical CBST1 one
    assert decode(encode(state)).keys() == back.keys()


@pytest.mark.parametrize(
    ("make", "stored_sparse"),
    [
        (lambda rng: np.zeros((10, 1 << 12)), True),
        (lambda rng: np.zeros(7, np.bool_), True),
        (lambda rng: np.full((3, 5), -0.0), False),  # -0.0 is not zero bits: dense
        (lambda rng: rng.normal(size=(10, 64)), False),
        (lambda rng: np.where(rng.random((10, 1 << 12)) < 0.01, rng.normal(size=(10, 1 << 12)), 0.0), True),
        (lambda rng: np.where(rng.random(1000) < 0.01, -0.0, 0.0), True),
        (lambda rng: np.zeros((0, 3)), False),  # not smaller
        (lambda rng: np.array(2.5), False),
        (lambda rng: np.array(0.0), True),
        (lambda rng: (np.arange(20) * (np.arange(20) % 7 == 0)).astype(">i8"), True),  # big-endian
        (lambda rng: np.zeros(8, np.complex128), False),  # 16-byte items are always raw
    ],
)
def test_arrays_round_trip_and_are_stored_sparse_only_when_smaller(make, stored_sparse: bool) -> None:
    a = make(np.random.default_rng(0))
    data = encode_sparse({"a": a, "t": 3})
    back = decode(data)["a"]
    assert back.dtype == a.dtype.newbyteorder("=") and back.shape == a.shape and bits(back) == bits(a)
    assert data.startswith(MAGIC_SPARSE)
    assert ("nnz" in header(data)["a"]) is stored_sparse
    assert len(data) - len(encode({"a": a, "t": 3})) <= 40  # never larger but for the header entry
    if stored_sparse:  # (uint32 index, value) per entry that is not all zero bits
        nnz = np.count_nonzero(a.reshape(-1).view(f"u{a.itemsize}"))
        assert payload(data) == (4 + a.itemsize) * nnz


def test_a_hashed_model_state_costs_what_it_learned() -> None:
    w = np.zeros((10, 1 << 18))
    rng = np.random.default_rng(1)
    w[:, rng.choice(1 << 18, 300, replace=False)] = rng.normal(size=(10, 300))
    data = encode_sparse({"W_": w})
    assert payload(data) == 12 * 3000  # (uint32 index, float64 value) per non-zero
    assert len(encode({"W_": w})) > 20_000_000
    np.testing.assert_array_equal(decode(data)["W_"], w)


def test_the_old_encoding_is_still_read_and_stays_the_checksum() -> None:
    state = {"W_": np.zeros((3, 100)), "t_": 7}
    state["W_"][1, 5] = -2.0
    old = encode(state)
    assert old.startswith(MAGIC) and "nnz" not in header(old)["W_"]
    assert checksum(decode(old)) == checksum(decode(encode_sparse(state))) == checksum(state)


def test_forged_sparse_entries_are_refused() -> None:
    a = np.zeros(100)
    a[[3, 50]] = [1.0, 2.0]
    data = encode_sparse({"a": a})
    assert header(data)["a"]["nnz"] == 2
    idx = data.index(struct.pack("<II", 3, 50))
    cases = {
        "out of range": data[:idx] + struct.pack("<II", 3, 100) + data[idx + 8 :],
        "not increasing": data[:idx] + struct.pack("<II", 50, 3) + data[idx + 8 :],
        "repeated": data[:idx] + struct.pack("<II", 3, 3) + data[idx + 8 :],
        "nnz above the size": forge(data, "a", nnz=101),
        "nnz not an int": forge(data, "a", nnz=2.0),
        "index dtype": forge(data, "a", index="<i8"),
        "sparse in a CBST1 state": MAGIC + data[len(MAGIC_SPARSE) :],
        "huge shape": forge(data, "a", shape=[2**40, 2**20], nnz=0)[: -2 * 12],
        "truncated": data[:-1],
        "trailing": data + b"\0",
    }
    for what, bad in cases.items():
        with pytest.raises(StateFormatError):
            decode(bad)
            pytest.fail(what)


@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])  # 0.5 and 1: stored raw, in pieces
def test_a_column_major_array_encodes_to_the_row_major_bytes(
    density: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hashed linear model keeps W_ column-major (Learner.use_sparse_layout): every encoding
    and the checksum are those of the same array in C order, read without copying it whole."""
    rng = np.random.default_rng(2)
    row = np.where(rng.random((7, 300)) < density, rng.normal(size=(7, 300)), 0.0)
    row[0, 3] = -0.0  # zero bits only count as zero
    column = np.asfortranarray(row)
    assert column.flags.f_contiguous and not column.flags.c_contiguous
    monkeypatch.setattr(serial, "_c_chunks", partial(serial._c_chunks, chunk_bytes=64))  # many pieces
    for fn in (encode, encode_sparse, checksum):
        assert fn({"W_": column, "t_": 1}) == fn({"W_": row, "t_": 1})
    assert bits(decode(encode_sparse({"W_": column}))["W_"]) == bits(row)
