"""Model placement's rule and settings (service.placement, service.config): rendezvous hashing,
overrides and moves, the 421's contents, and settings that refuse a bad placement at start-up."""

from __future__ import annotations

import pytest

from service.config import ConfigError, load_settings
from service.placement import MISDIRECTED_HEADER, Placement, rendezvous
from service.store.base import Heartbeat

NAMES = [f"model-{i}" for i in range(2000)]


def test_rendezvous_is_deterministic_and_ignores_the_order_of_the_groups() -> None:
    for name in NAMES[:50]:
        chosen = rendezvous(name, ["a", "b", "c", "d"], 2)
        assert len(chosen) == 2 and len(set(chosen)) == 2
        assert rendezvous(name, ["d", "c", "b", "a"], 2) == chosen
        assert rendezvous(name, ["a", "b", "c", "d"], 4)[:2] == chosen  # the same ranking


def test_models_spread_evenly_and_a_new_group_takes_only_its_share() -> None:
    four, five = ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"]
    before = {n: rendezvous(n, four, 1)[0] for n in NAMES}
    counts = {g: sum(v == g for v in before.values()) for g in four}
    assert all(400 <= c <= 600 for c in counts.values()), counts  # 500 each expected
    after = {n: rendezvous(n, five, 1)[0] for n in NAMES}
    moved = [n for n in NAMES if after[n] != before[n]]
    assert all(after[n] == "e" for n in moved)  # only to the new group
    assert 300 <= len(moved) <= 500, len(moved)  # a fifth expected (400)
    # Two copies: a model keeps at least one of its groups when one is added.
    for n in NAMES[:200]:
        assert set(rendezvous(n, four, 2)) & set(rendezvous(n, five, 2))


def test_an_override_places_a_moved_model_and_a_move_under_way_loads_it_on_both() -> None:
    p = Placement("b", {"a": ["http://a:1"], "b": ["http://b:1", "http://b:2"]}, 1)
    name = next(n for n in NAMES if rendezvous(n, ["a", "b"], 1) == ["a"])
    assert p.serving(name, None) == ["a"] and not p.holds(name, None)
    moving = {"groups": ["a"], "joining": ["b"]}
    assert (
        p.serving(name, moving) == ["a"] and p.loading(name, moving) == ["a", "b"] and p.holds(name, moving)
    )
    assert p.serving(name, {"groups": ["b"]}) == ["b"] and p.holds(name, {"groups": ["b"]})
    assert p.serving(name, {"groups": ["gone"]}) == ["a"]  # a group no longer configured: the default
    err = p.misdirected(name, None)
    assert err.body()["groups"] == {"a": ["http://a:1"]} and err.body()["replica_group"] == "b"
    assert err.headers() == {MISDIRECTED_HEADER: "http://a:1"}
    assert name in str(err) and "http://a:1" in str(err)
    assert p.misdirected(name, {"groups": ["b"]}).addresses == ["http://b:1", "http://b:2"]


GROUPS = '{"a": ["http://10.0.0.1:8000"], "b": ["http://10.0.0.2:8000"]}'


def test_settings_build_the_placement_and_refuse_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "REDIS_URL",
        "CLICKBOOST_REPLICA_GROUP",
        "CLICKBOOST_REPLICA_GROUPS",
        "CLICKBOOST_PLACEMENT_COPIES",
    ):
        monkeypatch.delenv(var, raising=False)
    assert load_settings().placement is None  # not configured: every replica holds every model
    monkeypatch.setenv("CLICKBOOST_REPLICA_GROUPS", GROUPS)
    monkeypatch.setenv("CLICKBOOST_REPLICA_GROUP", "b")
    with pytest.raises(ConfigError, match="REDIS_URL"):
        load_settings()
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
    p = load_settings().placement
    assert p is not None and p.group == "b" and p.copies == 2 and p.groups["a"] == ["http://10.0.0.1:8000"]
    assert load_settings(placement_copies=1).placement.copies == 1  # type: ignore[union-attr]
    for bad, words in [
        ({"replica_group": "c"}, "must be one of"),
        ({"placement_copies": 3}, "more than the 2 groups"),
        ({"placement_copies": 0}, "PLACEMENT_COPIES"),
        ({"replica_groups": {"a": [], "b": ["http://x"]}, "replica_group": "b"}, "has no address"),
        ({"replica_groups": {"a b": ["http://x"]}, "replica_group": "a b"}, "REPLICA_GROUPS"),
    ]:
        with pytest.raises(ConfigError, match=words):
            load_settings(**bad)
    monkeypatch.delenv("CLICKBOOST_REPLICA_GROUPS")
    with pytest.raises(ConfigError, match="need CLICKBOOST_REPLICA_GROUPS"):
        load_settings()


def test_the_fingerprint_is_what_every_replica_must_share() -> None:
    """Each replica's own group and the order the groups are given in do not change it; another
    address, another group or another number of copies does (GET /replicas compares them)."""
    groups = {"a": ["http://a1", "http://a2"], "b": ["http://b1"]}
    base = Placement("a", groups, 1).fingerprint()
    assert Placement("b", dict(reversed(list(groups.items()))), 1).fingerprint() == base
    assert Placement("a", groups, 2).fingerprint() != base
    assert Placement("a", {**groups, "b": ["http://b2"]}, 1).fingerprint() != base
    assert Placement("a", {**groups, "c": ["http://c1"]}, 1).fingerprint() != base
    assert len(base) == 12 and int(base, 16) >= 0


def test_a_heartbeat_of_an_earlier_release_is_left_out_of_the_comparison() -> None:
    """A replica of the release before the fingerprint reports its group and no fingerprint: it
    cannot be compared (a rolling upgrade is no disagreement); one without placement can."""
    doc = {"replica": "r1", "host": "h", "pid": 1, "started_at": 0.0, "models": {}}
    assert not Heartbeat.from_json({**doc, "group": "a"}, 0.0).fingerprinted
    assert Heartbeat.from_json(doc, 0.0).fingerprinted  # no placement at all: None, comparable
    beat = Heartbeat.from_json({**doc, "group": "a", "placement": "0123456789ab"}, 1.5)
    assert beat.fingerprinted and beat.placement == "0123456789ab" and beat.age == 1.5
    assert Heartbeat.from_json(beat.to_json(), 0.0).placement == beat.placement
