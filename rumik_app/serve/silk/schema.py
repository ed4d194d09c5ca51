"""Rumik's hosted API ("Silk") as this server reads it: fields, voices, tones and errors.

    fields = SilkFields.parse({"text": "[happy] Namaste!", "model": "muga"})   # SilkError if malformed
    voice = SilkVoice().updated(fields)             # a session keeps the voice its first frame set
    req = silk_request(fields, voice, ctx)          # ctx: the server's ServeContext (its one builder)
    SilkError(422, "...", "unknown_speaker").body()   # {"error": msg, "message": msg, "code": ...}

The official clients (`rumik-ai`, `pipecat-rumik`, `livekit-plugins-rumik`) send
`{text, model, description, speaker, temperature, top_p, top_k, repetition_penalty,
max_new_tokens}` (pipecat and livekit also `f0_up_key`); see docs/ARCHITECTURE.md §15.
The protocol has no format or rate field (the clients expect 24 kHz 16-bit audio), so this
server adds its own, as it adds `seed` (an int: the same audio again): `response_format`
(`/v1/tts`: any of the speech route's formats, default wav; the socket: pcm, ulaw or alaw,
default pcm) and `sample_rate` (rumik_app.resample.RATES; default 8000 for ulaw/alaw, else
24000), checked by `silk_output`, and on the socket `timestamps` (true: each utterance's
words with their times, as `words` frames between its audio; `check_silk_timestamps`).
Both model names select this server's one model:
  mulberry  the voice from `speaker` and `description`;
  muga      a leading tone tag in the text, `[happy] Namaste!`: neutral (no tone), happy,
            sad, excited, angry (and this model's `professional`). `whisper` has no
            equivalent here: a 400 that says so. The tag is read under both names.
`speaker`: Ira, Aisha, Siya or Zoya in any case; the legacy `speaker_1..4` are Ira, Siya,
Aisha, Zoya (the livekit plugin's mapping). Hosted-only names (emma, lucas, ...) get a 422
naming this server's voices. `f0_up_key` other than 0 is a 400: pitch shifting is a feature
of the hosted voices. Every other value is checked by `rumik_app.request.build_request` (one
message per bad value, as on every front end); the sampling fields are `rumik_app.serve.fields`'.

Errors use the hosted API's body, which the SDK parses into its exception classes by
status (400 BadRequest, 401 Authentication, 404 NotFound, 422 UnprocessableEntity, 429
RateLimit, 503 ServiceUnavailable); over the socket the same fields ride in a `type:
"error"` frame with `status`. No client error is ever a 5xx: the SDK retries those.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, ValidationError

from rumik_app.engine.script import Part
from rumik_app.prompt import TONES, PromptError, normalize_voice
from rumik_app.request import CONDITION_FIELDS, SynthesisRequest
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import format_problem, output_rate, rate_problem
from rumik_app.serve.fields import protocol_model, setting_values, settings_taken

SILK_MODELS = ("muga", "mulberry")
DEFAULT_SILK_MODEL = "muga"  # every client's default
LEGACY_SPEAKERS = {"speaker_1": "Ira", "speaker_2": "Siya", "speaker_3": "Aisha", "speaker_4": "Zoya"}
# The hosted muga tones, as this model's tones (None: no tone in the prompt).
SILK_TONES: dict[str, str | None] = {"neutral": None, "happy": "happy", "sad": "sad", "excited": "excited",
                                     "angry": "angry"}
NO_EQUIVALENT_TONES = ("whisper",)
_TONE_TAG = re.compile(r"^\s*\[([^\[\]]{1,32})\]\s*")
# Silk's names for the request's settings, and the settings the hosted protocol does not have: its
# tone is a tag in the text, its length max_new_tokens (every client sends it), and it knows no
# accent, pace, language, number reading or lexicons.
SILK_NAMES = {"voice": "speaker"}
SILK_LEAVES_OUT = ("tone", "accent", "pace", "language", "normalize", "lexicons", "max_seconds")


class SilkError(Exception):
    """A refused request, in the hosted API's shape (see the module docstring)."""

    def __init__(self, status: int, message: str, code: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}

    def body(self) -> dict:
        return {"error": self.message, "message": self.message, "code": self.code}

    def frame(self) -> dict:
        return {"type": "error", **self.body(), "status": self.status}


class SilkOwnFields(BaseModel):
    """What this protocol itself knows of a request body or socket frame (unknown keys refused:
    a typo must not pass silently); `SilkFields` adds the request's settings it takes."""

    model_config = ConfigDict(extra="forbid")

    type: str | None = None  # socket control frames: "cancel", "close"
    text: str | None = None  # may start with a tone tag: split_tone_tag
    model: str | None = None
    speaker: str | None = None
    f0_up_key: float | None = None
    max_new_tokens: int | None = None
    response_format: str | None = None  # this server's: see silk_output
    sample_rate: StrictInt | None = None  # this server's: Hz, one of rumik_app.resample.RATES (`true` is not 1)
    timestamps: StrictBool | None = None  # this server's: `words` frames on the socket (see check_silk_timestamps)

    @classmethod
    def parse(cls, data) -> "SilkFields":
        """SilkFields from decoded JSON; SilkError 422 naming the first bad field."""
        if not isinstance(data, dict):
            raise SilkError(422, "The body must be a JSON object, e.g. {\"text\": \"Namaste!\"}.", "invalid_request")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err.get("loc", ())) or "body"
            if err.get("type") == "extra_forbidden":
                known = ", ".join(name for name in cls.model_fields if name != "type")
                raise SilkError(422, f"{field}: unknown field. This server accepts: {known}.",
                                "unknown_field") from None
            raise SilkError(422, f"{field}: {err.get('msg')}.", "invalid_request") from None


# One request body or socket frame: the protocol's own fields, then the request's settings it takes.
SilkFields = protocol_model("SilkFields", SilkOwnFields, SILK_NAMES, leave_out=SILK_LEAVES_OUT)
# Fields whose bad value is a 422 (unprocessable content), as the hosted API answers; a bad
# voice, tone or description is a 400.
UNPROCESSABLE_FIELDS = (*(spec.name for spec in settings_taken(SilkFields, SILK_NAMES)
                          if spec.name not in CONDITION_FIELDS), "max_new_tokens")


@dataclass(frozen=True)
class SilkVoice:
    """What a socket session keeps between frames: the voice (the SDK sends it in the first
    frame only). A `speaker` or `description` in a later frame replaces it for this and later
    utterances; sampling settings and the seed belong to the frame that carries them."""

    speaker: str | None = None
    description: str | None = None

    def updated(self, fields: SilkFields) -> "SilkVoice":
        given = {name: getattr(fields, name) for name in ("speaker", "description")
                 if getattr(fields, name) is not None}
        return replace(self, **given)


@dataclass(frozen=True)
class SilkAudio:
    """A socket session's output (`response_format`, `sample_rate`; None: the defaults; and
    `timestamps`: word frames, default off): like the voice, a frame's values hold until a
    frame changes them."""

    response_format: str | None = None
    sample_rate: int | None = None
    timestamps: bool = False

    def updated(self, fields: SilkFields) -> "SilkAudio":
        given = {name: getattr(fields, name) for name in ("response_format", "sample_rate", "timestamps")
                 if getattr(fields, name) is not None}
        return replace(self, **given)


def silk_output(fmt: str | None, rate: int | None, default: str, allowed: Sequence[str],
                source_rate: int) -> tuple[str, int]:
    """(format, output rate in Hz) for the extension fields (None: `default`, the format's rate);
    SilkError 400 naming the allowed formats or rates."""
    fmt = (fmt or default).strip().lower()
    if problem := format_problem(fmt, tuple(allowed)):
        raise SilkError(400, problem, "unsupported_format")
    if problem := rate_problem(fmt, rate):
        raise SilkError(400, problem, "unsupported_sample_rate")
    return fmt, output_rate(fmt, source_rate, rate)


def check_silk_timestamps(timestamps: bool | None, ctx: ServeContext, parts: list[Part] | None = None,
                          socket: bool = True) -> None:
    """`timestamps: true` needs this server's aligners (`ctx.aligners`), plain text (not SSML)
    and the socket, whose `words` frames carry them (`/v1/tts` answers a WAV alone); SilkError 400."""
    if not timestamps:
        return
    if not socket:
        raise SilkError(400, "timestamps come as `words` frames on the socket (POST /v1/tts/ws-connect); /v1/tts "
                             "answers a WAV alone. For one JSON answer with the audio and its words, POST "
                             "/v1/audio/speech with timestamps: true.", "unsupported_parameter")
    if ctx.aligners is None:
        raise SilkError(400, "This server gives no word timestamps (it was started with --aligner none); send "
                             "timestamps: false or ask its operator.", "timestamps_unavailable")
    if parts is not None:
        raise SilkError(400, "Word timestamps are not available for SSML text yet; send plain text, or "
                             "timestamps: false for this utterance.", "unsupported_parameter")


def check_silk_model(name: str | None, accepted: Sequence[str]) -> str:
    """The model name (default muga); SilkError 404 for another."""
    name = (name or DEFAULT_SILK_MODEL).strip()
    if name.lower() in SILK_MODELS or name in accepted:
        return name
    raise SilkError(404, f"The model {name!r} does not exist on this server. Use muga or mulberry (both are "
                         f"{accepted[0]}).", "model_not_found")


def silk_speaker(name: str | None, voices: Sequence[str]) -> str:
    """A Silk speaker name as one of `voices` (default: the first)."""
    if name is None or not name.strip():
        return voices[0]
    key = name.strip().lower()
    try:
        return normalize_voice(LEGACY_SPEAKERS.get(key, key), voices)
    except PromptError:
        legacy = ", ".join(f"{k} = {v}" for k, v in LEGACY_SPEAKERS.items())
        raise SilkError(422, f"Unknown speaker {name!r}. This server's voices are {', '.join(voices)} (any case; "
                             f"legacy {legacy}). The hosted API's other voices are not part of rumik-oss-1.",
                        "unknown_speaker") from None


def split_tone_tag(text: str) -> tuple[str | None, str]:
    """A leading `[tone]` tag -> (this model's tone or None, the rest of the text)."""
    match = _TONE_TAG.match(text)
    if match is None:
        return None, text
    tag = match.group(1).strip().lower()
    if tag in SILK_TONES:
        return SILK_TONES[tag], text[match.end():]
    if tag in TONES:
        return tag, text[match.end():]
    choices = ", ".join([*SILK_TONES, *(t for t in TONES if t not in SILK_TONES)])
    if tag in NO_EQUIVALENT_TONES:
        raise SilkError(400, f"The tone [{tag}] has no equivalent in rumik-oss-1. Use one of: {choices} "
                             "(or a description with model mulberry).", "unsupported_tone")
    raise SilkError(400, f"Unknown tone tag [{tag}]. Start the text with one of: {choices}, e.g. "
                         "\"[happy] Namaste!\".", "unsupported_tone")


def check_f0(value: float | None) -> None:
    if value is not None and (not math.isfinite(value) or value != 0):
        raise SilkError(400, f"f0_up_key {value:g} asks for a pitch shift, which is a feature of Rumik's hosted "
                             "voices; rumik-oss-1 has no pitch control. Send 0 or leave it out.",
                        "unsupported_parameter")


def silk_request(fields: SilkFields, voice: SilkVoice, ctx: ServeContext) -> SynthesisRequest:
    """The checked SynthesisRequest for one utterance: this frame's text and sampling settings
    with the session's voice (already updated with this frame's fields), built by the server's
    one builder (`ctx.build`: its voices, limits and default length when no max_new_tokens is
    given). SilkError names the fix. (SSML text: `silk_script` first.)"""
    values = _silk_values(fields, voice, ctx)
    try:
        return ctx.build(values)
    except PromptError as exc:
        raise _silk_prompt_error(exc) from None


def silk_script(fields: SilkFields, voice: SilkVoice, ctx: ServeContext) -> list[Part] | None:
    """The checked script of an utterance whose text is SSML (starts with `<speak>`), or None
    for plain text (`silk_request`); its parts play in order (`rumik_app.serve.scripts`)."""
    values = _silk_values(fields, voice, ctx)
    try:
        return ctx.build_script(values)
    except PromptError as exc:
        raise _silk_prompt_error(exc) from None


def _silk_values(fields: SilkFields, voice: SilkVoice, ctx: ServeContext) -> dict:
    check_f0(fields.f0_up_key)
    tone, text = split_tone_tag(fields.text or "")
    voice_name = silk_speaker(voice.speaker, ctx.adapter.voices)
    return {**setting_values(fields, SILK_NAMES), "text": text, "voice": voice_name, "tone": tone,
            "description": voice.description, "max_new_tokens": fields.max_new_tokens}


def _silk_prompt_error(exc: PromptError) -> SilkError:
    status = 422 if exc.field in UNPROCESSABLE_FIELDS else 400
    return SilkError(status, str(exc), "invalid_request")
