"""The app's audio judges: DNSMOS quality and speaker similarity, for the Evaluate tab and the
campaign results (docs/ARCHITECTURE.md §8, §13).

Library module (no command line; no gradio)::

    judges = AudioJudges(registry)                      # the operator's judges; nothing loads yet
    clip_judge = judges.judge(AudioRequest(quality=True, speaker=True, reference_clip="me.wav"))
    clip_judge.score(clip)         # an Audio at the file's own rate (`read_upload`), a path, or samples + rate ->
                                   # {"dnsmos_ovrl": 3.1, "dnsmos_sig": 3.4, "dnsmos_bak": 3.9, "speaker_sim": 0.81}

Each judge converts a clip once, from the rate it was uploaded at straight to its own
(`evaluation.audio_io.at_rate`, soxr HQ), as the judges' reference pipelines do.
    clip_judge.summary([values, ...])                   # means with 95 % bootstrap CIs, markdown

A visitor chooses only whether to run each judge and what the reference voice is: a clip
they upload (bounded like every upload: format, MAX_CLIP_MB, its duration read from the
header, at most MAX_REFERENCE_SECONDS; `webapp.uploads.read_upload`), or one of the app's
systems speaking one of its voices (`evaluation.voice_ref`: the mean embedding of fixed
sentences with fixed seeds, made once per checkpoint and cached on disk). The models are the
operator's: DNSMOS P.835 from the speechmos wheel (P.808 skipped; `evaluation.quality`) and
the speaker encoder the app was started with (`app.py --speaker-encoder`, default
resemblyzer; `evaluation.speaker`). Each loads on first use, once per process, behind a lock;
the process holds one of each and one `VoiceReferences` per system (three at most), so
nothing a visitor sends grows the cache. A judge that cannot load raises `UserError` with one
message for the visitor (the cause goes to the log) and is tried again on the next request.
Heavy imports (onnxruntime, resemblyzer) happen inside the loaders, never at import time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rumik_app.errors import RumikError
from rumik_app.request import DEFAULT_VOICE
from webapp.common import UserError
from webapp.uploads import UploadRefused, read_upload

log = logging.getLogger(__name__)

QUALITY_COLUMNS = ("dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak")
SPEAKER_COLUMN = "speaker_sim"
HEADERS = {"dnsmos_ovrl": "DNSMOS OVRL", "dnsmos_sig": "DNSMOS SIG", "dnsmos_bak": "DNSMOS BAK",
           "speaker_sim": "speaker sim"}  # evaluation.acoustic's names for the same columns
DEFAULT_SPEAKER_ENCODER = "resemblyzer"
MAX_REFERENCE_SECONDS = 60.0  # a voice needs a few seconds; a minute is plenty
SUMMARY_DIGITS = 3
QUALITY_NAME, SPEAKER_NAME = "DNSMOS quality", "speaker similarity"
UNAVAILABLE = ("The {what} judge could not be loaded on this server; untick it, or ask the app's operator to fix "
               "it (the app's log says why).")


@dataclass(frozen=True)
class AudioRequest:
    """What one Evaluate run asks of the audio judges (the visitor's choices, unchecked).

    reference_clip: an uploaded file as the reference voice (wins over the system);
    reference_system / voice: an app system (key or label) and one of its voices, whose own
    voice is the reference when no clip is uploaded."""

    quality: bool = False
    speaker: bool = False
    reference_clip: str | None = None
    reference_system: str | None = None
    voice: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.quality or self.speaker)


@dataclass
class ClipJudge:
    """The loaded judges of one run: DNSMOS and/or an encoder with its reference embedding [D]."""

    quality: object | None = None
    encoder: object | None = None
    reference: np.ndarray | None = None
    source: str = ""  # what the reference is, in words: "clip me.wav", "espeak-ng's voice Ira"

    def columns(self) -> list[str]:
        """The per-clip value keys this judge fills, in table order."""
        return [*(QUALITY_COLUMNS if self.quality is not None else ()),
                *((SPEAKER_COLUMN,) if self.encoder is not None else ())]

    def score(self, clip, sample_rate: int | None = None) -> dict[str, float]:
        """The values of one clip: DNSMOS MOS 1-5, cosine similarity. clip: an `Audio` at its own
        rate (`webapp.uploads.read_upload`), a file path, or float32 [N] mono samples at
        `sample_rate`; each judge converts it once. Raises QualityError / SpeakerError / AudioLoadError
        (RumikError) for a clip a judge cannot take."""
        from evaluation.speaker import cosine

        out: dict[str, float] = {}
        if self.quality is not None:
            [s] = self.quality.score([clip], sample_rate)
            out.update(dnsmos_ovrl=s.ovrl, dnsmos_sig=s.sig, dnsmos_bak=s.bak)
        if self.encoder is not None:
            out[SPEAKER_COLUMN] = cosine(self.reference, self.encoder.embed([clip], sample_rate)[0])
        return out

    def summary(self, values: Sequence[dict]) -> str:
        """Markdown: each column's mean over the clips that have it, with a 95 % percentile bootstrap CI."""
        from evaluation.listening_stats import bootstrap_mean

        parts = [f"{HEADERS[c]} {bootstrap_mean([v[c] for v in values if c in v]).text(SUMMARY_DIGITS)}"
                 for c in self.columns()]
        lines = [f"**Audio judges** ({len(values)} clip(s); mean [95 % bootstrap CI over clips] (n)): "
                 + ", ".join(parts) + "."]
        if self.quality is not None:
            lines.append("DNSMOS P.835 (MOS 1-5, speechmos's models): a predictor trained on noisy human speech, "
                         "not a listening test.")
        if self.encoder is not None:
            scale = " (resemblyzer's lie in 0-1; compare clips, not absolute values)" if self.encoder.name == \
                DEFAULT_SPEAKER_ENCODER else ""
            lines.append(f"Speaker similarity: cosine of `{self.encoder.name}` embeddings with {self.source}{scale}.")
        return "<br>".join(lines)


class _LockedSystem:
    """An app system (`webapp.systems.LoadedSystem`) as `evaluation.voice_ref` needs it, speaking
    under the system's lock (engines are not thread-safe)."""

    def __init__(self, loaded) -> None:
        self.loaded, synth = loaded, loaded.synthesizer
        self.name, self.needs_clip_id = synth.name, getattr(synth, "needs_clip_id", False)

    def fingerprint(self) -> str | None:
        return self.loaded.synthesizer.fingerprint()

    def synthesize_many(self, requests, clip_ids=None, run=None, native=False):
        with self.loaded.lock:
            return self.loaded.synthesizer.synthesize_many(requests, clip_ids, run, native=native)


class AudioJudges:
    """The app's audio judges (see the module docstring).

    registry: the app's `webapp.systems.SystemRegistry` (None: uploaded references only);
    speaker_encoder: an `evaluation.speaker` spec, the operator's; device: None (DNSMOS on CUDA
    if onnxruntime has it, the encoder on the CPU), "cpu" or "cuda"; voice_cache: where system
    references are kept (default `$RUMIK_CACHE/voice_refs`); operator: True on the command line,
    where a judge that cannot load raises its own error (QualityError, SpeakerError: the fix in
    the operator's terms) instead of the visitor's message."""

    def __init__(self, registry=None, speaker_encoder: str = DEFAULT_SPEAKER_ENCODER, device: str | None = None,
                 voice_cache: str | Path | None = None, operator: bool = False) -> None:
        self.registry, self.speaker_spec, self.device, self.voice_cache = registry, speaker_encoder, device, voice_cache
        self.operator = operator
        self._loaded: dict[str, object] = {}
        self._references: dict[str, object] = {}  # system key -> VoiceReferences (one per system)
        self._lock = threading.Lock()

    def _load(self, what: str, make: Callable[[], object]) -> object:
        with self._lock:
            if what not in self._loaded:
                try:
                    self._loaded[what] = make()
                except RumikError:
                    if self.operator:
                        raise
                    log.exception("loading the %s judge failed", what)
                    raise UserError(UNAVAILABLE.format(what=what)) from None
                except Exception:  # noqa: BLE001 - a missing package, a damaged model: the log has it
                    log.exception("loading the %s judge failed", what)
                    raise UserError(UNAVAILABLE.format(what=what)) from None
            return self._loaded[what]

    def quality(self):
        """DNSMOS P.835 (`evaluation.quality.DNSMOS`, P.808 off), loaded once."""
        def make():
            from evaluation.quality import DNSMOS

            return DNSMOS(device=self.device, p808=False)

        return self._load(QUALITY_NAME, make)

    def encoder(self):
        """The operator's speaker encoder (`evaluation.speaker.load_speaker_encoder`), loaded once."""
        def make():
            from evaluation.speaker import load_speaker_encoder

            return load_speaker_encoder(self.speaker_spec, None if self.device in (None, "auto") else self.device)

        return self._load(SPEAKER_NAME, make)

    def judge(self, request: AudioRequest) -> ClipJudge | None:
        """The loaded judges for `request` (None if it asks for none); UserError naming the fix."""
        if not request.active:
            return None
        out = ClipJudge(quality=self.quality() if request.quality else None)
        if request.speaker:
            out.encoder = self.encoder()
            out.reference, out.source = self.reference(request)
        return out

    def reference(self, request: AudioRequest) -> tuple[np.ndarray, str]:
        """(reference embedding [D], what it is): the uploaded clip, else the system's voice."""
        if request.reference_clip:
            return self.clip_reference(request.reference_clip)
        return self.system_reference(request.reference_system, request.voice)

    def clip_reference(self, path: str | Path) -> tuple[np.ndarray, str]:
        """An uploaded reference voice, bounded like the clips (`read_upload`), embedded."""
        name = Path(path).name
        try:
            clip = read_upload(path, MAX_REFERENCE_SECONDS, name)  # at its own rate: the encoder converts it once
        except UploadRefused as exc:
            raise UserError(f"The reference voice {name}: {exc}") from None
        try:
            return self.encoder().embed([clip])[0], f"clip {name}"
        except RumikError as exc:
            raise UserError(f"The reference voice {name}: {exc} Upload a clip of someone speaking.") from None

    def system_reference(self, system: str | None, voice: str | None) -> tuple[np.ndarray, str]:
        """The voice reference of an app system's voice; UserError (SystemUnavailable) naming the fix."""
        if self.registry is None:
            raise UserError("Upload a reference voice clip for speaker similarity.")
        key = self.registry.resolve_key(str(system or "")[:100] or None)  # the message echoes it
        loaded = self.registry.get(key)
        voice = voice or DEFAULT_VOICE
        if voice not in loaded.voices:
            raise UserError(f"{loaded.label} has no voice {str(voice)[:40]!r}; choose one of "
                            f"{', '.join(loaded.voices)}, or upload a reference clip.")
        encoder = self.encoder()
        try:
            return self._system_refs(key, loaded, encoder).get(voice), f"{loaded.label}'s voice {voice}"
        except RumikError:
            log.exception("the voice reference of %s (%s) failed", key, voice)
            raise UserError(f"The voice {voice} of {loaded.label} could not be made into a reference here; upload "
                            "a reference clip instead, or choose another system.") from None

    def _system_refs(self, key: str, loaded, encoder):
        from evaluation.voice_ref import VoiceReferences

        with self._lock:
            if key not in self._references:
                self._references[key] = VoiceReferences(encoder, system=_LockedSystem(loaded),
                                                        cache_dir=self.voice_cache)
            return self._references[key]
