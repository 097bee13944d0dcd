"""Where numba keeps the compiled kernels: a cache directory per version of their sources.

numba keys a cached function by its own source file only. A kernel that calls into another module
(``booster_kernels.forest_learn_costs`` compiles ``forest_kernels.forest_update`` into itself) would
otherwise load its old machine code after that module changed, in a checkout that was edited or
upgraded in place: the old callee on the new data layout. So every compiled module's source goes into
one hash, and the cache lives in ``<base>/<hash>``; ``<base>`` is ``$NUMBA_CACHE_DIR`` when the
operator set it, else the package's ``__pycache__/numba``, else (a package the process cannot write
to, and numba caches only where it can write) ``clickboost-numba-<uid>`` in the temporary directory:
without it numba finds no cache location and the import fails (a read-only install run by a user
without a writable home, as the Docker image's). A change of any kernel module recompiles all of
them once (20-40 s on the reference machine); older directories under the default base are
removed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

#: The modules with ``@njit(cache=True)`` kernels (tests/service/test_jit_cache.py checks the list).
KERNEL_MODULES = (
    "kernels.py",
    "interactions.py",
    "learners/banditboost.py",
    "learners/bbm_kernels.py",
    "learners/booster_kernels.py",
    "learners/squarecb.py",
    "learners/weak/family_kernels.py",
    "learners/weak/forest_kernels.py",
)
ROOT = Path(__file__).resolve().parent


def sources_digest() -> str:
    """Hash of every kernel module's source."""
    h = hashlib.sha256()
    for name in KERNEL_MODULES:
        h.update(name.encode())
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()[:16]


def configure() -> Path:
    """Point numba's cache at this version's directory (before any kernel module is imported)."""
    import numba

    digest = sources_digest()
    user = os.environ.get("NUMBA_CACHE_DIR")
    base = Path(user) if user else ROOT / "__pycache__" / "numba"
    if not user and not writable(base / digest):
        base = Path(tempfile.gettempdir()) / f"clickboost-numba-{getattr(os, 'getuid', lambda: 0)()}"
    path = base / digest
    numba.config.CACHE_DIR = str(path)
    if not user and base.is_dir():  # best effort: another process may be removing them too
        for old in base.iterdir():
            if old.name != digest and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    return path


def writable(path: Path) -> bool:
    """Whether ``path`` exists or can be made, and takes a file (numba's own test of a cache location)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True
