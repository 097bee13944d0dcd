"""The canonical state codec: round trip, canonical bytes, and refusal of anything else."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service.serial import MAGIC, StateFormatError, checksum, decode, encode

arrays = hnp.arrays(
    dtype=st.sampled_from([np.float64, np.float32, np.int64, np.uint64, np.bool_, np.int8]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)
scalars = st.one_of(
    st.integers(-(2**62), 2**62), st.floats(allow_nan=False), st.text(max_size=8), st.booleans()
)
states = st.dictionaries(st.text(min_size=1, max_size=6), st.one_of(arrays, scalars), max_size=6)


def same(a: object, b: object) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return a == b and type(a) is type(b)


@given(states)
def test_roundtrip_is_exact_and_canonical(state: dict) -> None:
    data = encode(state)
    back = decode(data)
    assert set(back) == set(state)
    assert all(same(state[k], back[k]) for k in state)
    assert encode(back) == data
    assert checksum(back) == checksum(state)


def test_key_order_does_not_change_the_bytes() -> None:
    a = {"b": np.arange(3), "a": 1.5}
    assert encode(a) == encode(dict(reversed(list(a.items()))))


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"PK\x03\x04 a zip file",
        MAGIC + (10**9).to_bytes(8, "little"),
        MAGIC + (3).to_bytes(8, "little") + b"{x}",
        MAGIC + (2).to_bytes(8, "little") + b"[]",
    ],
)
def test_garbage_is_refused(data: bytes) -> None:
    with pytest.raises(StateFormatError):
        decode(data)


def test_truncated_and_trailing_bytes_are_refused() -> None:
    data = encode({"w": np.arange(10.0)})
    with pytest.raises(StateFormatError, match="truncated"):
        decode(data[:-1])
    with pytest.raises(StateFormatError, match="trailing"):
        decode(data + b"\0")


def test_object_arrays_are_never_encoded_or_decoded() -> None:
    with pytest.raises(StateFormatError):
        encode({"o": np.array([object()], dtype=object)})
    forged = encode({"w": np.zeros(1)}).replace(b'"<f8"', b'"|O8"')
    with pytest.raises(StateFormatError):
        decode(forged)


def test_checksum_hashes_the_encoding_without_building_it() -> None:
    import hashlib

    rng = np.random.default_rng(0)
    state = {
        "a": rng.normal(size=(3, 4)),
        "zero_d": np.array(5),
        "empty": np.zeros((0, 3)),
        "strided": rng.normal(size=(4, 3)).T,  # not C-contiguous
        "big_endian": np.arange(4, dtype=">i8"),
        "f": 1.5,
        "flag": True,
        "s": "text",
        "nan": float("nan"),
    }
    assert checksum(state) == hashlib.sha256(encode(state)).hexdigest()
