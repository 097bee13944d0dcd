"""``bench profile --quick``: AdaBandit's rate and the profile table come from one real run."""

from __future__ import annotations

import re

from lab.bench import benches


def test_quick_profile_reports_a_rate_and_shares_that_name_the_tree_code() -> None:
    markdown = benches.get("profile")(True)
    rate = re.search(r"\*\*([\d,]+) examples per CPU-second\*\*", markdown)
    assert rate is not None and int(rate.group(1).replace(",", "")) > 0
    rows = [line for line in markdown.splitlines() if line.startswith("| `")]
    assert len(rows) == 10
    own = [float(row.split("|")[3]) for row in rows]
    assert own == sorted(own, reverse=True) and 0 < sum(own) <= 100.0
    # the trees' compiled update is named: called from Python, within the boosters' learn kernel, or
    # (since issue 41's fused learn events) within AdaBandit's one compiled call per learn event
    names = ("forest_kernels.py", "forest_learn_costs", "adabandit_learn ")
    assert any(name in row for row in rows for name in names), rows
