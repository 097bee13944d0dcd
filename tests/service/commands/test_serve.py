"""``serve`` refuses a model file it cannot serve with one line, before binding (issue 51, item 8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port


def _serve(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("CLICKBOOST_")} | env
    cmd = [sys.executable, "-m", "service", "serve", "--memory", "--config", str(config)]
    cmd += ["--port", str(free_port())]
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(
    ("models", "env", "named"),
    [
        # 74.5 GiB of weights: numpy could not allocate them (a traceback before the fix)
        ("[models.huge]\nlearner = 'banditron'\nn_features = 1000000\nn_labels = 10000\n", {}, "74.5 GiB"),
        # allocated, but over the budget (the lifespan's traceback before the fix)
        ("[models.huge]\nlearner = 'banditron'\nn_features = 100000\nn_labels = 1000\n", {}, "762.9 MiB"),
        # each model fits, both together do not
        (
            "[models.small]\nlearner = 'banditron'\nn_features = 60000\nn_labels = 300\n"
            "[models.huge]\nlearner = 'banditron'\nn_features = 60000\nn_labels = 300\n",
            {"CLICKBOOST_MAX_TOTAL_MODEL_BYTES": str(200 * 2**20)},
            "137.3 MiB",
        ),
    ],
)
def test_a_model_file_over_the_memory_budget_is_refused_in_one_line(
    tmp_path: Path, models: str, env: dict[str, str], named: str
) -> None:
    config = tmp_path / "models.toml"
    config.write_text(models)
    done = _serve(config, **env)
    print(f"\nexit {done.returncode}: {done.stderr.strip()}")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "'huge'" in done.stderr and named in done.stderr and "(CLICKBOOST_MAX_" in done.stderr
