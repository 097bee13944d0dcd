"""The run stores' pinned results versions (lab.repro.seed001.RESULTS_VERSION, lab.sweep.VERSION) still hold.

Each stored run of the seed-001 table is keyed by its learner's results version. A short run per
learner and setting must give exactly the correctness vector and final state recorded here (sha256
of the packed vector and of the canonical state with its floats rounded to float32): the arithmetic
of every learner whose runs are stored is what produced them. The rounding is there because numpy's
reductions pick SIMD kernels by CPU (an AVX-512 machine sums some arrays in another order), which
moves the last bits of a state, not its decisions; a change of the arithmetic moves far more.
When a change moves one of these, the stored runs of that learner no
longer describe the code: change its RESULTS_VERSION (invalidating them) and record the new values.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pytest

from lab.repro.seed001 import OPTFULL, RESULTS_VERSION, _params, new_run
from lab.sim.stream import run_stream
from service.sampling import DecisionIds
from service.serial import checksum

LIMIT = 1500
SEED = 3


def _settings() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for learner in RESULTS_VERSION:
        rho = None if learner in ("adaboost-olm", "online-mbbm") else 0.1
        out.append((learner, "car", _params("car", learner, rho, 5)))
    # the isolet path: weights divided by k - 1 (a parameter the car runs leave off)
    out.append(("adabandit", "balance", {**_params("balance", "adabandit", 0.1, 5), "weight_divide": True}))
    out.append(("banditbbm", "balance", {**_params("balance", "banditbbm", 0.1, 5), "weight_divide": True}))
    out.append(("online-mbbm", "balance", {**_params("balance", "online-mbbm", None, 5), **OPTFULL}))
    # BanditBoost's cached sweep runs (lab.sweep.VERSION): both weak-learner families
    out.append(("banditboost", "car", {"weak": "perceptron", "n_learners": 20, "delta": 0.05}))
    out.append(("banditboost", "nursery", {"weak": "naive_bayes", "n_learners": 5, "delta": 0.05}))
    # the pinned linear learners and AdaBoost.MH of bench quality (lab.sweep.VERSION), at defaults
    for learner in ("banditron", "perceptron", "adaboost-mh"):
        out.append((learner, "nursery", {}))
    # C-OVA at its defaults (pairs, "auto", issue 24), without pairs, and with pairs on balance
    out.append(("cova", "nursery", {}))
    out.append(("cova", "car", {"base": "pa2", "C": 1.0, "interactions": "none"}))
    out.append(("cova", "balance", {"interactions": "auto"}))
    # SquareCB (ours, issue 24) at its defaults
    out.append(("squarecb", "nursery", {}))
    # SquareCB over VW's SGD with hashed pairs (issue 41), VW's settings and ours; RegCB over it
    vw_settings = {"gamma_scale": 10.0, "interactions": "quadratic", "weighting": "mtr"}
    out.append(("squarecb-sgd", "nursery", vw_settings))
    out.append(("squarecb-sgd", "car", {"gamma_scale": 100.0, "interactions": "pairs", "weighting": "none"}))
    out.append(("regcb-sgd", "nursery", {"mellowness": 0.001, "variant": "elimination"}))
    out.append(("regcb-sgd", "car", {"mellowness": 0.01, "variant": "optimistic", "interactions": "none"}))
    return out


def fingerprint(learner: str, dataset: str, params: dict[str, Any]) -> tuple[str, str]:
    model, X, y = new_run(learner, dataset, params, SEED, LIMIT, "ordinal")
    correct = run_stream(model, X, y, DecisionIds.for_seed(SEED))
    state = {
        k: v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v
        for k, v in model.state().items()
    }
    state = {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in state.items()}
    return hashlib.sha256(np.packbits(correct).tobytes()).hexdigest()[:16], checksum(state)[:16]


#: (learner, data set) -> (correctness vector, final state), recorded at the code of the stored runs.
#: The tree learners' state hashes were re-recorded at their schema 2 (entry keys ``class * d +
#: feature``): same correctness vectors, and the old code's final states, upgraded, equal the new
#: code's array for array (tests/service/learners/test_forest_layout.py checks the upgrade).
EXPECTED: dict[tuple[str, str], tuple[str, str]] = {
    ("adabandit", "car"): ("a21ea9b0aa6aa5ac", "c771f625ebcb1bd9"),
    ("banditbbm", "car"): ("1148fcdbf7b2e3f4", "4a8d9899c489a8ed"),
    ("adaboost-olm", "car"): ("9473e8549306e431", "4c747629466073fe"),
    ("online-mbbm", "car"): ("0156041914e4acb1", "44b9f673ee0606bd"),
    ("binbandit", "car"): ("d41fb17544a07ffb", "d16e14290317646e"),
    ("adabandit", "balance"): ("829811a54b90e490", "96223e014bbb298f"),
    ("banditbbm", "balance"): ("b22711193a26f6c0", "81bb52108f2b9252"),
    ("online-mbbm", "balance"): ("ab322aeeb66e86f1", "1b67512b4fa7a313"),
    ("banditboost", "car"): ("aae38f7517398c68", "cac0672acb7fd2fc"),
    ("banditboost", "nursery"): ("e6c2c79efe69ad7d", "a1e6ce35128c52ce"),
    ("banditron", "nursery"): ("b7c1041542c6f91b", "c587c116d148c99f"),
    ("cova", "nursery"): ("4785eba7318a07d8", "adf4541a1be2cd42"),  # defaults: pairs ("auto")
    ("perceptron", "nursery"): ("0870230974c70ee9", "63711a2b1a1f07a7"),
    ("adaboost-mh", "nursery"): ("09e2a5e40e01b28a", "cc8fdb7cc93cd936"),
    ("cova", "car"): ("027231cff3a24b53", "fed1ed3608829fd9"),
    ("cova", "balance"): ("712506d67f058611", "ccf0b5ec244995e7"),  # pairs ("auto"), issue 24
    ("squarecb", "nursery"): ("17cc28b88f087c35", "a2ae1548975a2549"),
    ("squarecb-sgd", "nursery"): ("c8ae914aea6e73dc", "bb16cc5328186b92"),
    ("squarecb-sgd", "car"): ("2f581c07d71f8d78", "346588d44ff6087b"),
    ("regcb-sgd", "nursery"): ("bccecac59d78b093", "461ddd2209833f2d"),
    ("regcb-sgd", "car"): ("9cbed624ee208574", "d047b1732ca0d479"),
}


@pytest.mark.parametrize(
    ("learner", "dataset", "params"), _settings(), ids=[f"{a}-{b}" for a, b, _ in _settings()]
)
def test_results_unchanged(learner: str, dataset: str, params: dict[str, Any]) -> None:
    assert fingerprint(learner, dataset, params) == EXPECTED[(learner, dataset)], (
        f"{learner} on {dataset}: its arithmetic changed, so its stored runs no longer describe it; "
        "change RESULTS_VERSION in lab/repro/seed001.py (banditboost, the linear learners and "
        "adaboost-mh: VERSION in lab/sweep.py) and "
        "record the new values here"
    )
