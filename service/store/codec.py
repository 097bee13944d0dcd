"""Bytes of the arrays and decisions the stores keep, shared by the Redis and SQLite stores.

Pickle-free: :func:`service.serial.encode` (a JSON header plus raw little-endian arrays; decoding
never runs code). A record's features are kept bit for bit as float64, its decision
(``Decision.to_state()``) as a flat state dictionary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from service.serial import decode, encode

__all__ = ["decode_decision", "decode_x", "eligible_of", "encode_decision", "encode_x", "rollout_of"]


def encode_x(x: np.ndarray) -> bytes:
    """The features of a decision record as float64 (exact)."""
    return encode({"x": np.asarray(x, dtype=np.float64)})


def decode_x(data: bytes) -> np.ndarray:
    """Inverse of :func:`encode_x`."""
    return decode(data)["x"]


def encode_decision(decision: Mapping[str, Any]) -> bytes:
    """A decision's state (``Decision.to_state()``)."""
    return encode(decision)


def decode_decision(data: bytes) -> dict[str, Any]:
    """Inverse of :func:`encode_decision`."""
    return decode(data)


def rollout_of(decision: Mapping[str, Any]) -> tuple[np.ndarray | None, int | None]:
    """The learner's own distribution and the baseline label of a decision served in logging or
    apprentice mode (``memo.policy``, ``memo.baseline``: :func:`service.rollout.served`), or Nones."""
    policy = decision.get("memo.policy")
    if policy is None:
        return None, None
    return np.asarray(policy, dtype=np.float64), int(decision["memo.baseline"])


def eligible_of(decision: Mapping[str, Any]) -> np.ndarray | None:
    """The eligible-label mask a decision state carries (``memo.eligible``), or None: every label."""
    mask = decision.get("memo.eligible")
    return None if mask is None else np.asarray(mask, dtype=bool)
