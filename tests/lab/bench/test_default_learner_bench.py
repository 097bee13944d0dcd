"""``bench default-learner --quick``: the tuning-set table marks the served default, and a real
server creates a model without a learner, replays car into it and reads back its decision log."""

from __future__ import annotations

import re

import pytest

from lab.bench import benches
from service.config import DEFAULT_LEARNER


@pytest.mark.slow
def test_quick_default_learner_bench() -> None:
    markdown = benches.get("default-learner")(True)
    name = DEFAULT_LEARNER[0]
    assert f"| **{name} (defaults)** (default) |" in markdown  # the served default is a candidate, marked
    assert "| cova epsilon=0.02 (the default before issue 50) |" in markdown
    assert f"`{name}` `{{" in markdown  # what PUT without a learner got
    assert "| visits replayed per shuffle (failed, all shuffles) | 300 (0) |" in markdown
    floor = re.search(
        r"least probability of any label in any decision \(all shuffles\) \| ([0-9.]+) \|", markdown
    )
    assert floor is not None and 0 < float(floor[1]) <= 1 / 4  # it explores: no label is ever left out
    ratio = re.search(r"Ratio new / old: \*\*([0-9.]+)\*\*", markdown)
    assert ratio is not None and float(ratio[1]) > 0
