"""`Watermarker`: PerthNet's mark applied to and read from audio at any rate, its weights from resemble-perth's wheel.

    from rumik_app.watermark.marker import Watermarker, shared_watermarker
    marker = Watermarker.load()                      # the weights inside the installed resemble-perth wheel
    marked = marker.apply(wave, 24000)               # float32 [N] -> float32 [N], same rate
    marker.detect(marked, 24000)                     # score in [0, 1]; >= THRESHOLD (0.5) means watermarked
    marker.is_watermarked(wave, 24000)               # False for speech that never went through apply
    shared_watermarker("cpu")                        # loaded once per process and device (the engines')

The network is rumik_app.watermark.perth_net, a torch-only port of perth's
PerthImplicitWatermarker: perth itself is never imported (it needs torchaudio, which does not
load beside this torch, and pkg_resources). Only its checkpoint is read, from the wheel's files
as importlib.metadata lists them, checked against the sha256 of 1.0.1's, and loaded with
weights_only=True. A missing or damaged wheel is `WatermarkUnavailable`, naming the install.

Perth works at 32 kHz. `apply` resamples there with soxr (HQ, as perth does through librosa),
marks, and adds back only what the mark changed, resampled to the clip's rate:
    marked = wave + resample(perth(up) - up, 32 kHz -> rate),  up = resample(wave, rate -> 32 kHz)
so nothing of the clip but the mark is touched (perth resamples the whole marked clip back,
which also low-passes it). At 32 kHz that is perth's output to float rounding; at 24 kHz it
differs from perth's by the resampling round trip of the clip, 58 dB below it on the fixture
(tests/evaluation/test_watermark.py). `detect` resamples a wave with the same soxr (perth uses
scipy's polyphase filter there): scores within 2e-3 of perth's. (`rumik watermark detect` and
`evaluation.run` load files through evaluation.audio_io, which converts with the same one resampler,
`rumik_app.resample`, straight to 32 kHz.)
"""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rumik_app.resample import Resampler, resample
from rumik_app.watermark import WatermarkError, WatermarkUnavailable

if TYPE_CHECKING:
    import torch

PERTH_DISTRIBUTION, PERTH_VERSION = "resemble-perth", "1.0.1"
WEIGHTS_NAME = "perth_net_250000.pth.tar"
WEIGHTS_SHA256 = "oVvORX68U85ebJw_Ed94z37iv5zasKeYkCE1tMQCdnA"  # urlsafe base64, as in the wheel's RECORD
PERTH_RATE = 32_000  # perth_net.SAMPLE_RATE, named here so that importing this module needs no torch
THRESHOLD = 0.5  # perth rounds the decoder's output: >= 0.5 is "watermarked"
MIN_SECONDS = 0.05  # the STFT's reflect padding needs more than 1024 samples at 32 kHz
INSTALL_FIX = f"pip install {PERTH_DISTRIBUTION}=={PERTH_VERSION}"


def weights_path() -> Path:
    """PerthNet's checkpoint inside the installed resemble-perth wheel, found from its RECORD (perth is
    not imported) and checked against 1.0.1's sha256; WatermarkUnavailable naming the install otherwise."""
    try:
        dist = metadata.distribution(PERTH_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise WatermarkUnavailable(f"The watermark needs {PERTH_DISTRIBUTION}, whose wheel ships its weights, "
                                   f"and it is not installed: {INSTALL_FIX}") from None
    found = [f for f in dist.files or () if f.name == WEIGHTS_NAME]
    if not found:
        raise WatermarkUnavailable(f"{PERTH_DISTRIBUTION} {dist.version} has no {WEIGHTS_NAME}; {INSTALL_FIX}")
    path = Path(dist.locate_file(found[0]))
    if not path.is_file():
        raise WatermarkUnavailable(f"{path} is listed in {PERTH_DISTRIBUTION}'s RECORD but missing; {INSTALL_FIX}")
    digest = hashlib.sha256(path.read_bytes()).digest()
    if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != WEIGHTS_SHA256:
        raise WatermarkUnavailable(f"{path} is not {PERTH_VERSION}'s checkpoint (sha256 differs); {INSTALL_FIX}")
    return path


def resampler(from_rate: int, to_rate: int) -> Resampler | None:
    """`resample` as a stream: its pieces concatenate to `resample` of the whole (None when equal)."""
    return None if from_rate == to_rate else Resampler(from_rate, to_rate)


def check_wave(wave: np.ndarray, sample_rate: int) -> np.ndarray:
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


def fit(wave: np.ndarray, length: int) -> np.ndarray:
    """`wave` cut or zero-padded to `length` samples."""
    return wave[:length] if wave.size >= length else np.pad(wave, (0, length - wave.size))


@dataclass(frozen=True)
class Watermarker:
    """PerthNet's tensors on `device`; `apply` marks speech, `detect` scores it. Read-only: one
    instance serves every thread."""

    weights: dict[str, Any]
    device: str = "cpu"

    @classmethod
    def load(cls, device: str = "cpu", path: str | Path | None = None) -> Watermarker:
        """The network from `path`, by default the checkpoint in the installed wheel (weights_path)."""
        from rumik_app.watermark import perth_net

        return cls(perth_net.load_weights(path or weights_path(), device), str(device))

    def tensor(self, wave: np.ndarray) -> torch.Tensor:
        import torch

        return torch.tensor(wave, dtype=torch.float32, device=self.device)  # a copy: never a view

    def residual(self, up: np.ndarray) -> np.ndarray:
        """What the mark adds to float32 [N] at PERTH_RATE (perth's output minus its input)."""
        from rumik_app.watermark import perth_net

        return perth_net.watermark_signal(self.weights, self.tensor(up)).cpu().numpy() - up

    def apply(self, wave: np.ndarray, sample_rate: int) -> np.ndarray:
        """The watermarked float32 [N]: same length and rate as `wave` (the module docstring)."""
        wave = check_wave(wave, sample_rate)
        added = resample(self.residual(resample(wave, sample_rate, PERTH_RATE)), PERTH_RATE, sample_rate)
        return wave + fit(added, wave.size)

    def detect(self, wave: np.ndarray, sample_rate: int) -> float:
        """The decoder's confidence that `wave` carries the mark, clipped to [0, 1] (0 for silence)."""
        up = resample(check_wave(wave, sample_rate), sample_rate, PERTH_RATE)
        from rumik_app.watermark import perth_net

        raw = perth_net.decode_signal(self.weights, self.tensor(up))
        return 0.0 if np.isnan(raw) else float(np.clip(raw, 0.0, 1.0))

    def is_watermarked(self, wave: np.ndarray, sample_rate: int) -> bool:
        return self.detect(wave, sample_rate) >= THRESHOLD


@functools.cache
def shared_watermarker(device: str = "cpu") -> Watermarker:
    """The installed wheel's Watermarker on `device`, loaded on first use and kept for the process
    (WatermarkUnavailable is not kept: a later call tries again)."""
    return Watermarker.load(device)
