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
    # the trees' compiled update is named (called from Python, or within the boosters' learn kernel)
    assert any("forest_kernels.py" in row or "forest_learn_costs" in row for row in rows)
