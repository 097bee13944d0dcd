"""``bench replicas --quick``: real Redis, real replicas, real uvicorn echo server, into BENCH_DIR."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.cli import main


def test_bench_replicas_quick_measures_echo_and_1_and_2_replicas(
    bench_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "replicas", "--quick"]) == 0
    md = capsys.readouterr().out.strip()
    assert md in (bench_dir / "BENCHMARKS.md").read_text()
    rows = [line.split(" | ") for line in md.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [(r[0], r[1]) for r in rows] == [
        ("| echo (bare FastAPI)", "1"),
        ("| predict", "1"),
        ("| predict+feedback", "1"),
        ("| predict", "2"),
        ("| predict+feedback", "2"),
    ]
    for r in rows:
        count = int(r[2].replace(",", ""))
        p50, p95, p99 = (float(v.strip(" |")) for v in r[5:8])
        assert count > 0 and 0 < p50 <= p95 <= p99
    assert "2 replicas / 1 replica:" in md
