"""Make perth_fixture.npz: resemble-perth's own PerthImplicitWatermarker on three fixed clips.

tests/evaluation/test_watermark.py checks evaluation.watermark (the torch-only port) against it.
Runs only in a scratch environment where perth imports (a torch with its matching torchaudio,
librosa, pkg_resources), never in the project's:

    python3.11 -m venv /tmp/perth-env
    /tmp/perth-env/bin/pip install torch==2.11.0 torchaudio==2.11.0 resemble-perth==1.0.1 \\
        "setuptools<81" librosa==0.11.0 pyyaml soundfile numpy==2.3.5 scipy
    /tmp/perth-env/bin/python tests/evaluation/data/make_perth_fixture.py   # needs espeak-ng

The clips (inputs stored as int16, so the test feeds both implementations the same samples):
  en_32k    espeak-ng `en`, 1.255 s at perth's own 32 kHz: the network and STFT alone
  tone_32k  seeded tones, vibrato and noise, 0.8 s at 32 kHz
  hi_24k    espeak-ng `hi`, 1.25 s at 24 kHz (the model's rate): perth resamples with librosa's soxr
            to 32 kHz and back for apply (ours uses scipy's polyphase), polyphase for detection
For each: `<name>_input` int16, `<name>_rate`, `<name>_perth` (apply_watermark's float32 output,
a whole number of 320-sample hops at 32 kHz, so up to 10 ms shorter than the input), and
`<name>_scores` = get_watermark(round=False) on [input, perth's output]. `versions` names the
packages that made it.
"""

from __future__ import annotations

import io
import json
import subprocess
from importlib import metadata
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

OUT = Path(__file__).with_name("perth_fixture.npz")
SPEECH = {
    "en_32k": ("en", "The quick brown fox jumps over the lazy dog.", 32_000, 1.255),
    "hi_24k": ("hi", "नमस्ते, आज मौसम बहुत अच्छा है।", 24_000, 1.25),
}


def espeak(voice: str, text: str, rate: int, seconds: float) -> np.ndarray:
    """espeak-ng's 22.05 kHz speech at `rate`, leading silence skipped, `seconds` long, as int16."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "--stdout", text], check=True, capture_output=True).stdout
    speech, source_rate = sf.read(io.BytesIO(wav), dtype="float32")
    start = int(np.argmax(np.abs(speech) > 0.01))
    speech = resample_poly(speech[start:], rate // 50, source_rate // 50)[: int(rate * seconds)]
    return np.round(np.clip(speech, -1, 1) * 32767).astype(np.int16)


def tones(rate: int = 32_000, seconds: float = 0.8) -> np.ndarray:
    """Two harmonics with vibrato and a fade, plus seeded noise, as int16."""
    t = np.arange(int(rate * seconds)) / rate
    f0 = 180 + 20 * np.sin(2 * np.pi * 3 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    wave = 0.3 * np.sin(phase) + 0.15 * np.sin(2 * phase) + 0.02 * np.random.default_rng(7).standard_normal(t.size)
    wave *= np.minimum(1, np.minimum(t, t[::-1]) / 0.05)
    return np.round(wave * 32767).astype(np.int16)


def main() -> None:
    import perth  # only here: the scratch environment

    marker = perth.PerthImplicitWatermarker(device="cpu")
    clips = {name: (espeak(voice, text, rate, s), rate) for name, (voice, text, rate, s) in SPEECH.items()}
    clips["tone_32k"] = (tones(), 32_000)
    arrays = {}
    for name, (pcm, rate) in clips.items():
        wave = pcm.astype(np.float32) / 32768
        marked = np.asarray(marker.apply_watermark(wave, sample_rate=rate), dtype=np.float32)
        scores = [float(marker.get_watermark(x, sample_rate=rate, round=False)) for x in (wave, marked)]
        arrays.update({f"{name}_input": pcm, f"{name}_rate": np.int32(rate), f"{name}_perth": marked,
                       f"{name}_scores": np.asarray(scores, np.float32)})
        print(f"{name}: {pcm.size} -> {marked.size} samples at {rate} Hz, scores clean {scores[0]:.4f} "
              f"marked {scores[1]:.4f}")
    versions = {p: metadata.version(p) for p in ("resemble-perth", "torch", "torchaudio", "librosa", "soxr")}
    np.savez_compressed(OUT, versions=json.dumps(versions), **arrays)
    print(f"{OUT}: {OUT.stat().st_size:,} bytes, {versions}")


if __name__ == "__main__":
    main()
