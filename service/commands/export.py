"""``clickboost export``: write a model's decision log to a file, streamed from a running server.

    clickboost export --url http://127.0.0.1:8000 --model news --since 24h --format dsjson -o news.dsjson

reads ``GET /models/{name}/log`` with the admin key of ``CLICKBOOST_ADMIN_KEY`` and writes what it
streams as it comes: JSON lines of the decision-log records (``--format jsonl``, the default), or
Vowpal Wabbit's decision-service lines of the decisions with a reward (``--format dsjson``, for
``vw --dsjson --cb_explore_adf``); the formats are described in ``service/decision_log.py``.
``--candidates all`` writes a catalog decision's dsjson line with every candidate the decision was
over, rebuilt from the catalog's history (``GET /models/{name}/log?candidates=all``), so that VW
learns with every action. ``--since`` and ``--until`` take Unix seconds, an ISO 8601 date-time
(UTC unless it has an offset) or a duration back from now (``90s``, ``15m``, ``36h``, ``7d``, ``2w``).

The file is written as FILE.partial and renamed to FILE once the server has sent everything, so an
export cut short (a server that stops, a store that fails mid-stream) leaves no FILE that looks
complete. Over HTTP, so it works with every store and while the server runs (the embedded SQLite
file is locked by its server).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode
from urllib.request import Request, urlopen

from service.cli import CLIError, plain_text
from service.config import parse_duration
from service.decision_log import FORMATS

CHUNK = 1 << 16


def _bound(value: str | None) -> str | None:
    """A ``--since`` / ``--until`` value as the server takes it (a duration: that long before now)."""
    if value is None:
        return None
    seconds = parse_duration(value)
    return repr(time.time() - seconds) if seconds is not None else value


def _detail(exc: HTTPError) -> str:
    body = exc.read()
    try:
        return str(json.loads(body)["detail"])
    except (ValueError, KeyError, TypeError):
        return body.decode(errors="replace")[:200] or str(exc.reason)


def run(args: argparse.Namespace) -> int:
    query = {"format": args.format}
    if args.candidates != "chosen":
        query["candidates"] = args.candidates
    for name in ("since", "until"):
        if (bound := _bound(getattr(args, name))) is not None:
            query[name] = bound
    url = f"{args.url.rstrip('/')}/models/{quote(args.model, safe='')}/log?{urlencode(query)}"
    key = os.environ.get("CLICKBOOST_ADMIN_KEY")
    request = Request(url, headers={"X-API-Key": key} if key else {})
    output: Path = args.output
    partial = output.with_name(output.name + ".partial")
    lines = 0
    try:
        with urlopen(request, timeout=args.timeout) as answer, partial.open("wb") as out:
            while chunk := answer.read(CHUNK):
                out.write(chunk)
                lines += chunk.count(b"\n")
    except HTTPError as exc:
        partial.unlink(missing_ok=True)
        raise CLIError(f"GET {url}: {exc.code} {_detail(exc)}") from None
    except (URLError, OSError, http.client.HTTPException) as exc:
        partial.unlink(missing_ok=True)
        reason = exc.reason if isinstance(exc, URLError) else f"{type(exc).__name__}: {exc}"
        raise CLIError(f"GET {url}: {reason}; nothing written to {output}") from None
    partial.replace(output)
    print(f"{output}: {lines} {args.format} lines", file=sys.stderr)
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a model's decision log to a file, from a running server (CLICKBOOST_ADMIN_KEY)",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the server (default: %(default)s)")
    p.add_argument("--model", required=True, help="the model's name")
    p.add_argument(
        "--since", help="decisions made at or after: Unix seconds, ISO 8601, or a duration ago (24h)"
    )
    p.add_argument("--until", help="decisions made before: Unix seconds, ISO 8601, or a duration ago")
    p.add_argument("--format", choices=FORMATS, default="jsonl", help="default: %(default)s")
    p.add_argument(
        "--candidates",
        choices=("chosen", "all"),
        default="chosen",
        help="dsjson: a catalog decision's line with its chosen item or every candidate, rebuilt from the "
        "catalog (default: %(default)s)",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="the file to write")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds without data before giving up")
    p.set_defaults(func=run)
