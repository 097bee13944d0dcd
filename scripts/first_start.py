#!/usr/bin/env python3
"""Time a new user's first ``make run``: a fresh clone of this checkout's HEAD, ``make run`` from
nothing (virtual environment, install, the default learner's kernels compiled), the first 200 on
``/healthz`` and on ``/readyz``; then a second ``make run`` in the same clone.

    python3 scripts/first_start.py            # the package caches as they are (downloaded before)
    python3 scripts/first_start.py --cold     # empty pip and uv caches: every package downloaded

Standard library only (it runs before any virtual environment exists). The clone goes to a
temporary directory, removed at the end; nothing in this checkout is written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def start_make_run(clone: Path, env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """``make run`` in ``clone`` on ``port``, in a process group of its own (make, the install and
    the server: :func:`stop` ends them together)."""
    return subprocess.Popen(
        ["make", "run", f"PORT={port}"],
        cwd=clone,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def make_run(clone: Path, env: dict[str, str], limit: float) -> dict[str, float | None]:
    """``make run`` in ``clone`` until /readyz answers 200: seconds to the first answers."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    start = time.monotonic()
    proc = start_make_run(clone, env, port)
    got: dict[str, float | None] = {"healthz": None, "readyz": None}
    try:
        while time.monotonic() - start < limit and proc.poll() is None:
            now = time.monotonic() - start
            if got["healthz"] is None and status(f"{base}/healthz") == 200:
                got["healthz"] = now
            if got["healthz"] is not None and status(f"{base}/readyz") == 200:
                got["readyz"] = time.monotonic() - start
                break
            time.sleep(0.2)
    finally:
        stop(proc)
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="empty pip and uv caches (all downloaded)")
    parser.add_argument("--limit", type=float, default=600.0, help="give up after this many seconds")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="clickboost-first-start-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLICKBOOST_", "NUMBA_", "VIRTUAL_ENV"))}
    if args.cold:
        env["PIP_CACHE_DIR"] = env["UV_CACHE_DIR"] = str(work / "package-cache")
    try:
        clone = work / "clickboost"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=clone, text=True, capture_output=True
        )
        caches = "empty" if args.cold else "as they are"
        print(f"fresh clone of {head.stdout.strip()}, package caches {caches}")
        for attempt in ("first", "second"):
            got = make_run(clone, env, args.limit)
            shown = {k: "never" if v is None else f"{v:.1f} s" for k, v in got.items()}
            print(
                f"{attempt} make run: /healthz 200 after {shown['healthz']}, /readyz after {shown['readyz']}"
            )
            if got["readyz"] is None:
                return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
