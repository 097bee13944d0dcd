"""Decision ids and the per-decision random generator.

Sampling randomness in ``decide`` comes from a generator seeded by the decision id (DESIGN.md), so a
decision can be re-derived from its id and the offline simulator reproduces the HTTP service exactly
when both draw ids from the same :class:`DecisionIds`.

Both have two implementations computing the same bits: in Python (:class:`PyDecisionIds`,
:class:`PyDecisionRng`, :func:`py_decision_rng`) and, where the C extension ``service._decisions``
was built (service/_decisions.c), in C, about 2 us less per decision; the names without ``Py`` are
the C ones when present.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
from typing import Any

import numpy as np

from service.kernels import pcg64_doubles

try:  # service/_decisions.c, built by `pip install` where a C compiler is at hand
    from service import _decisions as _compiled
except ImportError:  # pragma: no cover - the Python classes below compute the same bits
    _compiled = None  # type: ignore[assignment]


class PyDecisionIds:
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
    def for_seed(cls, seed: int) -> PyDecisionIds:
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
_MULT_INV = pow(_MULT, -1, 1 << 128)  # the LCG stepped backwards (:meth:`PyDecisionRng._unread`)
_M64 = (1 << 64) - 1
_M128 = (1 << 128) - 1


class PyDecisionRng:
    """The generator of one decision: numpy's PCG64 at the state ``blake2b(decision_id)`` sets.

    The draws decisions take are computed here, bit for bit what numpy's PCG64 gives, without
    building a numpy generator (about 24 us, more than a whole linear decision):

    * ``random()``: in Python integers (``(next64 >> 11) 2^-53``);
    * ``random(size)``: the same doubles from a compiled loop (:func:`service.kernels.pcg64_doubles`;
      the boosters draw one per tree and label to break ties);
    * ``integers(high)`` for ``0 < high <= 2^32``: numpy's Lemire rejection on 32-bit draws, each
      64-bit output split into two (low half first, the high half kept for the next call, as numpy's
      ``next_uint32`` does).

    Any other use (``normal``, ``choice``, ``integers`` with other arguments, ...) switches to a real
    ``numpy.random.Generator`` at the current state, so every sequence of calls draws exactly what
    a generator seeded from the id would.
    """

    __slots__ = ("_gen", "_inc", "_state", "_u32")

    def __init__(self, state: int, inc: int) -> None:
        self._state = state
        self._inc = inc
        self._gen: np.random.Generator | None = None
        self._u32: int | None = None  # numpy's has_uint32 / uinteger

    def _next64(self) -> int:
        s = self._state = (self._state * _MULT + self._inc) & _M128
        x = ((s >> 64) ^ s) & _M64
        rot = s >> 122
        return ((x >> rot) | (x << (64 - rot))) & _M64

    def _next32(self) -> int:
        if self._u32 is not None:
            out, self._u32 = self._u32, None
            return out
        n = self._next64()
        self._u32 = n >> 32
        return n & 0xFFFFFFFF

    def random(self, size: int | tuple[int, ...] | None = None, *args: object, **kwargs: object) -> Any:
        """Uniform doubles in [0, 1), as ``numpy.random.Generator.random``."""
        if self._gen is not None or args or kwargs:
            return self.generator().random(size, *args, **kwargs)  # type: ignore[arg-type]
        if size is None:
            return (self._next64() >> 11) * (1.0 / 9007199254740992.0)
        shape = (size,) if isinstance(size, int | np.integer) else tuple(size)
        out = np.empty(shape)
        s, inc = self._state, self._inc
        words = np.array([s >> 64, s & _M64, inc >> 64, inc & _M64], dtype=np.uint64)
        pcg64_doubles(words, out.reshape(-1))
        self._state = (int(words[0]) << 64) | int(words[1])
        return out

    def _unread(self) -> None:
        """Take back the last ``random()`` (the state one LCG step back); only for a draw made here."""
        if self._gen is not None:
            raise RuntimeError("_unread: the draws are the numpy Generator's now")
        self._state = ((self._state - self._inc) * _MULT_INV) & _M128

    def integers(self, low: int, *args: object, **kwargs: object) -> Any:
        """``numpy.random.Generator.integers``; ``integers(high)`` with ``0 < high <= 2^32`` here."""
        if self._gen is not None or args or kwargs or not 0 < low <= 1 << 32:
            return self.generator().integers(low, *args, **kwargs)  # type: ignore[arg-type]
        # numpy's buffered_bounded_lemire_uint32 for the range [0, low - 1]
        if low == 1 << 32:
            return np.int64(self._next32())
        m = self._next32() * low
        if m & 0xFFFFFFFF < low:
            threshold = (0xFFFFFFFF - (low - 1)) % low
            while m & 0xFFFFFFFF < threshold:
                m = self._next32() * low
        return np.int64(m >> 32)

    def generator(self) -> np.random.Generator:
        """A numpy generator at this one's state (used from then on for every draw)."""
        if self._gen is None:
            self._gen = _numpy_generator(self._state, self._inc, self._u32)
        return self._gen

    def __getattr__(self, name: str) -> object:
        return getattr(self.generator(), name)


def own_random(rng: np.random.Generator) -> float | None:
    """``rng.random()`` when ``rng`` is a decision generator still drawing on its own (it can then
    take that draw back with ``rng._unread()``), else None and nothing drawn.

    A decide that needs its sampling draw before it knows whether a tie-break draws first (which
    must come first, to keep the generator's order) draws it here, and hands it back on a tie.
    """
    return rng.random() if getattr(rng, "_gen", False) is None else None


def py_decision_rng(decision_id: str) -> np.random.Generator:
    """The generator ``decide`` uses for the decision ``decision_id``: PCG64 whose state and
    increment are the two halves of ``blake2b(decision_id)`` (see :class:`PyDecisionRng`)."""
    h = hashlib.blake2b(decision_id.encode(), digest_size=32).digest()
    state = int.from_bytes(h[:16], "little")
    inc = int.from_bytes(h[16:], "little") | 1
    return PyDecisionRng(state, inc)  # type: ignore[return-value]


def reward_bit(decision_id: str, reward: float) -> bool:
    """The click bit a learner that learns from bits takes for a graded ``reward`` in (0, 1) of the
    decision ``decision_id``: Bernoulli(reward), ``u < reward`` with ``u`` the first uniform of
    the decision's reward stream, :func:`decision_rng` of ``decision_id + "#reward"`` (no id holds
    ``#``, so it never reuses a decision's own draws). Every replica draws the same bit, and its
    expectation is the reward, so an update unbiased for the click stays unbiased for the reward.
    """
    return bool(decision_rng(decision_id + "#reward").random() < reward)


def _numpy_generator(state: int, inc: int, u32: int | None) -> np.random.Generator:
    """numpy's Generator on a PCG64 at ``(state, inc)``, holding the 32-bit half ``u32`` if any."""
    gen = np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": state, "inc": inc},
        "has_uint32": int(u32 is not None),
        "uinteger": u32 or 0,
    }
    return gen


if _compiled is None:  # pragma: no cover - where service/_decisions.c was not built
    DecisionIds = PyDecisionIds
    DecisionRng = PyDecisionRng
    decision_rng = py_decision_rng
else:

    class DecisionIds(_compiled.Ids):  # type: ignore[no-redef]
        """:class:`PyDecisionIds` in C: ``DecisionIds(secret=None)``, ``new()`` (22 characters).

        Without a secret the 16 bytes of an id come from the OS's CSPRNG (``getrandom``, read 4 KiB
        at a time; a fork empties the buffer), with one the keyed blake2b of a counter.
        """

        __slots__ = ()

        @classmethod
        def for_seed(cls, seed: int) -> DecisionIds:
            """Deterministic ids for simulation seed ``seed`` (shared by simulator and replay tests)."""
            return cls(f"clickboost-sim-{seed}".encode())

    class DecisionRng(_compiled.Pcg64):  # type: ignore[no-redef]
        """:class:`PyDecisionRng` in C: ``random()`` and ``integers(high)`` there, the rest here.

        Calls the C methods do not take come to ``_random`` and ``_integers``; as in the Python
        class, anything numpy-specific moves the generator to a real ``numpy.random.Generator`` at
        the current state (``_gen``), which then draws everything.
        """

        __slots__ = ()

        def _random(self, size: int | tuple[int, ...] | None = None, *args: object, **kwargs: object) -> Any:
            if self._gen is not None or args or kwargs:
                return self.generator().random(size, *args, **kwargs)  # type: ignore[arg-type]
            if size is None:
                return self.random()
            out = np.empty((size,) if isinstance(size, int | np.integer) else tuple(size))
            self._fill(out.reshape(-1))  # a view: C order, numpy's order of draws
            return out

        def _integers(self, low: int, *args: object, **kwargs: object) -> Any:
            return self.generator().integers(low, *args, **kwargs)  # type: ignore[arg-type]

        def generator(self) -> np.random.Generator:
            """A numpy generator at this one's state (used from then on for every draw)."""
            if self._gen is None:
                self._gen = _numpy_generator(*self._get_state())
            return self._gen

        def __getattr__(self, name: str) -> object:
            return getattr(self.generator(), name)

    _compiled.set_rng_class(DecisionRng)
    decision_rng = _compiled.decision_rng  # type: ignore[assignment]
