"""The C decision ids and generator (service/_decisions.c) compute what the Python ones compute.

The draws of both against numpy's PCG64 are in tests/service/test_kernels.py; here: BLAKE2b against
hashlib on every length around the block boundaries, seeded ids equal, CSPRNG ids well formed and
never shared across a fork, and bad arguments refused with an error.
"""

from __future__ import annotations

import hashlib
import os
import re

import numpy as np
import pytest

from service import sampling

_c = pytest.importorskip(
    "service._decisions", reason="service/_decisions.c was not built (no C compiler): Python serves"
)


@pytest.mark.parametrize("key", [b"", b"k", bytes(range(64))])
@pytest.mark.parametrize("size", [1, 16, 32, 64])
def test_blake2b_is_hashlibs(key: bytes, size: int) -> None:
    rng = np.random.default_rng(size + len(key))
    for n in [*range(0, 260), 383, 384, 385, 1000]:
        data = rng.bytes(n)
        assert _c.blake2b(data, key, size) == hashlib.blake2b(data, key=key, digest_size=size).digest()


def test_blake2b_refuses_what_hashlib_refuses() -> None:
    with pytest.raises(ValueError):
        _c.blake2b(b"x", b"k" * 65, 16)
    with pytest.raises(ValueError):
        _c.blake2b(b"x", b"", 65)


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_seeded_ids_are_the_python_ones(seed: int) -> None:
    c, py = sampling.DecisionIds.for_seed(seed), sampling.PyDecisionIds.for_seed(seed)
    assert isinstance(c, _c.Ids)
    assert [c.new() for _ in range(3000)] == [py.new() for _ in range(3000)]


def test_random_ids_are_128_bit_urlsafe_and_distinct() -> None:
    ids = sampling.DecisionIds()
    got = [ids.new() for _ in range(20_000)]  # several 4 KiB refills of the buffer
    assert len(set(got)) == len(got)
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{21}[AQgw]", i) for i in got)  # 128 bits: 2 of 6 in the last


def test_a_forked_child_does_not_issue_its_parents_ids() -> None:
    ids = sampling.DecisionIds()
    ids.new()  # the buffer holds bytes now: the child must not reuse them
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, " ".join(ids.new() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        child = set(f.read().split())
    os.waitpid(pid, 0)
    parent = {ids.new() for _ in range(50)}
    assert len(child) == 50 and not child & parent


def test_decision_rng_is_the_python_one_for_any_id() -> None:
    for did in ["", "abc", "é" * 40, "x" * 129, sampling.DecisionIds().new()]:
        c, py = sampling.decision_rng(did), sampling.py_decision_rng(did)
        assert [c.random() for _ in range(5)] == [py.random() for _ in range(5)]
        assert c.random(7).tolist() == py.random(7).tolist()
        assert [int(c.integers(9)) for _ in range(9)] == [int(py.integers(9)) for _ in range(9)]
        assert c.normal() == py.normal()  # both move to numpy at the same state
        assert c.random() == py.random()


def test_the_state_is_taken_modulo_2_128_as_numpy_takes_it() -> None:
    for state, inc in [(-1, 3), (1 << 130, 5), (12345, (1 << 128) + 7)]:
        c, py = sampling.DecisionRng(state, inc), sampling.PyDecisionRng(state % (1 << 128), inc % (1 << 128))
        assert [c.random() for _ in range(4)] == [py.random() for _ in range(4)]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        sampling.decision_rng(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sampling.DecisionRng(1.5, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sampling.DecisionIds(b"k" * 65)
    with pytest.raises(TypeError):
        sampling.DecisionIds("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _c.set_rng_class(int)
