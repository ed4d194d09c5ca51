"""The `/v1/audio/speech` request (OpenAI's schema plus this model's controls), mapped onto the one builder.

    body = SpeechRequest(model="rumik-oss-1", input="नमस्ते <laugh>", voice="Ira", response_format="pcm",
                         tone="happy", seed=7)
    job = speech_job(body, ctx)       # SpeechJob(request, response_format, sse); ApiError on bad input

OpenAI fields: `model`, `input`, `voice` (a name, or `{"id": name}`), `instructions` (the
free-form description), `response_format` (wav | pcm | mp3 | opus | flac | ulaw | alaw | aac;
default mp3 as OpenAI), `speed`, `stream_format` (audio | sse). Extra fields (`extra_body` in the
openai client): `sample_rate` (one of rumik_app.resample.RATES; default 8000 for ulaw/alaw, else
the model's 24000), `dialogue`, `dialogue_gap`, `spans`, `timestamps`, and every request setting
that travels on the wire under its own name (`rumik_app.serve.fields`: `tone`, `accent`, `pace`,
`seed`, the sampling settings, `max_seconds`, `normalize`, `language`, `lexicon` ids, and any
setting declared since). Unknown fields are an error (a typo in `extra_body` must not be
silently ignored).

`speed` maps to the model's pace, which has three trained values, not a continuous rate:
at most 0.9 -> "slow", at least 1.1 -> "fast", in between -> the pace is left as given
(none = the voice's natural pace). The audio is never time-stretched. Outside OpenAI's
range 0.25-4.0, or together with a different `pace`, it is an error.

Messages are the project's own: this module only maps OpenAI's names onto
`rumik_app.request.build_request` (OPENAI_NAMES: `input` -> text, `instructions` -> description;
`voice` through `--voice-map`, `speed` -> pace), which checks every value, so the CLI, the app and
every protocol of this server say the same thing about the same bad value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, StrictInt

from rumik_app.engine.script import DEFAULT_GAP_SECONDS, Part
from rumik_app.prompt import PromptError, normalize_voice
from rumik_app.request import SynthesisRequest
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import STREAMED_FORMATS, format_problem, output_rate, rate_problem
from rumik_app.serve.errors import ApiError, prompt_error
from rumik_app.serve.fields import protocol_model, setting_values
from rumik_app.serve.protocol import OPEN_OWNER
from rumik_app.serve.scripts import first_request

SPEED_RANGE = (0.25, 4.0)  # OpenAI's
SLOW_SPEED, FAST_SPEED = 0.9, 1.1  # speed <= 0.9 -> "slow", >= 1.1 -> "fast"
# `model` values accepted besides the served name: OpenAI's TTS model names, which clients
# send by default (they all mean "this server's model").
OPENAI_MODEL_NAMES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
DEFAULT_FORMAT = "mp3"  # OpenAI's default
# OpenAI's names for the request's settings, where they differ from the declared wire names.
OPENAI_NAMES = {"text": "input", "description": "instructions"}
OPENAI_FIELDS = ("model", "input", "voice", "instructions", "response_format", "speed", "stream_format")


class VoiceRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str


class OpenAIFields(BaseModel):
    """What this protocol itself knows of POST /v1/audio/speech: OpenAI's fields, and this
    server's own controls that are not request settings (`SpeechRequest` adds those)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input: str
    voice: str | VoiceRef
    response_format: str = DEFAULT_FORMAT
    speed: float | None = None
    stream_format: Literal["audio", "sse"] = "audio"
    # this model's controls (extra_body)
    # Hz, one of rumik_app.resample.RATES (None: 8000 for ulaw/alaw, else the model's); strict: `true` is not 1
    sample_rate: StrictInt | None = None
    dialogue: bool = False  # input is a script: "Name (tone, pace): text" per line, one clip out
    dialogue_gap: float | None = None  # seconds of silence between turns (default 0.3)
    spans: bool = False  # answer JSON: the whole file in base64 and where each part (turn, SSML run) sits
    # word timestamps: JSON with the whole file in base64 and its words, or with SSE word events between the audio
    timestamps: bool = False


# The JSON body of POST /v1/audio/speech: OpenAI's fields and every request setting on the wire.
SpeechRequest = protocol_model("SpeechRequest", OpenAIFields, OPENAI_NAMES)
# This model's controls beyond OpenAI's fields, as the error for an unknown field lists them.
EXTRA_FIELDS = tuple(name for name in SpeechRequest.model_fields if name not in OPENAI_FIELDS)


@dataclass
class SpeechJob:
    """A checked request: what to synthesise and how to send it."""

    request: SynthesisRequest  # a script's: its first spoken part (its seed is the script's base)
    response_format: str
    sse: bool
    parts: list[Part] | None = None  # a dialogue or SSML script (rumik_app.serve.scripts)
    sample_rate: int | None = None  # the output rate in Hz (speech_job sets it; None: the format's default)
    timestamps: bool = False  # align the words (rumik_app.serve.words)


def check_model(name: str, accepted: Sequence[str]) -> None:
    if name in accepted or name in OPENAI_MODEL_NAMES or name.startswith("gpt-4o-mini-tts"):
        return
    raise ApiError(404, f"The model {name!r} does not exist on this server. Use {accepted[0]!r} (GET /v1/models); "
                        f"the OpenAI names {', '.join(OPENAI_MODEL_NAMES)} also select it.",
                   param="model", code="model_not_found")


def check_format(fmt: str, sse: bool) -> str:
    fmt = fmt.strip().lower()
    if problem := format_problem(fmt):
        raise ApiError(400, problem, param="response_format", code="unsupported_format")
    if sse and fmt not in STREAMED_FORMATS:
        raise ApiError(400, f"response_format {fmt!r} cannot be streamed as events (its header needs the length). "
                            f"With stream_format 'sse' choose one of: {', '.join(STREAMED_FORMATS)}.",
                       param="response_format", code="unsupported_format")
    return fmt


def check_rate(fmt: str, rate: int | None, source_rate: int) -> int:
    """The output rate of `fmt` for a requested `sample_rate` (None: the format's default); ApiError
    naming the allowed rates."""
    if problem := rate_problem(fmt, rate):
        raise ApiError(400, problem, param="sample_rate", code="unsupported_sample_rate")
    return output_rate(fmt, source_rate, rate)


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


def request_fields(body: SpeechRequest, voice_map: dict[str, str] | None = None) -> dict:
    """This API's fields under `build_request`'s names (OPENAI_NAMES: `input` is the text,
    `instructions` the description); `speed` sets the pace (ApiError when it contradicts it),
    and `voice` may be one of `voice_map`'s names (lower-case name -> voice)."""
    voice = body.voice.id if isinstance(body.voice, VoiceRef) else body.voice
    return {**setting_values(body, OPENAI_NAMES), "voice": (voice_map or {}).get(voice.strip().lower(), voice),
            "pace": pace_for_speed(body.speed, body.pace, body.instructions)}


def speech_job(body: SpeechRequest, ctx: ServeContext, owner: str = OPEN_OWNER) -> SpeechJob:
    """Check the format and every field, and build the request (`ctx.build`: this server's
    voices, limits and default length; `owner`'s lexicons by id); ApiError names the field by
    its name in this API."""
    sse = body.stream_format == "sse"
    fmt = check_format(body.response_format, sse)
    rate = check_rate(fmt, body.sample_rate, ctx.adapter.sample_rate)
    if body.spans and sse:
        raise ApiError(400, "spans come in one JSON answer with the whole file; drop stream_format \"sse\" (or "
                            "spans).", param="spans")
    if body.timestamps:
        check_timestamps(body, ctx)
    lexicons = ctx.lexicons.resolve(owner, body.lexicon)
    values = {**request_fields(body, ctx.voice_map), "lexicons": lexicons or None}
    try:
        gap = DEFAULT_GAP_SECONDS if body.dialogue_gap is None else body.dialogue_gap
        parts = ctx.build_script(values, dialogue=body.dialogue, gap_s=gap)
        request = ctx.build(values) if parts is None else first_request(parts)
    except PromptError as exc:
        raise prompt_error(exc) from None
    if parts is not None and body.timestamps:
        raise ApiError(400, "word timestamps are not available for dialogue or SSML input yet; send plain text "
                            "(or drop timestamps and use spans for each part's place).", param="timestamps")
    return SpeechJob(request, fmt, sse, parts, rate, body.timestamps)


def check_timestamps(body: SpeechRequest, ctx: ServeContext) -> None:
    """`timestamps: true` needs this server's aligners and does not combine with `spans`."""
    if body.spans:
        raise ApiError(400, "timestamps and spans are two JSON answers; ask for one.", param="timestamps")
    if ctx.aligners is None:
        raise ApiError(400, "this server gives no word timestamps (it was started with --aligner none); drop "
                            "timestamps or ask its operator.", param="timestamps")


def validation_error(errors: Sequence[dict]) -> ApiError:
    """One ApiError for pydantic's errors on the request body (the first one, OpenAI-worded)."""
    err = errors[0] if errors else {"type": "", "loc": (), "msg": "Invalid request body."}
    loc = [str(part) for part in err.get("loc", ()) if part != "body"]
    param = loc[0] if loc else None
    kind = err.get("type", "")
    if kind == "missing":
        return ApiError(400, f"Missing required parameter: {param!r}.", param=param, code="missing_required_parameter")
    if kind == "extra_forbidden":
        return ApiError(400, f"Unrecognized request argument supplied: {param}. This server also accepts: "
                             f"{', '.join(EXTRA_FIELDS)}.", param=param, code="unknown_parameter")
    if kind.startswith("json"):
        return ApiError(400, f"The request body is not valid JSON: {err.get('msg')}.", code="invalid_json")
    where = ".".join(loc) or "body"
    return ApiError(400, f"Invalid value for {where!r}: {err.get('msg')}.", param=param, code="invalid_value")
