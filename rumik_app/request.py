"""`SynthesisRequest`: everything one utterance needs, checked once for every front end.

    from rumik_app.request import SynthesisRequest, resolve_seed
    req = SynthesisRequest("नमस्ते <laugh> दोस्त", voice="Ira", tone="happy", seed=resolve_seed(None))
    SynthesisRequest("hi", temperature=3)   # PromptError: Temperature 3 is out of range: use 0 (greedy) to 2.

The one home of every request setting: its default, its bounds and the message for a value
outside them. A `SynthesisRequest` checks its sampling and length fields when it is made,
so the CLI, the app, the speech server, the benchmark runner and GRPO all give the same
message for the same bad value, and nothing downstream clamps: the engines, the decoders
and vLLM trust `max_new_tokens <= MAX_NEW_TOKENS_CAP`. A bad value raises `PromptError`
whose `field` names it (the server's `param`). The text, voice and description are checked
when the prompt is built (`prompt()`), against the checkpoint's own voices.

Light on purpose (no torch import), so `evaluation` systems and the app can build requests
without loading the model stack.
"""

from __future__ import annotations

import math
import numbers
import secrets
from dataclasses import asdict, dataclass, replace

from rumik_app.prompt import MAX_TEXT_CHARS, PromptError, build_prompt, validate_text
from rumik_app.text.languages import get_language
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


def _show(value) -> str:
    """A value as a message quotes it, the same whether it came typed (CLI), as JSON (the
    server) or from a slider (the app): 3, 3.0 and "3" all read "3"."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return repr(value)
    if isinstance(value, numbers.Integral) or (math.isfinite(value) and value == int(value) and abs(value) < 1e15):
        return str(int(value))
    return f"{float(value):g}"


def _number(value, what: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PromptError(f"{what} must be a number, not {_show(value)}.", field=field)
    return float(value)


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


def check_new_tokens(min_new_tokens, max_new_tokens) -> tuple[int, int]:
    """(min, max) generated tokens per utterance: 0 <= min, 1 <= max <= MAX_NEW_TOKENS_CAP."""
    out = []
    for value, lo, field in ((min_new_tokens, 0, "min_new_tokens"), (max_new_tokens, 1, "max_new_tokens")):
        n = _number(value, field, field)
        if not (math.isfinite(n) and n == int(n) and lo <= n <= MAX_NEW_TOKENS_CAP):
            raise PromptError(f"{field} {_show(value)} is out of range: use a whole number {lo} to {MAX_NEW_TOKENS_CAP} "
                              "(100 tokens = 1 s of audio).", field=field)
        out.append(int(n))
    return out[0], out[1]


def check_seed(value) -> int | None:
    """None or RANDOM_SEED (-1): draw one (None); else a whole number 0 to MAX_SEED."""
    if value is None:
        return None
    message = (f"Seed {_show(value)} is not valid. Use {RANDOM_SEED} for a random seed or a whole number from 0 to "
               f"{MAX_SEED:,}.")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PromptError(message, field="seed")
    if not math.isfinite(value) or value != int(value) or not RANDOM_SEED <= value <= MAX_SEED:
        raise PromptError(message, field="seed")
    return None if value == RANDOM_SEED else int(value)


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


@dataclass(frozen=True)
class SynthesisRequest:
    """One utterance to synthesise; the sampling and length fields are checked when it is made.

    text: what to say; may hold inline `<laugh>`, `<chuckle>`, `<sigh>`.
    voice/tone/accent/pace/description: the prompt condition (docs/ARCHITECTURE.md §3).
    seed: None (or -1) draws a fresh seed (reported back on the result); an int reproduces exactly.
    temperature/top_k/top_p: sampling; temperature 0 is greedy; top_k 0 disables top-k.
    repetition_penalty: 1 = off; above 1 lowers the logits of codes already generated.
    min_new_tokens/max_new_tokens: generated-token bounds per chunk (100 tokens = 1 s of audio).
    language: optional ISO code or name: speaking-rate estimates, and the language numbers are
        read in for text in its script (None: decided per clause from the script).
    normalize: read numbers, money, dates, times and abbreviations as words
        (`rumik_app.text.normalize_text`) before building the prompt; False sends the
        text as typed. The one switch for the engine, CLI, app and runner.
    """

    text: str
    voice: str = DEFAULT_VOICE
    tone: str | None = None
    accent: str | None = None
    pace: str | None = None
    description: str | None = None
    seed: int | None = None
    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    repetition_penalty: float = DEFAULT_REPETITION_PENALTY
    min_new_tokens: int = DEFAULT_MIN_NEW_TOKENS
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    language: str | None = None
    normalize: bool = True

    def __post_init__(self) -> None:
        min_new, max_new = check_new_tokens(self.min_new_tokens, self.max_new_tokens)
        checked = dict(temperature=check_temperature(self.temperature), top_k=check_top_k(self.top_k),
                       top_p=check_top_p(self.top_p),
                       repetition_penalty=check_repetition_penalty(self.repetition_penalty),
                       min_new_tokens=min_new, max_new_tokens=max_new, seed=check_seed(self.seed))
        if self.language is not None:
            get_language(self.language)  # PromptError naming the supported languages
        for name, value in checked.items():  # canonical types (a slider's 30.0 is top_k 30)
            object.__setattr__(self, name, value)

    def spoken_text(self, max_chars: int = MAX_TEXT_CHARS) -> str:
        """The text the model reads: validated (the limit applies to the text as typed), then
        normalised unless `normalize` is False. Raises PromptError on bad text."""
        text = validate_text(self.text, max_chars=max_chars)
        return normalize_text(text, self.language) if self.normalize else text

    def prompt(self, max_chars: int = MAX_TEXT_CHARS, **kwargs) -> str:
        """The prompt string (no BOS) this request produces; raises PromptError on bad input."""
        text = self.spoken_text(max_chars)
        return build_prompt(text, self.voice, self.tone, self.accent, self.pace, self.description,
                            max_chars=max(max_chars, len(text)), **kwargs)

    def with_(self, **changes) -> "SynthesisRequest":
        """A copy with some fields changed (checked again)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_seed(seed: int | None) -> int:
    """The seed to use: the given one, or (None or negative) a fresh random one in [0, SEED_RANGE),
    which the caller reports back so the result can be reproduced."""
    return int(seed) if seed is not None and int(seed) >= 0 else secrets.randbelow(SEED_RANGE)
