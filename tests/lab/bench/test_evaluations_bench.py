"""``bench evaluations --quick``: a real server fills its decision log, an evaluation job runs while
predicts are timed, and the section reports both latencies and every policy's estimate."""

from __future__ import annotations

from lab.bench import benches


def test_quick_evaluations_bench_reports_latency_and_estimates() -> None:
    markdown = benches.get("evaluations")(True)
    assert "predict p99 during / idle" in markdown
    for policy in ("banditron", "cova", "banditboost", "adabandit", "banditbbm", "logged"):
        assert f"| {policy} |" in markdown
    assert "2,000 logged decisions" in markdown
    assert "| events | ESS |" in markdown  # every estimate with its effective sample size
