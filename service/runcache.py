"""A file per finished run, so long reproductions and benchmarks resume where they stopped.

Used by ``reproduce seed001-table1`` and ``bench quality``: each run's small JSON result is stored
under a directory, named by a hash of a key string that must name everything the result depends on
(the caller includes a fingerprint of the code). Deleting the directory forces every run again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cached(directory: Path | None, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()``'s result for ``key``, read from ``directory`` if stored there, else computed and stored.

    With ``directory`` None nothing is read or written. The stored object is the result plus ``key``.
    """
    if directory is None:
        return compute()
    path = directory / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
    if path.is_file():
        return json.loads(path.read_text())
    got = {"key": key, **compute()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(got))
    return got


def progress(line: str) -> None:
    """Progress of a long run: one line on stderr, flushed (stdout carries the markdown)."""
    print(line, file=sys.stderr, flush=True)
