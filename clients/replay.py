"""Replay a labelled dataset as traffic against one or more clickboost replicas (load test + accuracy).

``python -m clickboost_client.replay --url URL[,URL...] [--url URL...] --model NAME --dataset NAME_OR_PATH
[--limit N] [--concurrency C] [--rate R] [--seed S] [--retry-budget SECONDS] [--json-out FILE]
[--plot FILE]``

Each example is one visit, cbify-style (the contextual-bandit reduction of a multiclass dataset that
Vowpal Wabbit's ``--cbify`` uses): ``predict`` with the example's features, then ``feedback`` with
click = (sampled label == true label). So the click-through rate is the online accuracy of the
learner under bandit feedback.

The visits go through one SDK client (:class:`~clickboost_client.sdk.AsyncClient`) over every replica given:
predictions round-robin over the replicas that are up (example ``i`` to replica ``i mod R`` while
all are), each feedback to the replica that answered its predict, a failing replica skipped until
its ``/readyz`` answers again, and retries within ``--retry-budget`` seconds (the SDK's module doc
says which calls are retried when). Feedback is sent with ``?wait=true``, so with one replica a
worker's next prediction sees its previous update; at concurrency 1 on one replica the replay is the
offline simulator's stream, deterministic for a fixed ``--seed`` when the server derives its
decision ids from a seed too.

The stream is :meth:`lab.sim.datasets.Dataset.stream` for ``--seed`` (shuffled, cut at
``--limit``). The API key for ``/predict`` and ``/feedback``, if the server needs one, is read from
the environment variable ``CLICKBOOST_API_KEY`` (never a command-line argument, which ``ps`` shows).

Printed and written as JSON: n, accuracy (= CTR), rps (predict+feedback pairs per second),
latency_ms p50/p95/p99 for predict and feedback, failed visits (no label: the predict failed after
its retries), feedbacks given up (their decisions will be learned as the default reward when their
window ends), error counts by status, visits by replica, and what the SDK's retries did. The plot
shows the learning curve and the latency over time. Exit code 2, with one line on stderr, when the replay
cannot run: missing dataset, or a predict answered 4xx (unknown model, wrong dimension, bad key),
which would repeat for every example; exit code 1 when no visit completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clickboost_client.errors import APIError, ClickboostError, RateLimited, TransportError
from clickboost_client.sdk import API_KEY_ENV, AsyncClient, Retry

if TYPE_CHECKING:
    import numpy as np

# The SDK needs httpx alone; the replay also reads datasets with the lab (numpy, tqdm, matplotlib).
NEEDS = (
    "the replay needs the clickboost lab (datasets, numpy, tqdm; matplotlib for --plot): in a "
    "clickboost checkout, pip install -e '.[lab]' ./clients"
)


class ReplayAborted(Exception):
    """A failure that would repeat for every example: reported as one line, exit code 2."""


@dataclass(frozen=True)
class Visit:
    """One replayed example: what was sampled and how long each call took."""

    index: int
    replica: int  # index in the URLs of the replica that answered the predict
    label_index: int
    click: bool
    start_s: float  # since the replay began
    predict_ms: float
    feedback_ms: float | None  # None when the feedback failed


@dataclass
class ReplayResult:
    """Every completed visit (in completion order), error counts, the SDK's stats and the wall time.

    A visit whose predict failed is not in ``visits``: it is counted in ``errors["predict"]``.
    """

    visits: list[Visit]
    urls: list[str] = field(default_factory=list)
    errors: dict[str, Counter[str]] = field(
        default_factory=lambda: {"predict": Counter(), "feedback": Counter()}
    )
    stats: Counter[str] = field(default_factory=Counter)
    duration_s: float = 0.0

    @property
    def failed_visits(self) -> int:
        """Visits that showed no label: their predict failed after the SDK's retries."""
        return sum(self.errors["predict"].values())

    @property
    def feedback_given_up(self) -> int:
        """Feedbacks that failed after the SDK's retries (learned as the default reward, later)."""
        return sum(self.errors["feedback"].values())


def _status(exc: ClickboostError) -> str:
    """The key errors are counted under: the HTTP status, "transport" or "protocol"."""
    if isinstance(exc, APIError):
        return str(exc.status)
    return "transport" if isinstance(exc, TransportError) else "protocol"


async def replay(
    urls: Sequence[str],
    model: str,
    X: np.ndarray,
    y: np.ndarray,
    *,
    concurrency: int = 1,
    rate: float | None = None,
    api_key: str | None = None,
    retry: Retry | None = None,
    progress: bool = True,
) -> ReplayResult:
    """Replay the stream ``(X, y)`` against ``urls`` with ``concurrency`` workers.

    Parameters
    ----------
    urls : sequence of str
        Base URLs of the replicas, all served by one SDK client (see the module doc).
    model : str
        Model name on the server (its dimension must be ``X.shape[1]``).
    X, y : numpy.ndarray
        Features (n, d) and true label indices (n,).
    concurrency : int
        Number of visits in flight at once.
    rate : float, optional
        Target visits per second (visit ``i`` starts no earlier than ``i / rate`` s); default as fast
        as the workers go.
    api_key : str, optional
        Key for predict and feedback; default the SDK's (``$CLICKBOOST_API_KEY``).
    retry : Retry, optional
        The SDK's retry policy; default :class:`~clickboost_client.sdk.Retry()` (retries within 60 s).
    progress : bool
        Show a progress bar on stderr.

    Raises
    ------
    ReplayAborted
        When a predict is answered 4xx other than 429.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    from tqdm import tqdm

    n = int(X.shape[0])
    client = AsyncClient(urls, api_key=api_key, retry=retry)
    result = ReplayResult([], list(client.urls), stats=client.stats)
    replica_of = {u: k for k, u in enumerate(client.urls)}
    bar = tqdm(total=n, unit="visit", file=sys.stderr, disable=not progress, mininterval=0.5)
    next_index = 0
    clicks = 0
    t0 = time.perf_counter()

    async def visit(i: int) -> None:
        nonlocal clicks
        start = time.perf_counter()
        try:
            pred = await client.predict(X[i].tolist(), model=model)
        except ClickboostError as exc:
            if isinstance(exc, APIError) and exc.status < 500 and not isinstance(exc, RateLimited):
                raise ReplayAborted(f"predict on {', '.join(client.urls)}: {exc}") from exc
            result.errors["predict"][_status(exc)] += 1
            return
        replica = replica_of[pred.server]
        mid = time.perf_counter()
        click = pred.label_index == int(y[i])
        feedback_ms: float | None = None
        try:
            await client.feedback(pred.decision_id, click, wait=True)
            feedback_ms = (time.perf_counter() - mid) * 1e3
        except ClickboostError as exc:
            result.errors["feedback"][_status(exc)] += 1
        clicks += click
        result.visits.append(
            Visit(i, replica, pred.label_index, click, start - t0, (mid - start) * 1e3, feedback_ms)
        )
        bar.update(1)
        bar.set_postfix_str(f"ctr={clicks / len(result.visits):.3f}", refresh=False)

    async def worker() -> None:
        nonlocal next_index
        while next_index < n:
            i = next_index
            next_index += 1
            if rate is not None:
                wait = t0 + i / rate - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
            await visit(i)

    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(min(concurrency, n)):
                tg.create_task(worker())
    except* ReplayAborted as group:
        raise group.exceptions[0] from None
    finally:
        bar.close()
        await client.aclose()
    result.duration_s = time.perf_counter() - t0
    return result


def _percentiles(values: Sequence[float]) -> dict[str, float | None]:
    import numpy as np

    if not values:
        return {"p50": None, "p95": None, "p99": None}
    p = np.percentile(np.asarray(values), [50, 95, 99])
    return {"p50": round(float(p[0]), 3), "p95": round(float(p[1]), 3), "p99": round(float(p[2]), 3)}


def summarize(result: ReplayResult) -> dict[str, Any]:
    """The report: n, accuracy (= CTR), rps, latency percentiles, failures, errors by status, visits
    by replica and the SDK's retry stats."""
    n = len(result.visits)
    clicks = sum(v.click for v in result.visits)
    by_replica = Counter(v.replica for v in result.visits)
    return {
        "n": n,
        "clicks": clicks,
        "accuracy": clicks / n if n else None,
        "duration_s": round(result.duration_s, 3),
        "rps": round(n / result.duration_s, 2) if result.duration_s > 0 else None,
        "latency_ms": {
            "predict": _percentiles([v.predict_ms for v in result.visits]),
            "feedback": _percentiles([v.feedback_ms for v in result.visits if v.feedback_ms is not None]),
        },
        "failed_visits": result.failed_visits,
        "feedback_given_up": result.feedback_given_up,
        "errors": {call: dict(sorted(c.items())) for call, c in result.errors.items()},
        "visits_by_replica": [by_replica[k] for k in range(len(result.urls))],
        "sdk": dict(sorted(result.stats.items())),
    }


def format_report(report: dict[str, Any]) -> str:
    """The report as a few human-readable lines."""
    acc = report["accuracy"]
    lines = [
        f"visits {report['n']}  clicks {report['clicks']}  accuracy (CTR) "
        + (f"{acc:.4f}" if acc is not None else "n/a"),
        f"{report['rps']} visits/s (predict + feedback) over {report['duration_s']} s",
        f"{'latency ms':<12}{'p50':>9}{'p95':>9}{'p99':>9}",
    ]
    for call in ("predict", "feedback"):
        q = report["latency_ms"][call]
        cells = "".join(f"{q[k]:>9.2f}" if q[k] is not None else f"{'-':>9}" for k in ("p50", "p95", "p99"))
        lines.append(f"{call:<12}{cells}")
    errs = ", ".join(
        f"{call} {status}: {k}" for call, c in report["errors"].items() for status, k in c.items()
    )
    lines.append(f"errors: {errs or 'none'}")
    lines.append(
        "  ".join(
            [
                f"failed visits {report['failed_visits']}",
                f"feedbacks given up {report['feedback_given_up']}",
                *(f"{k.replace('_', ' ')} {v}" for k, v in report["sdk"].items()),
            ]
        )
    )
    if len(report["visits_by_replica"]) > 1:
        lines.append("visits by replica: " + " / ".join(str(k) for k in report["visits_by_replica"]))
    return "\n".join(lines)


def plot(result: ReplayResult, path: Path, title: str) -> None:
    """Learning curve (running CTR over visits) and latency over time, as one image."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    visits = result.visits
    clicks = np.cumsum([v.click for v in visits])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(np.arange(1, len(visits) + 1), clicks / np.arange(1, len(visits) + 1))
    ax1.set(xlabel="visits", ylabel="running accuracy (CTR)", title="learning curve", ylim=(0, 1))
    t = np.array([v.start_s for v in visits])
    ax2.scatter(t, [v.predict_ms for v in visits], s=2, label="predict")
    fb = [(v.start_s, v.feedback_ms) for v in visits if v.feedback_ms is not None]
    if fb:
        ax2.scatter(*zip(*fb, strict=True), s=2, label="feedback (?wait=true)")
    ax2.set(xlabel="time since start (s)", ylabel="latency (ms)", title="latency", yscale="log")
    ax2.legend(markerscale=4)
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m clickboost_client.replay``."""
    parser = argparse.ArgumentParser(
        prog="python -m clickboost_client.replay",
        description=__doc__.splitlines()[0],
        epilog=f"The API key, if the server needs one, is read from {API_KEY_ENV}. Requirements: {NEEDS}.",
    )
    parser.add_argument(
        "--url",
        required=True,
        action="append",
        help="base URL(s) of the replicas, comma-separated or the option repeated",
    )
    parser.add_argument("--model", required=True, help="model name on the server")
    parser.add_argument("--dataset", required=True, help="dataset name (../shared/datasets) or .npz path")
    parser.add_argument("--limit", type=int, help="replay only the first N examples of the stream")
    parser.add_argument("--concurrency", type=int, default=1, help="visits in flight (default 1)")
    parser.add_argument("--rate", type=float, help="target visits per second (default: unthrottled)")
    parser.add_argument("--seed", type=int, default=0, help="stream shuffle seed (default 0)")
    parser.add_argument(
        "--retry-budget",
        type=float,
        default=Retry().budget,
        help="seconds within which a failed call is retried (default %(default)s)",
    )
    parser.add_argument("--json-out", type=Path, help="write the report as JSON here")
    parser.add_argument("--plot", type=Path, help="write the learning-curve and latency plot here (PNG)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a replay from the command line; returns the exit code (0, 1 or 2, see the module doc)."""
    args = build_parser().parse_args(argv)
    try:  # imported here, so that `import clickboost_client` and --help need httpx alone
        import numpy  # noqa: F401
        import tqdm  # noqa: F401

        from lab.sim.datasets import load_dataset
    except ModuleNotFoundError as exc:
        print(f"error: no module {exc.name!r}: {NEEDS}", file=sys.stderr)
        return 2
    urls = [u.strip().rstrip("/") for arg in args.url for u in arg.split(",") if u.strip()]
    try:
        if args.concurrency < 1 or (args.limit is not None and args.limit < 1):
            raise ReplayAborted("--concurrency and --limit must be >= 1")
        if args.rate is not None and args.rate <= 0:
            raise ReplayAborted("--rate must be > 0")
        if args.retry_budget < 0:
            raise ReplayAborted("--retry-budget must be >= 0")
        ds = load_dataset(args.dataset)
        X, y = ds.stream(args.seed, limit=args.limit)
        print(
            f"replaying {len(y)} visits of {ds.name} (d={ds.d}, K={ds.n_labels}, seed {args.seed}) "
            f"to model {args.model!r} on {len(urls)} replica(s), concurrency {args.concurrency}",
            flush=True,
        )
        result = asyncio.run(
            replay(
                urls,
                args.model,
                X,
                y,
                concurrency=args.concurrency,
                rate=args.rate,
                retry=Retry(budget=args.retry_budget),
                progress=True,
            )
        )
    except (ReplayAborted, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = summarize(result)
    print(format_report(report))
    if args.json_out:
        meta = {
            "urls": urls,
            "model": args.model,
            "dataset": ds.name,
            "seed": args.seed,
            "limit": args.limit,
            "concurrency": args.concurrency,
            "rate": args.rate,
            "retry_budget": args.retry_budget,
        }
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({**meta, **report}, indent=2) + "\n")
    if args.plot:
        plot(result, args.plot, f"replay of {ds.name} on model {args.model} ({len(urls)} replica(s))")
    return 0 if result.visits else 1


if __name__ == "__main__":
    raise SystemExit(main())
