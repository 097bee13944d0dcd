"""Off-policy evaluation jobs of a running service (``POST /models/{name}/evaluations``, issue 22).

Jobs run one at a time, in the order they came (at most ``MAX_JOBS`` queued or running per
process: 429 beyond; ``DELETE`` cancels one). The running job reads the model's decision log over
its time range from the store (pages, on the event loop, awaiting the store between pages like any
request), writes it to a temporary JSON-lines file, and evaluates the policies in a **separate
process** (one worker, spawned on first use, at a lower priority: nice 10): the estimators and
learner replays are CPU-bound Python and numba, and in a thread they would hold the interpreter lock
the request handlers need. A queued job holds its request only, so the temporary directory holds one
copy of a log at most: in :func:`scratch_dir`, named after the server's process id, so that a server
started later removes the copies a killed one left (:func:`remove_stale`). The worker dies with its
server however that goes (a parent-death signal and a check of its parent). Jobs live in the process
that started them (their results are small, kept for ``KEEP_SECONDS``): ask that replica for them
(its id is in the answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.learners.base import ParamError, learners, make_learner
from service.ope import EvaluationError, evaluate, parse_policy, read_log

KEEP_SECONDS = 24 * 3600.0
MAX_POLICIES = 20
#: Jobs queued or running in one process at most (``POST`` answers 429 beyond): each waiting job
#: keeps the model snapshots its policies name until it runs.
MAX_JOBS = 16
_PR_SET_PDEATHSIG = 1  # prctl(2)
#: A copy of a log in :func:`scratch_dir`: ``PID-RANDOM.jsonl``, PID the server's process.
_COPY = re.compile(r"(\d+)-\w+\.jsonl")

Records = Callable[[], AsyncIterator[list[Any]]]
Snapshots = dict[str, tuple[dict[str, Any], bytes]]
#: The model's catalog's bytes, history included, taken once the log is copied (None: no catalog):
#: what rebuilds its catalog decisions in the worker (:mod:`service.catalog_ope`).
CatalogBytes = Callable[[], bytes | None]


class TooManyJobsError(Exception):
    """``MAX_JOBS`` jobs are queued or running in this process already (429)."""


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
    state: str = "queued"  # queued | running | done | failed
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    events: int = 0
    results: dict[str, dict[str, dict[str, Any]]] | None = None
    error: str | None = None
    _records: Records | None = field(default=None, repr=False)
    _snapshots: Snapshots | None = field(default=None, repr=False)
    _catalog: CatalogBytes | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}


def _check_syntax(text: str) -> None:
    """:class:`EvaluationError` where ``parse_policy`` would fail on ``text``: ``constant:`` takes a
    whole number, and a learner's parameters are ``key=value`` pairs."""
    name, _, rest = text.partition(":")
    if name == "model":
        return
    if name == "constant":
        if not re.fullmatch(r"\s*[+-]?\d+\s*", rest):
            raise EvaluationError(f"policy {text!r}: constant:LABEL_INDEX with a whole number")
        return
    for item in filter(None, rest.split(",")):
        if "=" not in item:
            raise EvaluationError(f"policy {text!r}: expected {name}:param=value,... ({item!r} has no =)")


def check_policies(policies: Sequence[str], n_features: int, n_labels: int, actions: bool = False) -> None:
    """Every policy parses and its learner accepts its parameters at this model's size; ``actions``:
    the model chooses among candidate actions (no ``constant:K``; learners must be action learners)."""
    if not policies:
        raise EvaluationError(
            "policies: give at least one (uniform, first, baseline, constant:K or LEARNER[:k=v,...])"
        )
    if len(policies) > MAX_POLICIES:
        raise EvaluationError(f"policies: at most {MAX_POLICIES}")
    for text in policies:
        _check_syntax(text)
        name, params = parse_policy(text)
        if name in ("uniform", "first", "baseline", "model"):  # a model snapshot is checked by the caller
            continue
        if name == "constant" and actions:
            raise EvaluationError(
                f"policy {text!r}: a label index names another candidate in every request of an "
                "action-feature model; evaluate first, baseline, uniform, a model or a learner"
            )
        if name == "constant":
            label = params.get("label")
            if not isinstance(label, int) or not 0 <= label < n_labels:
                raise EvaluationError(
                    f"policy {text!r}: constant:LABEL_INDEX with 0 <= LABEL_INDEX < {n_labels}"
                )
            continue
        cls = learners.get(name) if name in learners.names() else None
        if cls is not None and cls.actions != actions:
            kind = "an action learner (squarecb-adf, cova-adf)" if actions else "a label learner"
            raise EvaluationError(f"policy {text!r}: this model needs {kind}")
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
    if sys.platform == "linux":  # killed by the kernel the moment the server dies, however it dies
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))

    def watch() -> None:
        while os.getppid() == parent:  # re-parented (to init or a subreaper) once the server dies
            time.sleep(1.0)
        os._exit(0)

    # The server's pid comes from the server: a worker that starts after its server died (stopped
    # as its first job came) is re-parented already, and exits at once.
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _evaluate_file(
    path: str,
    policies: list[str],
    runs: int,
    snapshots: dict[str, tuple[dict[str, Any], bytes]],
    catalog: bytes | None = None,
) -> tuple[int, dict[str, Any]]:
    """In the worker process: the estimates of ``policies`` on the log file ``path``; ``snapshots``
    are the ``model:NAME`` policies' (config, state bytes), ``catalog`` the model's catalog's bytes."""
    from pathlib import Path

    from service.catalog import Catalog
    from service.learners.base import learner_from_state
    from service.serial import decode

    frozen = {name: learner_from_state(config, decode(state)) for name, (config, state) in snapshots.items()}
    data = read_log(Path(path), None if catalog is None else Catalog.from_bytes(catalog))
    results = evaluate(data, policies, runs, seed=0, snapshots=frozen)
    n = data.n + (len(data.catalog.records) if data.catalog is not None else 0)
    return n, {p: {e: est.as_dict() for e, est in by.items()} for p, by in results.items()}


def scratch_dir() -> Path:
    """The directory of the logs' copies: ``clickboost-evaluations-UID`` in the temporary directory
    (``TMPDIR``), the user's own (mode 0700: a copy holds the model's decisions)."""
    path = Path(tempfile.gettempdir()) / f"clickboost-evaluations-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale() -> list[Path]:
    """Remove the copies of servers that are no longer running (killed during a job: ``kill -9``
    runs no clean-up), at start-up; the removed paths. A running server's copies are kept: several
    servers may share the temporary directory."""
    removed = []
    for path in scratch_dir().iterdir():
        match = _COPY.fullmatch(path.name)
        if match and not _alive(int(match[1])):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


class Evaluations:
    """The jobs of this process and the worker that runs them."""

    def __init__(self, replica: str) -> None:
        self.replica = replica
        self.jobs: dict[str, Job] = {}
        self._pool: ProcessPoolExecutor | None = None
        self._queue: deque[Job] = deque()
        self._runner: asyncio.Task[None] | None = None  # runs the queue while it is not empty
        self._current: tuple[Job, asyncio.Task[None]] | None = None
        self._computing = False  # the current job is in the worker
        self._closed = False

    def _worker(self) -> ProcessPoolExecutor:
        if self._closed:  # a worker started now would outlive the server's shutdown
            raise RuntimeError("the server is shutting down")
        if self._pool is None:
            # spawn: a fork of a process running an event loop and threads is not safe
            self._pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_background,
                initargs=(os.getpid(),),
            )
        return self._pool

    def _stop_worker(self) -> None:
        """Kill the worker (a call running in it cannot be interrupted otherwise); the next job
        spawns another."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # ProcessPoolExecutor has no public way to stop a running call (Python 3.14 adds
        # terminate_workers); its management thread then finds the pool broken and ends.
        for process in list(pool._processes.values()):  # type: ignore[attr-defined]
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def start(
        self,
        model: str,
        policies: list[str],
        since: float | None,
        until: float | None,
        runs: int,
        records: Records,
        snapshots: Snapshots | None = None,
        catalog: CatalogBytes | None = None,
    ) -> Job:
        """Queue a job over the pages ``records()`` yields (each record has ``to_json()``), read
        when it runs; ``snapshots``: the (config, state bytes) of the ``model:NAME`` policies,
        taken now; ``catalog``: the model's catalog's bytes, taken once the log is read (its
        version then covers every record read). :class:`TooManyJobsError` when ``MAX_JOBS`` are
        queued or running."""
        self._forget_old()
        if sum(j.finished_at is None for j in self.jobs.values()) >= MAX_JOBS:
            raise TooManyJobsError(
                f"{MAX_JOBS} evaluations are queued or running on this replica; retry when one is done"
            )
        job = Job(uuid.uuid4().hex, model, list(policies), since, until, runs, self.replica)
        job._records, job._snapshots, job._catalog = records, snapshots or {}, catalog
        self.jobs[job.id] = job
        self._queue.append(job)
        if self._runner is None:  # nothing ahead of it: it starts now
            job.state = "running"
            self._runner = asyncio.create_task(self._run_queue())
        return job

    def cancel(self, job_id: str) -> bool:
        """Forget the job ``job_id``, stopping it if it is queued or running; False if unknown."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return False
        if job in self._queue:
            self._queue.remove(job)
        elif self._current is not None and self._current[0] is job:
            self._current[1].cancel()
            if self._computing:
                self._stop_worker()
        return True

    async def _run_queue(self) -> None:
        try:
            while self._queue:
                job = self._queue.popleft()
                job.state = "running"
                task = asyncio.create_task(self._run(job))
                self._current = (job, task)
                await asyncio.wait([task])  # a cancelled job ends its task only, not the queue
        finally:
            self._current = self._runner = None

    async def _run(self, job: Job) -> None:
        assert job._records is not None and job._snapshots is not None
        records, snapshots, catalog = job._records, job._snapshots, job._catalog
        fd, path = tempfile.mkstemp(prefix=f"{os.getpid()}-", suffix=".jsonl", dir=scratch_dir())
        try:
            with os.fdopen(fd, "w") as f:
                async for page in records():
                    f.writelines(rec.to_json() + "\n" for rec in page)
            catalog_bytes = None if catalog is None else catalog()
            loop = asyncio.get_running_loop()
            self._computing = True
            job.events, job.results = await loop.run_in_executor(
                self._worker(), _evaluate_file, path, job.policies, job.runs, snapshots, catalog_bytes
            )
            job.state = "done"
        except Exception as exc:  # the job's answer says what failed; the service goes on
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            self._computing = False
            job.finished_at = time.time()
            job._records = job._snapshots = job._catalog = None
            os.unlink(path)

    def _forget_old(self) -> None:
        now = time.time()
        for key in [k for k, j in self.jobs.items() if j.finished_at and now - j.finished_at > KEEP_SECONDS]:
            del self.jobs[key]

    async def close(self) -> None:
        """Stop the jobs and the worker; no worker starts after this."""
        self._closed = True
        tasks = [t for t in (self._runner, self._current and self._current[1]) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        self._stop_worker()
