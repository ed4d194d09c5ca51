"""Tests for evaluation.systems (espeak-ng baseline, folder of clips, rumik adapter, specs)
and evaluation.audio_io.

Run: .venv/bin/python -m pytest tests/evaluation/test_systems.py -q
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from evaluation.audio_io import AudioLoadError, check_audio, load_audio, resample
from evaluation.systems import (
    EspeakSystem,
    FolderSystem,
    RumikSystem,
    SynthesisError,
    Synthesizer,
    espeak_synthesize,
    load_system,
)
from evaluation.systems import espeak as espeak_module
from evaluation.systems.espeak import ESPEAK_RATE
from rumik_app.audio import SAMPLE_RATE, Audio
from rumik_app.prompt import PromptError
from rumik_app.request import SynthesisRequest

HELLO = "Hello there, how are you today?"


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


# ---------------------------------------------------------------- espeak-ng
def test_espeak_english_clip_is_24k_mono_float32_speech():
    audio = espeak_synthesize(HELLO)
    assert audio.sample_rate == SAMPLE_RATE
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1
    assert 1.0 < audio.duration < 5.0
    assert np.max(np.abs(audio.samples)) > 0.05
    assert audio.info["espeak_voice"] == "en-us+f5"


def test_voices_map_to_different_female_variants():
    variants = {v: espeak_synthesize("Good morning.", voice=v).info["espeak_voice"]
                for v in ("Ira", "Aisha", "Siya", "Zoya")}
    assert len(set(variants.values())) == 4
    assert all("+f" in v for v in variants.values())
    a = espeak_synthesize("Good morning.", voice="Ira").samples
    b = espeak_synthesize("Good morning.", voice="Zoya").samples
    assert len(a) != len(b) or not np.allclose(a, b)
    with pytest.raises(PromptError, match="voice"):
        espeak_synthesize("Good morning.", voice="Bob")


def test_pace_changes_speaking_rate():
    slow = espeak_synthesize(HELLO, pace="slow").duration
    steady = espeak_synthesize(HELLO, pace="Steady").duration
    fast = espeak_synthesize(HELLO, pace="fast").duration
    assert slow > steady > fast


def test_tone_presets_change_pitch_and_loudness():
    sad = espeak_synthesize(HELLO, tone="sad")
    angry = espeak_synthesize(HELLO, tone="Angry")
    assert sad.info["pitch"] < angry.info["pitch"]
    assert rms(angry.samples) > 1.3 * rms(sad.samples)
    assert sad.duration > angry.duration  # sad is slower
    with pytest.raises(SynthesisError, match="Unknown tone"):
        espeak_synthesize(HELLO, tone="sleepy")


def test_tags_render_as_audible_events():
    plain = espeak_synthesize("That was funny. Anyway, let us go.")
    laugh = espeak_synthesize("That was funny. <laugh> Anyway, let us go.")
    sigh = espeak_synthesize("That was funny. <sigh> Anyway, let us go.")
    assert laugh.info["events"] == ["<laugh>"] and sigh.info["events"] == ["<sigh>"]
    assert laugh.duration > plain.duration + 0.4
    assert sigh.duration > plain.duration + 0.5
    # the sigh is a noise burst: the inserted region is not silent
    start = int(0.9 * len(plain.samples))
    inserted = sigh.samples[start:start + int(0.8 * SAMPLE_RATE)]
    assert np.max(np.abs(inserted)) > 0.05
    only_tag = espeak_synthesize("<chuckle>")
    assert only_tag.duration > 0.3 and np.max(np.abs(only_tag.samples)) > 0.02
    with pytest.raises(PromptError, match="Allowed inline tags"):
        espeak_synthesize("hello <giggle> there")


@pytest.mark.parametrize("text, language, voice", [
    ("नमस्ते, आप कैसे हैं?", None, "hi+f5"),
    ("வணக்கம், எப்படி இருக்கிறீர்கள்?", None, "ta+f5"),
    ("ਸਤ ਸ੍ਰੀ ਅਕਾਲ ਜੀ", None, "pa+f5"),
    ("आमी घरी वचतां", "kok", "kok+f5"),      # Konkani voice exists
    ("आंगो नोंखौ मोजां मोनो", "brx", "hi+f5"),  # Bodo: no espeak voice -> Devanagari reader
    ("مان گهر وڃان ٿو", "sd", "sd+f5"),
    ("بہ چھس گرِ گژھان", "ks", "ur+f5"),       # Kashmiri -> Urdu reader for Perso-Arabic
])
def test_language_picks_an_espeak_voice_for_the_script(text, language, voice):
    audio = espeak_synthesize(text, language=language)
    assert audio.info["espeak_voice"] == voice
    assert audio.duration > 0.5


def test_scripts_espeak_cannot_read_give_a_clear_error():
    with pytest.raises(SynthesisError, match="Ol Chiki"):
        espeak_synthesize("ᱟᱢ ᱫᱚ ᱪᱮᱫ ᱧᱩᱛᱩᱢ", language="sat")
    with pytest.raises(SynthesisError, match="Meetei Mayek"):
        espeak_synthesize("ꯑꯩ ꯌꯨꯝꯗ ꯆꯠꯂꯤ", language="mni")


def test_missing_espeak_names_the_fix(monkeypatch):
    monkeypatch.setattr(espeak_module.shutil, "which", lambda name: None)
    espeak_module.espeak_executable.cache_clear()
    try:
        with pytest.raises(SynthesisError, match="apt-get install espeak-ng"):
            EspeakSystem()
    finally:
        espeak_module.espeak_executable.cache_clear()


def test_espeak_system_is_labelled_a_classical_baseline():
    system = load_system("espeak")
    assert isinstance(system, EspeakSystem) and isinstance(system, Synthesizer)
    assert system.label == "espeak-ng (classical baseline)"
    audio = system.synthesize(SynthesisRequest("Good evening.", voice="Aisha", tone="happy", pace="fast"))
    assert audio.sample_rate == SAMPLE_RATE and audio.info["espeak_voice"] == "en-us+f2"
    assert system.request_settings(SynthesisRequest("x", tone="sad"))["tone"] == "sad"


# ---------------------------------------------------------------- folder of clips
def test_folder_system_resamples_downmixes_and_prefers_run_folders(tmp_path):
    sr = 16_000
    t = np.arange(sr) / sr
    stereo = np.stack([0.5 * np.sin(2 * np.pi * 300 * t), 0.1 * np.sin(2 * np.pi * 300 * t)], axis=1)
    sf.write(tmp_path / "p1.flac", stereo, sr)
    (tmp_path / "run2").mkdir()
    sf.write(tmp_path / "run2" / "p1.wav", 0.2 * np.sin(2 * np.pi * 300 * t), 48_000)
    system = load_system(f"folder:{tmp_path}")
    assert isinstance(system, FolderSystem) and "pre-generated" in system.label
    audio = system.synthesize(SynthesisRequest("anything"), clip_id="p1", run=1)
    assert audio.sample_rate == SAMPLE_RATE and audio.samples.ndim == 1
    assert abs(len(audio.samples) - SAMPLE_RATE) <= 1
    assert abs(np.max(np.abs(audio.samples)) - 0.3) < 0.02  # mean of the two channels
    run2 = system.synthesize(SynthesisRequest("anything"), clip_id="p1", run=2)
    assert abs(len(run2.samples) - SAMPLE_RATE // 3) <= 1  # 16000 samples at 48 kHz = 1/3 s


def test_folder_system_errors(tmp_path):
    with pytest.raises(SynthesisError, match="does not exist"):
        load_system(f"folder:{tmp_path / 'nope'}")
    (tmp_path / "broken.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunkjunkjunk")
    system = FolderSystem(tmp_path)
    with pytest.raises(SynthesisError, match="No clip for 'p9'"):
        system.synthesize(SynthesisRequest("x"), clip_id="p9")
    with pytest.raises(SynthesisError, match="broken.wav.*Re-export"):
        system.synthesize(SynthesisRequest("x"), clip_id="broken")
    with pytest.raises(SynthesisError, match="clip id"):
        system.synthesize(SynthesisRequest("x"))
    results = system.synthesize_many([SynthesisRequest("x")] * 2, ["broken", "p9"])
    assert all(isinstance(r, SynthesisError) for r in results)  # failures returned, not raised


def test_native_keeps_each_systems_own_rate_and_24k_is_one_conversion_of_it(tmp_path):
    request = SynthesisRequest("Good evening. <sigh> See you.")
    own = load_system("espeak").synthesize(request, native=True)
    assert own.sample_rate == ESPEAK_RATE and own.info["events"] == ["<sigh>"]
    at24 = load_system("espeak").synthesize(request)
    assert at24.sample_rate == SAMPLE_RATE
    np.testing.assert_array_equal(at24.samples, resample(own.samples, ESPEAK_RATE, SAMPLE_RATE))
    sf.write(tmp_path / "p1.wav", 0.2 * np.sin(np.arange(44_100) / 7), 44_100)
    [clip] = load_system(f"folder:{tmp_path}").synthesize_many([request], ["p1"], native=True)
    assert clip.sample_rate == 44_100 and len(clip.samples) == 44_100


# ---------------------------------------------------------------- audio_io
def test_load_audio_errors_name_the_file(tmp_path):
    with pytest.raises(AudioLoadError, match="no such audio file"):
        load_audio(tmp_path / "missing.wav", max_seconds=60)
    (tmp_path / "empty.wav").write_bytes(b"")
    with pytest.raises(AudioLoadError, match="empty"):
        load_audio(tmp_path / "empty.wav", max_seconds=60)
    (tmp_path / "noise.wav").write_bytes(np.random.default_rng(0).bytes(4000))
    with pytest.raises(AudioLoadError, match="noise.wav"):
        load_audio(tmp_path / "noise.wav", max_seconds=60)


def test_check_audio_catches_silent_short_and_nan():
    check_audio(0.1 * np.ones(SAMPLE_RATE, dtype=np.float32), SAMPLE_RATE)
    with pytest.raises(AudioLoadError, match="silent"):
        check_audio(np.zeros(SAMPLE_RATE, dtype=np.float32), SAMPLE_RATE)
    with pytest.raises(AudioLoadError, match="ms long"):
        check_audio(0.5 * np.ones(10, dtype=np.float32), SAMPLE_RATE)
    with pytest.raises(AudioLoadError, match="NaN"):
        check_audio(np.array([0.1, np.nan] * 5000, dtype=np.float32), SAMPLE_RATE)
    with pytest.raises(AudioLoadError, match="no audio"):
        check_audio(np.zeros(0, dtype=np.float32), SAMPLE_RATE)


# ---------------------------------------------------------------- specs
@pytest.mark.parametrize("spec", ["", "bogus", "rumik:", "folder:", "espeak:en", "tiny:x"])
def test_bad_system_spec_lists_valid_specs(spec):
    with pytest.raises(SynthesisError) as err:
        load_system(spec)
    for valid in ("rumik", "tiny", "espeak", "folder:DIR"):
        assert valid in str(err.value)


def test_rumik_specs_are_lazy():
    hub = load_system("rumik")
    assert isinstance(hub, RumikSystem) and hub.model == "rumik-ai/rumik-oss-1" and hub.label == "rumik-oss-1"
    assert load_system("rumik:/some/ckpt").model == "/some/ckpt"
    assert load_system("tiny").model == "tiny"
    assert hub._engine is None  # nothing loaded until the first synthesis


def test_rumik_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(SynthesisError) as err:
        RumikSystem(str(tmp_path / "no-such-ckpt"), device="cpu").load()
    message = str(err.value)  # the fixes in the runner's own flags, not rumik_app's --model
    assert message.startswith("No checkpoint folder at ") and "--system rumik:/path/to/rumik-oss-1" in message
    assert "--system tiny" in message and "--model" not in message


def test_rumik_system_on_the_tiny_checkpoint(tiny_checkpoint):
    system = load_system(f"rumik:{tiny_checkpoint}", device="cpu")
    request = SynthesisRequest("Hello <laugh> there.", seed=3, max_new_tokens=64)
    audio = system.synthesize(request)
    assert isinstance(audio, Audio) and audio.sample_rate == SAMPLE_RATE
    assert audio.samples.dtype == np.float32 and audio.samples.ndim == 1 and audio.samples.size > 0
    assert audio.seed == 3
    again = system.synthesize(request)
    np.testing.assert_allclose(again.samples, audio.samples, atol=1e-5)  # seeded -> reproducible
    both = system.synthesize_many([request, request.with_(seed=4)], ["a", "b"])
    assert len(both) == 2 and all(isinstance(a, Audio) for a in both)
    assert system.request_settings(request)["max_new_tokens"] == 64
