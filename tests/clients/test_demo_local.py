"""``scripts/demo-local``, small: redis-server + two replicas + the replay client, as local processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.clients.conftest import ROOT
from tests.conftest import redis_server_binary


def test_demo_local_runs_the_compose_topology(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_") and k != "REDIS_URL"}
    env |= {"PYTHON": sys.executable, "REDIS_SERVER": redis_server_binary()}
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [str(ROOT / "scripts" / "demo-local"), "--limit", "60", "--json-out", str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"^redis on :\d+ \(AOF\), replicas on :(\d+) and :(\d+)$", out, re.M)
    data = json.loads(report.read_text())
    assert data["n"] == 60 and len(data["urls"]) == 2 and data["errors"] == {"predict": {}, "feedback": {}}
    # both replicas applied all 60 events of the shared log and hold the same state
    lines = re.findall(
        r"^(http://127\.0\.0\.1:\d+)  model car version (\d+) checksum ([0-9a-f]{16})$", out, re.M
    )
    assert len(lines) == 2 and {u for u, _, _ in lines} == set(data["urls"])
    assert {(v, c) for _, v, c in lines} == {("60", lines[0][2])}
    assert out.rstrip().endswith("replicas agree")
