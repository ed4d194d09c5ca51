"""Voice references (evaluation.voice_ref): a system's voice as the mean embedding of fixed
sentences with fixed seeds, computed once per fingerprint and cached atomically; a user's clip.

Run: .venv/bin/python -m pytest tests/evaluation/test_voice_ref.py -q
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from evaluation.speaker import ResemblyzerEncoder, SpeakerError, cosine, mean_embedding
from evaluation.systems import EspeakSystem, RumikSystem, Synthesizer
from evaluation.systems.espeak import ESPEAK_RATE
from evaluation.voice_ref import REFERENCE_PROMPTS, VoiceReferences
from rumik_app.request import SynthesisRequest


@pytest.fixture(scope="module")
def encoder() -> ResemblyzerEncoder:
    return ResemblyzerEncoder()


class CountingEspeak(EspeakSystem):
    """espeak-ng that counts the clips it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def synthesize_many(self, requests, clip_ids=None, run=None, native=False):
        self.calls += len(requests)
        return super().synthesize_many(requests, clip_ids, run, native)


def test_reference_is_the_mean_of_the_fixed_sentences_and_is_cached(encoder, tmp_path):
    system = CountingEspeak()
    ref = VoiceReferences(encoder, system=system, cache_dir=tmp_path).get("Ira")
    assert system.calls == len(REFERENCE_PROMPTS)
    # at espeak's own 22.05 kHz (native), converted once by the encoder
    clips = [EspeakSystem().synthesize(SynthesisRequest(t, voice="Ira", language=lang, seed=s), native=True)
             for t, lang, s in REFERENCE_PROMPTS]
    assert {c.sample_rate for c in clips} == {ESPEAK_RATE}
    np.testing.assert_allclose(ref, mean_embedding(encoder.embed(clips)), atol=1e-6)
    [cached] = list(tmp_path.glob("*.json"))
    saved = json.loads(cached.read_text())
    assert saved["voice"] == "Ira" and saved["encoder"] == "resemblyzer" and saved["fingerprint"].startswith("espeak")

    again = VoiceReferences(encoder, system=system, cache_dir=tmp_path)
    assert np.array_equal(again.get("Ira"), ref) and system.calls == len(REFERENCE_PROMPTS)  # read, not spoken
    other = again.get("Aisha")  # another voice: its own reference and file
    assert system.calls == 2 * len(REFERENCE_PROMPTS) and len(list(tmp_path.glob("*.json"))) == 2
    assert cosine(other, ref) < 0.999
    cached.write_text("{not json")  # a damaged file is computed again
    assert np.allclose(VoiceReferences(encoder, system=system, cache_dir=tmp_path).get("Ira"), ref, atol=1e-6)


def test_a_clip_is_the_reference_for_every_voice(encoder, speech_clips):
    refs = VoiceReferences(encoder, clip=speech_clips["f5_one"])
    assert np.array_equal(refs.get("Ira"), refs.get("Zoya")) and refs.source == "clip f5_one.wav"
    with pytest.raises(SpeakerError, match="exactly one"):
        VoiceReferences(encoder)


def test_a_system_that_cannot_speak_the_voice_says_so(encoder, tmp_path):
    class Broken(Synthesizer):
        name = "broken"

        def fingerprint(self):
            return "broken v1"

        def _synthesize(self, request, *, clip_id, run):
            raise RuntimeError("no such voice")

    with pytest.raises(SpeakerError, match="--speaker-ref CLIP"):
        VoiceReferences(encoder, system=Broken(), cache_dir=tmp_path).get("Ira")


def test_checkpoint_fingerprint_follows_its_weights(tiny_checkpoint, tmp_path):
    import shutil

    copy = shutil.copytree(tiny_checkpoint, tmp_path / "ckpt")
    system = RumikSystem(str(copy))
    before = system.fingerprint()
    assert before == RumikSystem(str(copy)).fingerprint()  # stable, and the engine is not loaded for it
    weights = copy / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # retrained in place
    assert system.fingerprint() != before and system._engine is None
