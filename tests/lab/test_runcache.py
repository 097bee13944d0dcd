"""The run store of long reproductions: a directory of files or one committed ``.jsonl`` file."""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from lab.runcache import cached, lookup


def _square(store: Path, i: int) -> int:
    return int(cached(store, f"run {i}", lambda: {"value": i * i})["value"])


@pytest.mark.parametrize("name", ["runs", "runs.jsonl"])
def test_computes_once_then_reads_the_stored_result(tmp_path: Path, name: str) -> None:
    store = tmp_path / name
    calls: list[int] = []

    def compute() -> dict[str, float]:
        calls.append(1)
        return {"accuracy": 0.5}

    assert lookup(store, "a") is None
    first = cached(store, "a", compute)
    again = cached(store, "a", compute)
    assert first == again == {"key": "a", "accuracy": 0.5} and len(calls) == 1
    assert cached(store, "b", lambda: {"accuracy": 0.25})["accuracy"] == 0.25
    assert lookup(store, "b") == {"key": "b", "accuracy": 0.25}
    assert cached(None, "a", compute) == {"accuracy": 0.5} and len(calls) == 2  # no store: always computed


def test_jsonl_store_takes_appends_from_several_processes(tmp_path: Path) -> None:
    store = tmp_path / "runs.jsonl"
    with ProcessPoolExecutor(2) as pool:
        got = list(pool.map(_square, [store] * 40, range(40)))
    assert got == [i * i for i in range(40)]
    lines = store.read_text().splitlines()
    assert len(lines) == 40 and {json.loads(line)["key"] for line in lines} == {f"run {i}" for i in range(40)}
    # this process sees what the workers appended (the file is re-read when it has grown)
    assert all(lookup(store, f"run {i}") == {"key": f"run {i}", "value": i * i} for i in range(40))


def test_jsonl_line_still_being_written_is_not_read(tmp_path: Path) -> None:
    store = tmp_path / "runs.jsonl"
    store.write_text(json.dumps({"key": "a", "v": 1}) + "\n" + '{"key": "b", "v"')
    assert lookup(store, "a") == {"key": "a", "v": 1} and lookup(store, "b") is None
    store.write_text(store.read_text() + ": 2}\n")  # the writer finishes its line
    assert lookup(store, "b") == {"key": "b", "v": 2}
