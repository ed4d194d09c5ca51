"""The `/v1/audio/speech` request (OpenAI's schema plus this model's controls) and its checks.

    body = SpeechRequest(model="rumik-oss-1", input="नमस्ते <laugh>", voice="Ira", response_format="pcm",
                         tone="happy", seed=7)
    req = to_synthesis_request(body, voices=backend.voices, max_new_tokens_for=...)   # ApiError on bad input

OpenAI fields: `model`, `input`, `voice` (a name, or `{"id": name}`), `instructions` (the
free-form description), `response_format` (wav | pcm | mp3 | opus | flac; default mp3 as
OpenAI), `speed`, `stream_format` (audio | sse). Extra fields (`extra_body` in the openai
client): `tone`, `accent`, `pace`, `seed`, `temperature`, `top_k`, `top_p`, `repetition_penalty`, `max_seconds`,
`normalize`, `language`. Unknown fields are an error (a typo in `extra_body` must not be
silently ignored).

`speed` maps to the model's pace, which has three trained values, not a continuous rate:
at most 0.9 -> "slow", at least 1.1 -> "fast", in between -> the pace is left as given
(none = the voice's natural pace). The audio is never time-stretched. Outside OpenAI's
range 0.25-4.0, or together with a different `pace`, it is an error.

Messages are the project's own: every range and its message comes from
`rumik_app.request` (and the text, voice and description checks from `rumik_app.prompt`),
so the CLI, the app and this server say the same thing about the same bad value.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from rumik_app.prompt import PromptError, format_description, normalize_voice, validate_text
from rumik_app.request import SERVER_LIMITS, SynthesisRequest, check_seed
from rumik_app.serve.encoding import FORMATS, STREAMED_FORMATS
from rumik_app.serve.protocol import EngineFailed, ServerBusy, ShuttingDown

log = logging.getLogger(__name__)

SPEED_RANGE = (0.25, 4.0)  # OpenAI's
SLOW_SPEED, FAST_SPEED = 0.9, 1.1  # speed <= 0.9 -> "slow", >= 1.1 -> "fast"
# `model` values accepted besides the served name: OpenAI's TTS model names, which clients
# send by default (they all mean "this server's model").
OPENAI_MODEL_NAMES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
DEFAULT_FORMAT = "mp3"  # OpenAI's default


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


class VoiceRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str


class SpeechRequest(BaseModel):
    """The JSON body of POST /v1/audio/speech."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input: str
    voice: str | VoiceRef
    instructions: str | None = None
    response_format: str = DEFAULT_FORMAT
    speed: float | None = None
    stream_format: Literal["audio", "sse"] = "audio"
    # this model's controls (extra_body)
    tone: str | None = None
    accent: str | None = None
    pace: str | None = None
    seed: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    max_seconds: float | None = None
    normalize: bool = True
    language: str | None = None


@dataclass
class SpeechJob:
    """A checked request: what to synthesise and how to send it."""

    request: SynthesisRequest
    response_format: str
    sse: bool


def check_model(name: str, accepted: Sequence[str]) -> None:
    if name in accepted or name in OPENAI_MODEL_NAMES or name.startswith("gpt-4o-mini-tts"):
        return
    raise ApiError(404, f"The model {name!r} does not exist on this server. Use {accepted[0]!r} (GET /v1/models); "
                        f"the OpenAI names {', '.join(OPENAI_MODEL_NAMES)} also select it.",
                   param="model", code="model_not_found")


def check_format(fmt: str, sse: bool) -> str:
    fmt = fmt.strip().lower()
    if fmt not in FORMATS:
        raise ApiError(400, f"Unsupported response_format {fmt!r}. Choose one of: {', '.join(FORMATS)}.",
                       param="response_format", code="unsupported_format")
    if sse and fmt not in STREAMED_FORMATS:
        raise ApiError(400, f"response_format {fmt!r} cannot be streamed as events (its header needs the length). "
                            f"With stream_format 'sse' choose one of: {', '.join(STREAMED_FORMATS)}.",
                       param="response_format", code="unsupported_format")
    return fmt


def pace_for_speed(speed: float | None, pace: str | None, instructions: str | None) -> str | None:
    """The pace a request asks for, from `pace` and OpenAI's `speed` (see the module docstring)."""
    if speed is None:
        return pace
    lo, hi = SPEED_RANGE
    if not math.isfinite(speed) or not lo <= speed <= hi:
        raise ApiError(400, f"speed {speed} is out of range: use {lo} to {hi} (1.0 = natural pace).", param="speed")
    wanted = "slow" if speed <= SLOW_SPEED else "fast" if speed >= FAST_SPEED else None
    if wanted is None:
        return pace
    if pace and pace.strip().lower() != wanted:
        raise ApiError(400, f"speed {speed} means pace {wanted!r}, but pace {pace!r} was given; send one of them.",
                       param="speed")
    if instructions:
        raise ApiError(400, f"speed {speed} sets the pace ({wanted!r}), which cannot be combined with instructions "
                            "(a free-form description). Describe the pace in the instructions instead, or drop them.",
                       param="speed")
    return wanted


# A request field under its name in this API (OpenAI's), where the two differ.
API_PARAMS = {"text": "input", "description": "instructions"}


def _prompt_check(check: Callable[[], object], param: str):
    """check(), a PromptError answered as a 400 naming the field (the error's own, else `param`)."""
    try:
        return check()
    except PromptError as exc:
        raise ApiError(400, str(exc), param=API_PARAMS.get(exc.field, exc.field) or param) from None


def parse_voice_map(spec: str | None, voices: Sequence[str]) -> dict[str, str]:
    """`"alloy=Ira,nova=Aisha"` -> {"alloy": "Ira", "nova": "Aisha"} (names lower-cased);
    ValueError for a malformed entry or a target that is not one of `voices`."""
    mapping: dict[str, str] = {}
    for entry in (spec or "").split(","):
        if not entry.strip():
            continue
        name, sep, target = entry.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise ValueError(f"--voice-map entry {entry!r} is not NAME=VOICE (e.g. alloy=Ira).")
        try:
            mapping[name.strip().lower()] = normalize_voice(target.strip(), voices)
        except PromptError as exc:
            raise ValueError(f"--voice-map {entry.strip()}: {exc}") from None
    return mapping


def to_synthesis_request(body: SpeechRequest, voices: Sequence[str], max_new_tokens_for: Callable[[float], int],
                         max_text_chars: int = SERVER_LIMITS.max_chars,
                         voice_map: dict[str, str] | None = None,
                         default_max_new_tokens: int | None = None) -> SpeechJob:
    """Check every field and build the SynthesisRequest; ApiError names the field and the fix.

    voice_map: other names for the voices (lower-case name -> voice), for clients that can
    only send OpenAI's voice names (`--voice-map alloy=Ira`); default_max_new_tokens: the
    cap per chunk when the request has no max_seconds (the server's --max-seconds)."""
    sse = body.stream_format == "sse"
    fmt = check_format(body.response_format, sse)
    text = _prompt_check(lambda: validate_text(body.input, max_chars=max_text_chars), "input")
    voice_name = body.voice.id if isinstance(body.voice, VoiceRef) else body.voice
    voice_name = (voice_map or {}).get(voice_name.strip().lower(), voice_name)
    voice = _prompt_check(lambda: normalize_voice(voice_name, voices), "voice")
    pace = pace_for_speed(body.speed, body.pace, body.instructions)
    for name, value in (("tone", body.tone), ("accent", body.accent), ("pace", pace)):
        if value:
            _prompt_check(lambda: format_description(**{name: value}), name)
    _prompt_check(lambda: format_description(body.tone, body.accent, pace, body.instructions), "instructions")
    seed = _prompt_check(lambda: check_seed(body.seed), "seed")
    options = {name: value for name, value in (("temperature", body.temperature), ("top_k", body.top_k),
                                               ("top_p", body.top_p), ("repetition_penalty", body.repetition_penalty))
               if value is not None}
    if body.max_seconds is not None:  # PromptError outside 0-30 s (rumik_app.request.check_max_seconds)
        options["max_new_tokens"] = _prompt_check(lambda: max_new_tokens_for(body.max_seconds), "max_seconds")
    elif default_max_new_tokens is not None:
        options["max_new_tokens"] = default_max_new_tokens
    req = _prompt_check(lambda: SynthesisRequest(
        text=text, voice=voice, tone=body.tone or None, accent=body.accent or None, pace=pace or None,
        description=body.instructions or None, seed=seed, language=body.language or None, normalize=body.normalize,
        **options), "input")
    return SpeechJob(req, fmt, sse)


def validation_error(errors: Sequence[dict]) -> ApiError:
    """One ApiError for pydantic's errors on the request body (the first one, OpenAI-worded)."""
    err = errors[0] if errors else {"type": "", "loc": (), "msg": "Invalid request body."}
    loc = [str(part) for part in err.get("loc", ()) if part != "body"]
    param = loc[0] if loc else None
    kind = err.get("type", "")
    if kind == "missing":
        return ApiError(400, f"Missing required parameter: {param!r}.", param=param, code="missing_required_parameter")
    if kind == "extra_forbidden":
        extras = ("tone, accent, pace, seed, temperature, top_k, top_p, repetition_penalty, max_seconds, normalize, "
                  "language")
        return ApiError(400, f"Unrecognized request argument supplied: {param}. This server also accepts: {extras}.",
                        param=param, code="unknown_parameter")
    if kind.startswith("json"):
        return ApiError(400, f"The request body is not valid JSON: {err.get('msg')}.", code="invalid_json")
    where = ".".join(loc) or "body"
    return ApiError(400, f"Invalid value for {where!r}: {err.get('msg')}.", param=param, code="invalid_value")


def engine_error(exc: Exception) -> ApiError:
    """The ApiError for what an adapter raises before the first audio."""
    if isinstance(exc, PromptError):
        return ApiError(400, str(exc), param=exc.field or "input")
    if isinstance(exc, (ServerBusy, ShuttingDown)):
        code = "server_busy" if isinstance(exc, ServerBusy) else "shutting_down"
        return ApiError(503, str(exc), type="server_error", code=code,
                        headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, EngineFailed):
        log.error("the speech engine failed: %s", exc)
        return ApiError(500, "The speech engine failed; the server log says why.", type="server_error",
                        code="backend_failed")
    log.error("speech request failed", exc_info=exc)
    return ApiError(500, "Synthesis failed; the server log says why.", type="server_error", code="server_error")
