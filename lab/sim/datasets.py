"""Benchmark datasets: ``../shared/datasets`` (or ``$DATASETS_DIR``) by name, or an explicit .npz.

Format (``../shared/datasets/README.md``): ``X`` (n, d) float32 (mnist: uint8 pixels), ``y`` (n,)
int64 in ``0..K-1``; a sibling ``NAME.json`` carries provenance and class names. Preprocessing here
is exactly what the seed papers did: NaN -> 0 (mice, seed 001) and mnist scaled to [0, 1] (seed
004). Streams are shuffled with ``np.random.default_rng(seed).permutation(n)``, after duplication
when a duplication factor is given (ALGORITHMS.md §2.10).

The synthetic SYNSEP / SYNNONSEP data of seed 002 are not files: :class:`Synthetic` generates them
(Fig. 1 caption), and the names ``synsep`` / ``synnonsep`` load :data:`SYNTHETIC_N` examples of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Examples generated for the names ``synsep`` / ``synnonsep`` (the paper's 10^6 are streamed in
#: chunks by the seed-002 reproduction instead of being held in memory).
SYNTHETIC_N = 100_000


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
    feature_names: list[str] = field(default_factory=list)

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

    def ordinal(self) -> Dataset:
        """The same rows with every one-hot group collapsed into one ordinal column.

        A group is the run of features named ``attr=value`` with the same ``attr`` (the datasets'
        one-hot encoding of a categorical attribute); its column holds the index of the row's value
        in the order the values are listed (for car and nursery, the UCI order, which is the
        attribute's natural order: ``buying=vhigh, high, med, low``, ``safety=low, med, high``, ...).
        Features without ``=`` are kept as they are. The seed-001 reference code read car and
        nursery with one column per attribute (the authors' csv files, see the datasets README),
        though as nominal attributes with multiway splits, which our Hoeffding trees do not have.

        Raises
        ------
        ValueError
            When the data set has no feature names, or a row does not have exactly one value set in
            a group.
        """
        if len(self.feature_names) != self.d:
            raise ValueError(f"{self.name}: ordinal coding needs one feature name per column")
        groups: dict[str, list[int]] = {}
        for j, name in enumerate(self.feature_names):
            groups.setdefault(name.split("=", 1)[0] if "=" in name else name, []).append(j)
        cols = []
        for attr, idx in groups.items():
            block = self.X[:, idx]
            if "=" not in self.feature_names[idx[0]]:
                cols.append(block[:, 0])
                continue
            if not np.all(block.sum(axis=1) == 1.0):
                raise ValueError(f"{self.name}: attribute {attr!r} is not one-hot in every row")
            cols.append(block.argmax(axis=1).astype(np.float64))
        return Dataset(
            f"{self.name}-ordinal", np.stack(cols, axis=1), self.y, self.n_labels, self.classes, list(groups)
        )


@dataclass(frozen=True)
class Synthetic:
    """The 9-class, 400-dimensional SYNSEP / SYNNONSEP generator of seed 002 (Fig. 1 caption).

    Nine fixed topic bit-vectors ``v_i`` have 20 to 40 bits on among the first 120 coordinates
    ("keywords"; supports may overlap). An example of topic i is ``v_i`` with 5 of its bits turned
    off plus 20 random bits turned on among the last 280 coordinates ("common words").

    Separability ("we ensure, by construction", seed 002): the topics are redrawn until every
    ordered pair has ``|supp v_i minus supp v_j| >= 6``. Then ``w_i = 2 v_i - 1`` on the keyword
    coordinates (0 elsewhere) scores the true topic at ``|v_i| - 5`` and every other topic at most
    2 lower, because at least one kept keyword of topic i lies outside ``v_j``: a margin of 2.

    Parameters
    ----------
    noise : float, default 0.0
        Label noise: with this probability the label is replaced by a uniformly drawn *other* label
        (SYNNONSEP: 0.05, "5% label noise"; the paper does not say whether the new label may equal
        the old one, we make every noisy label wrong).
    seed : int, default 0
        Seed of the topic vectors (the fixed part of the data set).
    """

    noise: float = 0.0
    seed: int = 0

    n_labels = 9
    n_features = 400
    n_keywords = 120
    n_common_on = 20
    n_off = 5

    @cached_property
    def topics(self) -> np.ndarray:
        """The topic vectors ``v_i`` restricted to the keyword coordinates, bool (9, 120)."""
        rng = np.random.default_rng(self.seed)
        while True:
            v = np.zeros((self.n_labels, self.n_keywords), dtype=bool)
            for i, size in enumerate(rng.integers(20, 41, size=self.n_labels)):
                v[i, rng.choice(self.n_keywords, size=size, replace=False)] = True
            only = (v[:, None, :] & ~v[None, :, :]).sum(axis=2)  # |supp v_i minus supp v_j|
            if (only + np.eye(self.n_labels, dtype=int) * self.n_keywords).min() > self.n_off:
                return v

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` i.i.d. examples: ``X`` float64 (n, 400) of 0/1 and ``y`` int64 (n,)."""
        topics = self.topics
        y = rng.integers(self.n_labels, size=n)
        head = topics[y]
        # Turn off n_off random bits of the support: the n_off smallest keys among the on-bits.
        keys = np.where(head, rng.random(head.shape), 2.0)
        off = np.argpartition(keys, self.n_off - 1, axis=1)[:, : self.n_off]
        np.put_along_axis(head, off, False, axis=1)
        n_common = self.n_features - self.n_keywords
        on = np.argpartition(rng.random((n, n_common)), self.n_common_on - 1, axis=1)[:, : self.n_common_on]
        tail = np.zeros((n, n_common), dtype=bool)
        np.put_along_axis(tail, on, True, axis=1)
        X = np.concatenate([head, tail], axis=1).astype(np.float64)
        noisy = rng.random(n) < self.noise
        y = np.where(noisy, (y + rng.integers(1, self.n_labels, size=n)) % self.n_labels, y)
        return X, y.astype(np.int64)

    def chunks(
        self, n: int, chunk: int = 10_000, data_seed: int = 0
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The fixed stream of ``n`` examples as ``(X, y)`` chunks, regenerated identically each call."""
        for i, start in enumerate(range(0, n, chunk)):
            yield self.sample(min(chunk, n - start), np.random.default_rng([data_seed, i]))


#: Names accepted by :func:`load_dataset` for the seed-002 synthetic data.
SYNTHETIC = {"synsep": Synthetic(noise=0.0), "synnonsep": Synthetic(noise=0.05)}


def load_dataset(name_or_path: str) -> Dataset:
    """Load a dataset by name (``car``, ``mnist``, ``synsep``, ...) or from an explicit ``.npz`` path.

    ``synsep`` and ``synnonsep`` are :data:`SYNTHETIC_N` examples of :class:`Synthetic` (data seed
    0), generated on the fly.

    Raises
    ------
    FileNotFoundError
        With a message naming the file looked for and the available names.
    ValueError
        When the file lacks ``X``/``y`` or their shapes disagree.
    """
    if name_or_path in SYNTHETIC:
        parts = list(SYNTHETIC[name_or_path].chunks(SYNTHETIC_N))
        X, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        return Dataset(name_or_path, X, y, Synthetic.n_labels)
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
    np.nan_to_num(X, copy=False, nan=0.0)  # seed 001 fed NaN as 0 (mice); in place: mnist is 440 MB
    meta_path = path.with_suffix(".json")
    classes: list[str] = []
    names: list[str] = []
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        classes = [str(c) for c in meta.get("classes", [])]
        names = [str(f) for f in meta.get("feature_names") or []]
    n_labels = max(int(y.max()) + 1 if y.size else 0, len(classes), 2)
    return Dataset(path.stem, X, y, n_labels, classes, names if len(names) == X.shape[1] else [])
