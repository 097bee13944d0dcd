"""Vowpal Wabbit's contextual-bandit reductions as the anchor of the quality and speed benchmarks.

VW is driven in-process through its Python bindings (``vowpalwabbit`` from PyPI, the ``bench``
extra). ``--cbify K`` turns a multiclass example into a bandit round inside VW: the explorer draws
an action, VW simulates the click from the true label it was given (loss 0 if the action is the
label, 1 otherwise) and learns from that single bit. After ``learn`` the example's multiclass
prediction is the *sampled* action, so we count mistakes exactly as for our learners (the sampled
label against the truth); :func:`run_vw` checks that this count equals VW's own summed loss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

#: The explorers compared (issue 9): name -> VW arguments after ``--cbify K``.
EXPLORERS: dict[str, str] = {
    "vw-eps0.01": "--epsilon 0.01",
    "vw-eps0.05": "--epsilon 0.05",
    "vw-bag4": "--bag 4",
    "vw-cover4": "--cover 4",
    "vw-adf-squarecb": "--cb_explore_adf --squarecb",
    "vw-adf-regcb": "--cb_explore_adf --regcb",
    "vw-adf-eps0.05": "--cb_explore_adf --epsilon 0.05",
}


def vw_version() -> str:
    """Version of the installed ``vowpalwabbit`` package."""
    import vowpalwabbit

    return str(vowpalwabbit.__version__)


def to_lines(X: np.ndarray, y: np.ndarray) -> list[str]:
    """VW text examples ``"label | fj:x_j ..."`` (1-based labels, feature j named ``fj``).

    Features get names, not bare integers: VW takes an all-digit name as the hash index itself, and
    indices 0, 1, 2, ... collide with the per-action weights of ``--cbify`` (an indicator stream
    that VW learns to 3% error stays at chance with names ``0, 1, 2``). Zero features are left out
    (VW treats a missing feature as 0). Values have 9 significant digits, enough for float32 data.
    """
    lines = []
    for x, label in zip(X, y, strict=True):
        nz = np.flatnonzero(x)
        feats = " ".join(f"f{j}:{v:.9g}" for j, v in zip(nz.tolist(), x[nz].tolist(), strict=True))
        lines.append(f"{int(label) + 1} | {feats}")
    return lines


@dataclass(frozen=True)
class VWRun:
    """One pass of VW over a stream.

    Attributes
    ----------
    correct : ndarray of shape (T,), bool
        Whether the action VW sampled in round t equals the true label.
    seconds : float
        Wall time of the loop parse -> learn -> read prediction (the text lines are built before).
    """

    correct: np.ndarray
    seconds: float


def run_vw(explorer: str, n_labels: int, lines: list[str], y: np.ndarray, seed: int) -> VWRun:
    """Run ``vw --cbify n_labels <explorer>`` over the examples ``lines`` in order.

    Parameters
    ----------
    explorer : str
        VW arguments of the exploration strategy, e.g. ``"--epsilon 0.05"``.
    n_labels : int
        K.
    lines : list of str
        The stream as made by :func:`to_lines`.
    y : ndarray of shape (T,)
        True labels (0-based) of ``lines``, to score the sampled actions.
    seed : int
        VW's ``--random_seed`` (its exploration draws).

    Raises
    ------
    RuntimeError
        If our count of sampled-label mistakes differs from VW's own summed cbify loss.
    """
    from vowpalwabbit import Workspace

    vw = Workspace(f"--cbify {n_labels} {explorer} --random_seed {seed} --quiet")
    actions = np.empty(len(lines), dtype=np.int64)
    start = time.perf_counter()
    for t, line in enumerate(lines):
        ex = vw.parse(line)
        vw.learn(ex)
        actions[t] = ex.get_multiclass_prediction()  # the sampled action, 1-based
        vw.finish_example(ex)
    seconds = time.perf_counter() - start
    vw_loss = vw.get_sum_loss()
    vw.finish()
    correct = actions == np.asarray(y, dtype=np.int64) + 1
    if int((~correct).sum()) != round(vw_loss):
        raise RuntimeError(f"VW {explorer}: {int((~correct).sum())} sampled mistakes, VW's loss {vw_loss}")
    return VWRun(correct, seconds)
