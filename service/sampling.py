"""Decision ids and the per-decision random generator.

Sampling randomness in ``decide`` comes from a generator seeded by the decision id (DESIGN.md), so a
decision can be re-derived from its id and the offline simulator reproduces the HTTP service exactly
when both draw ids from the same :class:`DecisionIds`.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading

import numpy as np


class DecisionIds:
    """Generator of opaque, URL-safe decision ids with 128 bits.

    Parameters
    ----------
    secret : bytes or None
        ``None`` (the service default) draws every id from the OS's CSPRNG. With a secret the ids are
        ``blake2b(counter, key=secret)``: reproducible for whoever holds the secret (the simulator
        and replay tests), unguessable for anyone else.
    """

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret
        self._counter = 0
        self._lock = threading.Lock()

    @classmethod
    def for_seed(cls, seed: int) -> DecisionIds:
        """Deterministic ids for simulation seed ``seed`` (shared by simulator and replay tests)."""
        return cls(f"clickboost-sim-{seed}".encode())

    def new(self) -> str:
        """Return the next decision id (22 URL-safe characters)."""
        if self._secret is None:
            raw = secrets.token_bytes(16)
        else:
            with self._lock:
                n = self._counter
                self._counter += 1
            raw = hashlib.blake2b(n.to_bytes(16, "little"), key=self._secret, digest_size=16).digest()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


# PCG64 (O'Neill 2014; numpy's PCG64: 128-bit LCG, XSL-RR output), the constant of numpy's pcg64.h.
_MULT = 0x2360ED051FC65DA44385DF649FCCF645
_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1


class DecisionRng:
    """The generator of one decision: numpy's PCG64 at the state ``blake2b(decision_id)`` sets.

    ``random()`` with no argument (the one draw most decisions take: inverting the CDF) is computed
    here in Python integers, bit for bit the double numpy's PCG64 gives (``(next64 >> 11) 2^-53``),
    without building a numpy generator (about half the cost of a whole linear decision). Any other
    use (``integers`` for a tie, ``random(size)``, ...) switches to a real
    ``numpy.random.Generator`` at the current state, so every sequence of calls draws exactly what
    a generator seeded from the id would.
    """

    __slots__ = ("_gen", "_inc", "_state")

    def __init__(self, state: int, inc: int) -> None:
        self._state = state
        self._inc = inc
        self._gen: np.random.Generator | None = None

    def random(self, *args: object, **kwargs: object) -> float:
        """A uniform double in [0, 1), as ``numpy.random.Generator.random``."""
        if self._gen is not None or args or kwargs:
            return self.generator().random(*args, **kwargs)  # type: ignore[arg-type]
        s = self._state = (self._state * _MULT + self._inc) & _M128
        x = ((s >> 64) ^ s) & _M64
        rot = s >> 122
        out = ((x >> rot) | (x << (64 - rot))) & _M64
        return (out >> 11) * (1.0 / 9007199254740992.0)

    def generator(self) -> np.random.Generator:
        """A numpy generator at this one's state (used from then on for every draw)."""
        if self._gen is None:
            gen = np.random.Generator(np.random.PCG64(0))
            gen.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": self._state, "inc": self._inc},
                "has_uint32": 0,
                "uinteger": 0,
            }
            self._gen = gen
        return self._gen

    def __getattr__(self, name: str) -> object:
        return getattr(self.generator(), name)


def decision_rng(decision_id: str) -> np.random.Generator:
    """The generator ``decide`` uses for the decision ``decision_id``: PCG64 whose state and
    increment are the two halves of ``blake2b(decision_id)`` (see :class:`DecisionRng`)."""
    h = hashlib.blake2b(decision_id.encode(), digest_size=32).digest()
    state = int.from_bytes(h[:16], "little")
    inc = int.from_bytes(h[16:], "little") | 1
    return DecisionRng(state, inc)  # type: ignore[return-value]
