"""``bench default-learner --quick``: the tuning-set table marks the served default, and a real
server creates a model without a learner, replays car into it and reads back its decision log."""

from __future__ import annotations

import re

import pytest

from lab.bench import benches


@pytest.mark.slow
def test_quick_default_learner_bench() -> None:
    markdown = benches.get("default-learner")(True)
    assert "| **cova epsilon=0.02** (default) |" in markdown
    assert markdown.count("| cova epsilon=") == 4 and "| squarecb (defaults) |" in markdown
    assert '`cova` `{"C": 0.1, "base": "pa1", "epsilon": 0.02' in markdown  # what PUT without a learner got
    assert "| visits replayed per shuffle (failed, all shuffles) | 300 (0) |" in markdown
    floor = re.search(
        r"least probability of any label in any decision \(all shuffles\) \| ([0-9.]+) \|", markdown
    )
    assert floor is not None and float(floor[1]) == pytest.approx(0.02 / 4)  # epsilon / K: it explores
