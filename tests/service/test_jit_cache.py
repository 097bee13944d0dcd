"""numba's cache directory follows the kernel sources (service/_jit_cache.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numba
import pytest

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


def test_a_package_it_cannot_write_to_caches_in_the_temporary_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # numba caches only where it can write; without a location its import fails (as in the Docker
    # image: a read-only install, a user whose home is /)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = numba.config.CACHE_DIR
    try:
        monkeypatch.setattr(_jit_cache, "writable", lambda path: False)
        got = _jit_cache.configure()
        assert got.parent.parent == tmp_path and got.name == _jit_cache.sources_digest()
        assert got.parent.name.startswith("clickboost-numba-")
        monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
        assert _jit_cache.configure() == tmp_path / "mine" / _jit_cache.sources_digest()
    finally:
        numba.config.CACHE_DIR = before


def test_writable_is_numbas_test(tmp_path: Path) -> None:
    assert _jit_cache.writable(tmp_path / "a" / "b")
    (tmp_path / "file").write_text("")
    assert not _jit_cache.writable(tmp_path / "file" / "sub")
