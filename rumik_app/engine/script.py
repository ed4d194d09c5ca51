"""Scripts: several requests synthesised together and joined in order with exact pauses.

    from rumik_app.engine.script import Part, dialogue_parts, seeded_parts, ssml_parts, synthesize_script
    from rumik_app.request import SERVER_LIMITS, build_request
    from rumik_app.text.dialogue import parse_dialogue
    turns = parse_dialogue(open("script.txt").read(), voices=engine.voices, max_chars=SERVER_LIMITS.max_chars)
    base = build_request({"text": turns[0].text, "seed": 7, "max_seconds": 10}, voices=engine.voices)
    parts = dialogue_parts(turns, base, gap_s=0.3)                  # turn k: seed 7 + k
    result = synthesize_script(engine, parts, limits=SERVER_LIMITS)   # a ScriptAudio
    result.audio().save("dialogue.wav")
    result.spans[1]   # {"index": 1, "speaker": "Aisha", "start": 2.31, "end": 4.02, "seed": 8, ...}
    parts = ssml_parts(parse_ssml(text, voices=engine.voices), base)   # SSML: the same way

A script is a list of `Part`s: a request, who says it, and the silence after it (a part without
a request is silence only: SSML's leading `<break/>`). Dialogue
(`rumik_app.text.dialogue`) and SSML both build one; `synthesize_script` is the one way to
speak it. The parts go through `engine.synthesize_many` together, which puts the chunks of all
of them on the engine's rows `synth_batch_size` at a time, so turns share decode steps
(docs/ARCHITECTURE.md §5); each part's chunks are crossfaded as a request's are, and the parts
are then joined with exactly `round(pause_after_s * sample_rate)` zero samples after each, never
crossfaded. A row's tokens do not depend on its batch neighbours (§5), so each part's tokens are
those of its request synthesised alone with the same seed, and so is its audio: sample for sample
with `batch_size=1`; in shared batches to the float rounding of Mimi decoding several rows at
once (measured ~5e-7 on CPU, within the stream oracle's STREAM_ATOL, 1e-5).

Bounds (PromptError): 1 to `MAX_PARTS` parts, pauses 0 to `MAX_PAUSE_SECONDS`; every part is
planned under the front end's `limits`, and the sums over the parts (typed and spoken
characters, and the token budget plus the pauses in seconds of audio) must fit them too.
Seeds: `seeded_parts(parts, base)` gives part k seed base + k; a part without a seed draws one.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rumik_app.audio import Audio
from rumik_app.engine.planning import plan_request
from rumik_app.model.tokens import TokenLayout
from rumik_app.prompt import VOICES, PromptError
from rumik_app.request import (
    LIBRARY_LIMITS,
    RANDOM_SEED,
    RequestLimits,
    SynthesisRequest,
    build_request,
    resolve_seed,
)
from rumik_app.text.dialogue import Turn, parse_dialogue
from rumik_app.text.ssml import SsmlSegment, is_ssml, parse_ssml

if TYPE_CHECKING:  # only for annotations: this module loads no torch, so a CLI may import it before --help
    from rumik_app.engine.base import BaseEngine, Progress

MAX_PARTS = 200
MAX_PAUSE_SECONDS = 10.0
DEFAULT_GAP_SECONDS = 0.3  # between dialogue turns


def check_pause(value) -> float:
    """A pause in seconds: a number 0 to MAX_PAUSE_SECONDS."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    if not ok or not 0.0 <= value <= MAX_PAUSE_SECONDS:
        raise PromptError(f"Pause {value!r} is out of range: use 0 to {MAX_PAUSE_SECONDS:g} seconds.", field="pause")
    return float(value)


@dataclass(frozen=True)
class Part:
    """One piece of a script: a request (None: silence only), who says it, the silence after it
    (seconds), and the label an error names it by (default "Part N (speaker)")."""

    request: SynthesisRequest | None
    speaker: str | None = None
    pause_after_s: float = 0.0
    label: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pause_after_s", check_pause(self.pause_after_s))


@dataclass
class ScriptAudio:
    """A spoken script. samples: float32 [n] at sample_rate. spans: one dict per part, in order:
    index, speaker, voice, text, start and end (seconds on the output timeline), start_sample and
    end_sample (exact), pause_after (seconds of silence after it), seed, finish_reasons (a
    silence-only part: voice and seed None, text "", start == end).
    info: tokens, parts, chunks, seconds (compute), real_time_factor."""

    samples: np.ndarray
    sample_rate: int
    spans: list[dict]
    info: dict = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return len(self.samples) / float(self.sample_rate)

    def part_samples(self, index: int) -> np.ndarray:
        """The audio of part `index`, cut from the output by its span."""
        span = self.spans[index]
        return self.samples[span["start_sample"] : span["end_sample"]]

    def audio(self) -> Audio:
        """As an `Audio` (what the CLI saves and the server encodes): seed = the first spoken part's,
        info = this info plus "parts" (the spans)."""
        seed = next((span["seed"] for span in self.spans if span["seed"] is not None), None)
        return Audio(self.samples, self.sample_rate, seed=seed, info={**self.info, "parts": self.spans})


def seeded_parts(parts: Sequence[Part], base_seed: int | None) -> list[Part]:
    """The parts with the k-th spoken part's request seeded base_seed + k (silence-only parts
    take no seed, so the first spoken part carries the base: the seed a client sends back);
    None or -1: one random base."""
    base = resolve_seed(None if base_seed is None or base_seed == RANDOM_SEED else base_seed)
    seeded, spoken = [], 0
    for part in parts:
        seeded.append(_with_seed(part, base + spoken))
        spoken += part.request is not None
    return seeded


def _with_seed(part: Part, seed: int) -> Part:
    if part.request is None:
        return part
    return Part(part.request.with_(seed=seed), part.speaker, part.pause_after_s, part.label)


def dialogue_parts(turns: Sequence[Turn], base: SynthesisRequest, gap_s: float = DEFAULT_GAP_SECONDS,
                   base_seed: int | None = None) -> list[Part]:
    """A dialogue's script: turn k is `base` with the turn's text, voice and settings, seed
    base_seed + k (default base.seed; none: random), then `gap_s` of silence (none after the last).
    A turn's tone/pace/accent win over base's field by field; a turn with any of them drops
    base's free-form description (the prompt takes one or the other)."""
    gap = check_pause(gap_s)
    parts = []
    for k, turn in enumerate(turns):
        own = {name: getattr(turn, name) for name in ("tone", "pace", "accent") if getattr(turn, name)}
        settings = {"tone": base.tone, "pace": base.pace, "accent": base.accent, **own}
        description = None if own else base.description
        request = base.with_(text=turn.text, voice=turn.voice, description=description, **settings)
        label = f"Dialogue line {turn.line} ({turn.speaker})" if turn.line else None
        parts.append(Part(request, turn.speaker, gap if k < len(turns) - 1 else 0.0, label))
    return seeded_parts(parts, base.seed if base_seed is None else base_seed)


def build_script(values: Mapping[str, object], dialogue: bool = False, gap_s: float = DEFAULT_GAP_SECONDS,
                 voices: Sequence[str] | None = None, limits: RequestLimits | None = None,
                 speakers: Mapping[str, object] | None = None, **build) -> list[Part] | None:
    """The script a front end's fields ask for, or None for one plain request (`build_request`):
    with `dialogue` the text is a dialogue script; text that starts with `<speak>` is SSML. The
    other fields (voice, seed, sampling, lexicons, ...) make the base every part starts from;
    `build` goes to `build_request` (default_max_seconds, tokens_for). PromptError names the problem."""
    text = str(values.get("text") or "")
    if not dialogue and not is_ssml(text):
        return None
    max_chars = (limits or LIBRARY_LIMITS).max_chars
    if dialogue:
        turns = parse_dialogue(text, speakers=speakers, voices=tuple(voices or VOICES), max_chars=max_chars)
        base = build_request({**values, "text": turns[0].text}, voices=voices, limits=limits, **build)
        return dialogue_parts(turns, base, gap_s)
    segments = parse_ssml(text, language=values.get("language"), voices=tuple(voices) if voices else None)
    first = next((segment.text for segment in segments if segment.text.strip()), None)
    if first is None:
        raise PromptError("SSML: the document has no text to say; put words inside <speak>.", field="text")
    base = build_request({**values, "text": first}, voices=voices, limits=limits, **build)
    return ssml_parts(segments, base)


def ssml_parts(segments: Sequence[SsmlSegment], base: SynthesisRequest, base_seed: int | None = None) -> list[Part]:
    """An SSML document's script: segment k is `base` with the segment's text and its voice,
    language and pace where it sets them (a pace drops base's free-form description), then
    its pause, split into parts of at most MAX_PAUSE_SECONDS; an empty segment is silence only.
    Seeds base_seed + k over the spoken parts' order (default base.seed)."""
    parts: list[Part] = []
    for segment in segments:
        request = None
        if segment.text.strip():
            changes = {"text": segment.text, "voice": segment.voice or base.voice,
                       "language": segment.language or base.language}
            if segment.pace:
                changes.update(pace=segment.pace, description=None)
            request = base.with_(**changes)
        pause = segment.pause_after_s
        parts.append(Part(request, request.voice if request else None, min(pause, MAX_PAUSE_SECONDS)))
        while (pause := pause - MAX_PAUSE_SECONDS) > 0:
            parts.append(Part(None, None, min(pause, MAX_PAUSE_SECONDS)))
    return seeded_parts(parts, base.seed if base_seed is None else base_seed)


def _label(part: Part, index: int) -> str:
    return part.label or f"Part {index + 1}" + (f" ({part.speaker})" if part.speaker else "")


def plan_script(layout: TokenLayout, parts: Sequence[Part],
                limits: RequestLimits = LIBRARY_LIMITS) -> tuple[list[Part], list[list[SynthesisRequest]]]:
    """(the parts with their seeds drawn, each part's chunk plan), checked against `limits`
    part by part and summed over the parts; PromptError names the part. Text only: layout is
    the checkpoint's (`engine.layout`, `config.layout`), so a server checks a script before
    any part takes a row."""
    if not parts:
        raise PromptError("The script is empty: give at least one part.", field="text")
    if len(parts) > MAX_PARTS:
        raise PromptError(f"The script has {len(parts)} parts; the limit is {MAX_PARTS}. Split it.", field="text")
    if all(part.request is None for part in parts):
        raise PromptError("The script has no text to speak, only pauses.", field="text")
    seeded = [p if p.request is None or p.request.seed is not None else _with_seed(p, resolve_seed(None))
              for p in parts]
    plans = []
    for index, part in enumerate(seeded):
        try:
            plans.append([] if part.request is None else plan_request(part.request, layout, limits))
        except PromptError as exc:
            raise PromptError(f"{_label(part, index)}: {exc}", field=exc.field) from None
    _check_totals(seeded, plans, limits, layout.tokens_per_second)
    return seeded, plans


def _check_totals(parts: Sequence[Part], plans: Sequence[Sequence[SynthesisRequest]], limits: RequestLimits,
                  tokens_per_second: float) -> None:
    typed = sum(len(part.request.text) for part in parts if part.request is not None)
    if typed > limits.max_chars:
        raise PromptError(f"The script's parts hold {typed:,} characters of text; the limit is "
                          f"{limits.max_chars:,}. Split it into smaller scripts.", field="text")
    spoken = sum(len(chunk.text) for plan in plans for chunk in plan)
    if spoken > limits.max_spoken_chars:
        raise PromptError(f"The script reads as {spoken:,} characters once numbers, amounts and dates are spelled "
                          f"out; the limit is {limits.max_spoken_chars:,}. Split it into smaller scripts.",
                          field="text")
    speech = sum(chunk.max_new_tokens for plan in plans for chunk in plan) / tokens_per_second
    pauses = sum(part.pause_after_s for part in parts)
    if limits.max_audio_seconds is not None and speech + pauses > limits.max_audio_seconds:
        raise PromptError(f"This script could make up to {speech + pauses:,.0f} s of audio ({speech:,.0f} s of "
                          f"speech budget over {len(parts)} parts and {pauses:,.1f} s of pauses); the limit here is "
                          f"{limits.max_audio_seconds:.0f} s. Shorten it or lower max_seconds.", field="text")


def synthesize_script(engine: BaseEngine, parts: Sequence[Part], limits: RequestLimits = LIBRARY_LIMITS,
                      progress: Progress | None = None, batch_size: int | None = None) -> ScriptAudio:
    """Speak a script: all parts through `engine.synthesize_many` at once (their chunks share
    batches), then joined in order with each part's pause as exact silence.

    limits: the front end's (`RequestLimits`), per part and summed (see `plan_script`).
    progress: as `synthesize_many`'s, over the whole script. batch_size: rows per batch
    (default the engine's `synth_batch_size`)."""
    start = time.perf_counter()
    parts, plans = plan_script(engine.layout, parts, limits)
    spoken = iter(engine.synthesize_many([p.request for p in parts if p.request is not None],
                                         batch_size=batch_size, progress=progress))
    audios = [None if part.request is None else next(spoken) for part in parts]
    samples, spans = join_parts(parts, audios, engine.sample_rate)
    elapsed = time.perf_counter() - start
    duration = len(samples) / engine.sample_rate
    info = {"tokens": sum(a.info.get("tokens", 0) for a in audios if a is not None), "parts": len(parts),
            "chunks": sum(len(plan) for plan in plans), "seconds": elapsed,
            "real_time_factor": elapsed / duration if duration else 0.0}
    return ScriptAudio(samples, engine.sample_rate, spans, info)


def join_parts(parts: Sequence[Part], audios: Sequence[Audio | None],
               sample_rate: int) -> tuple[np.ndarray, list[dict]]:
    """The parts' audio in order (None: a silence-only part), each followed by its pause as zero
    samples; and their spans."""
    pieces, spans, position = [], [], 0
    for index, (part, audio) in enumerate(zip(parts, audios, strict=True)):
        wave = np.zeros(0, dtype=np.float32) if audio is None else np.asarray(audio.samples, dtype=np.float32)
        gap = np.zeros(round(part.pause_after_s * sample_rate), dtype=np.float32)
        spans.append(_span(index, part, audio, position, position + len(wave), len(gap), sample_rate))
        pieces += [wave, gap]
        position += len(wave) + len(gap)
    return (np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)), spans


def _span(index: int, part: Part, audio: Audio | None, start: int, end: int, gap: int, sample_rate: int) -> dict:
    request = part.request
    return {"index": index, "speaker": part.speaker, "voice": request.voice if request else None,
            "text": request.text if request else "", "start": start / sample_rate, "end": end / sample_rate,
            "start_sample": start, "end_sample": end, "pause_after": gap / sample_rate,
            "seed": audio.seed if audio else None,
            "finish_reasons": list(audio.info.get("finish_reasons", [])) if audio else []}
