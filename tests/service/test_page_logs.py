"""Logs and evaluation of pages (issue 53): the decision log keeps each slot, its dsjson export is the
CCB form Vowpal Wabbit reads and learns from, and per-slot off-policy evaluation of "our policy"
agrees with its measured reward on the page-layout stream of lab/sim/pages.py.

The log is a model's own: a runtime on the memory store decides 1,000 pages of the tuning stream
with the CCB reduction over squarecb-adf (learning as it goes), each slot rewarded by the stream."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import AsyncIterator

import numpy as np
import pytest

from lab.sim.pages import TUNING, PageStream
from service import decision_log
from service.config import ModelSpec, Settings
from service.decision_log import DsjsonWriter, LogRecord
from service.learners import make_learner
from service.learners.ccb_adf import CCB
from service.ope import LoggedData
from service.pages import page_records
from service.runtime import Runtime
from service.sampling import decision_rng
from service.slot_ope import (
    PageLog,
    _weights,
    evaluate_slots,
    logging_pmfs,
    policy_pmfs,
    slot_ips,
    slot_snips,
    uniform_pmfs,
)
from service.slots import PageFeaturiser
from service.store import DecisionRecord, MemoryStore

pytestmark = pytest.mark.anyio

PAGES = 1000
# An exploring logger (VW's default squarecb scale is 10; the server's 300 is near greedy on 1,000
# pages): IPS needs the log to show, now and then, what the judged policy would show.
SPEC = {
    "actions": "features",
    "hashing_bits": 14,
    "learner": "squarecb-adf",
    "params": {"gamma_scale": 5.0},
    "seed": 3,
    "reward_window_seconds": 600,
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def stream() -> PageStream:
    return TUNING.stream(0, PAGES)


@pytest.fixture
async def logged(stream: PageStream) -> AsyncIterator[tuple[Runtime, list[LogRecord]]]:
    """A runtime whose model decided and learned the stream's pages; its exported records."""
    rt = Runtime(MemoryStore(), Settings(store="memory"))
    await rt.start()
    try:
        await rt.create_model("shop", ModelSpec.model_validate(SPEC))
        m, start = rt.models["shop"], rt.clock()
        for t in range(stream.rounds):
            page = m.featurise_page(stream.context(t), stream.actions(t), stream.slots())
            d = m.decide_page(page, f"p{t}")
            now = start + t / 1000
            base = DecisionRecord(f"p{t}", "shop", np.zeros(0), {}, m.position, now, now + 600.0, True)
            await rt.store.put_page(page_records(base, page, m.pack_page(page), d))
            for s, reward in enumerate(stream.rewards(t, d.labels)):
                await rt.store.claim_slot(f"p{t}", s, reward, now)
            if t % 25 == 24:
                await rt.catch_up(m)
        await rt.catch_up(m)
        records = [r async for page in await rt.decision_log("shop") for r in page]
        yield rt, records
    finally:
        await rt.stop()


async def test_the_decision_log_keeps_each_slot_of_each_page(
    logged: tuple[Runtime, list[LogRecord]], stream: PageStream
) -> None:
    _, records = logged
    assert len(records) == 3 * PAGES
    for rec in records[:30]:
        assert rec.page is not None and rec.actions is not None
        t, s = int(rec.page["id"][1:]), rec.page["slot"]
        assert rec.page["slot_id"] == stream.slots()[s]["id"] and rec.page["slots"] == 3
        assert [a["id"] for a in rec.actions] == [a["id"] for a in stream.actions(t)]
        assert rec.probs[rec.label_index] > 0 and abs(sum(rec.probs) - 1.0) < 1e-12
        assert rec.reward is not None and rec.outcome in ("click", "no_click")
        assert LogRecord.from_json(rec.to_json()) == rec
    # a page's slots show distinct items; each slot's distribution is 0 on the earlier slots' items
    for i in range(0, 30, 3):
        page = records[i : i + 3]
        assert len({r.label_index for r in page}) == 3
        assert all(page[s].probs[page[t].label_index] == 0.0 for s in range(3) for t in range(s))
    # single-decision evaluation leaves pages to service.slot_ope
    with pytest.raises(ValueError, match="no logged decision"):
        LoggedData.from_records(json.loads(r.to_json()) for r in records)


async def test_vw_reads_the_ccb_dsjson_export_of_1000_pages_and_learns_from_it(
    logged: tuple[Runtime, list[LogRecord]],
) -> None:
    vw = pytest.importorskip("vowpalwabbit")
    _, records = logged
    writer = DsjsonWriter()
    lines = [line for line in map(writer.line, records) if line is not None]
    assert len(lines) == PAGES
    ws = vw.Workspace("--ccb_explore_adf --dsjson --quiet -q xa -q sa")
    ccb = vw.LabelType.CONDITIONAL_CONTEXTUAL_BANDIT

    def one_pass() -> float:
        before = ws.get_sum_loss()
        for line, page in zip(lines, (records[i : i + 3] for i in range(0, len(records), 3)), strict=True):
            examples = ws.parse(line)
            assert len(examples) == 1 + len(page[0].actions or []) + 3
            slots = [e.get_label(ccb) for e in examples[-3:]]
            for label, rec in zip(slots, page, strict=True):  # each slot's item, cost and probability
                top = label.outcome.action_probs[0]
                assert label.type == 2 and top.action == rec.label_index
                assert label.outcome.cost == -float(rec.reward or 0)
                assert top.score == pytest.approx(rec.probs[rec.label_index], rel=1e-6)
            ws.learn(examples)
            ws.finish_example(examples)
        return ws.get_sum_loss() - before

    first, second = one_pass(), one_pass()
    assert second < first


async def test_per_slot_ope_of_our_policy_agrees_with_its_measured_reward(
    logged: tuple[Runtime, list[LogRecord]], stream: PageStream
) -> None:
    rt, records = logged
    log = PageLog.from_records(json.loads(r.to_json()) for r in records)
    assert (log.n, log.n_slots) == (PAGES, 3)
    # the learning model's own log: every weight 1, the estimate is the log's measured reward per slot
    own = slot_ips(log, logging_pmfs(log))
    assert [e.value for e in own] == pytest.approx(log.rewards.mean(axis=0).tolist(), abs=1e-12)
    assert all(e.ess == pytest.approx(PAGES) and e.low <= e.value <= e.high for e in own)

    # "our policy": the model as it learned those pages, frozen, logs 1,000 more pages of the stream
    frozen = copy.deepcopy(rt.models["shop"].learner)
    ccb, featurise = CCB(frozen), rt.models["shop"].featurise_page
    store, spec = MemoryStore(), ModelSpec.model_validate(SPEC)
    await store.create_model("frozen", spec.model_dump(mode="json"))
    more = TUNING.stream(0, 2 * PAGES)
    for t in range(PAGES, 2 * PAGES):
        page = featurise(more.context(t), more.actions(t), more.slots())
        d = ccb.decide(page, decision_rng(f"f{t}"))
        base = DecisionRecord(f"f{t}", "frozen", np.zeros(0), {}, 0, float(t), t + 600.0, True)
        await store.put_page(page_records(base, page, rt.models["shop"].pack_page(page), d))
        for s, reward in enumerate(more.rewards(t, d.labels)):
            await store.claim_slot(f"f{t}", s, reward, float(t))
    exported = [
        json.loads(r.to_json()) async for page in decision_log.pages(store, "frozen", spec) for r in page
    ]
    frozen_log = PageLog.from_records(exported)
    # the policy's slot distributions rebuilt from the log are the logged ones: weights exactly 1
    pmfs = policy_pmfs(frozen_log, frozen)
    assert all(np.array_equal(pmfs[i][s], frozen_log.probs[i][s]) for i in range(PAGES) for s in range(3))
    ips, sn = slot_ips(frozen_log, pmfs), slot_snips(frozen_log, pmfs)
    # its measured reward: run on 2,000 fresh pages, each slot's expected reward its click probability
    fresh = TUNING.stream(0, 4000)  # the same world (stream 0), rounds past those logged
    rng = np.random.default_rng(9)
    measured = np.mean(
        [
            fresh.prob(t)[
                ccb.decide(featurise(fresh.context(t), fresh.actions(t), fresh.slots()), rng).labels,
                [0, 1, 2],
            ]
            for t in range(fresh.rounds)
        ],
        axis=0,
    )
    for s in range(3):
        assert ips[s].ess == pytest.approx(PAGES) and sn[s].ess == pytest.approx(PAGES)
        assert ips[s].low <= measured[s] <= ips[s].high, (s, ips[s], measured[s])
        assert sn[s].low <= measured[s] <= sn[s].high, (s, sn[s], measured[s])
    report = evaluate_slots(
        frozen_log, {"ours": lambda log: policy_pmfs(log, frozen), "uniform": uniform_pmfs}
    )
    assert report["ours"]["slots"] == ["hero", "middle", "footer"]
    assert report["ours"]["page_ips"] == pytest.approx(sum(e.value for e in ips))
    assert all(e["ess"] < PAGES for e in report["uniform"]["ips"])  # another policy: fewer effective pages


def test_the_prefix_weights_are_unbiased_by_exact_enumeration() -> None:
    """Every ordered choice of a three-slot page over four candidates, with its exact probability under
    a logging policy that learned a little (the CCB reduction's conditional distributions): the
    expected per-slot IPS term ``w_s r_s`` of a target (uniform, and another learner) is its value."""
    f = PageFeaturiser(8, 100, 10)
    page = f(
        {"user": "a"},
        [{"id": i, "features": {"kind": i, "p": k + 1.0}} for k, i in enumerate("wxyz")],
        [{"id": p, "features": {"position": p}} for p in ("hero", "tile", "footer")],
    )
    logger, other = CCB(make_learner("squarecb-adf", 256, 1)), make_learner("cova-adf", 256, 1)
    rng = np.random.default_rng(1)
    for _ in range(30):  # both learn something, so no distribution is uniform
        d = logger.decide(page, rng)
        logger.learn(page, d, [float(a == 2) for a in d.labels])
        CCB(other).learn(page, CCB(other).decide(page, rng), [1.0, 0.0, 1.0])
    rewards = np.arange(12.0).reshape(4, 3) / 12  # slot s showing a: reward R[a, s]
    paths = [p for p in itertools.permutations(range(4), 3)]
    probs, chance = [], []
    for path in paths:
        taken, row, p_path = np.zeros(4, dtype=bool), [], 1.0
        for s, a in enumerate(path):
            pmf = logger.decide_slot(page, s, taken, np.random.default_rng(0)).probs
            row.append(pmf)
            p_path *= pmf[a]
            taken[a] = True
        probs.append(row)
        chance.append(p_path)
    log = PageLog(
        [page] * len(paths),
        [f"e{i}" for i in range(len(paths))],
        np.asarray(paths),
        probs,
        rewards[np.asarray(paths), np.arange(3)],
        [[~np.isin(np.arange(4), p[:s]) for s in range(3)] for p in paths],
    )
    assert sum(chance) == pytest.approx(1.0)
    for target in (uniform_pmfs(log), policy_pmfs(log, other)):
        w = _weights(log, target)
        truth = np.zeros(3)  # the target's own expected reward per slot, over its own paths
        for i, path in enumerate(paths):
            truth += np.prod([target[i][s][a] for s, a in enumerate(path)]) * log.rewards[i]
        estimate = (np.asarray(chance)[:, None] * w * log.rewards).sum(axis=0)
        assert estimate == pytest.approx(truth, rel=1e-12)
