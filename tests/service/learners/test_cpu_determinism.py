"""Replicas on CPUs of different kinds hold the same model.

A model's arithmetic must not depend on which SIMD kernels numpy and OpenBLAS pick for the CPU at
hand: replicas on an AVX-512 machine and on an AVX2 one apply the same log, and their checksums must
agree. Two subprocesses learn the same stream with every learner at its defaults: one as numpy and
OpenBLAS choose on this machine, one with numpy's AVX-512 loops switched off
(``NPY_DISABLE_CPU_FEATURES``) and OpenBLAS on its AVX2 kernels (``OPENBLAS_CORETYPE=Haswell``), as
on an AVX2 machine. The input is wide and dense enough (784 features, MNIST-like) for numpy's BLAS
to take different paths; C-OVA's dense input went through ``W @ x`` and drifted until it was
computed by the compiled kernels. On a CPU without AVX-512 both runs are the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from numpy._core._multiarray_umath import __cpu_features__

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = """
import hashlib, json
import numpy as np
from service.learners import learners, make_learner
from service.sampling import DecisionIds
from service.serial import encode
from lab.sim.stream import run_stream

rng = np.random.default_rng(0)
d, k, n = 784, 10, 400
teacher = rng.standard_normal((k, d))
X = rng.random((n, d)) * (rng.random((n, d)) < 0.2)  # about 150 non-zeros, as an MNIST image
y = np.argmax(X @ teacher.T, axis=1)
out = {}
for name in sorted(n for n, c in learners.items() if n != "optbandit" and not c.actions):
    model = make_learner(name, d, k, {}, seed=0)
    correct = run_stream(model, X, y, DecisionIds.for_seed(0))
    out[name] = hashlib.sha256(encode(model.state()) + correct.tobytes()).hexdigest()
print(json.dumps(out))
"""


def _start(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, str]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def test_replicas_on_avx2_and_avx512_machines_hold_the_same_models() -> None:
    avx512 = [f for f, on in __cpu_features__.items() if on and f.startswith("AVX512")]
    other = {"NPY_DISABLE_CPU_FEATURES": " ".join(avx512)} if avx512 else {}
    if __cpu_features__.get("AVX2"):  # OpenBLAS's AVX2 kernels exist only where AVX2 does
        other["OPENBLAS_CORETYPE"] = "Haswell"
    # both at once: two independent processes, so on two cores the test takes the time of one
    runs = [_start({}), _start(other)]
    here, there = (_result(p) for p in runs)
    assert len(here) >= 10
    assert {name for name in here if here[name] != there[name]} == set()
