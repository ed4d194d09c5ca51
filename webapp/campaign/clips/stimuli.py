"""Audio made for the listening-test designs: the MUSHRA low anchor, "Bad" gold clips, P.808
trapping clips and digits-in-noise trials for the hearing check.

Library module, no command line; pure functions on float32 mono numpy arrays [N] at a given
sample rate (Hz), nothing written to disk::

    from webapp.campaign.clips.stimuli import (digits_in_noise, espeak_speaker, mushra_anchor, degraded_gold,
                                         qualification_set, trap_clip)
    anchor = mushra_anchor(reference, 24000)                 # ITU-R BS.1534-3 low anchor (3.5 kHz low-pass)
    gold = degraded_gold(clip, 24000, seed=7)                # a known "Bad" (1) clip, P.808 gold question
    speak = espeak_speaker()                                 # text -> (samples, rate), espeak-ng
    trap = trap_clip(clip, 24000, 2, "Poor", speak)          # "... Please select the answer 2, Poor, ..."
    for digits, snr in qualification_set(seed=3):            # [("382", 0.0), ("571", -5.0), ("907", -8.0)]
        trial = digits_in_noise(digits, snr, 24000, seed=3, speak=speak)

Where they come from:
- `mushra_anchor`: BS.1534-3 §5.1 low-range anchor, "a low-pass filtered version of the
  original signal with a cut-off frequency of 3.5 kHz" (webMUSHRA calls it `anchor35`): a
  linear-phase Kaiser-window FIR (scipy `kaiserord`/`firwin`), >= 80 dB down from 4 kHz,
  applied with zero delay (odd length, `fftconvolve(mode="same")`).
- `degraded_gold`: P.808 §6.3.8 gold-standard questions are clips whose rating is known; ours
  is a clip made unmistakably "Bad": 2 kHz narrowband, white noise at 0 dB SNR, hard clipping.
- `trap_clip`: P.808 §6.3.8 trapping question, as the P.808 toolkit builds them
  (microsoft/P.808 `src/create_trapping_stimuli.py`: the start of a real clip, then a message;
  message text from `src/trapping clips/messages/README.md`: "This is an interruption. Please
  select the answer X to confirm your attention now.").
- `digits_in_noise`: the digit-triplet test behind the toolkit's hearing check
  (`src/hearing test/`, Smits et al. 2004): three spoken digits in speech-shaped noise.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
from scipy.signal import butter, fftconvolve, firwin, firwin2, kaiserord, sosfiltfilt, welch

from evaluation.audio_io import resample
from rumik_app.errors import RumikError

Speak = Callable[[str], tuple[np.ndarray, int]]  # text -> (float32 mono samples [N], sample rate Hz)

# MUSHRA anchor (BS.1534-3): 3.5 kHz cut-off, stopband from 4 kHz at >= 80 dB.
ANCHOR_CUTOFF_HZ = 3500.0
ANCHOR_TRANSITION_HZ = 500.0
ANCHOR_STOPBAND_DB = 80.0
KAISER_MARGIN_DB = 3.0  # kaiserord's length formula is approximate: design a little past the target
# "Bad" gold clip: narrowband, noisy, clipped.
GOLD_BAND_HZ = 2000.0
GOLD_FILTER_ORDER = 8
GOLD_SNR_DB = 0.0
GOLD_CLIP_FRACTION = 0.25  # hard-clip at this fraction of the band-limited clip's peak
PEAK = 0.9  # peak level of made clips (full scale 1.0)
# Trapping clips.
TRAP_LEAD_S = 1.5  # the toolkit keeps 5 s of the source (trapping.cfg); a short lead keeps our pages short
TRAP_PAUSE_S = 0.4
FADE_S = 0.01
SILENT_RMS = 1e-4
FALLBACK_RMS = 0.05  # about -26 dBFS, the level P.808's messages are set to (-26 dBov)
TRAP_MESSAGE = "This is an interruption. Please select the answer {answer}, {label}, to confirm your attention now."
# Digits in noise.
DIGITS_PER_TRIAL = 3
QUALIFICATION_SNRS_DB = (0.0, -5.0, -8.0)  # easier than the toolkit's -11 dB: espeak is less intelligible than a voice
NOISE_LEAD_S = 0.5
NOISE_TAIL_S = 0.3
SHAPE_SEGMENT = 512  # Welch segment for the speech spectrum the noise copies
SHAPE_TAPS = 511


class StimulusError(RumikError, ValueError):
    """A stimulus that cannot be made from what was given; the message says what to change."""


def _mono(samples: np.ndarray, where: str) -> np.ndarray:
    x = np.asarray(samples, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise StimulusError(f"{where}: expected mono samples shaped [N] with N > 0, got shape {x.shape}.")
    return x


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x)))) if x.size else 0.0


def _peak_normalise(x: np.ndarray, peak: float = PEAK) -> np.ndarray:
    top = float(np.max(np.abs(x))) if x.size else 0.0
    return (x * (peak / top) if top > 0 else x).astype(np.float32)


def anchor_filter(sample_rate: int, cutoff_hz: float = ANCHOR_CUTOFF_HZ) -> np.ndarray:
    """Taps of the anchor's linear-phase low-pass: passband to `cutoff_hz`, >= ANCHOR_STOPBAND_DB
    down from `cutoff_hz + ANCHOR_TRANSITION_HZ` (narrower where Nyquist is closer); odd length."""
    nyquist = sample_rate / 2.0
    width = min(ANCHOR_TRANSITION_HZ, nyquist - cutoff_hz)
    if cutoff_hz <= 0 or width <= 0:
        raise StimulusError(f"A {cutoff_hz:g} Hz low-pass needs a sample rate above {2 * cutoff_hz:g} Hz; "
                            f"got {sample_rate} Hz. Resample the reference up first.")
    numtaps, beta = kaiserord(ANCHOR_STOPBAND_DB + KAISER_MARGIN_DB, width / nyquist)
    numtaps |= 1  # odd: a symmetric filter with an integer delay, removed by mode="same"
    return firwin(numtaps, cutoff_hz + width / 2.0, window=("kaiser", beta), fs=sample_rate)


def mushra_anchor(samples: np.ndarray, sample_rate: int, cutoff_hz: float = ANCHOR_CUTOFF_HZ) -> np.ndarray:
    """The BS.1534-3 low anchor of a reference: a `cutoff_hz` low-pass, zero delay, same length [N]
    as the input, float32. Levels are left as they are (a low-pass only removes energy)."""
    x = _mono(samples, "mushra_anchor")
    return fftconvolve(x, anchor_filter(sample_rate, cutoff_hz), mode="same").astype(np.float32)


def degraded_gold(samples: np.ndarray, sample_rate: int, seed: int) -> np.ndarray:
    """A deliberately "Bad" copy of a clip (P.808 gold question, expected answer 1): low-passed to
    GOLD_BAND_HZ, white noise added at GOLD_SNR_DB, hard-clipped at GOLD_CLIP_FRACTION of its peak,
    peak-normalised to PEAK. Same length [N], float32; the same seed gives the same clip."""
    x = _mono(samples, "degraded_gold")
    if sample_rate <= 2 * GOLD_BAND_HZ:
        raise StimulusError(f"degraded_gold needs a sample rate above {2 * GOLD_BAND_HZ:g} Hz; got {sample_rate}.")
    sos = butter(GOLD_FILTER_ORDER, GOLD_BAND_HZ, btype="lowpass", fs=sample_rate, output="sos")
    narrow = sosfiltfilt(sos, x)
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(x.size)
    level = _rms(narrow) if _rms(narrow) > SILENT_RMS else FALLBACK_RMS
    noise *= level / (_rms(noise) * 10 ** (GOLD_SNR_DB / 20))
    noisy = narrow + noise
    limit = GOLD_CLIP_FRACTION * float(np.max(np.abs(noisy)))
    return _peak_normalise(np.clip(noisy, -limit, limit))


def _spoken(speak: Speak, text: str, sample_rate: int) -> np.ndarray:
    audio, rate = speak(text)
    voice = _mono(audio, f"speak({text!r})")
    return resample(voice, int(rate), int(sample_rate)).astype(np.float64)


def trap_message(answer: int, label: str) -> str:
    """The spoken request of a trapping clip (the P.808 toolkit's wording plus the scale label)."""
    return TRAP_MESSAGE.format(answer=int(answer), label=label)


def trap_clip(lead_samples: np.ndarray, sample_rate: int, answer: int, label: str, speak: Speak,
              lead_seconds: float = TRAP_LEAD_S) -> np.ndarray:
    """A P.808 trapping clip: the first `lead_seconds` of a real clip (faded out), TRAP_PAUSE_S of
    silence, then `speak(trap_message(answer, label))` at the lead's RMS level. float32 [N]."""
    x = _mono(lead_samples, "trap_clip")
    lead = x[: int(round(lead_seconds * sample_rate))].copy()
    fade = min(lead.size, int(FADE_S * sample_rate))
    if fade:
        lead[-fade:] *= np.linspace(1.0, 0.0, fade)
    message = _spoken(speak, trap_message(answer, label), sample_rate)
    lead_rms = _rms(lead)
    target = lead_rms if lead_rms > SILENT_RMS else FALLBACK_RMS
    message *= target / max(_rms(message), SILENT_RMS)
    out = np.concatenate([lead, np.zeros(int(round(TRAP_PAUSE_S * sample_rate))), message])
    top = float(np.max(np.abs(out)))
    return (out / top * PEAK if top > 1.0 else out).astype(np.float32)


def speech_shaped_noise(speech: np.ndarray, n: int, sample_rate: int, rng: np.random.Generator) -> np.ndarray:
    """n samples of stationary noise with the long-term spectrum of `speech` (white noise through
    an FIR whose gain is the square root of the speech's Welch spectrum), float64 [n]."""
    freqs, psd = welch(speech, fs=sample_rate, nperseg=min(SHAPE_SEGMENT, speech.size))
    gain = np.sqrt(psd / max(float(psd.max()), 1e-20))
    taps = firwin2(SHAPE_TAPS, freqs, gain, fs=sample_rate)
    white = rng.standard_normal(n + SHAPE_TAPS)
    return fftconvolve(white, taps, mode="valid")[:n]


def digits_in_noise(digits: str, snr_db: float, sample_rate: int, seed: int, speak: Speak,
                    return_parts: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One hearing-check trial: the digits spoken one by one ("4, 8, 2"), NOISE_LEAD_S after the
    start of speech-shaped noise that goes on NOISE_TAIL_S after them, at `snr_db`.

    SNR = 10 log10(mean square of the spoken digits / mean square of the noise); the noise is
    stationary, so it holds over any stretch. Peak-limited to PEAK by scaling both parts alike.
    Returns the mix, float32 [N]; with return_parts, (mix [N], speech [M], noise [N]) with
    mix == noise + speech placed at NOISE_LEAD_S (all three scaled alike)."""
    if not digits or not digits.isdigit():
        raise StimulusError(f"digits_in_noise: {digits!r} is not a string of digits (e.g. '482').")
    speech = _spoken(speak, ", ".join(digits), sample_rate)
    lead, tail = int(round(NOISE_LEAD_S * sample_rate)), int(round(NOISE_TAIL_S * sample_rate))
    n = lead + speech.size + tail
    noise = speech_shaped_noise(speech, n, sample_rate, np.random.default_rng(seed))
    noise *= _rms(speech) / (_rms(noise) * 10 ** (snr_db / 20))
    mix = noise.copy()
    mix[lead: lead + speech.size] += speech
    scale = min(1.0, PEAK / float(np.max(np.abs(mix))))
    mix, speech, noise = (a * scale for a in (mix, speech, noise))
    if return_parts:
        return mix.astype(np.float32), speech.astype(np.float32), noise.astype(np.float32)
    return mix.astype(np.float32)


def qualification_set(seed: int | str, snrs_db: tuple[float, ...] = QUALIFICATION_SNRS_DB) -> list[tuple[str, float]]:
    """The hearing check's trials: one (digits, snr_db) per SNR, easiest first; DIGITS_PER_TRIAL
    digits each, no digit repeated within a trial (as in the digit-triplet test)."""
    rng = random.Random(seed)
    return [("".join(rng.sample("0123456789", DIGITS_PER_TRIAL)), float(snr)) for snr in snrs_db]


def espeak_speaker(language: str = "en", voice: str = "Ira", pace: str | None = None) -> Speak:
    """A `speak` callable backed by the repo's espeak-ng baseline (evaluation.systems.espeak):
    text -> (float32 samples [N], 24000). `language` picks the espeak voice ("en" -> en-us),
    `voice` our voice name (its espeak variant), `pace` slow | steady | fast (None: steady)."""
    from evaluation.systems.espeak import espeak_synthesize  # espeak-ng only when a speaker is made

    def speak(text: str) -> tuple[np.ndarray, int]:
        audio = espeak_synthesize(text, language=language, voice=voice, pace=pace)
        return audio.samples, audio.sample_rate

    return speak
