"""Resampling matches the judges' reference pipelines ("One resampler").

On espeak-ng clips of odd lengths written at 8, 22.05, 44.1 and 48 kHz, noisy and clean, loading
is `librosa.load(path, sr=...)` sample for sample (length included), and the benchmark runner's
DNSMOS (`evaluation.acoustic.score_clips`, which decodes each file once at its own rate and
converts it once to 16 kHz) equals speechmos's DNSMOS on `librosa.load(path, sr=16000)` within
0.01 OVRL; its speaker similarity equals resemblyzer's own `preprocess_wav(path)` +
`embed_utterance` within 0.01. Once, clips went to 24 kHz first and then to 16 kHz with scipy's
polyphase filter (a 44.1 kHz clip scored 0.17 OVRL off); later soxr's rounding left some clips one
sample short of librosa's, and a noisy 3.77 s clip at 22.05 kHz scored 1.147 against 1.290.

Run: .venv/bin/python -m pytest -n0 -q tests/evaluation/test_resample_reference.py
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from evaluation import acoustic
from evaluation.audio_io import file_sha256, load_audio, load_native, resample
from evaluation.quality import DNSMOS, MODEL_RATE
from evaluation.speaker import ResemblyzerEncoder, cosine
from evaluation.voice_ref import VoiceReferences
from rumik_app import resample as one_resampler

RATES = (8_000, 22_050, 44_100, 48_000)
OVRL_TOLERANCE = 0.01  # DNSMOS OVRL on 1-5
SIMILARITY_TOLERANCE = 0.01  # cosine
# Odd lengths at every rate (105,178 samples at 22.05 kHz). DNSMOS repeats a short clip until it is 9.01 s
# long and scores every 9.01 s window at 1 s hops: 4.77 s doubles to one window, where 3.77 s made six
# (six times the work). One sample short still shows here: OVRL moved 0.020-0.039 at 22.05-48 kHz.
CLIP_SECONDS = 4.77
SNR_DB = -2.0  # white noise over the whole band of each rate: OVRL 1.2-1.8, where the filters differ most
PEAK = 0.5  # under 1 after any conversion: speechmos refuses samples outside [-1, 1]


def noisy_clip(speech: np.ndarray, speech_rate: int, rate: int, seed: int) -> np.ndarray:
    """`speech` [N] converted to `rate` (soxr HQ) with white noise at SNR_DB, scaled to PEAK: float32."""
    clean = one_resampler.resample(speech, speech_rate, rate)
    rms = float(np.sqrt(np.mean(np.square(clean, dtype=np.float64))))
    noisy = clean + rms * 10 ** (-SNR_DB / 20) * np.random.default_rng(seed).standard_normal(len(clean))
    return (PEAK * noisy / np.max(np.abs(noisy))).astype(np.float32)


def clean_clip(speech: np.ndarray, speech_rate: int, rate: int) -> np.ndarray:
    """`speech` [N] converted to `rate` (soxr HQ), scaled to PEAK: float32."""
    clean = one_resampler.resample(speech, speech_rate, rate)
    return (PEAK * clean / np.max(np.abs(clean))).astype(np.float32)


def write_clips(speech_path: Path, folder: Path, noisy: bool) -> dict[int, Path]:
    """{rate: 16-bit WAV of the first CLIP_SECONDS of the espeak-ng clip at that rate, noisy or clean}."""
    speech, rate = sf.read(str(speech_path), dtype="float32")
    speech = speech[: int(CLIP_SECONDS * rate)]
    out = {}
    for r in RATES:
        out[r] = folder / f"{'noisy' if noisy else 'clean'}_{r}.wav"
        samples = noisy_clip(speech, rate, r, seed=r) if noisy else clean_clip(speech, rate, r)
        sf.write(str(out[r]), samples, r, subtype="PCM_16")
    return out


@pytest.fixture(scope="module")
def noisy(speech_clips, tmp_path_factory) -> dict[int, Path]:
    return write_clips(speech_clips["f5_one"], tmp_path_factory.mktemp("noisy"), noisy=True)


@pytest.fixture(scope="module")
def clean(speech_clips, tmp_path_factory) -> dict[int, Path]:
    return write_clips(speech_clips["f5_one"], tmp_path_factory.mktemp("clean"), noisy=False)


def librosa_load(path: Path, rate: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import librosa
    return librosa.load(str(path), sr=rate)[0]


def runner_values(judges: acoustic.AcousticJudges, clips: dict[int, Path]) -> dict[int, dict]:
    """The runner's per-clip values ({rate: values}) for clip files in one folder, as
    `python -m evaluation.run` gets them for its run<r>/<id>.wav files."""
    folder = next(iter(clips.values())).parent
    manifest = [{"run": 1, "id": p.stem, "path": p.name, "error": None, "sha256": file_sha256(p), "chunks": None}
                for p in clips.values()]
    values = acoustic.score_clips(judges, [{"id": p.stem, "text": "x"} for p in clips.values()], manifest, folder)
    return {r: values[(1, p.stem)] for r, p in clips.items()}


def test_loading_is_librosa_load_sample_for_sample(noisy, clean):
    for rate, path in [*noisy.items(), *clean.items()]:
        clip = load_native(path, max_seconds=60)
        assert clip.sample_rate == rate and clip.duration == pytest.approx(CLIP_SECONDS, abs=1e-3)
        for to_rate in (MODEL_RATE, 24_000):
            ours, theirs = load_audio(path, to_rate, max_seconds=60), librosa_load(path, to_rate)
            np.testing.assert_array_equal(ours, theirs)  # the length too: librosa's ceil(n * ratio)
    x = np.random.default_rng(0).standard_normal(4410).astype(np.float32)
    np.testing.assert_array_equal(resample(x, 44_100, 16_000), one_resampler.resample(x, 44_100, 16_000))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["noisy", "clean"])
def test_dnsmos_equals_speechmos_on_librosa_load(kind, request):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from speechmos import dnsmos
    clips = request.getfixturevalue(kind)
    judge = DNSMOS(device="cpu", threads=1, p808=False)
    ours = runner_values(acoustic.AcousticJudges(quality=judge), clips)
    direct = judge.score(list(clips.values()))  # the judge given the file paths
    for (rate, path), alone in zip(clips.items(), direct, strict=True):
        theirs = float(dnsmos.run(librosa_load(path, MODEL_RATE), MODEL_RATE)["ovrl_mos"])
        assert abs(ours[rate]["dnsmos_ovrl"] - theirs) <= OVRL_TOLERANCE, (rate, ours[rate], theirs)
        assert alone.ovrl == pytest.approx(ours[rate]["dnsmos_ovrl"], abs=1e-6)
        if kind == "noisy":
            assert 1.0 <= theirs < 2.5, (rate, theirs)  # the noise keeps DNSMOS low, where the filters matter


@pytest.mark.slow
def test_speaker_similarity_equals_resemblyzers_preprocess_wav(noisy, speech_clips):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from resemblyzer import VoiceEncoder, preprocess_wav
    reference = speech_clips["f5_two"]  # the same voice, another sentence, clean, at espeak's 22.05 kHz
    encoder = ResemblyzerEncoder()
    judges = acoustic.AcousticJudges(speaker=encoder, references=VoiceReferences(encoder, clip=reference))
    ours = runner_values(judges, noisy)
    theirs_encoder = VoiceEncoder("cpu", verbose=False)
    ref = theirs_encoder.embed_utterance(preprocess_wav(reference))
    for rate, path in noisy.items():
        theirs = cosine(ref, theirs_encoder.embed_utterance(preprocess_wav(path)))
        assert abs(ours[rate]["speaker_sim"] - theirs) <= SIMILARITY_TOLERANCE, (rate, ours[rate], theirs)
