"""What only the SQLite store promises: everything survives closing (or killing) and reopening the file.

The shared contract runs against it in test_contract.py (conftest.STORES["sqlite"]).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from service.config import Settings
from service.learners import Decision
from service.serial import encode
from service.store import (
    SQLITE_FILE,
    Activity,
    Checkpoint,
    ClaimOutcome,
    ClaimStatus,
    DecisionExistsError,
    DecisionRecord,
    Event,
    MemoryStore,
    SQLiteStore,
    StoreUnavailableError,
    UnknownModelError,
    open_store,
)
from service.store.codec import encode_decision, encode_x
from service.store.redis import RedisStore
from service.store.sqlite import SCHEMA_VERSION, DataDirInUseError

pytestmark = pytest.mark.anyio

CONFIG = {"learner": "banditron", "n_features": 3, "n_labels": 2, "params": {"gamma": 0.1}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def record(decision_id: str, created: float = 0.0, window: float = 10.0, model: str = "m") -> DecisionRecord:
    x = np.array([0.1, -2.5, 1e-300])
    d = Decision(np.array([0.95, 0.05]), 1, {"greedy": 0})
    return DecisionRecord(decision_id, model, x, d.to_state(), 7, created, created + window)


async def test_reopening_the_file_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "data" / "cb.sqlite3"
    s = SQLiteStore(path, claim_ttl=100.0)
    await s.create_model("m", CONFIG)
    await s.create_model("other", {**CONFIG, "seed": 3})
    for i, name in enumerate("abcde"):
        await s.put_decision(record(name, created=float(i), window=10.0))
    await s.claim_and_append("a", True, now=1.0)  # position 1
    await s.claim_and_append("b", False, now=2.0)  # position 2
    assert await s.append("m", Event(0, "import", at=2.5, state=b"\x00state")) == 3
    [expired] = await s.expire_due("m", now=12.0, default_reward="no_click")  # "c" (due at 12.0)
    assert (expired.decision_id, expired.position) == ("c", 4)
    await s.put_checkpoint("m", Checkpoint(2, b"cp-two"))
    await s.trim_log("m", 2)
    counts = await s.counts("m")
    await s.close()

    s = SQLiteStore(path, claim_ttl=100.0)
    try:
        assert await s.list_models() == {"m": CONFIG, "other": {**CONFIG, "seed": 3}}
        assert await s.counts("m") == counts
        c = await s.counts("m")
        assert (c.decisions, c.clicks, c.no_clicks, c.expired, c.pending) == (5, 1, 1, 1, 2)
        assert await s.log_position("m") == 4
        cp = await s.get_checkpoint("m")
        assert cp is not None and (cp.position, cp.state) == (2, b"cp-two")
        log = await s.read_log("m", after=0)  # trimmed up to 2
        assert [(e.position, e.kind, e.decision_id, e.reward, e.outcome) for e in log] == [
            (3, "import", "", None, None),
            (4, "learn", "c", False, "expired"),
        ]
        assert log[0].state == b"\x00state" and log[0].at == 2.5
        assert log[1].x is not None and log[1].x.tobytes() == record("c").x.tobytes()
        assert log[1].decision is not None and encode(log[1].decision) == encode(record("c").decision)
        # Pending decisions kept their records and their windows: "d" (due 13.0), "e" (due 14.0).
        got = await s.get_decision("d")
        assert got is not None and (got.created_at, got.expires_at, got.model_version) == (3.0, 13.0, 7)
        assert got.x.tobytes() == record("d").x.tobytes()
        out = await s.claim_and_append("d", True, now=12.5)
        assert out.status is ClaimStatus.ACCEPTED and out.claim is not None and out.claim.position == 5
        assert [c.decision_id for c in await s.expire_due("m", now=14.0, default_reward="no_click")] == ["e"]
        # Claims: duplicates still see the first outcome, and the forgetting time was kept.
        dup = await s.claim_and_append("a", False, now=50.0)
        assert dup.status is ClaimStatus.DUPLICATE and dup.claim is not None
        assert (dup.claim.outcome, dup.claim.position, dup.claim.at) == ("click", 1, 1.0)
        late = await s.claim_and_append("c", True, now=50.0)
        assert late.status is ClaimStatus.EXPIRED and late.claim is not None and late.claim.position == 4
        assert (await s.claim_and_append("a", False, now=101.0)).status is ClaimStatus.UNKNOWN
        assert await s.log_position("other") == 0 and (await s.counts("other")).decisions == 0
    finally:
        await s.close()


async def test_a_deleted_model_stays_deleted_and_a_new_one_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "cb.sqlite3"
    s = SQLiteStore(path)
    await s.create_model("m", CONFIG)
    await s.put_decision(record("a"))
    await s.claim_and_append("a", True, now=1.0)
    await s.put_checkpoint("m", Checkpoint(1, b"one"))
    await s.delete_model("m")
    await s.create_model("m", {**CONFIG, "seed": 9})
    await s.close()
    s = SQLiteStore(path)
    try:
        assert await s.get_model("m") == {**CONFIG, "seed": 9}
        assert await s.log_position("m") == 0 and await s.read_log("m", after=0) == []
        assert await s.get_checkpoint("m") is None
        assert (await s.counts("m")).decisions == 0
    finally:
        await s.close()


async def test_building_the_store_writes_nothing_until_used(tmp_path: Path) -> None:
    path = tmp_path / "not" / "yet" / SQLITE_FILE
    s = SQLiteStore(path)
    assert not path.parent.exists()
    await s.ping()
    assert path.exists()
    await s.close()


async def test_a_second_process_on_the_same_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE
    first = SQLiteStore(path)
    await first.create_model("m", CONFIG)
    code = textwrap.dedent(
        f"""
        import asyncio, sys
        from service.store.sqlite import SCHEMA_VERSION, DataDirInUseError, SQLiteStore
        try:
            asyncio.run(SQLiteStore({str(path)!r}, lock_timeout=0.2).list_models())
        except DataDirInUseError as exc:
            print("refused:", exc)
            sys.exit(3)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr
    assert "in use by another process" in out.stdout
    # and in this process too, through another connection
    with pytest.raises(DataDirInUseError):
        await SQLiteStore(path, lock_timeout=0.1).ping()
    await first.close()
    again = SQLiteStore(path)
    assert await again.list_models() == {"m": CONFIG}
    await again.close()


_WRITER = """
import asyncio, sys
import numpy as np
from service.learners import Decision
from service.store import DecisionRecord, Event
from service.store.sqlite import SQLiteStore

async def main(path):
    s = SQLiteStore(path, claim_ttl=1e12, synchronous="normal")
    await s.create_model("m", {"learner": "banditron"})
    d = Decision(np.array([0.5, 0.5]), 0, {}).to_state()
    i = 0
    while True:  # until SIGKILL
        for j in range(i, i + 4):
            await s.put_decision(DecisionRecord(f"d{j}", "m", np.full(50, j, float), d, 0, j, j + 1e9))
        await s.claim_and_append(f"d{i}", i % 3 == 0, now=float(i))
        await s.claim_and_append(f"d{i + 1}", False, now=float(i))
        await s.expire_due("m", now=float(i + 2) + 1e9, default_reward="no_click")  # expires d{i+2}
        if i % 40 == 0:
            await s.append("m", Event(0, "reset", at=1.0))
        if i == 0:
            print("running", flush=True)
        i += 4

asyncio.run(main(sys.argv[1]))
"""


async def test_kill_9_mid_write_leaves_a_consistent_file(tmp_path: Path) -> None:
    """SIGKILL a process writing as fast as it can; the file must hold whole transactions only."""
    path = tmp_path / SQLITE_FILE
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "running", proc.stderr
        time.sleep(1.0)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    db = sqlite3.connect(path)  # raw check of every invariant that spans rows of several tables
    try:
        (last, decisions, clicks, no_clicks, expired, pending) = db.execute(
            "SELECT last, decisions, clicks, no_clicks, expired, pending FROM models WHERE name = 'm'"
        ).fetchone()
        assert decisions > 20, "the writer did not get going"
        claims = dict(db.execute("SELECT outcome, count(*) FROM claims GROUP BY outcome").fetchall())
        assert (claims.get("click", 0), claims.get("no_click", 0), claims.get("expired", 0)) == (
            clicks,
            no_clicks,
            expired,
        )
        assert db.execute("SELECT count(*) FROM decisions").fetchone()[0] == pending
        assert decisions == pending + clicks + no_clicks + expired
        positions = [p for (p,) in db.execute("SELECT position FROM events ORDER BY position")]
        assert positions == list(range(1, last + 1))  # contiguous, ends at `last`
        # every learn event has its claim at that position, and vice versa
        learn = set(db.execute("SELECT decision_id, position FROM events WHERE kind = 'learn'").fetchall())
        claimed = set(db.execute("SELECT id, position FROM claims").fetchall())
        assert learn == claimed
        assert not set(db.execute("SELECT id FROM decisions").fetchall()) & {(d,) for d, _ in claimed}
        blob_references_are_exact(db)
    finally:
        db.close()
    s = SQLiteStore(path)  # and the store itself reopens it
    assert await s.log_position("m") == last
    await s.close()


def test_synchronous_is_checked() -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore("x.sqlite3", synchronous="off")  # type: ignore[arg-type]


def test_open_store_follows_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REDIS_URL", "CLICKBOOST_REDIS_URL", "CLICKBOOST_STORE", "CLICKBOOST_SQLITE_SYNCHRONOUS"):
        monkeypatch.delenv(name, raising=False)
    s = open_store(Settings(data_dir=tmp_path / "d", sqlite_synchronous="normal"))
    assert isinstance(s, SQLiteStore)
    assert (s.path, s.synchronous) == (tmp_path / "d" / SQLITE_FILE, "normal")
    assert isinstance(open_store(Settings(store="memory", data_dir=tmp_path)), MemoryStore)
    redis = open_store(Settings(redis_url="redis://127.0.0.1:1/0", data_dir=tmp_path))
    assert isinstance(redis, RedisStore)
    assert not (tmp_path / "d").exists()  # nothing is written before the store is used


async def test_the_sweep_deletes_forgotten_claims(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / SQLITE_FILE, claim_ttl=10.0)
    await s.create_model("m", CONFIG)
    for name in "abc":
        await s.put_decision(record(name, window=100.0))
        await s.claim_and_append(name, True, now=1.0)  # forget_at = 11.0
    db = s._conn()
    assert db.execute("SELECT count(*) FROM claims").fetchone()[0] == 3
    assert await s.expire_due("m", now=10.9, default_reward="no_click") == []
    assert db.execute("SELECT count(*) FROM claims").fetchone()[0] == 3
    assert await s.expire_due("m", now=11.0, default_reward="no_click") == []
    assert db.execute("SELECT count(*) FROM claims").fetchone()[0] == 0
    await s.close()


def blob_references_are_exact(db: sqlite3.Connection) -> None:
    """Every blob is referenced by at most one pending record or learn event, and by its decision-log
    row while that is kept; no blob is left without a reference, and every reference resolves."""
    refs = [b for (b,) in db.execute("SELECT blob FROM decisions UNION ALL SELECT blob FROM events")]
    refs = [b for b in refs if b is not None]
    assert len(refs) == len(set(refs))
    logged = {b for (b,) in db.execute("SELECT blob FROM decision_log")}
    assert set(refs) | logged == {b for (b,) in db.execute("SELECT id FROM blobs")}
    assert logged == {b for (b,) in db.execute("SELECT id FROM blobs WHERE logged IS NOT NULL")}
    counted = db.execute("SELECT coalesce(sum(logged), 0) FROM models").fetchone()[0]
    assert counted == len(logged)


async def test_housekeeping_runs_in_steps_and_leaves_no_orphan_blob(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / SQLITE_FILE, claim_ttl=50.0)
    s._EXPIRE_STEP, s._TRIM_STEP, s._FORGET_STEP = 3, 4, 2  # type: ignore[misc]
    await s.create_model("m", CONFIG)
    await s.create_model("d", CONFIG)
    for i in range(10):
        await s.put_decision(record(f"m{i}", created=float(i), window=10.0))
        await s.put_decision(record(f"d{i}", created=float(i), window=10.0, model="d"))
    for i in range(5):
        assert (
            await s.claim_and_append(f"m{i}", i % 2 == 0, now=float(i) + 0.5)
        ).status is ClaimStatus.ACCEPTED
    assert (await s.claim_and_append("m0", True, now=60.0)).status is ClaimStatus.UNKNOWN  # forgotten
    # The sweep claims the 5 due decisions of "m" in steps of 3 while feedback runs in between.
    sweep, late = await asyncio.gather(
        s.expire_due("m", now=60.0, default_reward="no_click"),
        s.claim_and_append("m9", True, now=18.0),  # runs between two steps of the sweep
    )
    assert late.status is ClaimStatus.ACCEPTED and late.claim is not None and late.claim.position == 6
    assert [c.decision_id for c in sweep] == ["m5", "m6", "m7", "m8"]
    assert [c.position for c in sweep] == [7, 8, 9, 10]
    db = s._conn()
    assert db.execute("SELECT count(*) FROM claims").fetchone()[0] == 5  # the 5 early claims forgotten
    dropped = await s.expire_due("d", now=100.0, default_reward="drop")
    assert [(c.decision_id, c.position) for c in dropped] == [(f"d{i}", None) for i in range(10)]
    blob_references_are_exact(db)
    await s.put_checkpoint("m", Checkpoint(9, b"nine"))
    await s.trim_log("m", 9)  # 3 steps of 4, 4, 1 events
    assert [e.position for e in await s.read_log("m", after=0)] == [10]
    blob_references_are_exact(db)
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 1
    c = await s.counts("m")
    assert (c.decisions, c.clicks, c.no_clicks, c.expired, c.pending) == (10, 4, 2, 4, 0)
    await s.delete_model("m")
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
    await s.close()


async def test_the_decision_log_shares_the_records_bytes_and_frees_them_with_the_last_reference(
    tmp_path: Path,
) -> None:
    """A logged decision's bytes are written once: its pending record, learn event and decision-log
    row refer to the same blob, which goes with whichever reference goes last, in any order."""
    s = SQLiteStore(tmp_path / SQLITE_FILE, claim_ttl=50.0)
    s._TRIM_STEP = 3  # type: ignore[misc]
    await s.create_model("m", CONFIG)
    for i in range(12):
        await s.put_decision(replace(record(f"d{i}", created=float(i), window=10.0), logged=i % 4 != 3))
    db = s._conn()
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 12
    blob_references_are_exact(db)
    for i in range(6):  # learn events 1..6
        await s.claim_and_append(f"d{i}", i % 2 == 0, now=float(i) + 0.5)
    await s.expire_due("m", now=17.5, default_reward="drop")  # d6 and d7 (not logged): dropped
    await s.expire_due("m", now=100.0, default_reward="no_click")  # d8..d11: events 7..10
    blob_references_are_exact(db)
    assert await s.trim_decision_log("m", older_than=2.0, keep=None) == 2  # d0, d1: events kept
    blob_references_are_exact(db)
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 11  # all but d7
    await s.put_checkpoint("m", Checkpoint(8, b"eight"))
    await s.trim_log("m", 8)  # events of d0..d5, d8, d9: the blobs of d0, d1, d3 go, the others are logged
    blob_references_are_exact(db)
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 8
    assert await s.trim_decision_log("m", older_than=None, keep=2) == 5  # in steps of 3 and 2
    blob_references_are_exact(db)
    assert [e.decision_id for e in (await s.read_decision_log("m"))[0]] == ["d9", "d10"]
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 3  # d9, d10, and d11's event
    await s.delete_model("m")
    assert db.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
    await s.close()


# What schema 6 added (deferred decisions): (table, column).
SCHEMA_6 = [
    ("models", "deferred"),
    ("models", "activated"),
    ("models", "dropped_unactivated"),
    ("decisions", "deferred"),
    ("decisions", "activated_at"),
    ("decisions", "held_reward"),
    ("decisions", "held_outcome"),
    ("decisions", "held_at"),
    ("claims", "deferred"),
    ("claims", "activated"),
    ("decision_log", "deferred"),
    ("decision_log", "activated_at"),
]


def downgrade(path: Path, version: int, script: str = "") -> None:
    """Put the file at ``path`` back to schema ``version``, as its files hold it: this undoes schema 6
    and, below 5, the graded counters of ``models``; ``script`` undoes the rest after ``version``."""
    undo = "".join(f"ALTER TABLE {table} DROP COLUMN {column}; " for table, column in SCHEMA_6)
    if version < 5:
        undo += "ALTER TABLE models DROP COLUMN graded; ALTER TABLE models DROP COLUMN graded_sum; "
    db = sqlite3.connect(path)
    db.executescript(f"{undo}{script}PRAGMA user_version = {version};")
    db.close()


async def test_a_schema_2_file_gets_an_empty_decision_log(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE
    s = SQLiteStore(path)
    await s.create_model("m", CONFIG)
    await s.put_decision(record("a"))
    await s.close()
    downgrade(
        path,
        2,
        "DROP TABLE decision_log; DROP TABLE activity; ALTER TABLE models DROP COLUMN logged; "
        "ALTER TABLE blobs DROP COLUMN logged; ",
    )
    s = SQLiteStore(path)
    try:
        assert s._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert (await s.read_decision_log("m")) == ([], None)
        await s.put_decision(replace(record("b", created=1.0), logged=True))
        assert (await s.claim_and_append("a", True, now=2.0)).status is ClaimStatus.ACCEPTED
        assert [e.decision_id for e in (await s.read_decision_log("m"))[0]] == ["b"]
        blob_references_are_exact(s._conn())
    finally:
        await s.close()


async def test_a_schema_3_file_gets_the_dashboard_activity(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE
    s = SQLiteStore(path)
    await s.create_model("m", CONFIG)
    await s.put_decision(record("a"))
    await s.close()
    downgrade(path, 3, "DROP TABLE activity; ")
    s = SQLiteStore(path)
    try:
        assert s._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        assert await s.read_activity("m", 0) == {}
        await s.add_activity("m", {7: Activity(decisions=2, exploration=0.5)})
        assert await s.read_activity("m", 0) == {7: Activity(decisions=2, exploration=0.5)}
        assert (await s.counts("m")).pending == 1  # what the file held is intact
    finally:
        await s.close()
    s = SQLiteStore(path)  # and kept across a restart
    try:
        assert await s.read_activity("m", 0) == {7: Activity(decisions=2, exploration=0.5)}
    finally:
        await s.close()


async def test_a_schema_4_file_gets_the_graded_counters_and_reads_its_clicks(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE
    s = SQLiteStore(path)
    await s.create_model("m", CONFIG)
    for i in "abc":
        await s.put_decision(record(i))
    await s.claim_and_append("a", True, 1.0)
    await s.claim_and_append("b", False, 1.0)
    await s.close()
    downgrade(
        path, 4, "ALTER TABLE activity DROP COLUMN graded; ALTER TABLE activity DROP COLUMN graded_sum; "
    )
    s = SQLiteStore(path)
    try:
        assert s._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        c = await s.counts("m")
        assert (c.clicks, c.no_clicks, c.graded, c.graded_sum, c.mean_reward) == (1, 1, 0, 0.0, 0.5)
        assert (await s.claim_and_append("c", 0.1 + 0.2, 2.0)).claim.outcome == "reward"  # type: ignore[union-attr]
        assert [e.reward for e in await s.read_log("m", 0)] == [True, False, 0.1 + 0.2]  # kept exactly
        c = await s.counts("m")
        assert (c.graded, c.graded_sum, c.reward_sum) == (1, 0.1 + 0.2, 1 + 0.1 + 0.2)
    finally:
        await s.close()


async def test_a_schema_5_file_gets_deferred_decisions_and_keeps_what_it_held(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE
    s = SQLiteStore(path, claim_ttl=100.0)
    await s.create_model("m", CONFIG)
    await s.put_decision(replace(record("a"), logged=True))
    await s.put_decision(replace(record("b"), logged=True))
    await s.claim_and_append("a", True, 1.0)
    await s.close()
    downgrade(path, 5)
    s = SQLiteStore(path, claim_ttl=100.0)
    try:
        assert s._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
        c = await s.counts("m")
        assert (c.decisions, c.clicks, c.pending, c.deferred, c.activated, c.dropped_unactivated) == (
            2, 1, 1, 0, 0, 0,
        )  # fmt: skip
        assert (await s.claim_and_append("a", False, 2.0)).status is ClaimStatus.DUPLICATE
        assert (await s.activate("a", 2.0)).deferred is False  # a claim from before: not deferred
        assert (await s.activate("b", 2.0)).deferred is False
        await s.put_decision(replace(record("c", created=2.0), logged=True, deferred=True))
        assert (await s.claim_and_append("c", True, 3.0)).status is ClaimStatus.HELD
        assert (await s.activate("c", 4.0)).claim.position == 2  # type: ignore[union-attr]
        log = (await s.read_decision_log("m"))[0]
        assert [(e.decision_id, e.outcome, e.deferred, e.activated_at) for e in log] == [
            ("a", "click", False, None),
            ("b", None, False, None),
            ("c", "click", True, 4.0),
        ]
        blob_references_are_exact(s._conn())
    finally:
        await s.close()


async def test_closing_stops_a_housekeeping_step_loop(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / SQLITE_FILE)
    s._TRIM_STEP = 1  # type: ignore[misc]
    await s.create_model("m", CONFIG)
    for i in range(3):
        await s.append("m", Event(0, "reset", at=float(i)))
    trim = asyncio.ensure_future(s.trim_log("m", 3))
    await asyncio.sleep(0)  # the first step ran
    await s.close()
    await trim
    assert s._db is None  # not reopened by the trim
    s = SQLiteStore(tmp_path / SQLITE_FILE)
    assert [e.position for e in await s.read_log("m", after=0)] == [2, 3]
    await s.close()


# Schema 1 (the first release), as its files hold it.
_SCHEMA_1 = """
CREATE TABLE models (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, config TEXT NOT NULL,
    last INTEGER NOT NULL DEFAULT 0, decisions INTEGER NOT NULL DEFAULT 0, clicks INTEGER NOT NULL DEFAULT 0,
    no_clicks INTEGER NOT NULL DEFAULT 0, expired INTEGER NOT NULL DEFAULT 0,
    pending INTEGER NOT NULL DEFAULT 0);
CREATE TABLE decisions (id TEXT PRIMARY KEY, model INTEGER NOT NULL, x BLOB NOT NULL, decision BLOB NOT NULL,
    model_version INTEGER NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL);
CREATE INDEX decisions_due ON decisions (model, expires_at);
CREATE TABLE claims (id TEXT PRIMARY KEY, model TEXT NOT NULL, outcome TEXT NOT NULL, position INTEGER,
    at REAL NOT NULL, forget_at REAL NOT NULL);
CREATE INDEX claims_forget ON claims (forget_at);
CREATE TABLE events (model INTEGER NOT NULL, position INTEGER NOT NULL, kind TEXT NOT NULL, at REAL NOT NULL,
    decision_id TEXT NOT NULL DEFAULT '', x BLOB, decision BLOB, reward INTEGER, outcome TEXT, state BLOB,
    PRIMARY KEY (model, position)) WITHOUT ROWID;
CREATE TABLE checkpoints (model INTEGER PRIMARY KEY, position INTEGER NOT NULL, state BLOB NOT NULL);
PRAGMA user_version = 1;
"""


async def test_a_schema_1_file_is_migrated_with_everything_in_it(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE
    a, b = record("a"), record("b", created=1.0)
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA_1)
    with db:
        db.execute(
            "INSERT INTO models (name, config, last, decisions, clicks, pending) VALUES ('m', ?, 2, 2, 1, 1)",
            (json.dumps(CONFIG),),
        )
        db.execute(  # "a" was clicked at 1.0: its learn event holds a copy of the record
            "INSERT INTO events VALUES (1, 1, 'learn', 1.0, 'a', ?, ?, 1, 'click', NULL)",
            (encode_x(a.x), encode_decision(a.decision)),
        )
        db.execute("INSERT INTO events VALUES (1, 2, 'reset', 1.5, '', NULL, NULL, NULL, NULL, NULL)")
        db.execute("INSERT INTO claims VALUES ('a', 'm', 'click', 1, 1.0, 101.0)")
        db.execute(
            "INSERT INTO decisions VALUES ('b', 1, ?, ?, 7, 1.0, 11.0)",
            (encode_x(b.x), encode_decision(b.decision)),
        )
    db.close()

    s = SQLiteStore(path, claim_ttl=100.0)
    try:
        got = await s.get_decision("b")
        assert (
            got is not None
            and got.x.tobytes() == b.x.tobytes()
            and encode(got.decision) == encode(b.decision)
        )
        assert (got.model_version, got.created_at, got.expires_at) == (7, 1.0, 11.0)
        dup = await s.claim_and_append("a", False, now=2.0)
        assert dup.status is ClaimStatus.DUPLICATE and dup.claim is not None and dup.claim.position == 1
        out = await s.claim_and_append("b", False, now=2.0)
        assert out.status is ClaimStatus.ACCEPTED and out.claim is not None and out.claim.position == 3
        log = await s.read_log("m", after=0)
        assert [(e.position, e.kind, e.decision_id, e.reward) for e in log] == [
            (1, "learn", "a", True),
            (2, "reset", "", None),
            (3, "learn", "b", False),
        ]
        assert log[0].x is not None and log[0].x.tobytes() == a.x.tobytes()
        assert log[2].x is not None and log[2].x.tobytes() == b.x.tobytes()
        c = await s.counts("m")
        assert (c.decisions, c.clicks, c.no_clicks, c.pending) == (2, 1, 1, 0)
        await s.trim_log("m", 3)
        assert await s.read_log("m", after=0) == []
        assert s._conn().execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
        assert s._conn().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        await s.close()


async def test_the_checkpointer_thread_keeps_the_wal_short_under_sustained_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The WAL is copied by the thread and started over, though commits never stop for long."""
    from service.store.sqlite import _Checkpointer

    monkeypatch.setattr(_Checkpointer, "RESTART_FRAMES", 100)
    path = tmp_path / SQLITE_FILE
    s = SQLiteStore(path, synchronous="normal")
    await s.create_model("m", CONFIG)
    x = np.arange(784.0)  # a record of 6 KiB: a pair writes some 13 WAL frames of 4 KiB
    d = Decision(np.array([0.5, 0.5]), 0, {}).to_state()
    for i in range(300):
        await s.put_decision(DecisionRecord(f"d{i}", "m", x, d, 0, 0.0, 1e9))
        assert (await s.claim_and_append(f"d{i}", True, now=1.0)).status is ClaimStatus.ACCEPTED
        if i % 10 == 9:
            await asyncio.sleep(0.01)  # the thread runs meanwhile (it also runs during SQLite calls)
    wal = Path(f"{path}-wal").stat().st_size
    assert wal < 300 * 13 * 4096 / 2, wal  # started over several times (else ~16 MB)
    await s.close()
    assert not Path(f"{path}-wal").exists()  # the last connection merged it on close
    s = SQLiteStore(path)
    assert await s.log_position("m") == 300
    await s.close()


def commits(db: sqlite3.Connection) -> list[str]:
    """The COMMITs the connection runs from now on (SQLite's own statement trace)."""
    seen: list[str] = []
    db.set_trace_callback(lambda sql: seen.append(sql) if sql == "COMMIT" else None)
    return seen


async def test_feedbacks_that_arrive_together_share_one_transaction_and_one_fsync(tmp_path: Path) -> None:
    """Group commit: concurrent feedbacks (a duplicate among them) commit as one transaction and are
    answered after the one fsync of the WAL that covers them, none before; a read-only answer waits
    for an fsync only while a commit it may rest on is not synced."""
    s = SQLiteStore(tmp_path / SQLITE_FILE, claim_ttl=100.0)
    await s.create_model("m", CONFIG)
    db = s._conn()
    seen = commits(db)
    await asyncio.gather(*(s.put_decision(record(f"d{i}")) for i in range(8)))
    assert (len(seen), s.wal_syncs) == (1, 0)  # predicts: one transaction, answered at its commit

    syncs_at_answer: list[int] = []

    async def feedback(decision_id: str, click: bool) -> ClaimOutcome:
        out = await s.claim_and_append(decision_id, click, now=1.0)
        syncs_at_answer.append(s.wal_syncs)
        return out

    outs = await asyncio.gather(*(feedback(f"d{i}", i % 2 == 0) for i in range(8)), feedback("d3", True))
    assert (len(seen), s.wal_syncs) == (2, 1)
    assert syncs_at_answer == [1] * 9  # none answered before the fsync
    assert [o.status for o in outs] == [ClaimStatus.ACCEPTED] * 8 + [ClaimStatus.DUPLICATE]
    assert [o.claim.position for o in outs if o.claim is not None] == [*range(1, 9), 4]
    assert [e.decision_id for e in await s.read_log("m", after=0)] == [f"d{i}" for i in range(8)]

    # Nothing unsynced: a duplicate or an unknown id is answered without an fsync.
    assert (await s.claim_and_append("d3", False, now=2.0)).status is ClaimStatus.DUPLICATE
    assert (await s.claim_and_append("nope", False, now=2.0)).status is ClaimStatus.UNKNOWN
    assert s.wal_syncs == 1
    # An expiry committed without an fsync: the answer that reports it waits for one.
    await s.put_decision(record("e", created=0.0, window=5.0))
    assert [c.decision_id for c in await s.expire_due("m", now=6.0, default_reward="no_click")] == ["e"]
    assert (await s.claim_and_append("e", True, now=6.5)).status is ClaimStatus.EXPIRED
    assert s.wal_syncs == 2
    c = await s.counts("m")
    assert (c.decisions, c.clicks, c.no_clicks, c.expired, c.pending) == (9, 4, 4, 1, 0)
    await s.close()


async def test_an_error_in_a_group_fails_only_its_own_write(tmp_path: Path) -> None:
    """A taken decision id and an unknown model in the middle of a group: those two writes fail with
    their own errors and leave nothing behind; the others in the same transaction are stored."""
    s = SQLiteStore(tmp_path / SQLITE_FILE, claim_ttl=100.0)
    await s.create_model("m", CONFIG)
    await s.put_decision(record("taken"))
    db = s._conn()
    seen = commits(db)
    results = await asyncio.gather(
        s.put_decision(record("a")),
        s.put_decision(record("taken")),
        s.put_decision(record("b", model="nope")),
        s.put_decision(record("c")),
        s.claim_and_append("a", True, now=1.0),
        s.claim_and_append("taken", False, now=1.0),
        return_exceptions=True,
    )
    assert len(seen) == 1
    assert results[0] is None and results[3] is None
    assert isinstance(results[1], DecisionExistsError)
    assert isinstance(results[2], UnknownModelError)
    assert [r.status for r in results[4:]] == [ClaimStatus.ACCEPTED, ClaimStatus.ACCEPTED]
    c = await s.counts("m")
    assert (c.decisions, c.clicks, c.no_clicks, c.pending) == (3, 1, 1, 1)
    assert await s.get_decision("c") is not None
    blob_references_are_exact(db)
    await s.close()


async def test_closing_finishes_the_queued_writes_and_their_fsync(tmp_path: Path) -> None:
    path = tmp_path / SQLITE_FILE
    s = SQLiteStore(path, claim_ttl=100.0)
    await s.create_model("m", CONFIG)
    for i in range(5):
        await s.put_decision(record(f"d{i}"))
    feedbacks = [asyncio.create_task(s.claim_and_append(f"d{i}", True, now=1.0)) for i in range(5)]
    await asyncio.sleep(0)  # queued, not committed yet
    await s.close()
    assert [t.result().status for t in feedbacks] == [ClaimStatus.ACCEPTED] * 5
    assert s.wal_syncs == 1
    s = SQLiteStore(path, claim_ttl=100.0)
    assert await s.log_position("m") == 5
    await s.close()


async def test_synchronous_normal_answers_feedback_at_its_commit(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / SQLITE_FILE, claim_ttl=100.0, synchronous="normal")
    await s.create_model("m", CONFIG)
    await s.put_decision(record("a"))
    assert (await s.claim_and_append("a", True, now=1.0)).status is ClaimStatus.ACCEPTED
    assert s.wal_syncs == 0
    await s.close()


async def test_a_failed_fsync_answers_its_waiters_503(tmp_path: Path) -> None:
    """Nothing is acknowledged unless its fsync succeeded: when fdatasync fails (here for real, on a
    pipe in place of the WAL's descriptor) the feedbacks waiting for it get StoreUnavailableError,
    /readyz's ping writes again, and a retry is answered once an fsync succeeds."""
    s = SQLiteStore(tmp_path / SQLITE_FILE, claim_ttl=100.0)
    await s.create_model("m", CONFIG)
    await s.put_decision(record("a"))
    await s.put_decision(record("b"))
    await s.claim_and_append("a", True, now=1.0)  # opens the WAL's descriptor
    wal_fd = s._wal_fd
    read_end, write_end = os.pipe()
    s._wal_fd = read_end  # fdatasync on a pipe: EINVAL
    try:
        with pytest.raises(StoreUnavailableError, match="fsync"):
            await s.claim_and_append("b", False, now=1.0)
        assert s._unwritable is not None
    finally:
        s._wal_fd = wal_fd
        os.close(read_end)
        os.close(write_end)
    await s.ping()  # a write succeeds: ready again
    assert s._unwritable is None
    retry = await s.claim_and_append("b", False, now=1.5)
    assert (retry.status, retry.claim.position if retry.claim else None) == (ClaimStatus.DUPLICATE, 2)
    assert s.wal_syncs == 2
    await s.close()
