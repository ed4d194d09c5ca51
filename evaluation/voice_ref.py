"""Reference voices for speaker similarity (docs/ARCHITECTURE.md §8): what "the voice Ira" sounds
like, as one speaker embedding.

    from evaluation.speaker import load_speaker_encoder
    from evaluation.systems import load_system
    from evaluation.voice_ref import VoiceReferences
    refs = VoiceReferences(load_speaker_encoder(), system=load_system("rumik"))
    ref = refs.get("Ira")            # [D] unit vector: synthesised once per checkpoint, then cached
    refs = VoiceReferences(encoder, clip="my_voice.wav")   # a user's own clip is the reference instead

A system's reference for a voice is the L2-normalised mean embedding of REFERENCE_PROMPTS (a
few fixed sentences, English and Hindi) synthesised in that voice, each with its fixed seed, at
the system's own rate (`native=True`), so the encoder converts each once; a clip is read at its
own rate the same way.
It is computed once per (system fingerprint, voice, encoder) and kept as JSON under
`$RUMIK_CACHE/voice_refs/` (written atomically); the fingerprint of a checkpoint is its
config.json and the names, sizes and times of its weight files
(`evaluation.systems.RumikSystem.fingerprint`), so a retrained checkpoint gets new references.
Systems that only read clips made elsewhere (`folder:`) have no fingerprint: pass a clip.
Library module, no command line (python -m evaluation.speaker compares clips with a clip).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from evaluation.audio_io import LOCAL_MAX_SECONDS, load_native
from evaluation.speaker import SpeakerEncoder, SpeakerError, mean_embedding
from rumik_app.files import atomic_write
from rumik_app.request import DEFAULT_VOICE, SynthesisRequest

CACHE_VERSION = 2  # 2: clips reach the encoder at their own rate, converted once with soxr HQ
CACHE_FOLDER = "voice_refs"
REFERENCE_MAX_NEW_TOKENS = 800  # 8 s: the sentences take about 4 s; a model that never stops is cut there
# (text, language, seed): short everyday sentences in the model's two main languages.
REFERENCE_PROMPTS = (
    ("The weather is lovely today, so we are going for a walk by the river.", "en", 101),
    ("Please call me back when you reach home, and take care on the way.", "en", 102),
    ("आज मौसम बहुत सुहाना है, चलो बाहर टहलने चलते हैं।", "hi", 103),
    ("घर पहुँचकर मुझे फ़ोन कर देना, और रास्ते में ध्यान रखना।", "hi", 104),
)


def default_cache_dir() -> Path:
    from rumik_app.checkpoint.load import cache_root

    return cache_root() / CACHE_FOLDER


class VoiceReferences:
    """Reference embeddings per voice, from a system (synthesised, cached) or one clip.

    encoder: the speaker encoder the references are for; system: an `evaluation.systems`
    Synthesizer; clip: an audio file used for every voice instead; cache_dir: where system
    references are kept (default `$RUMIK_CACHE/voice_refs`).
    """

    def __init__(self, encoder: SpeakerEncoder, system=None, clip: str | os.PathLike | None = None,
                 cache_dir: str | os.PathLike | None = None) -> None:
        if (system is None) == (clip is None):
            raise SpeakerError("A voice reference comes from a system or from a clip; pass exactly one.")
        self.encoder, self.system = encoder, system
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._memo: dict[str, np.ndarray] = {}
        self.clip = None if clip is None else Path(clip)
        self.source = f"clip {self.clip.name}" if self.clip is not None else f"{system.name}'s own voice"
        if system is not None and getattr(system, "needs_clip_id", False):
            raise SpeakerError(f"{system.name} only reads clips made elsewhere, so it cannot speak a reference; "
                               "pass a reference clip of the voice (--speaker-ref CLIP).")
        if self.clip is not None:  # embed the user's clip now: a bad file fails before any work
            self._clip_embedding = self.encoder.embed([load_native(self.clip, max_seconds=LOCAL_MAX_SECONDS)])[0]

    def get(self, voice: str | None = None) -> np.ndarray:
        """The reference embedding [D] for `voice` (None: the default voice)."""
        if self.clip is not None:
            return self._clip_embedding
        voice = voice or DEFAULT_VOICE
        if voice not in self._memo:
            self._memo[voice] = self._cached(voice)
        return self._memo[voice]

    def _key(self, voice: str) -> tuple[str, dict]:
        fingerprint = self.system.fingerprint()
        if fingerprint is None:
            raise SpeakerError(f"{self.system.name} only reads clips made elsewhere, so it cannot speak a "
                               "reference; pass a reference clip of the voice (--speaker-ref CLIP).")
        fields = {"version": CACHE_VERSION, "fingerprint": fingerprint, "voice": voice,
                  "encoder": self.encoder.name, "prompts": [list(p) for p in REFERENCE_PROMPTS]}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest(), fields

    def _cached(self, voice: str) -> np.ndarray:
        key, fields = self._key(voice)
        path = self.cache_dir / f"{key}.json"
        if path.is_file():
            try:
                return np.asarray(json.loads(path.read_text(encoding="utf-8"))["embedding"], dtype=np.float32)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                pass  # unreadable: compute it again and overwrite
        embedding = self.compute(voice)
        atomic_write(path, json.dumps({**fields, "system": self.system.name, "embedding": embedding.tolist()}))
        return embedding

    def compute(self, voice: str) -> np.ndarray:
        """Synthesise REFERENCE_PROMPTS in `voice` and average their embeddings (no cache)."""
        requests = [SynthesisRequest(text, voice=voice, language=lang, seed=seed,
                                     max_new_tokens=REFERENCE_MAX_NEW_TOKENS) for text, lang, seed in REFERENCE_PROMPTS]
        clips = self.system.synthesize_many(requests, [f"voice_ref_{i}" for i in range(len(requests))], native=True)
        failed = [c for c in clips if isinstance(c, Exception)]
        if failed:
            raise SpeakerError(f"Could not synthesise the reference voice {voice!r} with {self.system.name}: "
                               f"{failed[0]}. Pass a reference clip instead (--speaker-ref CLIP).")
        return mean_embedding(self.encoder.embed(clips))  # each Audio at its own rate, converted once
