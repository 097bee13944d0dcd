"""Checkpoints of the tree learners from before the class-major entry keys (schema 1) load and go on
exactly as the code that wrote them would have (``upgrade_entry_keys``).

``data/forest-layout-1.npz`` was written by the code of commit f966a9e (schema 1): per learner its
config, its state after 600 rounds of a synthetic stream, and the labels it decided in the next 300
rounds while still learning.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from service.learners.base import Learner, StateFormatError, learners
from service.sampling import DecisionIds, decision_rng
from service.serial import decode

FIXTURE = Path(__file__).parent / "data" / "forest-layout-1.npz"


def _stream(n: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The fixture's stream (the generator's own function)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, d)) * (rng.random((n, d)) < 0.4)
    y = (X[:, 0] * 3 + X[:, 1] * 2 + X[:, 2] > 1.5).astype(int) + (X[:, 3] > 0.5).astype(int)
    return X, y % k


@pytest.mark.parametrize("name", ["adabandit", "banditbbm", "binbandit"])
def test_a_schema_1_checkpoint_goes_on_as_before(name: str) -> None:
    saved = np.load(FIXTURE)
    config = json.loads(saved[f"{name}.config"].tobytes())
    # the parameters added since read their values of then, as the runtime reads a stored spec
    config["params"] = learners.get(name).Params.legacy(config["params"])
    state = decode(saved[f"{name}.state"].tobytes())
    assert state["schema_version"] == 1
    model = Learner.from_state(config, state)
    assert model.state()["schema_version"] == 2
    prefix = "weak_.forest_." if name == "binbandit" else "trees_."
    upgraded = model.get_state()
    key, segment = upgraded[prefix + "key_"], upgraded[prefix + "segment_"]
    assert (segment[:, 1] > 1).any()  # the check below has something to check
    for start, used in segment[segment[:, 1] > 0, :2]:
        assert np.all(np.diff(key[start : start + used]) > 0)
    X, y = _stream(900, config["n_features"], config["n_labels"], 0)
    ids = DecisionIds.for_seed(2)
    for _ in range(600):
        ids.new()  # the ids the fixture's first 600 rounds used
    labels = []
    for t in range(600, 900):
        d = model.decide(X[t], decision_rng(ids.new()))
        model.learn(X[t], d, d.label == y[t])
        labels.append(d.label)
    assert labels == saved[f"{name}.labels"].tolist()


def test_an_unknown_schema_is_refused() -> None:
    saved = np.load(FIXTURE)
    config = json.loads(saved["adabandit.config"].tobytes())
    state = decode(saved["adabandit.state"].tobytes())
    for version in (0, 3, "1"):
        with pytest.raises(StateFormatError, match="schema version"):
            Learner.from_state(config, {**state, "schema_version": version})
