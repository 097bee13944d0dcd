"""Learner registry and validation errors."""

from __future__ import annotations

import pytest

from service.learners.base import ParamError, learners, make_learner
from service.registry import UnknownNameError


def test_unknown_learner_names_the_known_ones() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown learner 'nope'.*banditron"):
        learners.get("nope")


@pytest.mark.parametrize(
    ("params", "needle"),
    [({"gamma": 0.7}, "gamma"), ({"gamma": "abc"}, "gamma"), ({"tie_break": "last"}, "tie_break")],
)
def test_bad_hyperparameters_name_the_parameter(params: dict, needle: str) -> None:
    with pytest.raises(ParamError, match=f"banditron: .*{needle}"):
        make_learner("banditron", 3, 2, params)


def test_string_values_are_coerced_like_the_cli_passes_them() -> None:
    m = make_learner("cova", 3, 2, {"C": "0.5", "base": "pa2"})
    assert m.params.C == 0.5 and m.params.base == "pa2"


def test_hyperparameters_are_stored_verbatim_and_frozen() -> None:
    m = make_learner("banditron", 3, 2, {"gamma": 0.15})
    assert m.config()["params"] == {"gamma": 0.15, "tie_break": "random"}
    with pytest.raises(ValueError):
        m.params.gamma = 0.2  # type: ignore[misc]


def test_full_information_learners_are_marked() -> None:
    assert learners.get("perceptron").full_information
    assert not learners.get("banditron").full_information
