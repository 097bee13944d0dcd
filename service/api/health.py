"""``/healthz`` (the process is alive), ``/readyz`` (store reachable, models loaded), ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service.api import metrics
from service.api.predict import RuntimeDep
from service.api.schemas import error_responses

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={
        503: {
            "description": "Not ready: starting (compiling kernels, loading models), the default model "
            "missing, or the store unreachable; `detail` says which"
        }
    },
)
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    ready, doing = runtime.status()
    if not ready:
        return JSONResponse({"status": "not ready", "detail": doing}, status_code=503)
    try:
        await runtime.store.ping()
    except Exception as exc:
        return JSONResponse({"status": "store unreachable", "detail": str(exc)}, status_code=503)
    return JSONResponse({"status": "ready", "models": sorted(runtime.models)})


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
        **error_responses(503),
    },
)
async def prometheus(runtime: RuntimeDep) -> Response:
    """Prometheus text format (merged over workers in multiprocess mode)."""
    data, content_type = await metrics.render(runtime)
    return Response(data, media_type=content_type)
