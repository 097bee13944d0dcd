#!/usr/bin/env python3
"""Run every command README.md gives, as a new user would, in a fresh clone; then `git status`.

    python3 scripts/readme_check.py

Clones this checkout's HEAD into a temporary directory and runs README's ``sh`` blocks in order,
each as one bash script in the clone: ``make run`` in the background (until /readyz answers 200),
every other block to its end, which must exit 0. A block right after a ``<!-- not run: why -->``
comment is skipped and listed with its reason. The README's port 8000 becomes a free one. At the
end the clone's ``git status --porcelain`` must be empty: following README leaves no file behind
that git would see. Standard library only (it runs before any virtual environment exists).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from first_start import free_port, start_make_run, status, stop  # this directory's

ROOT = Path(__file__).resolve().parents[1]
# Each block runs alone, so a block that needs a value another printed (the quick start's decision
# id) carries it itself, in a shell variable (scripts/readme.py writes it so).
BLOCK = re.compile(r"(?:<!-- not run: (?P<why>[^>]*?) -->\s*\n)?[ \t]*```sh\n(?P<body>.*?)\n[ \t]*```", re.S)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="clickboost-readme-check-"))
    clone = work / "clickboost"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    port = free_port()
    drop = ("CLICKBOOST_", "VIRTUAL_ENV", "REDIS_URL")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    server: subprocess.Popen[bytes] | None = None
    ran, skipped, failed = 0, [], []
    try:
        for m in BLOCK.finditer((clone / "README.md").read_text()):
            lines = m["body"].splitlines()
            body = "\n".join(line.removeprefix("  ") for line in lines)
            body = body.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            first = body.splitlines()[0]
            if m["why"]:
                skipped.append(f"{first!r}: {m['why']}")
                continue
            if first.split("#")[0].strip() == "make run":
                server = start_make_run(clone, env, port)
                start = time.monotonic()
                while status(f"http://127.0.0.1:{port}/readyz") != 200:
                    if server.poll() is not None or time.monotonic() - start > 600:
                        failed.append("make run: not ready")
                        return 1
                    time.sleep(0.5)
                print(f"ok   make run (ready after {time.monotonic() - start:.0f} s)")
                ran += 1
                continue
            cmd = ["bash", "-e", "-c", body]
            done = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True)
            ran += 1
            if done.returncode != 0:
                failed.append(f"{first!r} exited {done.returncode}: {done.stderr[-800:]}")
                print(f"FAIL {first}\n{done.stdout[-800:]}{done.stderr[-800:]}")
            else:
                print(f"ok   {first}")
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True)
        for line in skipped:
            print(f"skip {line}")
        print(f"{ran} blocks run, {len(failed)} failed, {len(skipped)} not run")
        print("git status: " + ("clean" if not dirty.stdout.strip() else f"dirty\n{dirty.stdout}"))
        return 0 if not failed and not dirty.stdout.strip() else 1
    finally:
        if server is not None:
            stop(server)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
