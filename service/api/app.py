"""The FastAPI application: settings -> store -> runtime in the lifespan, routers, handlers, middleware.

``uvicorn service.api.app:create_app --factory`` (what ``python -m service serve`` runs) builds
it from the environment (:class:`service.config.Settings`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Route

from service.api import dashboard, errors, health, items, models, personalizer, predict
from service.api.hygiene import RequestHygiene
from service.api.metrics import HTTPMetrics
from service.config import Settings, load_settings
from service.placement import MISDIRECTED_HEADER
from service.runtime import Runtime
from service.store import Store, open_store

log = logging.getLogger("clickboost.app")

DESCRIPTION = """Online multiclass prediction that learns from clicks.

`POST /predict` samples a label and returns it with its probability and a decision id; `POST /feedback`
reports the click bit for that id, which the model turns into an unbiased update. `/models` manages
models (admin key). Send keys in the `X-API-Key` header when the server has keys configured. The
dashboard page is at `/dashboard`.
"""


def _stop_if_failed(task: asyncio.Task[None]) -> None:
    """A start-up that failed in the background stops the server, as one that failed in the lifespan."""
    if task.cancelled() or task.exception() is None:
        return
    log.error("start-up failed, stopping: %s", task.exception(), exc_info=task.exception())
    os.kill(os.getpid(), signal.SIGTERM)


def create_app(settings: Settings | None = None, store: Store | None = None) -> FastAPI:
    """Build the app; ``settings`` default to the environment, ``store`` to :func:`open_store`."""
    settings = settings or load_settings()
    store = store or open_store(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime(store, settings)
        app.state.runtime = runtime
        await runtime.open()  # quick; a bad config or store stops the server here
        # Loading may first compile kernels (a minute on a cold cache): the server answers /healthz
        # and /readyz (503, saying what it does) meanwhile; other routes 503 until it is ready.
        loading = asyncio.create_task(runtime.load())
        loading.add_done_callback(_stop_if_failed)
        app.state.loading = loading
        try:
            yield
        finally:
            if not loading.done():
                loading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loading
            await runtime.stop()
            await store.close()

    # FastAPIOffline: FastAPI whose /docs and /redoc load Swagger UI and ReDoc from files shipped in
    # the fastapi-offline package (served under /static-offline-docs), not from a CDN, so the
    # documentation renders on a machine without internet.
    app = FastAPIOffline(
        title="clickboost",
        description=DESCRIPTION,
        version="0.1.0",
        lifespan=lifespan,
        # FastAPI's OpenTelemetry layer checks its providers on every request; our metrics are
        # Prometheus (service.api.metrics), so it is switched off.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.state.settings = settings
    errors.install(app)
    app.include_router(predict.router)
    # The hot path: the same two endpoints as plain Starlette routes ahead of the APIRoutes, so
    # requests skip FastAPI's per-request machinery (dependency solving, endpoint wrapping), and
    # predict.HotRoutes (the innermost middleware) calls them without routing; the APIRoutes stay
    # for the OpenAPI contract. The endpoints take the Request and return a Response.
    for path, endpoint in (("/predict", predict.predict), ("/feedback", predict.feedback)):
        app.router.routes.insert(0, Route(path, endpoint, methods=["POST"]))
    app.include_router(predict.activation)
    app.include_router(models.router)
    app.include_router(items.router)  # an action-feature model's catalog (issue 54)
    app.include_router(dashboard.stats)
    app.include_router(dashboard.replicas)
    app.include_router(health.router)
    # Azure Personalizer's rank / reward / activate on the same models (docs/PERSONALIZER.md).
    app.include_router(personalizer.router)
    # The dashboard page and its files (not in the OpenAPI document: a page, not an API).
    app.include_router(dashboard.page)
    app.mount(dashboard.STATIC_PATH, dashboard.static_files(), name="dashboard-static")
    # The last added is the outermost: CORS answers preflights and labels every answer, metrics
    # count everything, then request ids / 415 / 429, then the body limit, then the hot routes.
    app.add_middleware(predict.HotRoutes, routes=app.router.routes, handlers=app.exception_handlers)
    app.add_middleware(
        errors.BodyLimit,
        max_bytes=settings.max_body_bytes,
        state_bytes=settings.max_model_bytes,
        admin_key=settings.admin_key,
        keys_configured=bool(settings.admin_key or settings.api_key_set),
    )
    app.add_middleware(RequestHygiene, rate_limit=settings.rate_limit)
    app.add_middleware(HTTPMetrics, routes=app.router.routes)
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Content-Type", "X-API-Key", "X-Request-ID"],
            expose_headers=[
                "X-Request-ID",
                "X-Model-Version",
                "X-Checksum",
                "Retry-After",
                MISDIRECTED_HEADER,
            ],
        )
    return app
