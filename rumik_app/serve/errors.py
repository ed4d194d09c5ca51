"""The speech server's errors as clients read them: `ApiError` (OpenAI's body, or Rumik's).

    raise ApiError(400, "Unsupported response_format 'ogg'. ...", param="response_format")
    ApiError(503, "...", code="server_busy").body()          # {"error": {message, type, param, code}}
    raise engine_error(exc) from None                        # what an adapter raised, as one error

Every route and the gate in front of them (`rumik_app.serve.gate`) answer with these; Rumik's
protocol has its own shape for its routes (`rumik_app.serve.silk.schema.SilkError`).
"""

from __future__ import annotations

import logging

from rumik_app.engine.serving import EngineFailed, ServerBusy, ShuttingDown
from rumik_app.prompt import PromptError
from rumik_app.watermark import WatermarkUnavailable

log = logging.getLogger(__name__)
# A request field under its name in OpenAI's API, where the two differ.
API_PARAMS = {"text": "input", "description": "instructions", "pause": "dialogue_gap", "speakers": "input"}


class ApiError(Exception):
    """An error answered as OpenAI does: `{"error": {"message", "type", "param", "code"}}`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 type: str = "invalid_request_error", headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type
        self.headers = headers or {}

    def body(self, silk: bool = False) -> dict:
        """OpenAI's error body; silk: Rumik's hosted API's, `{"error", "message", "code"}`."""
        if silk:
            return {"error": self.message, "message": self.message, "code": self.code}
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def prompt_error(exc: PromptError) -> ApiError:
    """A request that cannot be built, as a 400 naming the field by its name in this API."""
    return ApiError(400, str(exc), param=API_PARAMS.get(exc.field or "text", exc.field))


def engine_error(exc: Exception) -> ApiError:
    """The ApiError for what an adapter raises before the first audio."""
    if isinstance(exc, PromptError):
        return prompt_error(exc)
    if isinstance(exc, (ServerBusy, ShuttingDown)):
        code = "server_busy" if isinstance(exc, ServerBusy) else "shutting_down"
        return ApiError(503, str(exc), type="server_error", code=code,
                        headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, EngineFailed):
        log.error("the speech engine failed: %s", exc)
        return ApiError(500, "The speech engine failed; the server log says why.", type="server_error",
                        code="backend_failed")
    if isinstance(exc, WatermarkUnavailable):  # this voice's audio must be marked: refused, never sent unmarked
        log.error("refused a request that must be watermarked: %s", exc)
        return ApiError(500, str(exc), type="server_error", code="watermark_unavailable")
    log.error("speech request failed", exc_info=exc)
    return ApiError(500, "Synthesis failed; the server log says why.", type="server_error", code="server_error")
