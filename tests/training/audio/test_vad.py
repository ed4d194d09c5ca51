"""training.audio.vad: a VADError's fix names the key of the command that hit it, and the energy VAD
marks the frames silero would (the same count, one per 32 ms at 16 kHz)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from training.audio import vad
from training.audio.levels import clipped_fraction, level_and_snr
from training.audio.vad import FRAME_SAMPLES, VAD_RATE, CutSettings, VADError, speech_frames


@pytest.mark.parametrize("vad_key", ["vad", "data.vad"])  # training.prepare's key, a voice's key
def test_without_silero_the_fix_names_the_callers_key(monkeypatch, vad_key):
    monkeypatch.setattr(vad, "_SESSION", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # silero-vad not installed
    with pytest.raises(VADError, match=f"pip install silero-vad==6.2.3; or use the model-free VAD with "
                                       f"--set {vad_key}=energy"):
        speech_frames(np.zeros(24_000, np.float32), 24_000, CutSettings(), vad_key=vad_key)
    with pytest.raises(VADError, match=f"use silero or energy \\(--set {vad_key}=...\\)"):
        speech_frames(np.zeros(24_000, np.float32), 24_000, CutSettings(vad="webrtc"), vad_key=vad_key)


def test_energy_vad_marks_a_tone_between_silences():
    rate = VAD_RATE
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(rate) / rate).astype(np.float32)
    audio = np.concatenate([np.zeros(rate, np.float32), tone, np.zeros(rate // 2, np.float32)])
    frames = speech_frames(audio, rate, CutSettings(vad="energy"))
    assert len(frames) == -(-len(audio) // FRAME_SAMPLES)  # silero's frame count
    first, last = np.flatnonzero(frames)[[0, -1]]  # the tone's first and last frames, within a frame
    assert abs(first * FRAME_SAMPLES - rate) <= FRAME_SAMPLES
    assert abs((last + 1) * FRAME_SAMPLES - 2 * rate) <= FRAME_SAMPLES
    assert frames[first : last + 1].all()


def test_levels_of_a_clip():
    rate = 24_000
    tone = 0.5 * np.sin(2 * np.pi * 220 * np.arange(rate) / rate)
    noisy = np.concatenate([tone, 0.005 * np.ones(rate)])
    level, snr = level_and_snr(noisy)
    assert level == pytest.approx(20 * np.log10(0.5 / np.sqrt(2)), abs=0.1) and snr == pytest.approx(
        20 * np.log10(0.5 / np.sqrt(2) / 0.005), abs=0.1)
    assert clipped_fraction(np.clip(4 * tone, -1, 1), 0.99) > 0.5 and clipped_fraction(tone, 0.99) == 0.0
