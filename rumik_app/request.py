"""`SynthesisRequest`: everything one utterance needs, shared by the engine, app, runner, GRPO.

    from rumik_app.request import SynthesisRequest, resolve_seed
    req = SynthesisRequest("नमस्ते <laugh> दोस्त", voice="Ira", tone="happy", seed=resolve_seed(None))

The one home of the request defaults (sampling settings, token bounds, the default model and
the seed range): the engine's `RowParams`, GRPO's `RolloutConfig`, the benchmark runner, the
app and the CLI all read them from here.

Light on purpose (no torch import), so `evaluation` systems and the app can build requests
without loading the model stack.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, replace

from rumik_app.text.normalize import normalize_text
from rumik_app.prompt import MAX_TEXT_CHARS, PromptError, build_prompt, validate_text

DEFAULT_MODEL = "rumik-ai/rumik-oss-1"  # hub id of the released checkpoint
TINY_MODEL = "tiny"  # random weights in the published format (rumik_app.checkpoint.tiny)
DEFAULT_VOICE = "Ira"
# The optional prompt condition (docs/ARCHITECTURE.md §3), as fields of manifests, prompt sets
# and requests. This order is the key order of prepared index rows (training.prepare), whose
# sha256 seeds the SFT data order: keep it.
DESCRIPTION_FIELDS = ("description", "tone", "accent", "pace")
CONDITION_FIELDS = ("voice", *DESCRIPTION_FIELDS)
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 30
DEFAULT_TOP_P = 1.0
DEFAULT_MIN_NEW_TOKENS = 8
DEFAULT_MAX_NEW_TOKENS = 2048
# Hard cap on generated tokens per utterance: ~30 s of audio, the longest training clips.
MAX_NEW_TOKENS_CAP = 3072
# Default length cap per utterance (chunk) of the CLI and the app, in seconds of audio; `tiny`
# gets a short one: its random weights rarely stop by themselves, so every run fills the
# whole budget with noise (20 s of it took ~30 s on a CPU).
DEFAULT_MAX_SECONDS = 20.0
TINY_MAX_SECONDS = 3.0
# Seeds are in [0, SEED_RANGE): the engine draws a fresh one there when none is given, the
# benchmark runner derives per-clip seeds into it, and GRPO's group seeds stay inside it.
SEED_RANGE = 2**31


@dataclass(frozen=True)
class SynthesisRequest:
    """One utterance to synthesise.

    text: what to say; may hold inline `<laugh>`, `<chuckle>`, `<sigh>`.
    voice/tone/accent/pace/description: the prompt condition (docs/ARCHITECTURE.md §3).
    seed: None draws a fresh seed (reported back on the result); an int reproduces exactly.
    temperature/top_k/top_p: sampling; temperature 0 is greedy; top_k 0 disables top-k.
    min_new_tokens/max_new_tokens: generated-token bounds (100 tokens = 1 s of audio).
    language: optional ISO code or name: speaking-rate estimates, and the language numbers are
        read in for text in its script (None: decided per clause from the script).
    normalize: read numbers, money, dates, times and abbreviations as words
        (`rumik_app.normalize.normalize_text`) before building the prompt; False sends the
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
    min_new_tokens: int = DEFAULT_MIN_NEW_TOKENS
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    language: str | None = None
    normalize: bool = True

    def spoken_text(self, max_chars: int = MAX_TEXT_CHARS) -> str:
        """The text the model reads: validated (the limit applies to the text as typed), then
        normalised unless `normalize` is False. Raises PromptError on bad text or language."""
        text = validate_text(self.text, max_chars=max_chars)
        if not self.normalize:
            return text
        try:
            return normalize_text(text, self.language)
        except ValueError as exc:  # unknown language
            raise PromptError(str(exc)) from None

    def prompt(self, max_chars: int = MAX_TEXT_CHARS, **kwargs) -> str:
        """The prompt string (no BOS) this request produces; raises PromptError on bad input."""
        text = self.spoken_text(max_chars)
        return build_prompt(text, self.voice, self.tone, self.accent, self.pace, self.description,
                            max_chars=max(max_chars, len(text)), **kwargs)

    def with_(self, **changes) -> "SynthesisRequest":
        """A copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def resolve_seed(seed: int | None) -> int:
    """The seed to use: the given one, or (None or negative) a fresh random one in [0, SEED_RANGE),
    which the caller reports back so the result can be reproduced."""
    return int(seed) if seed is not None and int(seed) >= 0 else secrets.randbelow(SEED_RANGE)
