"""Compiled kernels: declared at import, compiled when first needed, cached per version of their sources.

**When they compile.** :func:`kernel` is ``numba.njit`` with explicit signatures, compiled on first
use (or by :func:`warm`) rather than when its module is imported: importing a learner costs nothing,
and a process compiles only what its learners use. At the first call, every declared signature is
compiled (from the on-disk cache after the first time) and further compilation is switched off, so
a kernel dispatches exactly as ``njit(signatures)`` would (same overloads, same conversions, a
``TypeError`` for other types). The server warms the kernels of its models' learners in a thread
before it turns ready (:func:`warm`, listed per learner by ``Learner.kernel_modules``), so no
request pays a compilation.

**Where they are cached.**
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
import importlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

#: The modules with ``@njit(cache=True)`` kernels (tests/service/test_jit_cache.py checks the list).
KERNEL_MODULES = (
    "actions.py",
    "catalog.py",
    "catalog_explore.py",
    "kernels.py",
    "interactions.py",
    "learners/banditboost.py",
    "learners/bbm_kernels.py",
    "learners/booster_kernels.py",
    "learners/cova_adf.py",
    "learners/squarecb.py",
    "learners/squarecb_sgd.py",
    "learners/weak/family_kernels.py",
    "learners/weak/forest_kernels.py",
)
ROOT = Path(__file__).resolve().parent


def module_names() -> list[str]:
    """The importable names of :data:`KERNEL_MODULES` (``learners/x.py``: ``service.learners.x``)."""
    return ["service." + name.removesuffix(".py").replace("/", ".") for name in KERNEL_MODULES]


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


#: numba options of every kernel: cached on disk, the GIL released, no bounds checks. No
#: ``fastmath`` (no reassociation, no fused multiply-add): sums in index order with IEEE arithmetic,
#: so replicas applying the same log stay bit-identical.
OPTS: dict[str, Any] = {"cache": True, "nogil": True, "boundscheck": False}
#: The kernels of each module (``service.kernels`` -> its dispatchers), in definition order.
KERNELS: dict[str, list[Any]] = {}
_lock = threading.RLock()


def kernel(signatures: str | list[str], **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(signatures, **OPTS)``, compiled at first use instead of at import.

    numba's dispatcher calls its ``_compile_for_args`` when no compiled overload fits the arguments;
    set on the instance, ours compiles the declared signatures, switches compilation off and hands
    back the dispatcher, which numba then calls: the call dispatches among exactly the declared
    overloads (a ``TypeError`` for arguments none of them takes, as ``njit(signatures)``).
    """
    from numba import njit

    declared = [signatures] if isinstance(signatures, str) else list(signatures)

    def wrap(fn: Callable[..., Any]) -> Any:
        dispatcher = njit(**{**OPTS, **options})(fn)

        def compile_declared(*args: Any, **kws: Any) -> Any:
            _compile(dispatcher)
            return dispatcher  # numba calls what this returns with the arguments: now an overload fits

        dispatcher._compile_for_args = compile_declared
        dispatcher.declared_signatures = declared
        KERNELS.setdefault(fn.__module__, []).append(dispatcher)
        return dispatcher

    return wrap


def _compile(dispatcher: Any) -> None:
    with _lock:  # one thread compiles; another waiting here then finds it done
        if dispatcher._can_compile:
            for sig in dispatcher.declared_signatures:
                dispatcher.compile(sig)
            dispatcher.disable_compile()


def warm(modules: Iterable[str], log: Callable[[str], None] | None = None) -> float:
    """Compile (or load from the cache) every kernel of ``modules``; seconds it took.

    ``log`` gets a line per module that had anything to compile, with its time.
    """
    start = time.perf_counter()
    for name in modules:
        importlib.import_module(name)
        todo = [d for d in KERNELS.get(name, ()) if d._can_compile]
        if not todo:
            continue
        t = time.perf_counter()
        for dispatcher in todo:
            _compile(dispatcher)
        if log is not None:
            log(f"kernels of {name}: {len(todo)} ready in {time.perf_counter() - t:.1f} s")
    return time.perf_counter() - start


def cold(modules: Iterable[str]) -> list[str]:
    """The modules among ``modules`` with kernels not compiled or loaded yet in this process."""
    out = []
    for name in modules:
        importlib.import_module(name)
        if any(d._can_compile for d in KERNELS.get(name, ())):
            out.append(name)
    return out


def cached(modules: Iterable[str]) -> bool:
    """Whether numba's on-disk cache holds every declared signature of the cold kernels of ``modules``
    for this machine and these sources, so that :func:`warm` loads them rather than compiles them
    (what the start-up log and ``/readyz`` say). False when unsure (numba's cache internals moved)."""
    try:
        for name in cold(modules):
            for dispatcher in KERNELS.get(name, ()):
                if not dispatcher._can_compile:
                    continue
                cache = dispatcher._cache
                # numba's index key: (signature, this CPU's magic tuple, the function's code hash)
                _, magic, code = cache._index_key(None, dispatcher.targetctx.codegen())
                index = cache._cache_file._load_index()  # {} when stale (the source file changed)
                found = sum(1 for key in index if key[1] == magic and key[2] == code)
                if found < len(dispatcher.declared_signatures):
                    return False
    except Exception:  # a numba release without these internals: say "compiling", never wrongly "loading"
        return False
    return True
