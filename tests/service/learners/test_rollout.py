"""Safe rollout's served decisions (service.rollout.served) and evidence (service.rollout.Rollout).

Every bandit learner learns from the served distribution ``p = (1 - eps) onehot(b) + eps pi``:
its importance-weighted estimates, averaged over the served label by exact enumeration, equal
their full-information values; a learner whose memo depends on the drawn label (BanditBoost) gets
the memo of the label served. The evidence's IPS means equal service.ope's on the same decisions,
and its anytime intervals cover the truth on a stream with a known mean.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.learners.base import Decision, learners
from service.ope import LoggedData, ips
from service.rollout import Rollout, served
from service.sampling import DecisionIds, decision_rng
from tests.service.learners.test_contract import BANDIT, KM, D, _enumerate, masks, new

EPS = 0.25


def serve(case_or_learner, x, mode="apprentice", baseline=0, did="id", mask=None, eps=EPS, epoch=0):
    m = new(case_or_learner, k=KM) if isinstance(case_or_learner, str) else case_or_learner
    rng = decision_rng(did)
    own = m.decide(x, rng, mask)
    return m, own, served(m, x, own, mode, baseline, eps, epoch, rng)


@pytest.mark.parametrize("case", BANDIT)
def test_served_distribution_mixes_the_baseline_with_the_learners_and_is_seeded_by_the_id(case: str) -> None:
    rng = np.random.default_rng(0)
    ids = DecisionIds.for_seed(1)
    for mask in masks(7, 20):
        x = rng.random(D)
        b = int(rng.choice(np.flatnonzero(mask)))
        did = ids.new()
        _, own, d = serve(case, x, baseline=b, did=did, mask=mask)
        want = EPS * own.probs
        want[b] += 1 - EPS
        np.testing.assert_allclose(d.probs, want, atol=1e-15)
        assert d.probs.sum() == pytest.approx(1.0) and d.probs[d.label] > 0 and mask[d.label]
        assert d.memo["baseline"] == b and d.memo["rollout"] == "apprentice" and d.memo["rollout_epoch"] == 0
        assert d.memo["policy"].tobytes() == own.probs.tobytes()
        again = serve(case, x, baseline=b, did=did, mask=mask)[2]  # the same id draws the same label
        assert again.label == d.label and again.probs.tobytes() == d.probs.tobytes()
        logging = serve(case, x, mode="logging", baseline=b, did=did, mask=mask)[2]
        assert logging.label == b and logging.probs.tolist() == np.eye(KM)[b].tolist()
        assert logging.memo["policy"].tobytes() == own.probs.tobytes()


def test_banditboost_gets_the_memo_of_the_label_served() -> None:
    """The votes h and score f in BanditBoost's memo are the drawn label's: relabel gives, for every
    label, what decide gives when its own draw lands on that label."""
    m = new("banditboost", k=KM)
    X = np.random.default_rng(3).random((50, D))
    for t in range(50):  # a model that has learned something
        d = m.decide(X[t], decision_rng(f"warm{t}"))
        m.learn(X[t], d, d.label == t % KM)
    x = X[0]
    own = m.decide(x, decision_rng("first"))
    seen = {}
    for i in range(2000):
        d = m.decide(x, decision_rng(f"try{i}"))
        seen.setdefault(d.label, d)
        if len(seen) == KM:
            break
    assert len(seen) == KM
    for label, d in seen.items():
        r = m.relabel(x, own, label)
        assert r.label == label and r.probs is own.probs
        np.testing.assert_allclose(r.memo["h"], d.memo["h"], atol=1e-12)
        assert r.memo["f"] == pytest.approx(d.memo["f"], abs=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_estimates_from_served_decisions_are_unbiased_by_enumeration(seed: int) -> None:
    """Over the served label ~ p, each learner's estimate averages to its full-information value for
    every true label (the contract suite's enumeration, at the apprentice distribution)."""
    from service.learners.booster_costs import loss_estimate

    rng = np.random.default_rng(seed)
    mask = masks(seed, 1)[0]
    x = rng.random(D)
    y = int(rng.choice(np.flatnonzero(mask)))
    b = int(rng.choice(np.flatnonzero(mask)))  # the baseline: right or wrong
    e_y = np.eye(KM)[y]

    # Banditron: E of the update is the Perceptron update towards y
    m = new("banditron", k=KM, params={"gamma": 0.3})
    m.W_ = rng.normal(size=m.W_.shape)
    _, own, d = serve(m, x, baseline=b, did=f"b{seed}", mask=mask)
    perceptron = np.outer(e_y - np.eye(KM)[own.memo["greedy"]], x)
    np.testing.assert_allclose(_enumerate(m, x, d, y, lambda t, _: t.W_ - m.W_), perceptron, atol=1e-12)

    # AdaBandit and BanditBBM: estimator (4) at the served probabilities and the learner's greedy label
    for name in ("adabandit", "banditbbm"):
        m = new(name, k=KM, params={"n_learners": 3, "rho": 0.3})
        _, own, d = serve(m, x, baseline=b, did=f"a{seed}", mask=mask)
        g = d.memo["greedy"]
        q = d.conditional  # the served mix given the learner's greedy label: what estimator (4) takes
        mean = sum(q[a] * loss_estimate(q, a, g, a == y) for a in np.flatnonzero(q))
        np.testing.assert_allclose(mean, 1.0 - e_y, atol=1e-12)

    # AdaBoost.MH: E of the logged weight row is the share-point weights on the eligible entries
    m = new("adaboost-mh", k=KM, params={"epsilon": 0.3, "retrain_every": 10**6})
    _, _, d = serve(m, x, baseline=b, did=f"m{seed}", mask=mask)
    share = np.where(mask, np.where(np.arange(KM) == y, 0.5, 0.5 / (KM - 1)), 0.0)
    np.testing.assert_allclose(_enumerate(m, x, d, y, lambda t, _: t.W_log_[0]), share, atol=1e-12)


def test_every_bandit_learner_learns_from_served_decisions_deterministically() -> None:
    """A served decision survives the store's encoding and every bandit learner learns from it."""
    from service.serial import decode, encode

    for name in sorted({learners.get(new(c).name).name for c in BANDIT}):
        a, b = new(name, k=KM, seed=3), new(name, k=KM, seed=3)
        X = np.random.default_rng(5).random((40, D))
        for t in range(40):
            _, _, d = serve(a, X[t], baseline=t % KM, did=f"{name}{t}")
            d2 = Decision.from_state(decode(encode(d.to_state())))
            a.learn(X[t], d, d.label == (t * 7) % KM)
            b.learn(X[t], d2, d.label == (t * 7) % KM)
        assert encode(a.state()) == encode(b.state())


def _stream(seed: int, n: int, k: int = 4) -> tuple[list[Decision], np.ndarray, np.ndarray]:
    """Served apprentice decisions of a fixed learner distribution with rewards of known means:
    label l pays Bernoulli(q[l])."""
    rng = np.random.default_rng(seed)
    q = np.array([0.3, 0.6, 0.5, 0.2])
    decisions, rewards, pis = [], [], []
    for _ in range(n):
        pi = rng.dirichlet(np.ones(k))
        p = EPS * pi
        p[0] += 1 - EPS
        a = int(rng.choice(k, p=p))
        memo = {"policy": pi, "baseline": 0, "rollout": "apprentice", "rollout_epoch": 0}
        decisions.append(Decision(p, a, memo))
        rewards.append(float(rng.random() < q[a]))
        pis.append(pi)
    return decisions, np.array(rewards), np.array(pis)


def test_evidence_is_ope_ips_on_the_same_decisions_and_its_intervals_cover_the_truth() -> None:
    decisions, rewards, pis = _stream(0, 3000)
    r = Rollout("apprentice", EPS, 0.95)
    for d, reward in zip(decisions, rewards, strict=True):
        r.observe(d, reward)
    report = r.report()
    data = LoggedData(
        [np.zeros(1)] * len(decisions),
        np.array([d.probs for d in decisions]),
        np.array([d.label for d in decisions]),
        rewards,
        1,
    )
    baseline = np.zeros_like(pis)
    baseline[:, 0] = 1.0
    assert report["n"] == 3000
    assert report["learner"]["value"] == pytest.approx(ips(data, pis).value, rel=1e-12)
    assert report["baseline"]["value"] == pytest.approx(ips(data, baseline).value, rel=1e-12)
    diff = report["learner"]["value"] - report["baseline"]["value"]
    assert report["difference"]["value"] == pytest.approx(diff, rel=1e-9)
    q = np.array([0.3, 0.6, 0.5, 0.2])
    truth = {"learner": float((pis @ q).mean()), "baseline": 0.3}
    truth["difference"] = truth["learner"] - truth["baseline"]
    for key, value in truth.items():
        assert report[key]["low"] <= value <= report[key]["high"], (key, report[key], value)
    # anytime-valid, so wider than the fixed-n normal interval of ope.ips, but of its order
    normal = ips(data, pis)
    width = report["learner"]["high"] - report["learner"]["low"]
    assert normal.high - normal.low < width < 3 * (normal.high - normal.low)


def test_intervals_hold_at_every_look_on_most_streams() -> None:
    """Checked after every decision, the difference's interval misses the truth (its average of
    per-decision means) on at most a few of 40 streams: far below what 40 x 3000 looks at a fixed-n
    interval would give."""
    q = np.array([0.3, 0.6, 0.5, 0.2])
    misses = 0
    for seed in range(40):
        decisions, rewards, pis = _stream(100 + seed, 600)
        r = Rollout("apprentice", EPS, 0.95)
        truth = pis @ q - q[0]
        for t, (d, reward) in enumerate(zip(decisions, rewards, strict=True)):
            r.observe(d, reward)
            diff = r.report()["difference"]
            if not diff["low"] <= truth[: t + 1].mean() <= diff["high"]:
                misses += 1
                break
    assert misses <= 4


def test_logging_bounds_the_learner_and_decisions_of_other_epochs_do_not_count() -> None:
    r = Rollout("logging", EPS, 0.95)
    pi = np.array([0.5, 0.25, 0.25])
    logged = Decision(np.array([1.0, 0.0, 0.0]), 0, {"policy": pi, "baseline": 0, "rollout": "logging"})
    logged.memo["rollout_epoch"] = 0
    for _ in range(200):
        r.observe(logged, 1.0)
    report = r.report()
    assert report["learner"]["value"] is None and report["baseline"]["value"] == 1.0
    assert report["learner"]["low"] <= 0.5 and report["learner"]["high"] == 1.0  # 0.5 known, 0.5 unknown
    assert report["difference"]["low"] < -0.4 and report["difference"]["high"] >= 0.0
    r.apply_event(Rollout.event("apprentice", "admin"), 7, 1.0)
    assert (r.mode, r.epoch, r.n, r.changed["position"]) == ("apprentice", 1, 0, 7)
    r.observe(logged, 1.0)  # made in epoch 0
    assert r.n == 0
    # An automatic promotion decided in another epoch does nothing; one of this epoch applies.
    r.apply_event(Rollout.event("online", "auto", epoch=0), 8, 2.0)
    assert (r.mode, r.epoch) == ("apprentice", 1)
    r.apply_event(Rollout.event("online", "auto", epoch=1), 9, 3.0)
    assert (r.mode, r.epoch, r.changed["reason"]) == ("online", 2, "auto")
    copy = Rollout("online", EPS, 0.95)
    copy.load(r.to_state())
    assert copy.to_state()["rollout.sums"].tobytes() == r.sums.tobytes() and copy.changed == r.changed
    assert math.isclose(copy.epsilon, EPS)


@pytest.mark.parametrize("name", ["banditron", "cova", "adaboost-mh"])
def test_a_tied_learner_served_in_apprentice_mode_reports_the_true_probabilities(name: str) -> None:
    """A new model ties every label: the served ``probs`` are the exact distribution of the served
    label over the learner's tie-break and the serving draw (issue 50), whichever way the tie was
    broken; a learner that keeps its mix given the greedy label (``memo["conditional"]``) finds
    there the served mix of that one, and its importance-weighted estimate stays unbiased given the
    tie-break (Banditron: the Perceptron update towards y, by enumeration over the served label)."""
    from tests.service.learners.exact_draws import Replay, assert_honest, exact_draws

    class Twice(Replay):
        """The learner's own sampling draw is 0.5; the serving draw is the grid's."""

        def random(self, size: object = None) -> float:
            self.randoms += 1
            return 0.5 if self.randoms == 1 else self.u

    x, b, y = np.random.default_rng(4).random(D), 1, 3
    m = new(name, k=KM, params={"banditron": {"gamma": 0.3}, "cova": {"epsilon": 0.02}}.get(name))
    found = exact_draws(
        lambda rng: served(m, x, m.decide(x, rng), "apprentice", b, EPS, 0, rng),
        KM,
        replay=lambda script, u: Twice(script, u),
    )
    assert found.paths == KM  # every label tied
    assert_honest(found)
    want = np.full(KM, EPS / KM)
    want[b] += 1 - EPS
    np.testing.assert_allclose(found.reported[0], want, rtol=0, atol=1e-15)
    for tie in range(KM):
        own = m.decide(x, Twice([tie], 0.5))
        d = served(m, x, own, "apprentice", b, EPS, 0, Twice([tie], 0.5))
        if "conditional" not in own.memo:
            assert "conditional" not in d.memo
            continue
        q = EPS * own.conditional
        q[b] += 1 - EPS
        np.testing.assert_array_equal(d.conditional, q)
        if name == "banditron":  # E over the served label ~ q of the update, given the tie-break
            mean = sum(
                q[a] * _update(m, x, Decision(d.probs, a, d.memo), a == y) for a in range(KM) if q[a] > 0
            )
            perceptron = np.outer(np.eye(KM)[y] - np.eye(KM)[tie], x)
            np.testing.assert_allclose(mean, perceptron, atol=1e-12)


def _update(m, x: np.ndarray, d: Decision, click: bool) -> np.ndarray:
    from tests.service.learners.test_contract import roundtrip

    trial = roundtrip(m)
    trial.learn(x, d, click)
    return trial.W_ - m.W_
