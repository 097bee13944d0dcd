"""``bench catalog-http`` (issue 54), quick: a bulk registered twice over HTTP on one server, with
whole-catalog predicts answered while the second bulk is applied."""

from __future__ import annotations

import re
from pathlib import Path

from lab.bench import benches


def test_quick_run_registers_the_bulk_and_answers_predicts_meanwhile(bench_dir: Path) -> None:
    markdown = benches.get("catalog-http")(True)
    row = re.search(r"^\| memory \| 20,000 \|(.*)\|$", markdown, re.M)
    assert row is not None, markdown
    cells = [c.strip() for c in row[1].split("|")]
    first, again, per_item, _, per_item_replaced, during, p50, longest = cells
    assert 0 < float(first) < 60 and 0 < float(again) < 60
    assert 0 < int(per_item) <= int(per_item_replaced)
    # predicts went on during the bulk (every answer a 200, or the bench raises)
    assert int(during.replace(",", "")) >= 1 and 0 < float(p50) <= float(longest)
