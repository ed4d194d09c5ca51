"""GRPO reward functions (docs/ARCHITECTURE.md §7), built from the evaluation metrics and an ASR judge.

Library module, no command line; `training.grpo.trainer` builds them from the config's `rewards`
list. Every reward has one TRL-style signature::

    reward(prompts, rollouts, **columns) -> list[float | None]      # one value per row

prompts: one `SynthesisRequest` per rollout row (a plain string works as the text);
rollouts: the `rumik_app.decode.rollouts.Rollouts` the rows came from (may be None when a
reward only needs the audio); columns: per-row lists from the prompt set (`text`,
`language`, `domain`, any extra field) plus `audio` (float32 waveforms, when some reward
sets `needs_audio`), `sample_rate` and `frame_rate_hz` (scalars). None = abstain: the
row carries no signal in that stream (see `training.grpo.loss`). Extra columns a reward
does not use are ignored (`**_`).

Built-in kinds:
Texts are compared in spoken form, as the engine synthesised them: a request's
`spoken_text()` (numbers, money, dates and times as words unless `normalize=False`), a
plain-string prompt through `evaluation.text.spoken_form`; the transcript through
`spoken_form` too. Both rewards use that text (duration counts the spoken characters).

- `content`: c = 1 - min(1, err) with err = `evaluation.metrics.content_error` of the
  spoken prompt text against the ASR transcript, both in spoken form (GCER for Indic
  scripts, `wer_weight` * WER + (1 - wer_weight) * CER for Latin). `segmentation` picks GCER's clusters: "grapheme"
  (default; the `grapheme` package, Unicode 13.0 rules, as the release's GCER) or
  "unicode" (regex `\\X`, Unicode 15.1+: a conjunct is one cluster); see
  evaluation.metrics. The config always records it (`RewardSpec` fills in the default).
  Abstains when the judge cannot handle the row's language (`evaluation.asr.ASRError`),
  when the language is outside `languages`, and when the text normalises to nothing.
- `duration`: d = -|ln(t_gen / t_exp)|, t_gen = frames / frame rate (at least one frame),
  t_exp = speakable characters / rate. Rates are chars/s per language, looked up as
  `rates["<code>:<voice>"]`, then `rates["<code>"]`, then `rumik_app.text.languages`; times the
  pace multiplier of the request's pace (slow 0.8, fast 1.2). Abstains on empty text.
- `codebook0_low`: the fraction of codebook-0 codes below `threshold` (default half the
  codebook) in each rollout; deterministic and ASR-free, it is the smoke-test reward.
- `function`: any importable `module:function` with the signature above; `kwargs` from
  config are bound with functools.partial. Set `needs_audio` in config if it reads `audio`.
"""

from __future__ import annotations

import functools
import importlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from evaluation.metrics import DEFAULT_WER_WEIGHT, content_error
from evaluation.text import DEFAULT_SEGMENTATION, check_segmentation, normalize, spoken_form
from rumik_app.errors import ConfigError
from rumik_app.text.languages import PACE_RATE, get_language, rate_for_text, speakable_length

RewardFn = Callable[..., list]
DEFAULT_ASR = "pocketsphinx"
DEFAULT_FRAME_RATE_HZ = 12.5
SMOKE_CODE_THRESHOLD = 1024
REWARD_KINDS = ("content", "duration", "codebook0_low", "function")


@dataclass
class RewardSpec:
    """One reward stream in a GRPO config.

    name: the stream's name in logs (`rewards/<name>/mean`); kind: one of REWARD_KINDS;
    function: `module:function` for kind "function"; kwargs: constructor/partial arguments
    (content: asr, wer_weight, languages, segmentation; duration: rates; codebook0_low: threshold;
    a content stream without `segmentation` gets DEFAULT_SEGMENTATION written in, so the
    saved config says which GCER the run was rewarded with);
    routing: this stream's row of W (Q codebook weights, then the stop slot), or None for
    the kind's default (content -> codebook 0, duration -> stop slot, others -> everything);
    needs_audio: for kind "function", decode audio for it.
    """

    name: str
    kind: str = "function"
    function: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    routing: list[float] | None = None
    needs_audio: bool = False

    def __post_init__(self) -> None:
        if self.kind == "content":
            self.kwargs = {"segmentation": DEFAULT_SEGMENTATION, **self.kwargs}

    def check(self) -> None:
        """ConfigError naming the stream and the key for settings that cannot run (before any model loads)."""
        if self.kind not in REWARD_KINDS:
            raise ConfigError(f"reward {self.name!r}: unknown kind {self.kind!r}; use one of {REWARD_KINDS}")
        if self.kind == "content":
            try:
                check_segmentation(self.kwargs.get("segmentation"))
            except ValueError as exc:
                raise ConfigError(f"reward {self.name!r}: kwargs.segmentation: {exc}") from None


def _text(prompt: Any, language: str | None = None) -> str:
    """The text the engine synthesised for this prompt (see the module docstring)."""
    if hasattr(prompt, "spoken_text"):
        return prompt.spoken_text()
    return spoken_form(prompt.text if hasattr(prompt, "text") else str(prompt), language)


def _row_value(columns: dict, key: str, i: int, prompt: Any = None) -> Any:
    """Column `key` for row i, falling back to the request's attribute of the same name."""
    col = columns.get(key)
    if col is not None and not isinstance(col, (str, bytes)) and i < len(col) and col[i] is not None:
        return col[i]
    return getattr(prompt, key, None)


class ContentReward:
    """c = 1 - min(1, content_error(text, ASR transcript)); see the module docstring.

    judge: any object with `transcribe(samples, sample_rate, language) -> str`; None loads
    `evaluation.asr.load_asr(asr)` on first use. languages: ISO codes to score (None: all
    the judge accepts). segmentation: GCER's clusters, "grapheme" or "unicode".
    """

    kind = "content"
    needs_audio = True

    def __init__(self, judge: Any = None, asr: str = DEFAULT_ASR, wer_weight: float = DEFAULT_WER_WEIGHT,
                 languages: Sequence[str] | None = None, asr_cache: str | None = None,
                 segmentation: str = DEFAULT_SEGMENTATION):
        if not 0.0 <= wer_weight <= 1.0:
            raise ConfigError(f"wer_weight must be in [0, 1], got {wer_weight}")
        try:
            self.segmentation = check_segmentation(segmentation)
        except ValueError as exc:
            raise ConfigError(f"content reward: {exc}") from None
        self._judge, self.asr, self.asr_cache = judge, asr, asr_cache
        self.wer_weight = wer_weight
        self.languages = {get_language(code).code for code in languages} if languages else None

    @property
    def judge(self) -> Any:
        if self._judge is None:
            from evaluation.asr import load_asr

            self._judge = load_asr(self.asr, cache=self.asr_cache)
        return self._judge

    def score(self, text: str, samples: np.ndarray, sample_rate: int, language: str | None = None) -> float | None:
        """Content reward of one clip against its text (None = abstain)."""
        from evaluation.asr import ASRError

        if not normalize(text):
            return None
        code = get_language(language).code if language else None
        if self.languages is not None and code not in self.languages:
            return None
        try:
            hyp = self.judge.transcribe(np.asarray(samples, dtype=np.float32), sample_rate, code)
        except ASRError:
            return None
        hyp = spoken_form(hyp, code)
        err = content_error(text, hyp, language=code, wer_weight=self.wer_weight, segmentation=self.segmentation)
        return 1.0 - min(1.0, err)

    def __call__(self, prompts: Sequence[Any], rollouts: Any = None, *, audio: Sequence[np.ndarray],
                 sample_rate: int, **columns) -> list[float | None]:
        if len(audio) != len(prompts):
            raise ValueError(f"content reward: {len(audio)} clips for {len(prompts)} prompts")
        languages = [_row_value(columns, "language", i, p) for i, p in enumerate(prompts)]
        return [self.score(_text(p, languages[i]), audio[i], sample_rate, languages[i])
                for i, p in enumerate(prompts)]


class DurationReward:
    """d = -|ln(t_gen / t_exp)| per row; see the module docstring.

    rates: chars/s overrides keyed `code` or `code:voice` (e.g. {"hi": 13.5, "hi:Ira": 12.8}).
    """

    kind = "duration"
    needs_audio = False

    def __init__(self, rates: dict[str, float] | None = None):
        self.rates = {}
        for key, rate in (rates or {}).items():
            code, _, voice = key.partition(":")
            if float(rate) <= 0:
                raise ConfigError(f"duration rate for {key!r} must be positive, got {rate}")
            self.rates[f"{get_language(code).code}:{voice}" if voice else get_language(code).code] = float(rate)

    def expected_seconds(self, text: str, language: str | None = None, voice: str | None = None,
                         pace: str | None = None) -> float:
        """t_exp: speakable characters / (rate x pace multiplier)."""
        code = get_language(language).code if language else None
        rate = (self.rates.get(f"{code}:{voice}") or self.rates.get(code)) if code else None
        if rate is None:
            return speakable_length(text) / rate_for_text(text, language, pace)
        return speakable_length(text) / (rate * PACE_RATE.get((pace or "steady").lower(), 1.0))

    def score(self, text: str, seconds: float, language: str | None = None, voice: str | None = None,
              pace: str | None = None, min_seconds: float = 1.0 / DEFAULT_FRAME_RATE_HZ) -> float | None:
        expected = self.expected_seconds(text, language, voice, pace)
        if expected <= 0:
            return None
        return -abs(math.log(max(seconds, min_seconds) / expected))

    def __call__(self, prompts: Sequence[Any], rollouts: Any, *, frame_rate_hz: float = DEFAULT_FRAME_RATE_HZ,
                 **columns) -> list[float | None]:
        frames = rollouts.num_frames.tolist()
        return [self.score(_text(p, _row_value(columns, "language", i, p)), frames[i] / frame_rate_hz,
                           _row_value(columns, "language", i, p),
                           _row_value(columns, "voice", i, p), _row_value(columns, "pace", i, p),
                           min_seconds=1.0 / frame_rate_hz)
                for i, p in enumerate(prompts)]


class Codebook0LowReward:
    """Fraction of a rollout's codebook-0 codes below `threshold` (default: half of Mimi's 2048
    codes); None for a rollout with no frames."""

    kind = "codebook0_low"
    needs_audio = False

    def __init__(self, threshold: int = SMOKE_CODE_THRESHOLD):
        self.threshold = int(threshold)

    def __call__(self, prompts: Sequence[Any], rollouts: Any, **columns) -> list[float | None]:
        out: list[float | None] = []
        for i, n in enumerate(rollouts.num_frames.tolist()):
            codes = rollouts.codes[i, 0, :n]
            out.append(float((codes < self.threshold).float().mean()) if n else None)
        return out


def load_callable(ref: str) -> Callable:
    """Import `package.module:function` (dots after the colon walk attributes)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"reward function {ref!r} must look like 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"reward function {ref!r} cannot be imported ({exc}); check the name and PYTHONPATH") from exc
    if not callable(obj):
        raise ConfigError(f"{ref!r} is not callable")
    return obj


def build_reward(spec: RewardSpec) -> RewardFn:
    """The callable for one config entry; it carries `name`, `kind` and `needs_audio` attributes."""
    kinds = {"content": ContentReward, "duration": DurationReward, "codebook0_low": Codebook0LowReward}
    if spec.kind in kinds:
        try:
            fn: Any = kinds[spec.kind](**spec.kwargs)
        except TypeError as exc:  # an unknown or missing keyword
            raise ConfigError(f"reward {spec.name!r}: kwargs: {exc}") from None
    elif spec.kind == "function":
        if not spec.function:
            raise ConfigError(f"reward {spec.name!r}: kind 'function' needs function = 'module:function'")
        fn = functools.partial(load_callable(spec.function), **spec.kwargs)
        fn.kind, fn.needs_audio = "function", spec.needs_audio  # type: ignore[attr-defined]
    else:
        raise ConfigError(f"reward {spec.name!r}: unknown kind {spec.kind!r}; use one of {REWARD_KINDS}")
    fn.name = spec.name  # type: ignore[attr-defined]
    return fn


def compute_rewards(functions: Sequence[RewardFn], prompts: Sequence[Any], rollouts: Any,
                    columns: dict) -> torch.Tensor:
    """Call every reward: returns [B, S] float64 with NaN where a reward abstained.

    Raises ValueError when a function returns the wrong number of values or a non-finite one.
    """
    out = torch.full((len(prompts), len(functions)), math.nan, dtype=torch.float64)
    for s, fn in enumerate(functions):
        values = fn(list(prompts), rollouts, **columns)
        name = getattr(fn, "name", s)
        if len(values) != len(prompts):
            raise ValueError(f"reward {name!r} returned {len(values)} values for {len(prompts)} rollouts")
        for i, v in enumerate(values):
            if v is None:
                continue
            if not math.isfinite(float(v)):
                raise ValueError(f"reward {name!r} returned {v!r} for row {i}; return None to abstain")
            out[i, s] = float(v)
    return out
