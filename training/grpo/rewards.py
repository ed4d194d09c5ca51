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
  Abstains when the judge cannot handle the row's language (`evaluation.asr_judge.ASRError`),
  when the language is outside `languages`, and when the text normalises to nothing.
- `duration`: d = -|ln(t_gen / t_exp)|, t_gen = frames / frame rate (at least one frame),
  t_exp = speakable characters / rate. Rates are chars/s per language, looked up as
  `rates["<code>:<voice>"]`, then `rates["<code>"]`, then `rumik_app.text.languages`; times the
  pace multiplier of the request's pace (slow 0.8, fast 1.2). Abstains on empty text.
- `speaker`: cosine similarity of the rollout's speaker embedding (`evaluation.speaker`,
  resemblyzer by default: 0..1) with the reference of the row's voice
  (`evaluation.voice_ref`): by default the voice as the starting checkpoint speaks fixed
  sentences (the trainer passes its `model` as `reference_model`; computed once, cached), or
  `reference` = an audio file for every voice. Abstains on empty or silent audio.
- `quality`: DNSMOS P.835 OVRL (`evaluation.quality`) mapped from MOS 1-5 onto 0-1. Abstains
  on empty audio. Both are routed to codebooks 1..Q-1 by default (the `acoustic` target,
  training.grpo.loss): the acoustic residual carries timbre and quality.
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
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from evaluation.metrics import DEFAULT_WER_WEIGHT, content_error
from evaluation.text import DEFAULT_SEGMENTATION, check_segmentation, normalize, spoken_form
from rumik_app.errors import ConfigError
from rumik_app.text.languages import PACE_RATE, get_language, rate_for_text, speakable_length

if TYPE_CHECKING:
    import torch

RewardFn = Callable[..., list]
DEFAULT_ASR = "pocketsphinx"
DEFAULT_FRAME_RATE_HZ = 12.5
SMOKE_CODE_THRESHOLD = 1024
REWARD_KINDS = ("content", "duration", "speaker", "quality", "codebook0_low", "function")


@dataclass
class RewardSpec:
    """One reward stream in a GRPO config.

    name: the stream's name in logs (`rewards/<name>/mean`); kind: one of REWARD_KINDS;
    function: `module:function` for kind "function"; kwargs: constructor/partial arguments
    (content: asr, wer_weight, languages, segmentation; duration: rates; speaker: encoder,
    reference, reference_model, device; quality: device, threads, max_windows, personalized;
    codebook0_low: threshold; a content stream without `segmentation` gets
    DEFAULT_SEGMENTATION written in, so the saved config says which GCER the run was rewarded with);
    routing: this stream's row of W: a target of training.grpo.loss.ROUTING_TARGETS
    ("codebook0", "acoustic", "stop", "all") or Q codebook weights then the stop slot; None for
    the kind's default (content -> codebook0, duration -> stop, speaker and quality ->
    acoustic, others -> all); weight: a factor on the stream's row (its share of the advantage);
    needs_audio: for kind "function", decode audio for it.
    """

    name: str
    kind: str = "function"
    function: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    routing: Any = None  # a target name (str), a list of Q + 1 numbers, or None; checked by `check`
    weight: float = 1.0
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
        if not (isinstance(self.weight, (int, float)) and math.isfinite(self.weight) and self.weight >= 0):
            raise ConfigError(f"reward {self.name!r}: weight must be a number >= 0, got {self.weight!r}")
        from training.grpo.loss import ROUTING_TARGETS

        row = self.routing
        is_row = isinstance(row, (list, tuple)) and all(isinstance(w, (int, float)) and not isinstance(w, bool)
                                                        for w in row)
        if not (row is None or is_row or (isinstance(row, str) and row in ROUTING_TARGETS)):
            raise ConfigError(f"reward {self.name!r}: routing {row!r} is neither a target nor a list of weights; "
                              f"use one of {ROUTING_TARGETS} or the weights of the codebooks, then the stop slot")


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
        from evaluation.asr_judge import ASRError

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


def _audible(samples: np.ndarray) -> bool:
    """A rollout with some audio that is not digital silence (the audio judges abstain otherwise)."""
    from evaluation.audio_io import SILENCE_PEAK

    samples = np.asarray(samples)
    return samples.size > 0 and float(np.max(np.abs(samples))) >= SILENCE_PEAK


class SpeakerReward:
    """Cosine similarity to the reference of the row's voice; see the module docstring.

    encoder: `evaluation.speaker` spec; reference: an audio file (every voice); reference_model:
    the checkpoint whose voices are the references (the trainer passes its own `model`);
    device: torch device of the encoder and of the reference synthesis (None: auto).
    """

    kind = "speaker"
    needs_audio = True

    def __init__(self, encoder: str = "resemblyzer", reference: str | None = None,
                 reference_model: str | None = None, device: str | None = None):
        if reference is None and reference_model is None:
            raise ConfigError("speaker reward: set kwargs.reference (an audio file) or kwargs.reference_model "
                              "(a checkpoint whose voices are the references)")
        self.spec, self.reference, self.reference_model, self.device = encoder, reference, reference_model, device
        self._encoder, self._refs = None, None

    def references(self):
        """The encoder and the voice references, loaded on first use."""
        if self._refs is None:
            from evaluation.speaker import load_speaker_encoder
            from evaluation.systems import RumikSystem
            from evaluation.voice_ref import VoiceReferences

            self._encoder = load_speaker_encoder(self.spec, self.device)
            self._refs = (VoiceReferences(self._encoder, clip=self.reference) if self.reference else
                          VoiceReferences(self._encoder, system=RumikSystem(self.reference_model, device=self.device)))
        return self._encoder, self._refs

    def __call__(self, prompts: Sequence[Any], rollouts: Any = None, *, audio: Sequence[np.ndarray],
                 sample_rate: int, **columns) -> list[float | None]:
        from evaluation.speaker import cosine

        encoder, refs = self.references()
        rows = [i for i in range(len(prompts)) if _audible(audio[i])]
        embeddings = encoder.embed([audio[i] for i in rows], sample_rate) if rows else []
        out: list[float | None] = [None] * len(prompts)
        for i, emb in zip(rows, embeddings, strict=True):
            out[i] = cosine(refs.get(_row_value(columns, "voice", i, prompts[i])), emb)
        return out


class QualityReward:
    """DNSMOS OVRL scaled to 0-1 (`evaluation.quality.scaled_ovrl`); see the module docstring.

    device/threads: onnxruntime's; max_windows: score the first k 9 s windows only (None: all,
    as speechmos); personalized: the personalized DNSMOS model.
    """

    kind = "quality"
    needs_audio = True

    def __init__(self, device: str | None = None, threads: int | None = None, max_windows: int | None = None,
                 personalized: bool = False):
        self.options = {"device": device, "threads": threads, "max_windows": max_windows,
                        "personalized": personalized, "p808": False}
        self._judge = None

    def __call__(self, prompts: Sequence[Any], rollouts: Any = None, *, audio: Sequence[np.ndarray],
                 sample_rate: int, **columns) -> list[float | None]:
        from evaluation.quality import DNSMOS, scaled_ovrl

        if self._judge is None:
            self._judge = DNSMOS(**self.options)
        rows = [i for i in range(len(prompts)) if np.asarray(audio[i]).size]
        scores = self._judge.score([audio[i] for i in rows], sample_rate) if rows else []
        out: list[float | None] = [None] * len(prompts)
        for i, s in zip(rows, scores, strict=True):
            out[i] = scaled_ovrl(s)
        return out


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


def build_reward(spec: RewardSpec, model: str | None = None) -> RewardFn:
    """The callable for one config entry; it carries `name`, `kind` and `needs_audio` attributes.
    model: the run's checkpoint, the speaker reward's default `reference_model`."""
    kinds = {"content": ContentReward, "duration": DurationReward, "speaker": SpeakerReward,
             "quality": QualityReward, "codebook0_low": Codebook0LowReward}
    kwargs = dict(spec.kwargs)
    if spec.kind == "speaker" and not kwargs.get("reference"):
        kwargs.setdefault("reference_model", model)
    if spec.kind in kinds:
        try:
            fn: Any = kinds[spec.kind](**kwargs)
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
    import torch

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
