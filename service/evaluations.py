"""Off-policy evaluation jobs of a running service (``POST /models/{name}/evaluations``, issue 22).

A job reads a model's decision log over a time range from the store (pages, on the event loop,
awaiting the store like any request), writes it to a temporary JSON-lines file, and evaluates the
policies in a **separate process** (one worker, spawned on first use, at a lower priority: nice
10): the estimators and learner replays are CPU-bound Python and numba, and in a thread they would
hold the interpreter lock the request handlers need. Jobs live in the process that started them
(their results are small, kept for ``KEEP_SECONDS``): ask that replica for them (its id is in the
answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from service.learners.base import ParamError, make_learner
from service.ope import EvaluationError, evaluate, parse_policy, read_log

KEEP_SECONDS = 24 * 3600.0
MAX_POLICIES = 20


@dataclass
class Job:
    """One evaluation: its request, state and results."""

    id: str
    model: str
    policies: list[str]
    since: float | None
    until: float | None
    runs: int
    replica: str
    state: str = "running"  # running | done | failed
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    events: int = 0
    results: dict[str, dict[str, dict[str, Any]]] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


def check_policies(policies: Sequence[str], n_features: int, n_labels: int) -> None:
    """Every policy parses and its learner accepts its parameters at this model's size."""
    if not policies:
        raise EvaluationError("policies: give at least one (uniform, constant:K or LEARNER[:k=v,...])")
    if len(policies) > MAX_POLICIES:
        raise EvaluationError(f"policies: at most {MAX_POLICIES}")
    for text in policies:
        name, params = parse_policy(text)
        if name in ("uniform", "model"):  # a model snapshot is checked by the caller
            continue
        if name == "constant":
            label = params.get("label")
            if not isinstance(label, int) or not 0 <= label < n_labels:
                raise EvaluationError(
                    f"policy {text!r}: constant:LABEL_INDEX with 0 <= LABEL_INDEX < {n_labels}"
                )
            continue
        try:
            make_learner(name, 1, n_labels, params)  # name and parameters, without allocating d
        except (ParamError, KeyError, ValueError) as exc:
            raise EvaluationError(f"policy {text!r}: {exc}") from None
        if n_features < 1:
            raise EvaluationError(f"policy {text!r}: the model has no input dimension")


def _background(parent: int) -> None:
    """The worker yields the CPU to the server's requests (nice +10) where the OS allows it, and
    exits when its server ``parent`` is gone (killed, or shut down during a job): an evaluation
    nobody can read must not go on using a core.

    ``parent`` is passed, not read here: a server killed while the worker was still importing
    (seconds on a loaded machine) has already re-parented it, and its own ``getppid()`` would then
    name init, which never goes away."""
    with contextlib.suppress(OSError):  # not permitted here: normal priority
        os.nice(10)

    def watch() -> None:
        while os.getppid() == parent:  # re-parented (to init or a subreaper) once the server dies
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _evaluate_file(
    path: str, policies: list[str], runs: int, snapshots: dict[str, tuple[dict[str, Any], bytes]]
) -> tuple[int, dict[str, Any]]:
    """In the worker process: the estimates of ``policies`` on the log file ``path``; ``snapshots``
    are the ``model:NAME`` policies' (config, state bytes)."""
    from pathlib import Path

    from service.learners.base import learner_from_state
    from service.serial import decode

    frozen = {name: learner_from_state(config, decode(state)) for name, (config, state) in snapshots.items()}
    data = read_log(Path(path))
    results = evaluate(data, policies, runs, seed=0, snapshots=frozen)
    return data.n, {p: {e: est.as_dict() for e, est in by.items()} for p, by in results.items()}


class Evaluations:
    """The jobs of this process and the worker that runs them."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.jobs: dict[str, Job] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _worker(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: a fork of a process running an event loop and threads is not safe
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_background,
                initargs=(os.getpid(),),
            )
        return self._pool

    def start(
        self,
        model: str,
        policies: list[str],
        since: float | None,
        until: float | None,
        runs: int,
        records: Callable[[], AsyncIterator[list[Any]]],
        snapshots: dict[str, tuple[dict[str, Any], bytes]] | None = None,
    ) -> Job:
        """Start a job over the pages ``records()`` yields (each record has ``to_json()``);
        ``snapshots``: the (config, state bytes) of the ``model:NAME`` policies, taken now."""
        self._forget_old()
        job = Job(uuid.uuid4().hex, model, list(policies), since, until, runs, self.replica)
        self.jobs[job.id] = job
        task = asyncio.create_task(self._run(job, records, snapshots or {}))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _run(
        self,
        job: Job,
        records: Callable[[], AsyncIterator[list[Any]]],
        snapshots: dict[str, tuple[dict[str, Any], bytes]],
    ) -> None:
        fd, path = tempfile.mkstemp(prefix="clickboost-eval-", suffix=".jsonl")
        try:
            with os.fdopen(fd, "w") as f:
                async for page in records():
                    f.writelines(rec.to_json() + "\n" for rec in page)
            loop = asyncio.get_running_loop()
            job.events, job.results = await loop.run_in_executor(
                self._worker(), _evaluate_file, path, job.policies, job.runs, snapshots
            )
            job.state = "done"
        except Exception as exc:  # the job's answer says what failed; the service goes on
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            job.finished_at = time.time()
            os.unlink(path)

    def _forget_old(self) -> None:
        now = time.time()
        for key in [k for k, j in self.jobs.items() if j.finished_at and now - j.finished_at > KEEP_SECONDS]:
            del self.jobs[key]

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=1.0)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
