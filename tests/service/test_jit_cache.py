"""numba's cache directory follows the kernel sources (service/_jit_cache.py)."""

from __future__ import annotations

import numba

from service import _jit_cache


def test_every_compiled_module_is_in_the_hash() -> None:
    compiled = {
        str(path.relative_to(_jit_cache.ROOT))
        for path in _jit_cache.ROOT.rglob("*.py")
        if "njit(" in path.read_text() and path.name != "_jit_cache.py"
    }
    assert compiled == set(_jit_cache.KERNEL_MODULES)


def test_the_cache_directory_is_the_sources_version() -> None:
    digest = _jit_cache.sources_digest()
    assert numba.config.CACHE_DIR.endswith(digest)
    assert len(digest) == 16
