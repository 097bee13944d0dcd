"""Kernels compile when first needed, in the learner's modules only; numba's cache directory follows
the kernel sources (service/_jit_cache.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numba
import pytest

from service import _jit_cache


def test_every_compiled_module_is_in_the_hash() -> None:
    compiled = {
        str(path.relative_to(_jit_cache.ROOT))
        for path in _jit_cache.ROOT.rglob("*.py")
        if ("njit(" in path.read_text() or "@kernel(" in path.read_text()) and path.name != "_jit_cache.py"
    }
    assert compiled == set(_jit_cache.KERNEL_MODULES)


def test_the_cache_directory_is_the_sources_version() -> None:
    digest = _jit_cache.sources_digest()
    assert numba.config.CACHE_DIR.endswith(digest)
    assert len(digest) == 16


def test_a_package_it_cannot_write_to_caches_in_the_temporary_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # numba caches only where it can write; without a location its import fails (as in the Docker
    # image: a read-only install, a user whose home is /)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = numba.config.CACHE_DIR
    try:
        monkeypatch.setattr(_jit_cache, "writable", lambda path: False)
        got = _jit_cache.configure()
        assert got.parent.parent == tmp_path and got.name == _jit_cache.sources_digest()
        assert got.parent.name.startswith("clickboost-numba-")
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
        assert _jit_cache.configure() == tmp_path / "mine" / _jit_cache.sources_digest()
    finally:
        numba.config.CACHE_DIR = before


def test_writable_is_numbas_test(tmp_path: Path) -> None:
    assert _jit_cache.writable(tmp_path / "a" / "b")
    (tmp_path / "file").write_text("")
    assert not _jit_cache.writable(tmp_path / "file" / "sub")


# Every bandit learner at its defaults and the settings that call other kernels. Run in a fresh
# process each (what it compiled stays in the process): warm the learner's kernel modules, serve
# dense and hashed input, and list the modules any kernel of which compiled or loaded after that.
_SERVE = """
import json, sys
import numpy as np
from service import _jit_cache
from service.features import SparseVector
from service.learners import learners, make_learner

name, params = sys.argv[1], json.loads(sys.argv[2])
cls = learners.get(name)
_jit_cache.warm(cls.kernel_modules(params))
before = {id(d) for ds in _jit_cache.KERNELS.values() for d in ds if not d._can_compile}
if cls.actions:  # candidates with features: 1 to 5 per request, some masked by eligible, graded rewards
    from service.actions import ActionFeaturiser

    f = ActionFeaturiser(10, 100, 100)
    m = make_learner(name, 1024, 1, params, seed=1)
    rng = np.random.default_rng(0)
    for t in range(300):
        n = int(rng.integers(1, 6))
        acts = [{"id": f"a{a}", "features": {"k": f"v{rng.integers(5)}", "p": float(rng.random())}}
                for a in range(n)]
        x = f({"u": f"s{rng.integers(4)}", "z": float(rng.random())}, acts)
        eligible = None if t % 3 else rng.random(n) < 0.7
        if eligible is not None and not eligible.any():
            eligible[0] = True
        reward = float(rng.random()) if m.graded else bool(rng.random() < 0.4)
        m.learn(x, m.decide(x, rng, eligible), reward)
for sparse in () if cls.actions else (False, True):
    d = 1024 if sparse else 21
    m = make_learner(name, d, 4, params, seed=1)
    if sparse and not m.accepts_sparse:
        continue
    if sparse:
        m.use_sparse_layout()
    rng = np.random.default_rng(0)
    for t in range(300):
        if sparse:
            idx = np.unique(rng.integers(0, d, 20))
            x = SparseVector(idx.astype(np.int64), rng.random(idx.size), d)
        else:  # small integer values: ties, repeated inputs, tree splits
            x = (rng.random(d) < 0.4) * rng.integers(1, 3, d).astype(float)
        m.learn(x, m.decide(x, rng), bool(rng.random() < 0.4))
after = {n for n, ds in _jit_cache.KERNELS.items() for d in ds if not d._can_compile and id(d) not in before}
print(json.dumps(sorted(after)))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("banditron", {}),
        ("cova", {}),
        ("cova", {"base": "naive_bayes"}),
        ("cova", {"base": "ogd_perceptron"}),
        ("squarecb", {}),
        ("squarecb-sgd", {}),
        ("squarecb-sgd", {"bits": 6}),  # hashed columns
        ("banditboost", {}),
        ("banditboost", {"weak": "naive_bayes"}),
        ("binbandit", {}),
        ("adabandit", {}),
        ("banditbbm", {}),
        ("adaboost-mh", {}),
        ("squarecb-adf", {}),
        ("cova-adf", {}),
        ("cova-adf", {"epsilon": 0.0}),
    ],
)
def test_serving_after_warming_compiles_nothing_else(name: str, params: dict) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _SERVE, name, json.dumps(params)], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_kernel_dispatches_as_njit_with_signatures() -> None:
    import numpy as np

    from service.kernels import first_max

    assert first_max(np.array([1.0, 3.0, 3.0])) == (1, 2)
    assert not first_max._can_compile  # the declared overloads, and no others
    assert [str(s) for s in first_max.signatures] == ["(Array(float64, 1, 'C', False, aligned=True),)"]
    with pytest.raises(TypeError, match="No matching definition"):
        first_max(np.array([1, 2]))


def test_importing_every_learner_compiles_nothing() -> None:
    code = (
        "from service import _jit_cache; from service.learners import learners; learners.names(); "
        "print(sum(not d._can_compile for ds in _jit_cache.KERNELS.values() for d in ds))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
