"""Tests for webapp/campaign/clips/stimuli.py: the MUSHRA anchor's spectrum, the "Bad" gold clip, the
P.808 trapping clip and the digits-in-noise trials (with a fake voice, and with espeak-ng where
it is installed).

Run: python -m pytest -n0 tests/app/test_campaign_stimuli.py -q
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from scipy.signal import chirp, freqz, welch

from webapp.campaign.clips.stimuli import (
    NOISE_LEAD_S,
    NOISE_TAIL_S,
    TRAP_PAUSE_S,
    StimulusError,
    anchor_filter,
    degraded_gold,
    digits_in_noise,
    espeak_speaker,
    mushra_anchor,
    qualification_set,
    trap_clip,
    trap_message,
)

SR = 24_000
needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None and shutil.which("espeak") is None,
                                  reason="espeak-ng is not installed (apt-get install espeak-ng)")


def white_noise(seconds: float = 4.0, seed: int = 0) -> np.ndarray:
    return (0.1 * np.random.default_rng(seed).standard_normal(int(seconds * SR))).astype(np.float32)


def band_db(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    f, p = welch(x, fs=SR, nperseg=2048)
    return 10 * np.log10(p[(f >= lo) & (f <= hi)] + 1e-30)


def fake_speaker(rate: int = 16_000, seconds: float = 2.0, spoken: list | None = None):
    """A voice stand-in: a 300 Hz + 1.2 kHz tone of `seconds` at `rate`; records what it was asked to say."""
    def speak(text: str) -> tuple[np.ndarray, int]:
        if spoken is not None:
            spoken.append(text)
        t = np.arange(int(seconds * rate)) / rate
        return (0.3 * np.sin(2 * np.pi * 300 * t) + 0.1 * np.sin(2 * np.pi * 1200 * t)).astype(np.float32), rate
    return speak


# ------------------------------------------------------------------ MUSHRA anchor

@pytest.mark.parametrize("signal", ["noise", "chirp"])
def test_anchor_meets_the_pass_criterion(signal):
    """Above 4 kHz the anchor's Welch spectrum is >= 40 dB below its passband; below 3 kHz the
    reference is kept within 0.5 dB (the issue's criterion for BS.1534-3's 3.5 kHz anchor)."""
    t = np.arange(4 * SR) / SR
    x = white_noise() if signal == "noise" else (0.5 * chirp(t, 50, t[-1], 11_500)).astype(np.float32)
    y = mushra_anchor(x, SR)
    assert y.shape == x.shape and y.dtype == np.float32
    passband = band_db(y, 200, 3000)
    assert band_db(y, 4000, SR / 2).max() <= passband.mean() - 40
    assert np.abs(passband - band_db(x, 200, 3000)).max() <= 0.5


def test_anchor_filter_design():
    """The FIR itself: >= 80 dB down from 4 kHz, flat to 3.5 kHz, odd length (zero delay)."""
    taps = anchor_filter(SR)
    assert len(taps) % 2 == 1
    w, h = freqz(taps, worN=16384, fs=SR)
    db = 20 * np.log10(np.abs(h) + 1e-15)
    assert db[w >= 4000].max() <= -80
    assert np.abs(db[w <= 3500]).max() <= 0.01


def test_anchor_has_zero_delay():
    t = np.arange(SR) / SR
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    inner = slice(2000, -2000)  # away from the edges, where the filter sees the zero padding
    np.testing.assert_allclose(mushra_anchor(tone, SR)[inner], tone[inner], atol=1e-3)


def test_anchor_needs_a_rate_above_the_cutoff():
    with pytest.raises(StimulusError, match="sample rate above 7000"):
        mushra_anchor(white_noise(0.1), 6000)
    with pytest.raises(StimulusError, match=r"shaped \[N\]"):
        mushra_anchor(np.zeros((10, 2)), SR)


# ------------------------------------------------------------------ gold clip

def test_degraded_gold_is_bad_and_deterministic():
    t = np.arange(3 * SR) / SR
    clip = (0.4 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 3 * t))
            + 0.05 * white_noise(3.0, seed=1)).astype(np.float32)
    gold = degraded_gold(clip, SR, seed=5)
    assert gold.shape == clip.shape and gold.dtype == np.float32
    np.testing.assert_array_equal(gold, degraded_gold(clip, SR, seed=5))
    assert not np.array_equal(gold, degraded_gold(clip, SR, seed=6))
    assert 0.5 <= np.abs(gold).max() <= 1.0
    gain = float(np.dot(clip, gold) / np.dot(gold, gold))  # the best scaling: what is left is degradation
    snr = 10 * np.log10(np.sum(clip.astype(float) ** 2) / np.sum((clip - gain * gold).astype(float) ** 2))
    assert snr <= 3.0


# ------------------------------------------------------------------ trapping clip

def test_trap_clip_layout_and_wording():
    spoken: list[str] = []
    lead = white_noise(5.0)
    clip = trap_clip(lead, SR, 2, "Poor", fake_speaker(16_000, 2.0, spoken))
    assert spoken == ["This is an interruption. Please select the answer 2, Poor, to confirm your attention now."]
    assert spoken[0] == trap_message(2, "Poor")
    assert clip.dtype == np.float32
    assert len(clip) == int(1.5 * SR) + int(TRAP_PAUSE_S * SR) + 2 * SR  # lead + pause + message resampled to 24 kHz
    np.testing.assert_array_equal(clip[: SR], lead[: SR])  # the real clip's start, untouched before the fade
    pause = clip[int(1.5 * SR): int(1.5 * SR) + int(TRAP_PAUSE_S * SR)]
    assert not pause.any()
    message = clip[-2 * SR:]
    assert abs(np.sqrt(np.mean(message ** 2)) - np.sqrt(np.mean(lead[: int(1.5 * SR)] ** 2))) < 0.01  # same level


def test_trap_clip_keeps_a_short_clip_whole():
    clip = trap_clip(white_noise(0.5), SR, 5, "Excellent", fake_speaker(SR, 1.0))
    assert len(clip) == int(0.5 * SR) + int(TRAP_PAUSE_S * SR) + SR


@needs_espeak
def test_trap_clip_with_espeak_has_speech_after_the_lead():
    clip = trap_clip(white_noise(3.0), SR, 1, "Bad", espeak_speaker())
    after = clip[int((1.5 + TRAP_PAUSE_S) * SR):]
    assert len(after) / SR > 2.0  # the spoken request takes seconds
    frames = after[: len(after) // 480 * 480].reshape(-1, 480)  # 20 ms frames
    voiced = np.sqrt(np.mean(frames ** 2, axis=1)) > 0.01
    assert voiced.sum() * 0.02 > 1.0  # over a second of sound, not silence


# ------------------------------------------------------------------ digits in noise

@pytest.mark.parametrize("snr_db", [0.0, -5.0, -8.0, 6.0])
def test_digits_in_noise_hits_the_requested_snr(snr_db):
    mix, speech, noise = digits_in_noise("482", snr_db, SR, seed=1, speak=fake_speaker(16_000, 1.5),
                                         return_parts=True)
    measured = 10 * np.log10(np.mean(speech.astype(float) ** 2) / np.mean(noise.astype(float) ** 2))
    assert abs(measured - snr_db) <= 0.5
    lead = int(NOISE_LEAD_S * SR)
    assert len(mix) == len(noise) == lead + len(speech) + int(NOISE_TAIL_S * SR)
    rebuilt = noise.astype(float).copy()
    rebuilt[lead: lead + len(speech)] += speech
    np.testing.assert_allclose(mix, rebuilt, atol=1e-6)
    assert np.abs(mix).max() <= 1.0


def test_digits_in_noise_is_deterministic_and_checks_its_digits():
    speak = fake_speaker()
    a = digits_in_noise("123", -5.0, SR, seed=3, speak=speak)
    np.testing.assert_array_equal(a, digits_in_noise("123", -5.0, SR, seed=3, speak=speak))
    assert not np.array_equal(a, digits_in_noise("123", -5.0, SR, seed=4, speak=speak))
    with pytest.raises(StimulusError, match="string of digits"):
        digits_in_noise("12a", 0.0, SR, seed=0, speak=speak)


def test_digits_are_spoken_one_by_one():
    spoken: list[str] = []
    digits_in_noise("907", 0.0, SR, seed=0, speak=fake_speaker(spoken=spoken))
    assert spoken == ["9, 0, 7"]


@needs_espeak
def test_digits_in_noise_with_espeak():
    speak = espeak_speaker()
    audio, rate = speak("4, 8, 2")
    assert rate == SR and audio.dtype == np.float32 and len(audio) > SR // 2
    mix, speech, noise = digits_in_noise("482", -5.0, SR, seed=2, speak=speak, return_parts=True)
    measured = 10 * np.log10(np.mean(speech.astype(float) ** 2) / np.mean(noise.astype(float) ** 2))
    assert abs(measured + 5.0) <= 0.5
    # speech-shaped: the noise carries most of its power where the voice does (below 4 kHz)
    f, p = welch(noise, fs=SR, nperseg=1024)
    assert p[f < 4000].sum() > 0.8 * p.sum()


def test_qualification_set():
    trials = qualification_set(seed=3)
    assert trials == qualification_set(seed=3)
    assert len(trials) == 3
    snrs = [snr for _, snr in trials]
    assert snrs == sorted(snrs, reverse=True)
    for digits, _ in trials:
        assert len(digits) == 3 and digits.isdigit() and len(set(digits)) == 3
