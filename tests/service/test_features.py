"""Featurisation: stable hashing (oracle + other processes), one-hot strings, exact float round trips."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from service.actions import ActionFeaturiser
from service.features import CACHE_BYTES, FeatureError, Featuriser, bucket


def oracle_bucket(key: str, bits: int) -> int:
    """Textbook: first 8 bytes of blake2b, little-endian, modulo 2**bits."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little") % 2**bits


@pytest.mark.parametrize("key", ["age", "country=fr", "é=ü", "", "x" * 300])
@pytest.mark.parametrize("bits", [1, 10, 18])
def test_bucket_matches_the_oracle(key: str, bits: int) -> None:
    assert bucket(key, bits) == oracle_bucket(key, bits)


def test_hashing_is_the_same_in_other_processes() -> None:
    code = (
        "from service.features import Featuriser; "
        "print(Featuriser(None, 16, 10)({'country': 'fr', 'age': 3}).idx.tolist())"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    here = Featuriser(None, 16, 10)({"country": "fr", "age": 3}).idx.tolist()
    assert outs == {f"{here}\n"}


def test_named_features_semantics() -> None:
    f = Featuriser(None, 12, 10)
    x = f({"age": 31.5, "country": "fr", "mobile": True, "desktop": False})
    assert x.dim == 4096 and np.all(np.diff(x.idx) > 0) and np.all(x.val != 0.0)  # sorted, no zeros
    x = x.dense()
    expected = np.zeros(4096)
    expected[oracle_bucket("age", 12)] += 31.5
    expected[oracle_bucket("country=fr", 12)] += 1.0
    expected[oracle_bucket("mobile", 12)] += 1.0
    np.testing.assert_array_equal(x, expected)


def test_colliding_features_add_up() -> None:
    f = Featuriser(None, 1, 100)
    names = [f"f{i}" for i in range(10)]
    x = f(dict.fromkeys(names, 1.0)).dense()
    assert x.sum() == 10.0 and x.shape == (2,)


def test_dense_float64_round_trips_through_json_exactly() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(size=100) * 10.0 ** rng.integers(-300, 9, size=100), [5e-324, -0.0, 1e9]])
    sent = json.loads(json.dumps({"features": x.tolist()}))["features"]
    got = Featuriser(x.size, None, 10)(sent)
    assert got.tobytes() == x.tobytes()


@pytest.mark.parametrize(
    ("features", "words"),
    [
        ([1.0, 2.0], "expected 3 values, got 2"),
        ([1.0, float("nan"), 2.0], "features.1"),
        ({"a": 1.0}, "list of 3 numbers"),
    ],
)
def test_dense_errors(features: object, words: str) -> None:
    with pytest.raises(FeatureError, match=words):
        Featuriser(3, None, 10)(features)  # type: ignore[arg-type]


def test_named_errors() -> None:
    f = Featuriser(None, 4, 2)
    with pytest.raises(FeatureError, match="3 named features, at most 2"):
        f({"a": 1, "b": 2, "c": 3})
    with pytest.raises(FeatureError, match="object"):
        f([1.0])
    with pytest.raises(FeatureError, match=r"features\.a"):
        f({"a": float("inf")})


def test_pack_keeps_the_nonzero_buckets_and_unpacks_bit_for_bit() -> None:
    f = Featuriser(None, 18, 10)
    x = f({"a": 0.1, "b": "x", "c": -3e-310, "d": 0.0, "e": False})
    packed = f.pack(x)
    assert packed.shape == (2, 3)
    back = f.unpack(packed)
    assert back.idx.tobytes() == x.idx.tobytes() and back.val.tobytes() == x.val.tobytes()
    assert f.pack(x.dense()).tobytes() == packed.tobytes()  # the records written before: same bytes
    dense = Featuriser(3, None, 10)
    y = dense([1.0, -0.0, 2.0])
    assert dense.unpack(dense.pack(y)).tobytes() == y.tobytes()


def test_the_cache_is_bounded_in_bytes() -> None:
    """Issue 51: every new key stayed cached until 65,536 entries, so long unique strings held
    gigabytes. Twice the byte bound of unique 1,000-character names and values (4 bytes a
    character): the accounted bytes never pass the bound, the memory really held stays within it,
    and every vector is still the textbook one."""
    Featuriser(None, 12, 10)({"a": "b", "c": 1.0})  # the kernels loaded before memory is traced
    f = Featuriser(None, 12, 10)
    value = "\U0001f600" * 990  # 4 bytes a character in memory
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        i = 0
        while i * 2 * 4 * 1000 < 2 * CACHE_BYTES:
            name, text = f"{i:010d}" + "\u00e9" * 990, f"{i:010d}" + value
            x = f({name: text, f"n{i:06d}" + value: 1.5})
            assert f.cached_bytes <= CACHE_BYTES
            if i % 500 == 0:  # the vector of a key just cached, and of a key hashed after a clear
                expected = sorted([bucket(f"{name}={text}", 12), bucket(f"n{i:06d}" + value, 12)])
                assert x.idx.tolist() == sorted(set(expected))
            i += 1
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak <= CACHE_BYTES * 1.1, peak  # the accounting covers what Python really allocates
    assert f.cached_bytes > 0 and f._cached < i  # it started over at least once


def test_a_key_over_the_bound_alone_is_hashed_not_cached() -> None:
    f = Featuriser(None, 12, 10, cache_bytes=2000)
    for _ in range(2):
        x = f({"a": "x" * 3000})
        assert x.idx.tolist() == [bucket("a=" + "x" * 3000, 12)]
        assert f.cached_bytes == 0 and f._cached == 0
    f({"b": "y"})
    assert 0 < f.cached_bytes <= 2000 and f._cached == 1


def test_an_action_models_two_caches_share_the_bound() -> None:
    a = ActionFeaturiser(12, 10, 5)
    assert a.context.cache_bytes + a.action.cache_bytes == CACHE_BYTES
