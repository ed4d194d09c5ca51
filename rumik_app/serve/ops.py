"""The server's own routes, for operators: health, metrics, and unloading the model.

    GET  /health            200 {"status": "ok", ...ServingStats} (503 while draining or after the engine died)
    GET  /metrics           Prometheus text (rumik_app.serve.metrics)
    POST /v1/admin/unload   frees the model's memory until the next request; needs the admin key
                            (--admin-key), checked in front (`gate.admin_error`)
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from rumik_app.serve.context import ServeContext
from rumik_app.serve.errors import ApiError
from rumik_app.serve.metrics import CONTENT_TYPE

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> JSONResponse:
    ctx: ServeContext = request.app.state.ctx
    stats = ctx.adapter.stats()
    status = "ok" if stats.healthy and not stats.draining else "draining" if stats.healthy else "failed"
    body = {"status": status, "model": ctx.model_name, "backend": ctx.adapter.backend, **stats.to_dict()}
    return JSONResponse(body, status_code=200 if status == "ok" else 503)


@router.get("/metrics")
async def prometheus(request: Request) -> Response:
    return Response(request.app.state.ctx.metrics.render(), media_type=CONTENT_TYPE)


@router.post("/v1/admin/unload")
async def admin_unload(request: Request) -> dict:
    """Unload the model now (its memory is freed; the next request reloads it)."""
    ctx: ServeContext = request.app.state.ctx
    try:
        unloaded = await ctx.adapter.unload()
    except NotImplementedError as exc:
        raise ApiError(501, str(exc), code="not_supported") from None
    if not unloaded:
        raise ApiError(409, "Requests are decoding or waiting; the model can be unloaded once they finish "
                            "(or it unloads by itself after --idle-unload).", code="busy")
    return {"loaded": False}
