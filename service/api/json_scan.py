"""Counting a JSON body's candidate lists before it is parsed (issue 51, item 5).

A request of 10,000 candidates is refused anyway, but parsing it into models first held the event
loop for 100-300 ms. :func:`count_lists` reads the top level of the body itself and a capped list
item by item with the C scanner of :mod:`json`, and stops at the item past the cap. Used by the
Personalizer routes (always) and by ``POST /predict`` (when the body has enough objects to exceed
the cap at all: :func:`may_exceed`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping

#: key -> (most items, the refusal's message)
Caps = Mapping[str, tuple[int, str]]

_WS = re.compile(r"[ \t\n\r]*")
_SCAN = json.JSONDecoder()


def may_exceed(body: bytes, most: int) -> bool:
    """Whether ``body`` can hold a list of more than ``most`` objects: not when it has at most
    ``most + 1`` opening braces (every object has one; a brace in a string only adds to the count),
    so a small request is never scanned twice."""
    return body.count(b"{") > most + 1


def count_lists(body: bytes, caps: Caps, refuse: Callable[[str], Exception]) -> None:
    """Raise ``refuse(message)`` when a top-level list of ``caps`` in the JSON object ``body`` has
    more items than its cap, before anything is parsed into models.

    The top level is read here and each of its values handed to the C scanner of :mod:`json`, but a
    capped list is read item by item and left at the item past its cap. A body this cannot read
    is refused as malformed JSON (``refuse("malformed JSON: ...")``), so the full parse that follows
    only ever sees a body read whole (no way around the count).
    """
    try:
        text = body.decode()
        i = _WS.match(text).end()
        if not text.startswith("{", i):
            raise refuse("body: expected a JSON object")
        i = _WS.match(text, i + 1).end()
        if not text.startswith("}", i):
            while True:
                if not text.startswith('"', i):
                    raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
                key, i = _SCAN.raw_decode(text, i)
                i = _past(text, _WS.match(text, i).end(), ":")
                if key in caps and text.startswith("[", i):
                    i = _list_within(text, i, *caps[key], refuse)
                else:
                    _, i = _SCAN.raw_decode(text, i)
                i = _WS.match(text, i).end()
                if not text.startswith(",", i):
                    break
                i = _WS.match(text, i + 1).end()
        i = _past(text, i, "}")
        if i != len(text):
            raise json.JSONDecodeError("Extra data", text, i)
    except RecursionError:
        raise refuse("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of 4,300 digits
        raise refuse(f"malformed JSON: {exc}") from None


def _past(text: str, i: int, char: str) -> int:
    """Where the JSON ``text`` goes on after ``char`` at ``i`` and its whitespace."""
    if not text.startswith(char, i):
        raise json.JSONDecodeError(f"Expecting {char!r}", text, i)
    return _WS.match(text, i + 1).end()


def _list_within(text: str, i: int, most: int, message: str, refuse: Callable[[str], Exception]) -> int:
    """Where the JSON ``text`` goes on after the list at ``i``, read item by item: ``refuse(message)``
    at the item past ``most``."""
    i = _WS.match(text, i + 1).end()
    if text.startswith("]", i):
        return i + 1
    n = 0
    while True:
        _, i = _SCAN.raw_decode(text, i)
        n += 1
        if n > most:
            raise refuse(message)
        i = _WS.match(text, i).end()
        if not text.startswith(",", i):
            return _past(text, i, "]")
        i = _WS.match(text, i + 1).end()
