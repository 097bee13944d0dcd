"""A stored result per finished run, so long reproductions and benchmarks resume where they stopped.

Used by ``reproduce seed001-*``, ``sweep-defaults`` and ``bench quality``: each run's small JSON
result is stored under a key string that must name everything the result depends on (the caller
includes a version or fingerprint of the code). Two stores:

- a directory: one file per run, named by a hash of the key;
- a ``.jsonl`` file (the seed-001 reproductions, the sweep, the quality race; quick runs keep
  theirs under ``out/``): one line per run. It is committed, so a computation of many hours
  accumulates across sessions and machines; worker processes append whole lines with
  ``O_APPEND``, and a reader re-reads the file when it has grown.

Deleting the directory or the file forces every run again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cached", "lookup", "progress"]

#: per-process view of each .jsonl store: path -> (size read, key -> result)
_LINES: dict[Path, tuple[int, dict[str, dict[str, Any]]]] = {}


def _jsonl(path: Path) -> dict[str, dict[str, Any]]:
    """The results stored in ``path``, re-read only when the file has grown since the last read."""
    size = path.stat().st_size if path.is_file() else 0
    seen, table = _LINES.get(path, (0, {}))
    if size != seen:
        table = {}
        with path.open("rb") as f:
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        for raw in complete.splitlines():
            if raw.strip():
                row = json.loads(raw)
                table[row["key"]] = row
        _LINES[path] = (len(complete), table)
    return table


def lookup(store: Path, key: str) -> dict[str, Any] | None:
    """The stored result for ``key`` in ``store`` (a directory or a ``.jsonl`` file), or None."""
    if store.suffix == ".jsonl":
        return _jsonl(store).get(key)
    path = _file(store, key)
    return json.loads(path.read_text()) if path.is_file() else None


def _file(directory: Path, key: str) -> Path:
    """The file of ``key`` in a directory store (named by a hash of the key)."""
    return directory / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")


def cached(store: Path | None, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()``'s result for ``key``, read from ``store`` if stored there, else computed and stored.

    ``store`` is a directory (one file per key), a ``.jsonl`` file (one line per key), or None
    (nothing is read or written). The stored object is the result plus ``key``.
    """
    if store is None:
        return compute()
    got = lookup(store, key)
    if got is not None:
        return got
    got = {"key": key, **compute()}
    if store.suffix == ".jsonl":
        store.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(got, sort_keys=True) + "\n").encode()
        fd = os.open(store, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write of one line: appends from several processes do not interleave
        finally:
            os.close(fd)
        return got
    path = _file(store, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(got))
    return got


def progress(line: str) -> None:
    """Progress of a long run: one line on stderr, flushed (stdout carries the markdown)."""
    print(line, file=sys.stderr, flush=True)
