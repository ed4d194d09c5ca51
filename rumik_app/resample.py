"""The one resampler: every path that changes a sample rate (audio loading, the judges, the
watermark, the delivery formats) converts with soxr at librosa's default quality ("HQ"), the
resampler the judges' reference pipelines load with (`librosa.load(path, sr=...)`).

    from rumik_app.resample import resample, Resampler
    wave16k = resample(wave, 24_000, 16_000)              # float32 [N] -> float32 [M]
    stream = Resampler(24_000, 8_000)                     # pieces as they arrive
    out = stream.push(piece_1) + ... ; out_last = stream.push(piece_n, last=True)
    # concatenated, the pieces equal resample() of the whole clip, sample for sample

soxr's `ResampleStream` keeps the filter state between pieces, so a streamed response has no
seam and equals the offline conversion (tests/rumik_app/test_resample.py).
"""

from __future__ import annotations

import numpy as np
import soxr

QUALITY = "HQ"  # soxr's and librosa's default (`res_type="soxr_hq"`)
RATES = (8_000, 16_000, 22_050, 24_000, 44_100, 48_000)  # the output rates the server offers


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Mono float32 [N] from `from_rate` to `to_rate` Hz (the same array when the rates are equal)."""
    samples = np.asarray(samples, dtype=np.float32)
    if from_rate <= 0 or to_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {from_rate} -> {to_rate} Hz")
    if from_rate == to_rate or samples.size == 0:
        return samples
    return soxr.resample(samples, from_rate, to_rate, quality=QUALITY).astype(np.float32, copy=False)


class Resampler:
    """`resample` over pieces: `push(piece)` returns what is ready; the last push (`last=True`)
    flushes the filter. A pass-through when the rates are equal."""

    def __init__(self, from_rate: int, to_rate: int):
        if from_rate <= 0 or to_rate <= 0:
            raise ValueError(f"sample rates must be positive, got {from_rate} -> {to_rate} Hz")
        self.from_rate, self.to_rate = from_rate, to_rate
        self._stream = None if from_rate == to_rate else soxr.ResampleStream(from_rate, to_rate, 1, dtype="float32",
                                                                               quality=QUALITY)

    def push(self, samples: np.ndarray, last: bool = False) -> np.ndarray:
        samples = np.asarray(samples, dtype=np.float32)
        if self._stream is None:
            return samples
        return self._stream.resample_chunk(samples, last=last).astype(np.float32, copy=False)
