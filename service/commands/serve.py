"""``python -m service serve``: run the HTTP service with uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

from service.api.connections import GuardedHttp
from service.api.hygiene import log_config
from service.cli import CLIError, plain_text
from service.config import ConfigError, Settings, load_model_file, load_settings
from service.learners.base import ParamError
from service.runtime import build_learner, check_declared
from service.store import open_store
from service.store.sqlite import DataDirInUseError


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_data_dir(settings: Settings) -> None:
    """Open the SQLite file once before binding: one line (not a traceback) if another process holds
    it or it cannot be created."""
    store = open_store(settings)

    async def probe() -> None:
        try:
            await store.ping()
        finally:
            await store.close()

    try:
        asyncio.run(probe())
    except DataDirInUseError as exc:
        raise CLIError(str(exc)) from None
    except (OSError, sqlite3.Error) as exc:
        raise CLIError(f"cannot open the SQLite store in {settings.data_dir}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    import uvicorn

    overrides: dict[str, object] = {}
    if args.config is not None:
        overrides["config_file"] = args.config
    if args.demo:
        overrides["demo"] = True
    if args.memory:
        overrides["store"] = "memory"
    try:  # fail fast, before binding: settings, the model file and its learners
        settings = load_settings(**overrides)
        if settings.config_file is not None:
            declared = load_model_file(settings.config_file)
            # a creation's checks first: a model over its budget is named, not allocated
            check_declared(declared, settings)
            for spec in declared.values():
                build_learner(spec)
    except ConfigError as exc:
        raise CLIError(str(exc)) from None
    except ParamError as exc:
        raise CLIError(f"{settings.config_file}: {exc}") from None
    if not _is_loopback(args.host) and not settings.has_keys and not args.insecure:
        raise CLIError(
            f"refusing to bind {args.host} without API keys: set CLICKBOOST_API_KEY and "
            "CLICKBOOST_ADMIN_KEY, or pass --insecure"
        )
    if settings.decision_id_seed is not None and not settings.redis_url and settings.store == "sqlite":
        print(
            "clickboost serve: warning: seeded decision ids (CLICKBOOST_DECISION_ID_SEED) start over at "
            f"each start while {settings.data_dir} keeps the last run's ids; replay on a fresh "
            "CLICKBOOST_DATA_DIR or with --memory",
            file=sys.stderr,
        )
    if args.workers > 1:
        if not settings.redis_url:
            raise CLIError(
                "several workers need a shared store: set REDIS_URL (the SQLite file and the memory "
                "store each serve one process)"
            )
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="clickboost-metrics-"))
    if not settings.redis_url and settings.store == "sqlite":
        _check_data_dir(settings)
    # The app factory (in each worker) reads its settings from the environment.
    if args.config is not None:
        os.environ["CLICKBOOST_CONFIG_FILE"] = str(args.config)
    if args.demo:
        os.environ["CLICKBOOST_DEMO"] = "true"
    if args.memory:
        os.environ["CLICKBOOST_STORE"] = "memory"
    if args.log_format is not None:
        os.environ["CLICKBOOST_LOG_FORMAT"] = args.log_format
    uvicorn.run(
        "service.api.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        log_config=log_config(args.log_format or settings.log_format, args.log_level),
        # a header timeout and a connection limit (CLICKBOOST_HEADER_TIMEOUT_SECONDS, _MAX_CONNECTIONS)
        http=GuardedHttp,
    )
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the HTTP service (settings: CLICKBOOST_* environment variables)",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port to bind (default: %(default)s)")
    p.add_argument("--config", type=Path, help="TOML file declaring [models.NAME] created at start-up")
    p.add_argument("--demo", action="store_true", help="create the model 'demo' (named features, 3 labels)")
    p.add_argument(
        "--memory",
        action="store_true",
        help="keep models and decisions in memory only, lost at exit (default without REDIS_URL: "
        "CLICKBOOST_DATA_DIR/clickboost.sqlite3, kept across restarts)",
    )
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback bind without API keys")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (needs REDIS_URL)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="log lines as text or one JSON object per line, each with its request id "
        "(default: CLICKBOOST_LOG_FORMAT, else text)",
    )
    p.set_defaults(func=run)
