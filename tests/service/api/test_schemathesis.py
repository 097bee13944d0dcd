"""Schemathesis fuzzes a live server against its own ``/openapi.json`` (issue 18, item 6).

``python -m service serve --demo`` runs in a subprocess on loopback with the memory store (no files
written), once without keys (an open development server) and once with ``CLICKBOOST_API_KEY`` and
``CLICKBOOST_ADMIN_KEY``, the admin key sent on every request so the ``/models`` routes are reached.
The schemathesis CLI runs every phase (examples, coverage, fuzzing, stateful) with a fixed seed and a
bounded number of examples per operation; its exit code must be 0, and its report is the assertion
message when it is not.

Checks run, in both modes: no 5xx; every status, content type, body and documented header
(``Retry-After`` of 503) as documented; schema-violating requests rejected; a deleted model is
gone (``use_after_free``) and a created one is there (``ensure_resource_availability``). With keys
also: requests without the key or with a wrong one are refused (``ignored_auth``,
``missing_required_header``).

Checks left out, and why:

- ``positive_data_acceptance``: what the server accepts depends on things JSON Schema cannot say
  (a model config needs exactly one of ``n_features`` / ``hashing_bits``; ``/predict`` features
  must fit the named model's config; an imported state must be an exported one), so schema-valid
  requests are rightly refused with 400/404/422.
- ``ignored_auth``, ``missing_required_header`` and negative security headers without keys: a
  server with no key configured is open by design (docs: "Fail closed" only once a key is set), so
  the declared ``APIKeyHeader`` scheme is not generated there
  (``--generation-with-security-parameters false``).
- ``object_level_authorization``: one admin key owns every model; there are no per-object owners.
- ``unsupported_method`` and ``allow_header_conformance``: checked directly (one request per
  path, a precise message) by :func:`test_405_lists_every_method_of_the_path`.

``--workers 1``: with several worker threads, schemathesis's coverage phase can hit a CPython 3.11
bug in concurrent compilation ("SystemError: AST constructor recursion depth mismatch"), reported as
a run error that says nothing about our API.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.service.api.conftest import uvicorn_server

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))
SEED = 20240518
MAX_EXAMPLES = 40  # per operation and phase; about 15 s a run on a quiet 2-core machine
RUN_TIMEOUT = 240.0  # seconds: the bound on one schemathesis process

CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
    "negative_data_rejection",
    "use_after_free",
    "ensure_resource_availability",
]
ADMIN_KEY = "root"
HTTP_METHODS = {"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}
MODES = {
    "no-keys": ({}, ["--generation-with-security-parameters", "false"], CHECKS),
    "keys": (
        {"CLICKBOOST_API_KEY": "k1", "CLICKBOOST_ADMIN_KEY": ADMIN_KEY},
        ["--header", f"X-API-Key: {ADMIN_KEY}"],
        [*CHECKS, "ignored_auth", "missing_required_header"],
    ),
}


def schemathesis(url: str, args: list[str], cwd: Path) -> tuple[int, str, float]:
    """Run the CLI against ``url``'s schema; return its exit code, its whole report and seconds."""
    command = [
        SCHEMATHESIS,
        "run",
        f"{url}/openapi.json",
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--request-timeout",
        "10",
        "--generation-database",
        "none",  # nothing kept between runs: the same seed gives the same run
        "--no-color",
        *args,
    ]
    start = time.monotonic()
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        pytest.fail(f"schemathesis ran over {RUN_TIMEOUT} s:\n{text}")
    report = f"$ {' '.join(command)}\n{done.stdout}{done.stderr}"
    return done.returncode, report, time.monotonic() - start


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_schemathesis_finds_no_contract_violation(mode: str, tmp_path: Path) -> None:
    env, args, checks = MODES[mode]
    with uvicorn_server({"CLICKBOOST_STORE": "memory", **env}, ("--demo",)) as url:
        code, report, seconds = schemathesis(
            url, ["--checks", ",".join(checks), "--max-examples", str(MAX_EXAMPLES), *args], tmp_path
        )
    print(f"schemathesis {mode}: exit {code} in {seconds:.1f} s")
    assert code == 0, report


def test_405_lists_every_method_of_the_path() -> None:
    """An undocumented method gets 405 whose ``Allow`` names every documented method of the path
    (RFC 9110 15.5.6; what schemathesis's ``allow_header_conformance`` checks), e.g.
    ``PATCH /models/{name}`` -> ``Allow`` with DELETE, GET and PUT, not only the first route's."""
    with uvicorn_server({"CLICKBOOST_STORE": "memory"}, ("--demo",)) as url:
        schema = httpx.get(f"{url}/openapi.json", timeout=10).json()
        wrong = []
        for template, operations in schema["paths"].items():
            path = template.replace("{name}", "demo")
            documented = {m.upper() for m in operations if m.upper() in HTTP_METHODS}
            r = httpx.request("PATCH", f"{url}{path}", timeout=10)
            allow = {m.strip().upper() for m in r.headers.get("allow", "").split(",") if m.strip()}
            if r.status_code != 405 or not documented <= allow:
                wrong.append(
                    f"PATCH {path} -> {r.status_code}, Allow: {r.headers.get('allow')!r}, documented: "
                    f"{sorted(documented)}"
                )
        assert not wrong, "\n".join(wrong)
