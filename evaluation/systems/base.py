"""The `Synthesizer` interface shared by the benchmark runner and the Gradio app.

A system turns a `SynthesisRequest` into an `Audio` (float32 mono [N] at 24 kHz):

    from evaluation.systems import load_system
    system = load_system("espeak")
    audio = system.synthesize(SynthesisRequest("Hello there."), clip_id="p01", run=1)
    system.name, system.label   # "espeak", "espeak-ng (classical baseline)"

`clip_id` and `run` identify the benchmark clip; systems that generate audio ignore them,
`FolderSystem` (pre-generated clips) needs `clip_id` to find the file.

`native=True` keeps the system's own rate (espeak-ng's 22.05 kHz, a folder clip's file rate;
mono still): the benchmark runner writes clips that way, so each judge converts a clip once,
from the rate it was made at to its own, instead of through 24 kHz:

    audio = system.synthesize(request, native=True)     # Audio at audio.sample_rate Hz

Not a CLI; tested by tests/evaluation/test_systems.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evaluation.audio_io import resample, to_mono
from rumik_app.audio import SAMPLE_RATE, Audio
from rumik_app.errors import RumikError
from rumik_app.request import SynthesisRequest


class SynthesisError(RumikError, RuntimeError):
    """A system that cannot be set up or cannot produce a clip; the message says how to fix it."""


class Synthesizer:
    """Base class of every system. Subclasses set `name` and `label` and implement `_synthesize`.

    name: short machine id used in manifests and file names (e.g. "espeak", "rumik:tiny").
    label: human-facing name shown in reports and the app (e.g. "espeak-ng (classical baseline)").
    """

    name: str = "system"
    label: str = "system"
    # True when the system needs `clip_id` (pre-generated clips); the app hides such systems.
    needs_clip_id: bool = False

    def synthesize(self, request: SynthesisRequest, *, clip_id: str | None = None,
                   run: int | None = None, native: bool = False) -> Audio:
        """One utterance as float32 mono [N] at 24 kHz (resampled/down-mixed if needed);
        native: at the system's own rate instead (down-mixed only)."""
        audio = self._synthesize(request, clip_id=clip_id, run=run)
        return conform(audio, None if native else SAMPLE_RATE)

    def _synthesize(self, request: SynthesisRequest, *, clip_id: str | None, run: int | None) -> Audio:
        """The utterance at the system's own rate (any rate; `synthesize` conforms it)."""
        raise NotImplementedError

    def load(self) -> None:
        """Do any expensive set-up now (the runner calls this once before the first clip),
        so a broken system fails before any work is done. Default: nothing to load."""

    def synthesize_many(self, requests: Sequence[SynthesisRequest], clip_ids: Sequence[str | None] | None = None,
                        run: int | None = None, native: bool = False) -> list[Audio | Exception]:
        """Synthesise several requests (at 24 kHz, or the system's own rate with `native`); a
        failure is returned in its slot (not raised), so one bad clip does not stop a benchmark.
        Subclasses may batch."""
        clip_ids = list(clip_ids) if clip_ids is not None else [None] * len(requests)
        out: list[Audio | Exception] = []
        for request, clip_id in zip(requests, clip_ids, strict=True):
            try:
                out.append(self.synthesize(request, clip_id=clip_id, run=run, native=native))
            except Exception as exc:  # noqa: BLE001 - recorded per clip by the caller
                out.append(exc)
        return out

    def fingerprint(self) -> str | None:
        """What the system's voices sound like depends on, as a string (the cache key of its voice
        references, evaluation.voice_ref); None: the system cannot synthesise references (clips
        made elsewhere)."""
        return None

    def settings(self) -> dict:
        """Facts about the system (shown in reports)."""
        return {"system": self.name, "label": self.label}

    def request_settings(self, request: SynthesisRequest) -> dict:
        """The request fields this system uses, recorded per clip in the benchmark manifest."""
        return {k: getattr(request, k) for k in ("voice", "tone", "accent", "pace", "description", "normalize")}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def conform(audio: Audio, sample_rate: int | None = SAMPLE_RATE) -> Audio:
    """`audio` as float32 mono [N] at `sample_rate` (None: at its own rate), converted once by
    the one resampler; other fields kept."""
    samples = to_mono(np.asarray(audio.samples, dtype=np.float32))
    rate = int(audio.sample_rate if sample_rate is None else sample_rate)
    samples = resample(samples, int(audio.sample_rate), rate)
    return Audio(samples=samples, sample_rate=rate, seed=audio.seed, info=dict(audio.info))
