"""Safe rollout on a simulated car stream (issue 38 part 5, must-show): with a fixed baseline, the
reward while in apprentice mode stays within epsilon of the baseline's, a learner that beats the
baseline is promoted and one that does not never is, over several seeds. The stream runs through a
real runtime (memory store) and its own sweep promotes (lab.bench.rollout, also `bench rollout`)."""

from __future__ import annotations

import pytest

from lab.bench.rollout import GOOD, UNIFORM, simulate

EPS = 0.2


@pytest.mark.parametrize("seed", range(3))
def test_a_learner_that_beats_the_majority_baseline_is_promoted(seed: int) -> None:
    run = simulate(seed, GOOD, "majority", EPS, n=4000)
    assert run.promoted_at is not None and 1000 <= run.promoted_at <= 4000
    assert run.report["difference"]["low"] > 0
    # served = (1 - eps) baseline + eps learner on average: within eps of the baseline's reward
    assert abs(run.served - run.baseline) <= EPS


@pytest.mark.parametrize("seed", range(3))
def test_a_learner_worse_than_the_baseline_is_never_promoted(seed: int) -> None:
    run = simulate(seed, UNIFORM, "majority", EPS, n=3000)  # a random label: 0.25 against 0.70
    assert run.promoted_at is None and run.decisions == 3000
    assert run.report["difference"]["high"] < 0
    assert run.baseline - EPS <= run.served < run.baseline  # it costs, but at most epsilon


@pytest.mark.parametrize("seed", range(2))
def test_no_learner_is_promoted_over_a_baseline_it_cannot_beat(seed: int) -> None:
    run = simulate(seed, GOOD, "oracle", EPS, n=3000)  # the baseline shows the true label
    assert run.promoted_at is None and run.baseline == 1.0
    assert 1.0 - EPS <= run.served < 1.0
