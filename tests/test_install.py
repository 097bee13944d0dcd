"""Installs into real fresh venvs: the server alone (what the Dockerfile installs: pyproject.toml,
README.md and service/) and the SDK alone (``pip install ./clients``), each checked for what it
brings, what it must not bring, and that its entry points work without the lab.

Each venv is built once per module (by uv where the dev venv has it, else pip; each uses its normal
cache); ``pytest -s`` shows the size of its site-packages. Commands run in an empty directory with a
clean environment, so neither the checkout nor the dev venv can leak onto ``sys.path``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
VENV_TIMEOUT = 120  # seconds, python -m venv (with ensurepip)
INSTALL_TIMEOUT = 600  # seconds, pip install (a cold pip cache downloads numpy, scipy, uvicorn...)
RUN_TIMEOUT = 60  # seconds, any other command
PIP_QUIET = ["--quiet", "--disable-pip-version-check"]

SERVER_FORBIDDEN = {"matplotlib", "tqdm", "httpx", "vowpalwabbit", "river", "pytest", "lab"}
CLIENT_FORBIDDEN = {"numpy", "fastapi", "redis", "pydantic", "starlette", "scipy"}


@dataclass(frozen=True)
class Venv:
    root: Path
    workdir: Path  # empty: the cwd of every command (nothing importable in it)

    @property
    def bin(self) -> Path:
        return self.root / ("Scripts" if os.name == "nt" else "bin")

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def run(
        self, args: Sequence[str | Path], timeout: float = RUN_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        return _run(args, cwd=self.workdir, timeout=timeout, venv=self.root)

    def pip_list(self) -> set[str]:
        out = self.run([self.python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"])
        assert out.returncode == 0, out.stderr
        return {_normalize(d["name"]) for d in json.loads(out.stdout)}

    def site_packages(self) -> Path:
        out = self.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        assert out.returncode == 0, out.stderr
        return Path(out.stdout.strip())


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _clean_env(venv: Path | None) -> dict[str, str]:
    """The environment without anything that would point Python at the checkout or the dev venv."""
    drop = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "REDIS_URL", "PIP_REQUIRE_VIRTUALENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("CLICKBOOST_")}
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        bindir = venv / ("Scripts" if os.name == "nt" else "bin")
        env["PATH"] = os.pathsep.join([str(bindir), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(
    args: Sequence[str | Path], cwd: Path, timeout: float, venv: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_clean_env(venv),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _size_mb(path: Path) -> float:
    """Sum of the sizes of the files under ``path`` (symlinks not followed), in MB."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            total += os.lstat(os.path.join(dirpath, f)).st_size
    return total / 1e6


def _installer(venv: Venv) -> list[str | Path]:
    """``uv pip install`` into ``venv`` when uv sits beside this Python (``make install-dev`` puts it
    there): it resolves and installs the same packages as pip, about ten times faster (seconds
    instead of about 20 s for the server). Else pip, as the Dockerfile does."""
    uv = Path(sys.executable).with_name("uv")
    if uv.exists():
        return [uv, "pip", "install", "--quiet", "--python", venv.python]
    return [venv.python, "-m", "pip", "install", *PIP_QUIET]


def _make_venv(base: Path, source: Path, label: str) -> Venv:
    """A fresh venv under ``base`` (no system site packages) with ``source`` pip-installed in it."""
    workdir = base / "cwd"
    workdir.mkdir()
    root = base / "venv"
    made = _run([sys.executable, "-m", "venv", root], cwd=workdir, timeout=VENV_TIMEOUT)
    assert made.returncode == 0, made.stderr
    venv = Venv(root, workdir)
    installed = venv.run([*_installer(venv), source], timeout=INSTALL_TIMEOUT)
    assert installed.returncode == 0, f"pip install {source} failed:\n{installed.stdout}\n{installed.stderr}"
    print(f"\n[{label}] site-packages of the fresh venv: {_size_mb(venv.site_packages()):.1f} MB")
    return venv


_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


@pytest.fixture(scope="module")
def server_venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """What the Dockerfile installs: pyproject.toml, README.md and service/, no extras."""
    base = tmp_path_factory.mktemp("server")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "service", src / "service", ignore=_IGNORE)
    return _make_venv(base, src, "server")


@pytest.fixture(scope="module")
def clients_venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """``pip install ./clients`` alone."""
    base = tmp_path_factory.mktemp("clients")
    src = base / "clients"
    shutil.copytree(REPO / "clients", src, ignore=_IGNORE)
    return _make_venv(base, src, "clients")


# -- the server alone --------------------------------------------------------------------------------


def test_server_install_builds_the_app(server_venv: Venv) -> None:
    code = "import service.api.app; from service.api.app import create_app; create_app()"
    out = server_venv.run([server_venv.python, "-c", code])
    assert out.returncode == 0, out.stderr


def test_server_install_ships_the_dashboard_page(server_venv: Venv) -> None:
    """The page, script and style sheet are package data of the installed package (not the checkout)."""
    code = (
        "from service.api.dashboard import STATIC; "
        "print(STATIC); print(' '.join(sorted(p.name for p in STATIC.iterdir())))"
    )
    out = server_venv.run([server_venv.python, "-c", code])
    assert out.returncode == 0, out.stderr
    where, names = out.stdout.splitlines()
    assert where.startswith(str(server_venv.site_packages())), where
    assert names.split() == ["dashboard.css", "dashboard.js", "index.html"]


def test_server_install_brings_no_lab_dev_or_client_packages(server_venv: Venv) -> None:
    installed = server_venv.pip_list()
    assert "clickboost" in installed
    unwanted = sorted(SERVER_FORBIDDEN & installed)
    assert not unwanted, f"the server install brings {unwanted}"
    out = server_venv.run([server_venv.python, "-c", "import lab"])
    assert out.returncode != 0
    assert "No module named 'lab'" in out.stderr


def test_server_console_script_help_lists_serve(server_venv: Venv) -> None:
    out = server_venv.run([server_venv.bin / "clickboost", "--help"])
    assert out.returncode == 0, out.stderr
    assert re.search(r"\bserve\b", out.stdout), out.stdout


def test_server_lab_command_says_what_to_install_in_one_line(server_venv: Venv) -> None:
    args = ["lab", "simulate", "--dataset", "car", "--learner", "banditron"]
    out = server_venv.run([server_venv.bin / "clickboost", *args])
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "pip install" in lines[0] and "[lab" in lines[0], lines[0]
    assert "'clickboost lab simulate' needs the lab" in lines[0], lines[0]
    # the spelling of the release before: the same line, after the note naming the new one
    out = server_venv.run([server_venv.bin / "clickboost", *args[1:]])
    assert out.returncode == 2 and out.stderr.strip().splitlines()[1:] == lines, out.stderr


# -- the SDK alone -----------------------------------------------------------------------------------


def test_clients_install_brings_httpx_and_nothing_of_the_server(clients_venv: Venv) -> None:
    installed = clients_venv.pip_list()
    assert {"httpx", "clickboost-client"} <= installed, sorted(installed)
    unwanted = sorted(CLIENT_FORBIDDEN & installed)
    assert not unwanted, f"the SDK install brings {unwanted}"


def test_clients_import(clients_venv: Venv) -> None:
    """The import name is the distribution's; the old one (``clients``) is the same objects, with a
    DeprecationWarning, for one more release."""
    code = "import clickboost_client as c; c.Client, c.AsyncClient"
    out = clients_venv.run([clients_venv.python, "-W", "error", "-c", code])
    assert out.returncode == 0, out.stderr
    code = "import clients, clickboost_client; assert clients.Client is clickboost_client.Client"
    out = clients_venv.run([clients_venv.python, "-W", "always", "-c", code])
    assert out.returncode == 0 and "DeprecationWarning" in out.stderr, out.stderr


@pytest.mark.parametrize("name", ["clickboost_client", "clients"])
def test_clients_replay_help_says_it_needs_the_lab(clients_venv: Venv, name: str) -> None:
    out = clients_venv.run([clients_venv.python, "-m", f"{name}.replay", "--help"])
    assert out.returncode == 0, out.stderr
    assert re.search(r"\blab\b", out.stdout), out.stdout
