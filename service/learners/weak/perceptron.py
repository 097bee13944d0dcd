"""Projected online Perceptron as a binary weak-learner family (ALGORITHMS.md §4.3).

:class:`PerceptronFamily` keeps a dense ``(d, K, N)`` store; :class:`LazyPerceptronFamily` the same
models with rows only for the features learned, bounded, for hashed input (BanditBoost's
``store``; not registered as a family of its own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from service.features import SparseVector
from service.kernels import nonzeros
from service.learners.weak import BinaryFamily, weak_families
from service.learners.weak.family_kernels import (
    perceptron_lazy_scores,
    perceptron_lazy_update,
    perceptron_lazy_update_dense,
    perceptron_lazy_votes,
    perceptron_lazy_votes_dense,
    perceptron_scores,
    perceptron_update,
    perceptron_update_dense,
    perceptron_votes,
    perceptron_votes_dense,
)
from service.serial import StateFormatError

#: Rows a new lazy store allocates (fewer if its bound allows fewer); it doubles as features come.
LAZY_INITIAL_ROWS = 64


@weak_families.register("perceptron")
class PerceptronFamily(BinaryFamily):
    """N x K projected Perceptrons on the unit ball.

    Seed 000 §3 analyses online gradient descent on the reward ``w y <h_k, x>`` with
    ``||h_k|| <= 1`` and ``||x|| <= 1``; ALGORITHMS.md §4.3 (PROPOSED) fixes the details:

    * input ``x / max(1, ||x||_2)``, so the score ``<u, x>`` lies in [-1, 1];
    * on a margin mistake ``y <u, x> <= 0`` with weight ``w > 0``:
      ``u <- Proj_{||u|| <= 1}(u + eta_n w y x)`` with ``eta_n = 1/sqrt(n)``, n counting this
      model's updates;
    * random start ``u ~ N(0, sigma^2 I)``, ``sigma = 0.01/sqrt(d)`` (seed 000: "random h_1k").

    Each vector is kept as ``u = scale V`` with its squared norm, so a step costs O(nnz) on sparse
    input: V moves on the non-zeros, ``||u + c x||^2 = ||u||^2 + 2 c u.x + c^2 ||x||^2`` and the
    projection only divides the scale (:func:`~service.learners.weak.family_kernels.perceptron_update`).
    A scale below ``1e-100`` is folded back into V (O(d), rare).

    Attributes
    ----------
    V_ : ndarray of shape (d, K, N)
        Unscaled weights, feature-major: ``V_[:, k, i] * scale_[k, i]`` is the weight vector of
        ``h_k^(i)``; the weights of one feature for all models are contiguous.
    scale_ : ndarray of shape (K, N)
        The lazy scale of each vector.
    sqnorm_ : ndarray of shape (K, N)
        ``||u||^2`` of each model, kept up to date by the updates.
    n_ : ndarray of shape (K, N), int64
        Number of updates of each model.
    """

    accepts_sparse = True

    def __init__(self, n_learners: int, n_labels: int, n_features: int, rng: np.random.Generator) -> None:
        super().__init__(n_learners, n_labels, n_features, rng)
        sigma = 0.01 / np.sqrt(n_features)
        U = rng.normal(0.0, sigma, size=(n_labels, n_learners, n_features))  # the draws of every version
        self.V_ = np.ascontiguousarray(U.transpose(2, 0, 1))
        self.scale_ = np.ones((n_labels, n_learners))
        self.sqnorm_ = np.einsum("kid,kid->ki", U, U)
        self.n_ = np.zeros((n_labels, n_learners), dtype=np.int64)

    @property
    def U(self) -> np.ndarray:
        """The weight vectors ``u_k^(i)``, shape (K, N, d) (a new array)."""
        return (self.V_ * self.scale_).transpose(1, 2, 0)

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        idx, val = (x.idx, x.val) if isinstance(x, SparseVector) else nonzeros(x)
        return perceptron_scores(self.V_, self.scale_, idx, val).T

    def votes(self, x: np.ndarray | SparseVector, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, f = np.empty(self.scale_.shape), np.empty(self.n_labels)
        if isinstance(x, SparseVector):
            perceptron_votes(self.V_, self.scale_, alpha, x.idx, x.val, h, f)
        else:
            perceptron_votes_dense(self.V_, self.scale_, alpha, x, h, f)
        return h.T, f

    def update(
        self,
        x: np.ndarray | SparseVector,
        k: int,
        y: float,
        weights: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        if isinstance(x, SparseVector):
            perceptron_update(self.V_, self.scale_, self.sqnorm_, self.n_, x.idx, x.val, k, y, weights)
        else:
            perceptron_update_dense(self.V_, self.scale_, self.sqnorm_, self.n_, x, k, y, weights)


class LazyPerceptronFamily(BinaryFamily):
    """:class:`PerceptronFamily` whose weights live in rows materialised as features are learned.

    For hashed input (d = 2**18 and more buckets, ~30 non-zeros an event) the dense ``(d, K, N)``
    store is gigabytes while a stream touches a small part of it. Here a feature has a row of
    ``K x N`` weights only once an update has touched it (some model of the updated class moved on
    an example where it is non-zero); every other feature weighs 0 in every model. The steps,
    projections and lazy scale are those of :class:`PerceptronFamily` (compiled in
    :func:`~service.learners.weak.family_kernels.perceptron_lazy_update`).

    Random start (ours, for hashed inputs; ALGORITHMS.md §4.3 [PROPOSED] draws ``u ~ N(0, sigma^2 I)``
    over all d features at creation): a feature's start ``N(0, sigma^2)``, ``sigma = 0.01/sqrt(d)``,
    is drawn when its row is materialised, from a counter-based generator keyed by ``(seed,
    feature)`` (:func:`~service.learners.weak.family_kernels.perceptron_lazy_start`), so it does
    not depend on the order features arrive and replicas applying the same log stay bit-identical.
    A model that the new starts take just outside the unit ball is projected back. Decisions never
    materialise anything: before its first update a feature contributes 0.

    Bounded memory: at most ``max_rows`` rows, set by the owner from its byte bound; ``rows_``
    starts at :data:`LAZY_INITIAL_ROWS` rows and doubles (capped at ``max_rows``) when new features
    need more. Once all rows are in use, a new feature is not materialised: it keeps weight 0, is
    not learned, and each such (update, feature) is counted in ``dropped_`` (as VFDT deactivates
    leaves when its memory is full).

    Parameters
    ----------
    n_learners, n_labels, n_features, rng
        As :class:`~service.learners.weak.BinaryFamily` (``rng`` is not used: no start is drawn
        at creation).
    seed : int
        Key of the random starts (the owner's seed).
    max_rows : int
        Bound on the rows materialised, at least 1.

    Attributes
    ----------
    slot_ : ndarray of shape (d,), int32
        0 for a feature without a row, else 1 + its row in ``rows_`` (0, not -1, marks "none" so
        that the sparse checkpoint encoding stores only the features seen).
    rows_ : ndarray of shape (capacity, K, N)
        Unscaled weights of the materialised features, in the order they were first learned; only
        the first ``n_rows_`` rows are in use (the rest are 0).
    n_rows_ : int
        Rows in use.
    dropped_ : int
        Features not materialised because the store was full, counted once per update.
    scale_, sqnorm_, n_ : ndarray of shape (K, N)
        As :class:`PerceptronFamily`.
    """

    accepts_sparse = True
    _growable: ClassVar[frozenset[str]] = frozenset({"rows_"})

    def __init__(
        self,
        n_learners: int,
        n_labels: int,
        n_features: int,
        rng: np.random.Generator,
        *,
        seed: int,
        max_rows: int,
    ) -> None:
        super().__init__(n_learners, n_labels, n_features, rng)
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        self.seed = seed % 2**64
        self.max_rows = min(max_rows, n_features)
        self.sigma = float(0.01 / np.sqrt(n_features))
        self.slot_ = np.zeros(n_features, dtype=np.int32)
        self.rows_ = np.zeros((min(self.max_rows, LAZY_INITIAL_ROWS), n_labels, n_learners))
        self.n_rows_ = 0
        self.dropped_ = 0
        self.scale_ = np.ones((n_labels, n_learners))
        self.sqnorm_ = np.zeros((n_labels, n_learners))
        self.n_ = np.zeros((n_labels, n_learners), dtype=np.int64)

    @staticmethod
    def initial_rows(max_rows: int) -> int:
        """Rows a new store allocates under the bound ``max_rows``."""
        return min(max_rows, LAZY_INITIAL_ROWS)

    @property
    def U(self) -> np.ndarray:
        """The weight vectors ``u_k^(i)``, shape (K, N, d) (a new dense array: small d only)."""
        U = np.zeros((self.n_labels, self.n_learners, self.n_features))
        seen = np.flatnonzero(self.slot_)
        U[:, :, seen] = (self.rows_[self.slot_[seen] - 1] * self.scale_).transpose(1, 2, 0)
        return U

    def scores(self, x: np.ndarray | SparseVector) -> np.ndarray:
        idx, val = (x.idx, x.val) if isinstance(x, SparseVector) else nonzeros(x)
        return perceptron_lazy_scores(self.slot_, self.rows_, self.scale_, idx, val).T

    def votes(self, x: np.ndarray | SparseVector, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        h, f = np.empty(self.scale_.shape), np.empty(self.n_labels)
        if isinstance(x, SparseVector):
            perceptron_lazy_votes(self.slot_, self.rows_, self.scale_, alpha, x.idx, x.val, h, f)
        else:
            perceptron_lazy_votes_dense(self.slot_, self.rows_, self.scale_, alpha, x, h, f)
        return h.T, f

    def update(
        self,
        x: np.ndarray | SparseVector,
        k: int,
        y: float,
        weights: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        while True:
            head = (self.slot_, self.rows_, self.n_rows_, self.scale_, self.sqnorm_, self.n_)
            tail = (k, y, weights, self.seed, self.sigma, self.max_rows)
            if isinstance(x, SparseVector):
                need, used, dropped = perceptron_lazy_update(*head, x.idx, x.val, *tail)
            else:
                need, used, dropped = perceptron_lazy_update_dense(*head, x, *tail)
            if need == 0:
                break
            self._grow(need)
        self.n_rows_ = used
        self.dropped_ += dropped

    def _grow(self, need: int) -> None:
        """Double ``rows_`` (at least to ``need`` rows, at most to ``max_rows``)."""
        cap = self.rows_.shape[0]
        rows = np.zeros((min(self.max_rows, max(need, 2 * cap)), *self.rows_.shape[1:]))
        rows[:cap] = self.rows_
        self.rows_ = rows

    def set_state(self, state: Mapping[str, Any]) -> None:
        """:meth:`Stateful.set_state`, then the store's invariants (the compiled loops index with
        ``slot_`` unchecked): rows of shape (K, N), at most ``max_rows``, ``n_rows_`` of them in use
        and each in use held by exactly one feature."""
        super().set_state(state)
        cap = self.rows_.shape[0]
        if self.rows_.shape[1:] != (self.n_labels, self.n_learners) or not 1 <= cap <= self.max_rows:
            raise StateFormatError(
                f"state['rows_']: expected shape (1..{self.max_rows}, {self.n_labels}, {self.n_learners}), "
                f"got {self.rows_.shape}"
            )
        if not 0 <= self.n_rows_ <= cap or self.dropped_ < 0:
            raise StateFormatError(f"state: {self.n_rows_} rows in use of {cap}, {self.dropped_} dropped")
        slot = self.slot_
        if slot.min(initial=0) < 0 or slot.max(initial=0) > self.n_rows_:
            raise StateFormatError("state['slot_']: a feature points outside the rows in use")
        held = np.bincount(slot, minlength=self.n_rows_ + 1)[1:]
        if np.any(held != 1):
            raise StateFormatError("state['slot_']: each row in use must belong to exactly one feature")
