"""The catalog (service/catalog.py, issue 54): hashing identical to the action featuriser, scores
within the proven rounding bound of the candidates' rows, registration, lookup and a canonical
serialisation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service import catalog
from service.actions import ActionFeaturiser
from service.catalog import Catalog, CatalogError
from service.learners import make_learner
from service.serial import decode

BITS = 10
U = 2.0**-53


def items(n: int, seed: int = 0, unique: bool = True) -> list[dict]:
    """Items with numbers, strings and booleans (and an id feature of their own when ``unique``)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        features = {
            "price": float(np.round(rng.uniform(1, 300), 2)),
            "score": float(rng.normal()),
            "category": f"c{rng.integers(5)}",
            "brand": f"b{rng.integers(7)}",
            "sale": bool(rng.integers(2)),
        }
        if unique:
            features["item"] = f"i{i}"
        out.append({"id": f"i{i}", "features": features})
    return out


def context(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "user": f"u{rng.integers(50)}",
        "age": float(rng.integers(18, 80)),
        "mobile": True,
        "x": float(rng.normal()),
    }


def test_items_hash_as_the_action_featuriser_hashes_candidates() -> None:
    f = ActionFeaturiser(BITS, 100, 100)
    cat = Catalog(BITS, 100)
    its = items(40)
    cat.put_many(its)
    x = f(context(), its)
    y = cat.action_input(f.context(context()), cat.select_all())
    assert y.ids == x.ids
    for a, b in zip(x.rows(), y.rows(), strict=True):
        assert np.array_equal(a, b)  # the same rows, bit for bit


@pytest.mark.parametrize("bits", [6, 12])
@pytest.mark.parametrize("pairs", [0, 16])
def test_scores_equal_the_rows_scores_within_the_proven_bound(bits: int, pairs: int) -> None:
    """catalog_scores against squarecb-adf's costs of the same items sent as candidates: at 2**6
    columns every row has colliding products (the merge the factored sum skips); the difference
    stays within 2 gamma_{n+2} B (catalog_scores' docstring)."""
    f = ActionFeaturiser(bits, 100, 1000)
    cat = Catalog(bits, 100)
    its = items(60, seed=bits)
    cat.put_many(its)
    m = make_learner("squarecb-adf", 1 << bits, 1, {"context_pairs": pairs}, seed=0)
    rng = np.random.default_rng(3)
    m.w_[:] = rng.normal(size=m.w_.size) * 10.0 ** rng.integers(-3, 3, size=m.w_.size)
    slots = cat.select_all()
    for seed in range(5):
        ctx = f.context(context(seed))
        x = f(context(seed), its)
        ref = m.costs(x)
        use_pairs = x.pairs(pairs)
        got = cat.scores(m.w_, ctx, slots, use_pairs)
        # B and n per item: every product w c_i a_j, collisions counted apart
        c_val = [1.0, *ctx.val.tolist()]
        if use_pairs:
            nc = ctx.nnz
            for p in range(nc):
                for q in range(p + 1, nc):
                    c_val.append(ctx.val[p] * ctx.val[q])
        indptr, _, _ = x.rows(True, pairs)
        for a in range(len(its)):
            v = cat.features(int(slots[a]))
            n = len(c_val) * (v.nnz + 1)
            bound_b = sum(abs(c) * abs(av) for c in c_val for av in [1.0, *v.val.tolist()])
            row_w = np.abs(m.w_).max()
            g = (n + 2) * U / (1 - (n + 2) * U)
            assert abs(got[a] - ref[a]) <= 2 * g * bound_b * row_w * (1 + 1e-9), (a, got[a], ref[a])
        if bits == 6 and not use_pairs:  # colliding products were merged in the rows
            full = [len(c_val) * (cat.features(int(s)).nnz + 1) for s in slots]
            assert (np.diff(indptr) < np.array(full)).any()


def test_exact_on_rows_without_rounding() -> None:
    """Integer weights and values: every sum exact, so both orders give the same bits."""
    f = ActionFeaturiser(BITS, 100, 100)
    cat = Catalog(BITS)
    its = [
        {"id": f"i{i}", "features": {"k": f"v{i % 3}", "n": float(i % 4), "item": f"i{i}"}} for i in range(30)
    ]
    cat.put_many(its)
    m = make_learner("squarecb-adf", 1 << BITS, 1, {}, seed=0)
    m.w_[:] = np.random.default_rng(0).integers(-5, 6, size=m.w_.size)
    ctx = {"u": "a", "h": 3.0}
    assert np.array_equal(cat.scores(m.w_, f.context(ctx), cat.select_all()), m.costs(f(ctx, its)))


def test_put_replace_remove_and_version() -> None:
    cat = Catalog(BITS)
    assert cat.put("a", {"k": "x", "p": 1.0}) is False
    assert cat.put("b", {"k": "y"}) is False
    assert cat.put("a", {"k": "z", "p": 2.0, "q": 3.0}) is True  # replaced, keeps its place
    assert cat.version == 3 and len(cat) == 2
    assert [cat.id_of(int(s)) for s in cat.select_all()] == ["a", "b"]
    assert cat.features(int(cat.select(["a"])[0])).nnz == 3
    size = cat.nbytes()
    assert size > cat.array_bytes() > 0
    cat.remove("b")  # its row and a's first one are kept in the history until forgotten
    assert "b" not in cat and cat.version == 4 and cat.entries == 3 and len(cat.history) == 2
    assert cat.history.forget(4) == 2 and cat.nbytes() < size
    with pytest.raises(CatalogError, match="'b' is not in the catalog"):
        cat.remove("b")


def test_lookup_names_unknown_inactive_expired_and_repeated_ids() -> None:
    cat = Catalog(BITS)
    cat.put_many(
        [
            {"id": "a", "features": {"k": "x"}},
            {"id": "off", "features": {"k": "x"}, "active": False},
            {"id": "old", "features": {"k": "x"}, "expires_at": 100.0},
        ]
    )
    assert cat.select(["old", "a"], now=99.0).tolist() == [2, 0]
    for ids, message in (
        (["a", "nope"], "candidates.1: item 'nope' is not in the catalog"),
        (["off"], "candidates.0: item 'off' is inactive"),
        (["a", "a"], "candidates.1: item 'a' is given twice"),
    ):
        with pytest.raises(CatalogError, match=message):
            cat.select(ids)
    with pytest.raises(CatalogError, match=r"candidates\.0: item 'old' expired"):
        cat.select(["old"], now=100.0)
    assert cat.select_all(now=100.0).tolist() == [0]
    assert cat.expire(100.0) == ["old"] and cat.select_all().tolist() == [0]


def test_filters_on_categorical_features() -> None:
    cat = Catalog(BITS)
    cat.put_many(items(50, unique=False))
    ids = [f"i{i}" for i in range(50)]
    feats = {it["id"]: it["features"] for it in items(50, unique=False)}

    def chosen(where: dict) -> list[str]:
        return [cat.id_of(int(s)) for s in cat.select_all(where)]

    assert chosen({"category": "c1"}) == [i for i in ids if feats[i]["category"] == "c1"]
    assert chosen({"category": ["c1", "c2"], "sale": True}) == [
        i for i in ids if feats[i]["category"] in ("c1", "c2") and feats[i]["sale"]
    ]
    assert chosen({"category": "nothing"}) == [] and chosen({"colour": "red"}) == []
    with pytest.raises(CatalogError, match=r"where\.price"):
        cat.select_all({"price": 3.0})  # type: ignore[dict-item]


def test_a_bad_item_leaves_the_catalog_unchanged() -> None:
    cat = Catalog(BITS, max_named=3)
    cat.put("a", {"k": "x"})
    before = cat.to_bytes()
    for bad, message in (
        (
            [{"id": "b", "features": {"k": "y"}}, {"id": "c", "features": {"n": math.inf}}],
            "items.1.features.n",
        ),
        (
            [{"id": "b", "features": {"k": "y"}}, {"id": "b", "features": {"k": "y"}}],
            "items.1.id: 'b' is given twice",
        ),
        ([{"id": "", "features": {}}], "items.0.id"),
        ([{"id": "b", "features": {"a": 1, "b": 2, "c": 3, "d": 4}}], "items.0.features: 4 named features"),
        ([{"id": "b", "features": {}, "expires_at": "soon"}], "items.0.expires_at"),
    ):
        with pytest.raises(CatalogError, match=message):
            cat.put_many(bad)
        assert cat.to_bytes() == before


def test_serialisation_is_canonical_and_compaction_changes_nothing_scored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Replicas that applied the same operations give the same bytes; a catalog loaded from them
    gives them back; holes (and the compactions that reclaim them) change no score and no byte."""
    monkeypatch.setattr(catalog, "SLACK", 4)  # compactions on the way
    compactions = []
    compact = Catalog._compact
    monkeypatch.setattr(Catalog, "_compact", lambda self: (compactions.append(1), compact(self)))
    f = ActionFeaturiser(BITS, 100, 100)
    w = np.random.default_rng(0).normal(size=1 << BITS)
    ctx = f.context(context())

    def history(cat: Catalog) -> Catalog:
        rng = np.random.default_rng(5)
        cat.put_many(items(3000))
        for step in range(3000):  # replace and remove: holes in every pool, compactions on the way
            i = int(rng.integers(3000))
            if step % 3 == 0 and f"i{i}" in cat:
                cat.remove(f"i{i}")
            else:
                cat.put(
                    f"i{i}", {"k": f"v{step % 11}", "n": float(step), "item": f"x{step}"}, active=step % 7 > 0
                )
        return cat

    a, b = history(Catalog(BITS)), history(Catalog(BITS))
    assert len(compactions) >= 2  # one at least in each history
    assert a.to_bytes() == b.to_bytes()
    c = Catalog.from_bytes(a.to_bytes())
    assert c.to_bytes() == a.to_bytes() and c.version == a.version
    sa, sc = a.select_all(), c.select_all()
    assert [a.id_of(int(s)) for s in sa] == [c.id_of(int(s)) for s in sc]
    assert np.array_equal(a.scores(w, ctx, sa), c.scores(w, ctx, sc))
    a._compact()
    assert a.to_bytes() == c.to_bytes()
    assert np.array_equal(a.scores(w, ctx, a.select_all()), c.scores(w, ctx, sc))
    assert a.select_all({"k": "v3"}).size == c.select_all({"k": "v3"}).size > 0


def test_a_catalog_of_other_hashing_bits_is_refused() -> None:
    data = Catalog(BITS).to_bytes()
    cat = Catalog(BITS + 1)
    with pytest.raises(CatalogError, match="hashing bits"):
        cat._load(decode(data))
