"""A model is stored with every parameter resolved, so a release that moves a default (C-OVA's
``interactions`` became ``"auto"`` in issue 24) never changes a model that exists; a model stored
before that (parameters as the user gave them) keeps the meaning they had then."""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from typing import Any, Literal

import numpy as np
import pytest

from service.config import ModelSpec, Settings
from service.learners import learners, make_learner
from service.runtime import Runtime
from service.serial import encode
from service.store import Checkpoint, MemoryStore

pytestmark = pytest.mark.anyio

SPEC = ModelSpec(learner="cova", n_features=21, n_labels=4)  # car's shape: pairs under "auto"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    r = Runtime(MemoryStore(), Settings(store="memory"))  # type: ignore[arg-type]
    await r.start()
    yield r
    await r.stop()


async def test_a_new_model_is_stored_with_every_parameter(runtime: Runtime) -> None:
    m = await runtime.create_model("new", SPEC)
    stored = await runtime.store.get_model("new")
    assert stored["params_complete"] is True
    assert stored["spec"]["params"] == {
        "base": "pa1",
        "C": 0.1,
        "interactions": "auto",
        "interaction_bits": 18,
        "pair_max_nnz": 64,
        "epsilon": 0.0,
    }
    assert m.spec.params == stored["spec"]["params"]
    assert m.learner.W_.shape == (4, 21 + 210)  # today's default: pairs


async def test_a_model_stored_before_keeps_its_meaning_and_its_checkpoint(runtime: Runtime) -> None:
    # As an older release stored it: the user's parameters ({}: the defaults of that release).
    old = make_learner("cova", 21, 4, {"interactions": "none"}, seed=0)
    x = np.zeros(21)
    x[[0, 5, 9]] = 1.0
    old.learn(x, old.decide(x, np.random.default_rng(0)), True)
    config = {"spec": SPEC.model_dump(mode="json"), "incarnation": "i0", "created_at": 0.0}
    await runtime.store.create_model("old", config)
    await runtime.store.put_checkpoint("old", Checkpoint(1, encode(old.state())))
    await runtime.sync_models()
    m = runtime.get("old")
    assert m.learner.params.interactions == "none"
    assert m.learner.W_.shape == (4, 21)
    assert np.array_equal(m.learner.W_, old.W_)  # its checkpoint loaded, not refused


async def test_an_explicit_choice_is_kept_either_way(runtime: Runtime) -> None:
    spec = SPEC.model_copy(update={"params": {"interactions": "none", "C": 1.0}})
    m = await runtime.create_model("explicit", spec)
    assert m.learner.params.interactions == "none" and m.learner.params.C == 1.0
    legacy = {"spec": spec.model_dump(mode="json"), "incarnation": "i1", "created_at": 0.0}
    await runtime.store.create_model("explicit-old", legacy)
    await runtime.sync_models()
    assert runtime.get("explicit-old").learner.params == m.learner.params


def _other_values(field: Any, default: Any) -> list[Any]:
    """Values of a field other than its default to try (the ones its validation takes are kept)."""
    choices = (
        list(typing.get_args(field.annotation)) if typing.get_origin(field.annotation) is Literal else []
    )
    if isinstance(default, bool):
        return [not default]
    if isinstance(default, int | float):
        return [default + 1, default * 2, default / 2, default - 1]
    if isinstance(default, tuple | list):
        return [type(default)(v * 2 if isinstance(v, int | float) else v for v in default)]
    return [c for c in choices if c != default] + (["naive_bayes", "perceptron", "hoeffding_tree"])


@pytest.mark.parametrize("name", sorted(learners.names()))
def test_parse_dump_parse_is_the_identity_for_every_parameter(name: str) -> None:
    # the dump used to rebuild a learner never drops a value, whatever it is: a value at an old
    # default that is not today's (C-OVA's interactions="none") included
    cls = learners.get(name)
    checked = 0
    for field_name, field in cls.Params.model_fields.items():
        default = getattr(cls.Params(), field_name)
        for value in _other_values(field, default):
            try:
                p = cls.Params(**{field_name: value})
            except (ValueError, TypeError):
                continue
            if getattr(p, field_name) == default:
                continue
            assert cls.Params.parse(name, p.model_dump()) == p, field_name
            assert cls.Params.parse(name, p.model_dump(mode="json")) == p, field_name
            assert make_learner(name, 3, 3, p.model_dump()).params == p
            checked += 1
    assert checked >= 1 or not cls.Params.model_fields
    assert cls.Params.parse(name, cls.Params().model_dump()) == cls.Params()


def test_the_run_key_keeps_the_old_form() -> None:
    # the lab's stored runs are keyed by the dump as it was before a parameter existed
    from service.learners.cova import COVAParams

    assert COVAParams().key() == {"base": "pa1", "C": 0.1, "interactions": "auto"}
    assert COVAParams(interactions="none").key() == {"base": "pa1", "C": 0.1}
    assert COVAParams(interactions="none").model_dump()["interactions"] == "none"


@pytest.mark.parametrize("learner", ["adabandit", "banditbbm"])
async def test_a_complete_model_stored_before_a_parameter_existed_reads_its_old_value(
    runtime: Runtime, learner: str
) -> None:
    # issue 41: stored complete before grace_unit and subspace existed (and with the tree ranges and
    # adaptive_grace of then), a bandit booster keeps the papers' split schedule it ran with
    params = make_learner(learner, 8, 3, {"tie_threshold": (0.01, 0.9), "split_confidence": (0.01, 0.9)})
    old = {k: v for k, v in params.params.complete().items() if k not in ("grace_unit", "subspace")}
    old["adaptive_grace"] = False
    spec = ModelSpec(learner=learner, n_features=8, n_labels=3, params=old)
    stored = {"spec": spec.model_dump(mode="json"), "incarnation": "i2", "created_at": 0.0}
    await runtime.store.create_model("trees-old", {**stored, "params_complete": True})
    await runtime.sync_models()
    got = runtime.get("trees-old").learner
    assert (got.params.grace_unit, got.params.subspace, got.params.adaptive_grace) == ("weight", 1.0, False)
    assert not got.trees_.by_examples and got.trees_.subspace == 1.0
    new = await runtime.create_model("trees-new", ModelSpec(learner=learner, n_features=8, n_labels=3))
    assert (new.learner.params.grace_unit, new.learner.params.subspace) == ("examples", "auto")
