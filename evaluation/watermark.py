"""An inaudible watermark for synthesised speech: Resemble AI's PerthNet, from resemble-perth's shipped weights.

    from evaluation.watermark import Watermarker
    marker = Watermarker.load()                      # the weights inside the installed resemble-perth wheel
    marked = marker.apply(wave, 24000)               # float32 [N] -> float32 [N], same rate
    marker.detect(marked, 24000)                     # score in [0, 1]; >= THRESHOLD (0.5) means watermarked
    marker.is_watermarked(wave, 24000)               # False for speech that never went through apply

    python -m evaluation.watermark out/*.wav         # one line a file: path, watermarked|clean, score
    rumik watermark detect out/*.wav                 # the same command

The network is evaluation/perth_net.py, a torch-only port of perth's PerthImplicitWatermarker:
perth itself is never imported (it needs torchaudio, which does not load beside this torch, and
pkg_resources). Only its checkpoint is read, from the wheel's files as importlib.metadata lists
them, checked against the sha256 of 1.0.1's, and loaded with weights_only=True. Perth works at
32 kHz: other rates are resampled there and back with evaluation.audio_io.resample. At 32 kHz
the port's output and scores equal perth's; elsewhere its scores do too (perth detects through
scipy's polyphase filter as well), but perth applies through librosa's soxr, so the marked audio
differs from perth's about 54 dB below the signal (tests/evaluation/test_watermark.py).

The mark is one bit: "made here", no payload. What survives it and what does not (mp3,
resampling, 8 kHz mu-law) is measured by benchmarks/watermark_robustness.py with
`detection_rates`; docs/watermark.md has the table. The command reads at most MAX_SECONDS of
audio a file (refused from the header, before decoding) and exits 2 when any file could not be read.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from evaluation.audio_io import AudioLoadError, load_audio, resample
from rumik_app.errors import RumikError, report_user_error

PERTH_DISTRIBUTION, PERTH_VERSION = "resemble-perth", "1.0.1"
WEIGHTS_NAME = "perth_net_250000.pth.tar"
WEIGHTS_SHA256 = "oVvORX68U85ebJw_Ed94z37iv5zasKeYkCE1tMQCdnA"  # urlsafe base64, as in the wheel's RECORD
PERTH_RATE = 32_000  # = perth_net.SAMPLE_RATE, here without importing torch
THRESHOLD = 0.5  # perth rounds the decoder's output: >= 0.5 is "watermarked"
MIN_SECONDS = 0.05  # the STFT's reflect padding needs more than 1024 samples at 32 kHz
MAX_SECONDS = 600.0  # the command's limit per file
FFMPEG_TIMEOUT_S = 120


class WatermarkError(RumikError, ValueError):
    """The weights cannot be found or the audio cannot be watermarked; the message says how to fix it."""


def weights_path() -> Path:
    """PerthNet's checkpoint inside the installed resemble-perth wheel, found from its RECORD (perth is
    not imported) and checked against 1.0.1's sha256."""
    fix = f"pip install {PERTH_DISTRIBUTION}=={PERTH_VERSION}"
    try:
        dist = metadata.distribution(PERTH_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise WatermarkError(f"{PERTH_DISTRIBUTION} is not installed; the weights ship in it: {fix}") from None
    found = [f for f in dist.files or () if f.name == WEIGHTS_NAME]
    if not found:
        raise WatermarkError(f"{PERTH_DISTRIBUTION} {dist.version} has no {WEIGHTS_NAME}; {fix}")
    path = Path(dist.locate_file(found[0]))
    if not path.is_file():
        raise WatermarkError(f"{path} is listed in {PERTH_DISTRIBUTION}'s RECORD but missing; {fix}")
    digest = hashlib.sha256(path.read_bytes()).digest()
    if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != WEIGHTS_SHA256:
        raise WatermarkError(f"{path} is not {PERTH_VERSION}'s checkpoint (sha256 differs); {fix}")
    return path


def _as_wave(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """float32 [N], refused (WatermarkError) when not mono, not finite or shorter than MIN_SECONDS."""
    wave = np.asarray(wave, dtype=np.float32)
    if wave.ndim != 1:
        raise WatermarkError(f"expected mono audio shaped [N], got {wave.shape}; average the channels first.")
    if wave.size < MIN_SECONDS * sample_rate:
        raise WatermarkError(f"{wave.size / sample_rate:.3f} s of audio is too short; the watermark needs "
                             f"at least {MIN_SECONDS} s.")
    if not np.isfinite(wave).all():
        raise WatermarkError("the audio holds NaN or infinite samples.")
    return wave


def _fit(wave: np.ndarray, length: int) -> np.ndarray:
    """`wave` cut or zero-padded to `length` samples."""
    return wave[:length] if wave.size >= length else np.pad(wave, (0, length - wave.size))


@dataclass(frozen=True)
class Watermarker:
    """PerthNet's tensors on `device`; `apply` marks speech, `detect` scores it."""

    weights: dict[str, Any]
    device: str = "cpu"

    @classmethod
    def load(cls, device: str = "cpu", path: str | Path | None = None) -> Watermarker:
        """The network from `path`, by default the checkpoint in the installed wheel (weights_path)."""
        from evaluation import perth_net

        return cls(perth_net.load_weights(path or weights_path(), device), device)

    def _tensor(self, wave: np.ndarray, sample_rate: int):
        import torch

        return torch.tensor(resample(wave, sample_rate, PERTH_RATE), device=self.device)  # a copy: never a view

    def apply(self, wave: np.ndarray, sample_rate: int) -> np.ndarray:
        """The watermarked float32 [N]: same length and rate as `wave`."""
        from evaluation import perth_net

        wave = _as_wave(wave, sample_rate)
        marked = perth_net.watermark_signal(self.weights, self._tensor(wave, sample_rate)).cpu().numpy()
        return _fit(resample(marked, PERTH_RATE, sample_rate), wave.size)

    def detect(self, wave: np.ndarray, sample_rate: int) -> float:
        """The decoder's confidence that `wave` carries the mark, clipped to [0, 1] (0 for silence)."""
        from evaluation import perth_net

        raw = perth_net.decode_signal(self.weights, self._tensor(_as_wave(wave, sample_rate), sample_rate))
        return 0.0 if np.isnan(raw) else float(np.clip(raw, 0.0, 1.0))

    def is_watermarked(self, wave: np.ndarray, sample_rate: int) -> bool:
        return self.detect(wave, sample_rate) >= THRESHOLD


# ---------------------------------------------------------------- robustness: attacks and detection rates


def _ffmpeg(*args: str | Path) -> None:
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise WatermarkError("the mp3 attack needs ffmpeg: apt-get install ffmpeg")
    proc = subprocess.run([exe, "-nostdin", "-v", "error", "-y", *map(str, args)], capture_output=True,
                          timeout=FFMPEG_TIMEOUT_S)
    if proc.returncode != 0:
        raise WatermarkError(f"ffmpeg failed: {proc.stderr.decode(errors='replace').strip()[-300:]}")


def mp3(wave: np.ndarray, sample_rate: int, bitrate: str = "128k") -> np.ndarray:
    """`wave` through an mp3 encode (LAME, constant `bitrate`) and decode (ffmpeg's, gapless), same length."""
    with tempfile.TemporaryDirectory() as tmp:
        source, encoded, decoded = Path(tmp, "in.wav"), Path(tmp, "out.mp3"), Path(tmp, "decoded.wav")
        sf.write(source, wave, sample_rate, subtype="FLOAT")
        _ffmpeg("-i", source, "-c:a", "libmp3lame", "-b:a", bitrate, encoded)
        _ffmpeg("-i", encoded, "-c:a", "pcm_f32le", "-ar", str(sample_rate), decoded)
        return _fit(sf.read(decoded, dtype="float32")[0], wave.size)


def resampled(wave: np.ndarray, sample_rate: int, via: int = 16_000) -> np.ndarray:
    """`wave` down to `via` Hz and back."""
    return _fit(resample(resample(wave, sample_rate, via), via, sample_rate), wave.size)


def mu_law_8k(wave: np.ndarray, sample_rate: int) -> np.ndarray:
    """`wave` as telephone audio: 8 kHz, 8-bit mu-law (a WAV in memory), and back."""
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(resample(wave, sample_rate, 8000), -1, 1), 8000, format="WAV", subtype="ULAW")
    buffer.seek(0)
    phone, _rate = sf.read(buffer, dtype="float32")
    return _fit(resample(phone, 8000, sample_rate), wave.size)


Attack = Callable[[np.ndarray, int], np.ndarray]
ATTACKS: dict[str, Attack] = {
    "none": lambda wave, _rate: wave,
    "mp3 128 kbps": mp3,
    "resample via 16 kHz": resampled,
    "8 kHz mu-law": mu_law_8k,
}


@dataclass(frozen=True)
class DetectionRates:
    """Of `marked` watermarked clips the share detected (true positives), of `clean` ones the share
    wrongly detected (false positives); the median marked score and the highest clean one show the margin."""

    true_positive: float
    false_positive: float
    marked: int
    clean: int
    marked_median: float
    clean_max: float


def detection_rates(clean_waves: Sequence[np.ndarray], marked_waves: Sequence[np.ndarray], sample_rate: int,
                    attacks: Mapping[str, Attack] = ATTACKS,
                    watermarker: Watermarker | None = None) -> dict[str, DetectionRates]:
    """Each attack's DetectionRates: every clip attacked, then scored against THRESHOLD."""
    marker = watermarker or Watermarker.load()
    rates = {}
    for name, attack in attacks.items():
        marked = np.array([marker.detect(attack(w, sample_rate), sample_rate) for w in marked_waves])
        clean = np.array([marker.detect(attack(w, sample_rate), sample_rate) for w in clean_waves])
        rates[name] = DetectionRates(float(np.mean(marked >= THRESHOLD)), float(np.mean(clean >= THRESHOLD)),
                                     marked.size, clean.size, float(np.median(marked)), float(np.max(clean)))
    return rates


# ---------------------------------------------------------------- the command


def main(argv: Sequence[str] | None = None) -> int:
    """Score audio files: one `PATH<TAB>watermarked|clean<TAB>SCORE` line each; 2 when any file failed."""
    parser = argparse.ArgumentParser(description="Say whether audio files carry the PerthNet watermark "
                                                 f"(score >= {THRESHOLD}).")
    parser.add_argument("files", nargs="+", help="audio files (wav, flac, ogg, mp3, ...)")
    parser.add_argument("--max-seconds", type=float, default=MAX_SECONDS,
                        help=f"refuse files longer than this (default {MAX_SECONDS:g})")
    parser.add_argument("--device", default="cpu", help="torch device for the network (default cpu)")
    args = parser.parse_args(argv)
    try:
        marker = Watermarker.load(args.device)
    except RumikError as exc:
        return report_user_error(exc)
    status = 0
    for path in args.files:
        try:
            wave = load_audio(path, PERTH_RATE, max_seconds=args.max_seconds)
            score = marker.detect(wave, PERTH_RATE)
        except (AudioLoadError, WatermarkError) as exc:
            status = report_user_error(exc if isinstance(exc, AudioLoadError) else f"{path}: {exc}")
            continue
        print(f"{path}\t{'watermarked' if score >= THRESHOLD else 'clean'}\t{score:.3f}", flush=True)
    return status

if __name__ == "__main__":
    sys.exit(main())
