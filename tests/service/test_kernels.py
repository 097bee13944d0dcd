"""The compiled pieces of the sparse path (issue 19): decision generator, featuriser, kernels.

* :class:`service.sampling.DecisionRng` draws exactly what numpy's PCG64 seeded from the decision id
  draws, for every sequence of calls (its own ``random()`` and any call it hands to numpy);
* the featuriser's bucket cache changes nothing (a cold, warm or emptied cache gives the same
  vector as the textbook dense ``x[bucket] += v``);
* the numba loops are compiled when ``service.kernels`` is imported (the service imports it before
  turning ready): no call compiles, and a call with other array types is refused, not compiled.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Iterator

import numpy as np
import pytest

from service import _jit_cache, features, kernels, sampling
from service.features import FeatureError, Featuriser, bucket
from service.sampling import DecisionIds, DecisionRng, decision_rng

#: (ids, generator of an id, its class) of each implementation: C where built, Python always
IMPLEMENTATIONS = {
    "c": (DecisionIds, decision_rng, DecisionRng),
    "python": (sampling.PyDecisionIds, sampling.py_decision_rng, sampling.PyDecisionRng),
}


def numpy_rng(decision_id: str) -> np.random.Generator:
    """The textbook generator of a decision: a PCG64 set from ``blake2b(decision_id)``."""
    h = hashlib.blake2b(decision_id.encode(), digest_size=32).digest()
    gen = np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int.from_bytes(h[:16], "little"), "inc": int.from_bytes(h[16:], "little") | 1},
        "has_uint32": 0,
        "uinteger": 0,
    }
    return gen


CALLS = [
    lambda g: g.random(),
    lambda g: int(g.integers(7)),
    lambda g: g.random(3).tolist(),
    lambda g: g.random((4, 3)).tolist(),
    lambda g: int(g.integers(2)),
    lambda g: [int(g.integers(3)) for _ in range(3)],
    lambda g: int(g.integers(1 << 32)),
    lambda g: int(g.integers((1 << 32) - 3)),  # rejection is likely: exercises Lemire's loop
    lambda g: int(g.integers(1 << 40)),
    lambda g: g.normal(),
]


def _pairs(impl: str, seed: int, n: int) -> Iterator[tuple[np.random.Generator, np.random.Generator]]:
    """``n`` decision generators of ``impl`` with their textbook twins (skips where C was not built)."""
    if impl == "c" and sampling._compiled is None:
        pytest.skip("service/_decisions.c was not built (no C compiler): the Python classes serve")
    ids_class, rng_of, rng_class = IMPLEMENTATIONS[impl]
    ids = ids_class.for_seed(seed)
    for _ in range(n):
        did = ids.new()
        ours = rng_of(did)
        assert isinstance(ours, rng_class)
        yield ours, numpy_rng(did)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_decision_rng_draws_what_numpy_draws(impl: str) -> None:
    pick = np.random.default_rng(0)
    for ours, ref in _pairs(impl, 5, 2000):
        # a random sequence of calls: runs of the Python random() then anything numpy does
        for i in pick.integers(len(CALLS), size=int(pick.integers(1, 6))):
            if pick.random() < 0.5:
                assert ours.random() == ref.random()
            assert CALLS[i](ours) == CALLS[i](ref)
        assert ours.random() == ref.random()


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_a_random_taken_back_is_drawn_again(impl: str) -> None:
    """``own_random`` then ``_unread`` leaves the generator where it was, a buffered 32-bit half
    included; numpy's own generator is not drawn from (``own_random`` gives None)."""
    pick = np.random.default_rng(1)
    for ours, ref in _pairs(impl, 6, 500):
        for i in pick.integers(len(CALLS) - 2, size=int(pick.integers(1, 5))):  # no move to numpy
            u = sampling.own_random(ours)
            ours._unread()  # type: ignore[attr-defined]
            if pick.random() < 0.5:  # the draw taken back is the next random()
                assert u == ours.random() == ref.random()
            assert CALLS[i](ours) == CALLS[i](ref)
        assert ours.random() == ref.random()
    gen = np.random.default_rng(0)
    assert sampling.own_random(gen) is None and gen.random() == np.random.default_rng(0).random()
    moved = IMPLEMENTATIONS[impl][1]("x")
    moved.normal()
    assert sampling.own_random(moved) is None
    with pytest.raises(RuntimeError):
        moved._unread()  # type: ignore[attr-defined]


def test_featuriser_cache_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    requests = []
    for _ in range(300):
        r: dict[str, object] = {f"s{j}": f"v{rng.integers(30)}" for j in range(12)}
        r |= {f"n{j}": float(rng.normal()) for j in range(4)} | {"b": bool(rng.integers(2)), "i": 3}
        # one name with a string, a number or a bool; requests with strings only (the fast path)
        r["m"] = ["x", 1.0, True, 0][int(rng.integers(4))]
        requests.append(r if rng.random() < 0.5 else {k: v for k, v in r.items() if isinstance(v, str)})
    monkeypatch.setattr(features, "CACHE_SIZE", 50)  # emptied every few requests
    small, warm = Featuriser(None, 6, 100), Featuriser(None, 6, 100)  # 64 buckets: many collisions
    python = Featuriser(None, 6, 100)
    python._compiled = None  # the Python path alone (what runs where the C loop was not built)
    for r in requests:
        dense = np.zeros(64)
        for name, value in r.items():  # the textbook definition, in request order
            key = f"{name}={value}" if isinstance(value, str) else name
            dense[bucket(key, 6)] += 1.0 if isinstance(value, str) else float(value)  # type: ignore[arg-type]
        for f in (small, warm, Featuriser(None, 6, 100), python):
            x = f(r)
            assert np.all(np.diff(x.idx) > 0) and np.all(x.val != 0.0)
            assert x.idx.dtype == np.int64 and x.val.dtype == np.float64
            assert x.dense().tobytes() == dense.tobytes()
    assert small._cached <= 50


def test_the_compiled_featuriser_is_built_and_equals_the_python_path() -> None:
    """The C loop (service/_features.c) is built by ``make install`` wherever a C compiler is at
    hand; on every kind of request it returns the Python path's vector bit for bit, and it hands
    bad input to the Python path, which words the error."""
    if features._compiled is None:
        if shutil.which("cc") is None and shutil.which("gcc") is None:
            pytest.skip("no C compiler on PATH: the featuriser runs its Python path (apt-get install gcc)")
        pytest.fail("a C compiler is on PATH but service._features was not built: run `make install`")
    compiled, python = Featuriser(None, 8, 100), Featuriser(None, 8, 100)
    python._compiled = None
    rng = np.random.default_rng(3)
    values: list[object] = ["a", "b", "", "é", 0, 1, -2, 0.5, -0.0, 1e9, True, False, 10**30]
    for _ in range(3000):
        r = {
            f"k{rng.integers(12)}": values[int(rng.integers(len(values)))]
            for _ in range(int(rng.integers(8)))
        }
        try:
            want = python(r)
        except FeatureError as e:
            with pytest.raises(FeatureError, match=re.escape(str(e))):
                compiled(r)
            continue
        got = compiled(r)
        assert (got.idx.tobytes(), got.val.tobytes(), got.dim) == (
            want.idx.tobytes(),
            want.val.tobytes(),
            want.dim,
        )
    with pytest.raises(FeatureError, match=r"features\.x: nan"):
        compiled({"x": float("nan")})


@pytest.mark.parametrize("name", kernels.__all__)
def test_kernels_compile_when_warmed_and_never_at_a_call(name: str) -> None:
    _jit_cache.warm([kernels.__name__])  # what the server does before a model of these serves
    kernel = getattr(kernels, name)
    compiled = list(kernel.signatures)
    assert compiled, f"{name} has no compiled signature"
    # the types a request brings, in every layout they come in: no new compilation
    W = np.zeros((3, 16))
    idx, val = np.array([1, 5, 9]), np.array([1.0, -2.0, 0.5])
    args = {
        "sparse_scores": (W, idx, val),
        "sparse_argmax": (W, idx, val),
        "banditron_update": (W, idx, val, 0, 1, True, 0.5),
        "banditron_update_dense_batch": (
            W,
            np.ones((2, 16)),
            np.array([0, 2]),
            np.array([1, 1]),
            np.array([True, False]),
            np.array([0.5, 0.25]),
        ),
        "banditron_update_sparse_batch": (
            W,
            idx,
            val,
            np.array([0, 2, 3]),
            np.array([0, 2]),
            np.array([1, 1]),
            np.array([True, False]),
            np.array([0.5, 0.25]),
        ),
        "perceptron_update": (W, idx, val, 0, 1),
        "pa_update": (W, idx, val, 1, True, kernels.PA_BASES["pa1"], 1.0),
        "merge_buckets": (idx, val),
        "nonzeros": (np.array([0.0, 2.0, 0.0, -1.0]),),
        "sort_distinct": (np.array([9, 1, 5]),),
        "gamma_mix_sample": (1, 3, 0.1, 0.5),
        "rho_mix_sample": (1, 3, 0.1, 0.5),
        "pcg64_doubles": (np.array([1, 2, 3, 5], dtype=np.uint64), np.zeros(4)),
    }[name]
    kernel(*args)
    kernel(
        *[np.repeat(a, 2)[::2] if isinstance(a, np.ndarray) and a.ndim == 1 else a for a in args]
    )  # strided
    assert list(kernel.signatures) == compiled
    if not any(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in args):
        return  # no float array to hand over in another precision
    with pytest.raises(TypeError):  # float32 weights: refused rather than compiled on a request
        kernel(
            *[
                a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == np.float64 else a
                for a in args
            ]
        )


def test_sparse_scores_sum_in_index_order_in_either_layout() -> None:
    """Row-major models run four labels along their rows, column-major ones all labels per column:
    every score is still the sum of its terms in index order, bit for bit."""
    rng = np.random.default_rng(1)
    for _ in range(500):
        k, d = int(rng.integers(1, 12)), int(rng.integers(1, 60))
        W = rng.standard_normal((k, d)) * 10.0 ** rng.uniform(-5, 5, (k, 1))
        idx = np.sort(rng.choice(d, int(rng.integers(0, d + 1)), replace=False)).astype(np.int64)
        val = rng.standard_normal(idx.size)
        expected = np.zeros(k)
        for j in range(idx.size):
            expected += W[:, idx[j]] * val[j]  # one rounding per term and label, in index order
        for layout in (W, np.asfortranarray(W)):
            assert kernels.sparse_scores(layout, idx, val).tobytes() == expected.tobytes()
