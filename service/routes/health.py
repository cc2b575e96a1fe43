"""Probes and metrics; open without an API key so orchestrators can reach them."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from service.metrics import CONTENT_TYPE, render
from service.schemas import Health

router = APIRouter(tags=["operations"])


@router.get(
    "/healthz",
    response_model=Health,
    response_model_exclude_none=True,
    summary="Liveness: the process answers",
)
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=Health,
    summary="Readiness: Redis reachable and a worker alive",
    responses={503: {"model": Health, "description": "Not ready"}},
)
def readyz(request: Request) -> JSONResponse:
    try:
        request.app.state.redis.ping()
        workers = request.app.state.queue_factory().workers_alive()
    except Exception as exc:  # any failure to reach Redis means "not ready"
        body = Health(status="unavailable", redis=False, detail=f"redis: {exc}")
        return JSONResponse(body.model_dump(), status_code=503)
    if workers < 1:
        body = Health(status="unavailable", redis=True, workers=0, detail="no worker is alive")
        return JSONResponse(body.model_dump(), status_code=503)
    return JSONResponse(Health(status="ok", redis=True, workers=workers).model_dump())


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
def metrics(request: Request) -> Response:
    return Response(render(request.app.state.registry), media_type=CONTENT_TYPE)
