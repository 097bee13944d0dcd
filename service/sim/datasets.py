"""Benchmark datasets: ``../shared/datasets`` (or ``$DATASETS_DIR``) by name, or an explicit .npz.

Format (``../shared/datasets/README.md``): ``X`` (n, d) float32 (mnist: uint8 pixels), ``y`` (n,)
int64 in ``0..K-1``; a sibling ``NAME.json`` carries provenance and class names. Preprocessing here
is exactly what the seed papers did: NaN -> 0 (mice, seed 001) and mnist scaled to [0, 1] (seed
004). Streams are shuffled with ``np.random.default_rng(seed).permutation(n)``, after duplication
when a duplication factor is given (ALGORITHMS.md §2.10).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]


def datasets_dir() -> Path:
    """``$DATASETS_DIR`` if set, else ``../shared/datasets`` next to the repository."""
    env = os.environ.get("DATASETS_DIR")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "datasets"


@dataclass(frozen=True)
class Dataset:
    """A labelled dataset held in memory (float64 features, int64 labels)."""

    name: str
    X: np.ndarray
    y: np.ndarray
    n_labels: int
    classes: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    @property
    def d(self) -> int:
        return int(self.X.shape[1])

    def stream(
        self, seed: int, duplicate: int = 1, limit: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The shuffled stream for ``seed``: duplicate ``duplicate`` times, permute, cut at ``limit``."""
        if duplicate < 1:
            raise ValueError(f"duplication factor must be >= 1, got {duplicate}")
        idx = np.tile(np.arange(self.n), duplicate)
        idx = idx[np.random.default_rng(seed).permutation(idx.size)]
        if limit is not None:
            idx = idx[:limit]
        return self.X[idx], self.y[idx]


def load_dataset(name_or_path: str) -> Dataset:
    """Load a dataset by name (``car``, ``mnist``, ...) or from an explicit ``.npz`` path.

    Raises
    ------
    FileNotFoundError
        With a message naming the file looked for and the available names.
    ValueError
        When the file lacks ``X``/``y`` or their shapes disagree.
    """
    path = Path(name_or_path)
    if path.suffix != ".npz":
        path = datasets_dir() / f"{name_or_path}.npz"
    if not path.is_file():
        avail = sorted(p.stem for p in datasets_dir().glob("*.npz"))
        raise FileNotFoundError(
            f"dataset {name_or_path!r} not found ({path}); available in {datasets_dir()}: "
            + (", ".join(avail) or "none")
        )
    with np.load(path, allow_pickle=False) as z:
        if "X" not in z or "y" not in z:
            raise ValueError(f"{path}: an .npz dataset needs arrays X and y")
        X_raw, y = z["X"], z["y"].astype(np.int64)
    if X_raw.ndim != 2 or y.shape != (X_raw.shape[0],):
        raise ValueError(f"{path}: X must be (n, d) and y (n,), got {X_raw.shape} and {y.shape}")
    if y.size and y.min() < 0:
        raise ValueError(f"{path}: labels must be in 0..K-1")
    X = X_raw.astype(np.float64)
    if path.stem == "mnist" or X_raw.dtype == np.uint8:
        X /= 255.0  # seed 004 scales pixels to [0, 1]
    X = np.nan_to_num(X, nan=0.0)  # seed 001 fed NaN as 0 (mice)
    meta_path = path.with_suffix(".json")
    classes: list[str] = []
    if meta_path.is_file():
        classes = [str(c) for c in json.loads(meta_path.read_text()).get("classes", [])]
    n_labels = max(int(y.max()) + 1 if y.size else 0, len(classes), 2)
    return Dataset(path.stem, X, y, n_labels, classes)
