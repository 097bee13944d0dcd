"""The API documentation renders offline (issue 21, item 2): /docs and /redoc in a real headless
Chromium against a live server, with every request that would leave the machine blocked and counted.

The browser is the system's (Debian's ``chromium``, driven by Playwright with ``executable_path``:
no browser download). Skipped, saying so, only where no chromium binary exists; ``.ci/run``
installs one.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.service.api.conftest import uvicorn_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH (apt install chromium)")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with uvicorn_server({"CLICKBOOST_DEMO": "true"}) as url:
        yield url


def _render(url: str, path: str, selector: str) -> tuple[list[str], list[str]]:
    """Load ``url + path``, wait for ``selector``; (texts of the matches, requests to other hosts)."""
    from playwright.sync_api import Route, sync_playwright

    outside: list[str] = []

    def only_local(route: Route) -> None:
        host = urlsplit(route.request.url).hostname
        if host in ("127.0.0.1", "localhost") or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.route("**/*", only_local)
            page.goto(url + path)
            page.wait_for_selector(selector, timeout=20_000)
            texts = page.locator(selector).all_inner_texts()
        finally:
            browser.close()
    return texts, outside


def test_swagger_ui_renders_the_operations_offline(server: str) -> None:
    texts, outside = _render(server, "/docs", ".opblock-summary-path")
    paths = {t.strip() for t in texts}
    assert {"/predict", "/feedback", "/models", "/models/{name}"} <= paths, paths
    assert outside == [], f"requests leaving the machine: {outside}"


#: ReDoc's bundle links its footer logo ("API docs by Redocly") from Redocly's CDN; offline the
#: image is missing and nothing else is (README says so).
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def test_redoc_renders_offline(server: str) -> None:
    texts, outside = _render(server, "/redoc", "h2")
    assert any("Sample a label" in t for t in texts), texts[:10]
    assert set(outside) <= {REDOC_LOGO}, f"requests leaving the machine: {outside}"
