"""Model placement (issue 40 part 3): which replica groups hold which models.

Replicas are grouped (``CLICKBOOST_REPLICA_GROUP``, and every group's addresses in
``CLICKBOOST_REPLICA_GROUPS``, the same on every replica); each model is held by
``CLICKBOOST_PLACEMENT_COPIES`` groups (default: every group), chosen by rendezvous hashing of the
model name over the group names (:func:`rendezvous`), so adding a group moves only the models that
rank it among their first: about ``copies / groups`` of them. A replica loads, follows and sweeps
only the models its group holds, and answers the routes of any other model with 421 Misdirected
Request naming the model's groups and their addresses (:class:`MisdirectedError`).

The store may hold an override per model (:meth:`service.store.base.Store.placements`): the
groups it was moved to, and while a move is under way the groups that load it ahead of the switch
(``joining``). See docs/SCALING.md, "Model placement".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MISDIRECTED_HEADER", "MisdirectedError", "Placement", "PlacementError", "rendezvous"]

#: The header of a 421 answer listing the addresses of the replicas that hold the model (comma
#: separated), for clients that route by model (the SDK follows it once).
MISDIRECTED_HEADER = "X-Model-Replicas"


def _score(group: str, model: str) -> int:
    # 64 bits of BLAKE2b: the same on every machine and Python (hash() is salted per process)
    digest = hashlib.blake2b(f"{group}\x00{model}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous(model: str, groups: Sequence[str], copies: int) -> list[str]:
    """The ``copies`` groups of ``groups`` with the highest rendezvous score for ``model``.

    Highest random weight hashing (Thaler & Ravishankar 1998): each (group, model) pair gets a
    pseudo-random score and a model goes to its top-scoring groups, so adding a group moves only the
    models that now rank it among their first ``copies``, and removing one moves only its models.

    Parameters
    ----------
    model : str
        Model name.
    groups : sequence of str
        Group names (their order does not matter).
    copies : int
        How many groups hold the model (at most ``len(groups)``).

    Returns
    -------
    list of str
        The chosen groups, highest score first.

    Examples
    --------
    >>> rendezvous("news", ["a", "b", "c"], 2) == rendezvous("news", ["c", "b", "a"], 2)
    True
    >>> len(rendezvous("news", ["a", "b", "c"], 2))
    2
    """
    return sorted(groups, key=lambda g: (-_score(g, model), g))[:copies]


class PlacementError(Exception):
    """A placement that cannot be read or changed now (no placement configured, a move whose new
    groups have no live replica or did not catch up): 409, the placement as it was."""


class MisdirectedError(Exception):
    """A request for a model this replica's group does not hold: 421 Misdirected Request.

    Parameters
    ----------
    model : str
        The model asked for.
    groups : mapping
        The groups that hold it -> their replicas' addresses.
    group : str
        This replica's group.
    """

    def __init__(self, model: str, groups: Mapping[str, Sequence[str]], group: str) -> None:
        self.model = model
        self.groups = {g: list(urls) for g, urls in groups.items()}
        self.group = group
        where = "; ".join(f"group {g}: {', '.join(urls)}" for g, urls in self.groups.items())
        super().__init__(
            f"model {model!r} is not held by this replica (group {group}); send its requests to {where}"
        )

    @property
    def addresses(self) -> list[str]:
        """Every address of every group that holds the model."""
        return [url for urls in self.groups.values() for url in urls]

    def body(self) -> dict[str, Any]:
        """The JSON answer: ``detail``, ``model``, ``groups`` (name -> addresses), ``replica_group``."""
        return {"detail": str(self), "model": self.model, "groups": self.groups, "replica_group": self.group}

    def headers(self) -> dict[str, str]:
        return {MISDIRECTED_HEADER: ", ".join(self.addresses)}


@dataclass(frozen=True, slots=True)
class Placement:
    """The placement settings of one replica and the rule that maps a model to its groups.

    Parameters
    ----------
    group : str
        This replica's group.
    groups : mapping
        Every group's name -> the addresses of its replicas (as clients reach them).
    copies : int
        How many groups hold each model (``len(groups)``: every group holds every model).
    """

    group: str
    groups: Mapping[str, Sequence[str]]
    copies: int

    def fingerprint(self) -> str:
        """What every replica of a deployment must agree on, hashed: every group's name and
        addresses, and ``copies`` (not this replica's own group). Replicas report it in their
        heartbeats; two that differ place models differently (``GET /replicas`` says so)."""
        doc = {"groups": {g: list(self.groups[g]) for g in sorted(self.groups)}, "copies": self.copies}
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    def default(self, model: str) -> list[str]:
        """The groups of ``model`` without an override: its rendezvous choice."""
        return rendezvous(model, list(self.groups), self.copies)

    def serving(self, model: str, override: Mapping[str, Any] | None) -> list[str]:
        """The groups ``model`` is placed on, the ones requests go to: the override's ``groups``
        when the store has one (a moved model), else :meth:`default`. Groups no longer configured
        are left out; if none is left, the default."""
        if override is not None:
            known = [g for g in override.get("groups", []) if g in self.groups]
            if known:
                return known
        return self.default(model)

    def loading(self, model: str, override: Mapping[str, Any] | None) -> list[str]:
        """The groups that load and follow ``model``: those it is placed on, and during a move the
        ones joining it (they catch up before the placement switches to them)."""
        serving = self.serving(model, override)
        joining = [] if override is None else override.get("joining", [])
        return serving + [g for g in joining if g in self.groups and g not in serving]

    def holds(self, model: str, override: Mapping[str, Any] | None) -> bool:
        """Whether this replica's group loads ``model``."""
        return self.group in self.loading(model, override)

    def misdirected(self, model: str, override: Mapping[str, Any] | None) -> MisdirectedError:
        """The 421 for a request about ``model`` reaching this replica."""
        groups = {g: self.groups[g] for g in self.serving(model, override)}
        return MisdirectedError(model, groups, self.group)
