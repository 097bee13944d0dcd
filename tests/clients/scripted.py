"""A scripted loopback HTTP server for the SDK's retry and rotation tests.

Real HTTP over loopback (stdlib only), answering each ``POST`` from a script, so a test can make a
server drop a connection after reading the request, answer slowly, or answer 503 with
``Retry-After``, which a healthy service never does on demand. ``GET /readyz`` answers 200 or 503
after :attr:`Scripted.ready`, as the service's readiness probe does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Action = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]

PRED = {
    "decision_id": "abc",
    "label": "music",
    "label_index": 2,
    "probability": 0.9,
    "probabilities": [0.05, 0.05, 0.9],
    "model": "m",
    "model_version": 7,
}
FB = {"decision_id": "abc", "click": True, "reward": 1.0, "model": "m", "model_version": 8}


def reply(status: int, body: Any, headers: dict[str, str] | None = None, after: float = 0.0) -> Action:
    """Answer ``status`` with the JSON ``body`` (after sleeping ``after`` seconds)."""

    def act(h: BaseHTTPRequestHandler, _req: dict[str, Any]) -> None:
        time.sleep(after)
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    return act


def drop(h: BaseHTTPRequestHandler, _req: dict[str, Any]) -> None:
    """Read the request, then close the connection without answering (a crash after recording)."""
    h.close_connection = True
    h.connection.close()


class Scripted:
    """A loopback HTTP server answering successive POSTs from ``script`` (then ``default``, if set);
    logs what it received in ``seen``."""

    def __init__(self, default: Action | None = None) -> None:
        self.script: list[Action] = []
        self.default = default
        self.ready = True
        self.seen: list[dict[str, Any]] = []
        self.probes = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                assert self.path == "/readyz", self.path
                outer.probes += 1
                status = {"status": "ready" if outer.ready else "starting"}
                reply(200 if outer.ready else 503, status)(self, {})

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length", 0))
                req = {
                    "path": self.path,
                    "body": json.loads(self.rfile.read(n) or b"null"),
                    "key": self.headers.get("x-api-key"),
                }
                outer.seen.append(req)
                action = outer.script.pop(0) if outer.script else outer.default
                assert action is not None, f"unscripted request {req}"
                action(self, req)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
