"""`SynthesisRequest`: everything one utterance needs, checked once, and `build_request`, the one builder.

    from rumik_app.request import SynthesisRequest, build_request
    req = SynthesisRequest("नमस्ते <laugh> दोस्त", voice="Ira", tone="happy", seed=7)
    SynthesisRequest("hi", temperature=3)   # PromptError: Temperature 3 is out of range: use 0 (greedy) to 2.
    req = build_request({"text": "hi", "voice": "ira", "max_seconds": 5, "top_k": 40}, voices=("Ira", "Zoya"))
    chunk = req.with_(text="first sentence.", seed=req.seed + 1)   # only the changed fields are checked

The one home of every request setting: every field of `SynthesisRequest` (text-side,
sampling, and any added since) and `max_seconds` (`LengthSetting`), each declared once by
`setting()`: its default, its check (bounds and message), a help line, how the app's form
shows it, and how it travels (a wire field, a CLI flag, by reference, or neither). A request
checks every setting that has a check when it is made, so every front end gives the same
message for the same bad value, and nothing downstream clamps: the engines, the decoders and
vLLM trust `max_new_tokens <= MAX_NEW_TOKENS_CAP`. A bad value raises `PromptError` whose
`field` names it (the server's `param`). The CLI's flags, the protocols' fields and the app's
form are derived from `request_settings()`; a person's fields become a request through
`build_request` only (docs/ARCHITECTURE.md §5: how to add a setting).

Light on purpose (no torch import), so `evaluation` systems and the app can build requests
without loading the model stack.
"""

from __future__ import annotations

import math
import numbers
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, Field, asdict, dataclass, fields

from rumik_app.prompt import (
    ACCENTS,
    MAX_TEXT_CHARS,
    PACES,
    TONES,
    VOICES,
    PromptError,
    build_prompt,
    format_description,
    normalize_voice,
    validate_text,
)
from rumik_app.settings import (
    Checkbox,
    Dropdown,
    NumberBox,
    Slider,
    Textbox,
    derive,
    setting,
    setting_type,
    wire_name,
)
from rumik_app.text.languages import LANGUAGES, get_language
from rumik_app.text.lexicon import MAX_SPOKEN_CHARS, Lexicon, apply_lexicons, check_lexicons
from rumik_app.text.normalize import normalize_text

DEFAULT_MODEL = "rumik-ai/rumik-oss-1"  # hub id of the released checkpoint
TINY_MODEL = "tiny"  # random weights in the published format (rumik_app.checkpoint.tiny)
DEFAULT_VOICE = "Ira"
# The optional prompt condition (docs/ARCHITECTURE.md §3), as fields of manifests, prompt sets
# and requests. This order is the key order of prepared index rows (training.prepare), whose
# sha256 seeds the SFT data order: keep it.
DESCRIPTION_FIELDS = ("description", "tone", "accent", "pace")
CONDITION_FIELDS = ("voice", *DESCRIPTION_FIELDS)
DEFAULT_TEMPERATURE = 0.8
MAX_TEMPERATURE = 2.0
DEFAULT_TOP_K = 30
MAX_TOP_K = 200
DEFAULT_TOP_P = 1.0
# Repetition penalty (CTRL's, as transformers and vLLM apply it): a code this row already
# produced has its logit divided by the penalty when positive, multiplied when negative. 1 is
# off and exact (x / 1 == x), so the default leaves every token unchanged.
DEFAULT_REPETITION_PENALTY = 1.0
MAX_REPETITION_PENALTY = 2.0
DEFAULT_MIN_NEW_TOKENS = 8
DEFAULT_MAX_NEW_TOKENS = 2048
# Hard cap on generated tokens per utterance (chunk): ~30 s of audio, the longest training
# clips. Decoders size their per-row buffers by it.
MAX_NEW_TOKENS_CAP = 3072
# Length cap per utterance (chunk) in seconds of audio: the default of the CLI and the app,
# and the most any front end accepts (the token cap at 100 tokens/s, in whole seconds).
# `tiny` gets a short default: its random weights rarely stop by themselves, so every run
# fills the whole budget with noise (20 s of it took ~30 s on a CPU).
DEFAULT_MAX_SECONDS = 20.0
TINY_MAX_SECONDS = 3.0
MAX_SECONDS = 30.0


def default_max_seconds(model: str) -> float:
    """The length cap per utterance chunk when a request gives none: short for `tiny`."""
    return TINY_MAX_SECONDS if model == TINY_MODEL else DEFAULT_MAX_SECONDS

# Seeds are in [0, SEED_RANGE) when drawn: the engine draws a fresh one there when none is
# given, the benchmark runner derives per-clip seeds into it, and GRPO's group seeds stay
# inside it. A caller's own seed may go up to MAX_SEED: integers up to 2^53 survive JSON
# and JavaScript exactly, and seed + sample index + the stop-head offset stays an int64.
SEED_RANGE = 2**31
MAX_SEED = 2**53
RANDOM_SEED = -1  # what the CLI, the app and the server accept for "draw one"


MAX_SHOWN_CHARS = 40  # a message quotes at most this much of a bad value


def _show(value) -> str:
    """A value as a message quotes it, the same whether it came typed (CLI), as JSON (the
    server) or from a slider (the app): 3, 3.0 and "3" all read "3"; a huge integer reads
    ~1e400 and a long text is cut, so a message stays short whatever was sent."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        text = repr(value)
        return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "…"
    if isinstance(value, numbers.Integral):
        whole = int(value)
        if abs(whole) < 10**15:
            return str(whole)
        return f"~{'-' if whole < 0 else ''}1e{int(whole.bit_length() * 0.30103)}"
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{float(value):g}"


def _number(value, what: str, field: str) -> float:
    """`value` as a float for a range check; an integer too large for a float is infinite."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PromptError(f"{what} must be a number, not {_show(value)}.", field=field)
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_temperature(value) -> float:
    """0 (greedy) to MAX_TEMPERATURE."""
    t = _number(value, "Temperature", "temperature")
    if not 0.0 <= t <= MAX_TEMPERATURE:
        raise PromptError(f"Temperature {_show(value)} is out of range: use 0 (greedy) to {MAX_TEMPERATURE:g}.",
                          field="temperature")
    return t


def check_top_k(value) -> int:
    """A whole number 0 (off) to MAX_TOP_K."""
    k = _number(value, "Top-k", "top_k")
    if not (math.isfinite(k) and k == int(k) and 0 <= k <= MAX_TOP_K):
        raise PromptError(f"Top-k {_show(value)} is out of range: use a whole number 0 (off) to {MAX_TOP_K}.",
                          field="top_k")
    return int(k)


def check_top_p(value) -> float:
    """Above 0, at most 1."""
    p = _number(value, "Top-p", "top_p")
    if not 0.0 < p <= 1.0:
        raise PromptError(f"Top-p {_show(value)} is out of range: use a value above 0 and at most 1.", field="top_p")
    return p


def check_repetition_penalty(value) -> float:
    """Above 0, at most MAX_REPETITION_PENALTY (1 = off)."""
    r = _number(value, "Repetition penalty", "repetition_penalty")
    if not 0.0 < r <= MAX_REPETITION_PENALTY:
        raise PromptError(f"Repetition penalty {_show(value)} is out of range: use a value above 0 and at most "
                          f"{MAX_REPETITION_PENALTY:g} (1 = off; above 1 discourages repeating audio codes).",
                          field="repetition_penalty")
    return r


def _check_tokens(value, lowest: int, name: str) -> int:
    n = _number(value, name, name)
    if not (math.isfinite(n) and n == int(n) and lowest <= n <= MAX_NEW_TOKENS_CAP):
        raise PromptError(f"{name} {_show(value)} is out of range: use a whole number {lowest} to {MAX_NEW_TOKENS_CAP} "
                          "(100 tokens = 1 s of audio).", field=name)
    return int(n)


def check_min_new_tokens(value) -> int:
    """Generated tokens before a row may end: a whole number 0 to MAX_NEW_TOKENS_CAP."""
    return _check_tokens(value, 0, "min_new_tokens")


def check_max_new_tokens(value) -> int:
    """Generated tokens per utterance (chunk) at most: a whole number 1 to MAX_NEW_TOKENS_CAP."""
    return _check_tokens(value, 1, "max_new_tokens")


def check_seed(value) -> int | None:
    """None or RANDOM_SEED (-1): draw one (None); else a whole number 0 to MAX_SEED."""
    if value is None:
        return None
    message = (f"Seed {_show(value)} is not valid. Use {RANDOM_SEED} for a random seed or a whole number from 0 to "
               f"{MAX_SEED:,}.")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PromptError(message, field="seed")
    whole = isinstance(value, numbers.Integral) or (math.isfinite(value) and value == int(value))
    if not whole or not RANDOM_SEED <= value <= MAX_SEED:  # an int is compared exactly, however large
        raise PromptError(message, field="seed")
    return None if value == RANDOM_SEED else int(value)


def check_language(value) -> str | None:
    """None (decided per clause from the script), or a supported language's code or name."""
    if value is not None:
        get_language(value)  # PromptError naming the supported languages
    return value


def check_max_seconds(value) -> float:
    """A length cap per utterance: above 0, at most MAX_SECONDS."""
    s = _number(value, "Max seconds", "max_seconds")
    if not 0.0 < s <= MAX_SECONDS:
        raise PromptError(f"Max seconds {_show(value)} is out of range: use more than 0 and at most {MAX_SECONDS:g}.",
                          field="max_seconds")
    return s


def tokens_for_seconds(seconds, frame_rate_hz: float = 12.5, tokens_per_frame: int = 8) -> int:
    """The token budget for at most `seconds` of audio (checked: `check_max_seconds`), in whole
    frames, at least one. With the published layout that is at most 3,000 tokens."""
    frames = math.floor(check_max_seconds(seconds) * frame_rate_hz + 1e-9)
    return min(max(tokens_per_frame, frames * tokens_per_frame), MAX_NEW_TOKENS_CAP)


@dataclass(frozen=True)
class RequestLimits:
    """How much one request may ask for at a front end: characters as typed, characters once
    numbers are read out (normalisation can multiply a text: "₹99,99,999" is 9 characters
    and 64 spoken ones in Tamil), and seconds of audio summed over its chunks (None: no cap).
    `BaseEngine.plan(req, limits)` checks all three."""

    max_chars: int
    max_spoken_chars: int
    max_audio_seconds: float | None = None

    def check_spoken(self, typed: str, spoken: str) -> None:
        if len(spoken) > self.max_spoken_chars:
            raise PromptError(
                f"This text is {len(typed):,} characters as typed but reads as {len(spoken):,} once numbers, "
                f"amounts and dates are spelled out; the limit is {self.max_spoken_chars:,}. Split it into "
                "smaller parts.", field="text")

    def check_budget(self, chunk_tokens: list[int], tokens_per_second: float) -> None:
        """chunk_tokens: each chunk's max_new_tokens."""
        seconds = sum(chunk_tokens) / tokens_per_second
        if self.max_audio_seconds is not None and seconds > self.max_audio_seconds:
            raise PromptError(
                f"This request could make up to {seconds:,.0f} s of audio ({len(chunk_tokens)} chunks of up to "
                f"{max(chunk_tokens) / tokens_per_second:.0f} s); the limit here is {self.max_audio_seconds:.0f} s. "
                "Shorten the text or lower max_seconds.", field="text")


# The library and the CLI take a chapter; the public front ends take less, so that one
# visitor cannot hold the shared model for long: the app ~2 minutes of speech, the speech
# server OpenAI's input limit (which clients already split text for). A plain text at a
# front end's typed limit always passes the other two bounds.
LIBRARY_LIMITS = RequestLimits(MAX_TEXT_CHARS, 4 * MAX_TEXT_CHARS)
APP_LIMITS = RequestLimits(2_000, 4_000, 300.0)
SERVER_LIMITS = RequestLimits(4_096, 8_192, 600.0)


# ---------------------------------------------------------------- one declaration per setting
# How a form shows a setting (the app turns each into its widget: webapp.synth_widgets).
SECONDS_STEP = 0.5  # the length slider's floor and step (the engine rounds up to whole 80 ms frames)


@dataclass(frozen=True, kw_only=True)
class SamplingSettings:
    """How a row's tokens are drawn (docs/ARCHITECTURE.md §5), each setting declared once.

    `SynthesisRequest` is one (a request carries its settings), so is the decoders' `RowParams`
    (`rumik_app.decode.sampling`: these plus the row's seed), and the vLLM processors read them
    from the row. Adding a setting here reaches every front end (`request_settings()`); only the
    sampler's rule for it is code of its own. Keyword-only, so a request's text stays its first
    positional field.
    """

    temperature: float = setting(DEFAULT_TEMPERATURE, check_temperature, "0 = greedy, at most 2",
                                 Slider(0.0, MAX_TEMPERATURE, 0.05, "Temperature (0 = greedy)"))
    top_k: int = setting(DEFAULT_TOP_K, check_top_k, f"0 = off, at most {MAX_TOP_K}",
                         Slider(0, MAX_TOP_K, 1, "Top-k (0 = off)"))
    top_p: float = setting(DEFAULT_TOP_P, check_top_p, "above 0, at most 1 (1 = off)",
                           Slider(0.05, 1.0, 0.05, "Top-p"))
    repetition_penalty: float = setting(
        DEFAULT_REPETITION_PENALTY, check_repetition_penalty,
        f"above 1 discourages repeating audio codes (1 = off, at most {MAX_REPETITION_PENALTY:g})",
        Slider(0.5, MAX_REPETITION_PENALTY, 0.05, "Repetition penalty (1 = off)"))
    # Set by code; the front ends take max_seconds instead (`LengthSetting`).
    min_new_tokens: int = setting(DEFAULT_MIN_NEW_TOKENS, check_min_new_tokens,
                                  "generated tokens before the utterance may end", wire=False, flag=False)
    max_new_tokens: int = setting(DEFAULT_MAX_NEW_TOKENS, check_max_new_tokens,
                                  f"generated tokens at most, per chunk (100 = 1 s; at most {MAX_NEW_TOKENS_CAP})",
                                  wire=False, flag=False)

    def __post_init__(self) -> None:
        for spec in _checked_fields(type(self)):  # canonical types too: a slider's 30.0 is top_k 30
            object.__setattr__(self, spec.name, spec.metadata["check"](getattr(self, spec.name)))

    def with_(self, **changes):
        """A copy with some fields changed; only those are checked (the rest were, when this was made)."""
        return derive(self, type(self), **changes)


def _checked_fields(cls: type) -> list[Field]:
    return [spec for spec in fields(cls) if spec.metadata.get("check") is not None]


def wire_settings() -> list[Field]:
    """The sampling settings a client sets by name, in declaration order; `spec.name`,
    `spec.default`, `setting_type(spec)` and `spec.metadata` ("help", "form", "check") describe each."""
    return [spec for spec in fields(SamplingSettings) if wire_name(spec)]


def sampling_defaults() -> dict[str, object]:
    """Every sampling setting's declared default, by name: where a config that samples (GRPO's
    rollouts, the benchmark runner, the voice trainer) starts unless it chooses otherwise."""
    return {spec.name: spec.default for spec in fields(SamplingSettings)}


@dataclass(frozen=True)
class SynthesisRequest(SamplingSettings):
    """One utterance to synthesise; every setting with a check is checked when it is made (each
    field's help says what it is). The prompt condition (voice, tone, accent, pace, description:
    docs/ARCHITECTURE.md §3) is checked when the prompt is built (`prompt()`), against the
    checkpoint's own voices. seed None (or -1) draws a fresh one, reported back on the result.
    normalize (`rumik_app.text.normalize_text`) is the one switch for the engine, CLI, app and
    runner. Lexicons' entries beat the built-in abbreviations; an alias's numbers are read. The
    sampling settings (keyword-only) are `SamplingSettings`'.
    """

    text: str = setting(MISSING, None, "text to speak; inline <laugh> <chuckle> <sigh> allowed; text that starts "
                        "with <speak> is SSML (break, say-as, sub, prosody rate, voice, lang, p, s)",
                        Textbox("Text", lines=4))
    voice: str = setting(DEFAULT_VOICE, None, "a voice of the checkpoint (not given: its first, Ira in the "
                         "published one), or of a voice library; any case", Dropdown("Voice", VOICES))
    tone: str | None = setting(None, None, " | ".join(TONES), Dropdown("Tone", TONES, none=True))
    accent: str | None = setting(None, None, " | ".join(ACCENTS), Dropdown("Accent", ACCENTS, none=True))
    pace: str | None = setting(None, None, " | ".join(PACES), Dropdown("Pace", PACES, none=True))
    description: str | None = setting(None, None, "free-form description instead of tone/accent/pace",
                                      Textbox("Free-form description"))
    seed: int | None = setting(None, check_seed, "reproducible sampling; -1 or none = a random seed (reported)",
                               NumberBox("Seed (-1 = random)", blank=RANDOM_SEED))
    language: str | None = setting(None, check_language, "ISO code or name: speaking-rate estimates and the "
                                   "language numbers are read in (default: per clause, from the script)",
                                   Dropdown("Language", tuple((f"{lang.name} ({lang.script})", lang.code)
                                                              for lang in LANGUAGES), none=True))
    normalize: bool = setting(True, None, "read numbers, money, dates and times as words; off sends the text as typed",
                              Checkbox("Read numbers, money, dates and times as words"))
    lexicons: tuple[Lexicon, ...] = setting(
        (), check_lexicons, "pronunciation lexicons: aliases said instead of their graphemes, before normalisation "
        "(on the wire the ids of stored lexicons; on the command line files, .pls, .tsv or .json, repeatable)",
        wire="lexicon", flag="--lexicon", by_reference=True)

    def spoken_text(self, max_chars: int = MAX_TEXT_CHARS, max_spoken_chars: int = MAX_SPOKEN_CHARS) -> str:
        """The text the model reads: validated (the limit applies to the text as typed), then
        its lexicons' aliases applied (`rumik_app.text.lexicon`; PromptError as soon as they grow
        it past `max_spoken_chars`, before any normalising), then normalised unless `normalize`
        is False. Raises PromptError on bad text."""
        text = validate_text(self.text, max_chars=max_chars)
        text = apply_lexicons(text, self.lexicons, self.language, max_spoken_chars) if self.lexicons else text
        return normalize_text(text, self.language) if self.normalize else text

    def prompt(self, max_chars: int = MAX_TEXT_CHARS, **kwargs) -> str:
        """The prompt string (no BOS) this request produces; raises PromptError on bad input."""
        text = self.spoken_text(max_chars)
        return build_prompt(text, self.voice, self.tone, self.accent, self.pace, self.description,
                            max_chars=max(max_chars, len(text)), **kwargs)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LengthSetting:
    """The length cap a person sets instead of max_new_tokens: seconds of audio per utterance
    (per chunk of long text), which `build_request` turns into tokens with the checkpoint's layout."""

    max_seconds: float = setting(DEFAULT_MAX_SECONDS, check_max_seconds,
                                 f"length cap per utterance (per chunk for long text) in seconds, at most "
                                 f"{MAX_SECONDS:g} ({TINY_MAX_SECONDS:g} by default for the random-weight tiny)",
                                 Slider(SECONDS_STEP, MAX_SECONDS, SECONDS_STEP, "Max seconds (per sentence chunk)"))


def request_settings() -> list[Field]:
    """Every setting a person gives a request, each declared once (`setting()`): the request's
    fields as `fields(SynthesisRequest)` orders them (the sampling settings first), then
    max_seconds. The CLI's flags, the protocols' fields and the app's form derive from these."""
    return [*fields(SynthesisRequest), *fields(LengthSetting)]


# ---------------------------------------------------------------- the one builder

# What a front end may hand `build_request` (None = not given): every declared setting.
REQUEST_FIELDS = tuple(spec.name for spec in request_settings())


def build_request(values: Mapping[str, object], voices: Sequence[str] | None = None,
                  limits: RequestLimits | None = None, default_max_seconds: float | None = None,
                  tokens_for: Callable[[float], int] | None = None) -> SynthesisRequest:
    """User fields -> a checked SynthesisRequest with its seed drawn: every front end that takes
    a person's fields builds its requests here (the CLI, the app, the OpenAI route, Silk,
    text-in), each mapping its own field names onto these (`REQUEST_FIELDS`). (The benchmark
    runner and GRPO make theirs from prompt files, with `SynthesisRequest` directly: the same checks.)

    values: None or absent = not given; "" is "not given" too for a text setting that may be
    left out (tone, accent, pace, description, language: a form's empty choice); a switch
    (normalize) is read as true or false. voices: the checkpoint's (the voice is checked and
    spelled as there, default the first); None: not known yet, any name passes and the prompt
    checks it. limits: the front end's (the text as typed is checked here; the spoken length
    and the audio budget when an engine plans it). Length: max_new_tokens if given, else
    max_seconds, else `default_max_seconds`, as tokens by `tokens_for` (default the published
    layout, `tokens_for_seconds`); else the request default. PromptError names the field.
    """
    given = {name: value for name, value in values.items() if value is not None}
    unknown = sorted(set(given) - set(REQUEST_FIELDS))
    if unknown:
        raise TypeError(f"build_request: unknown field {unknown[0]!r}")
    options = {spec.name: _given(spec, given[spec.name]) for spec in fields(SynthesisRequest) if spec.name in given}
    options = {name: value for name, value in options.items() if value is not None}
    text = validate_text(options.pop("text", ""), max_chars=(limits or LIBRARY_LIMITS).max_chars)
    format_description(*(options.get(name) for name in ("tone", "accent", "pace", "description")))
    voice = options.pop("voice", voices[0] if voices else DEFAULT_VOICE)
    if voices is not None:
        voice = normalize_voice(voice, voices)
    seconds = given.get("max_seconds", default_max_seconds)
    if seconds is not None:
        seconds = check_max_seconds(seconds)  # checked even where max_new_tokens, given too, wins
        options.setdefault("max_new_tokens", (tokens_for or tokens_for_seconds)(seconds))
    req = SynthesisRequest(text, voice, **options)
    return req.with_(seed=resolve_seed(req.seed))


def _given(spec: Field, value):
    """A given value as the request takes it: "" of a text setting that may be left out is not
    given (None); a switch is true or false."""
    kind = None if spec.metadata.get("by_reference") else setting_type(spec)
    if kind is str and spec.default is None and value == "":
        return None
    return bool(value) if kind is bool else value


def resolve_seed(seed: int | None) -> int:
    """The seed to use: the given one, or (None or negative) a fresh random one in [0, SEED_RANGE),
    which the caller reports back so the result can be reproduced."""
    return int(seed) if seed is not None and int(seed) >= 0 else secrets.randbelow(SEED_RANGE)
