"""A clip's levels: the share of clipped samples, each frame's RMS level, the speech level and the SNR.

    share = clipped_fraction(samples, 0.99)    # the share of samples at or above 0.99 of full scale
    levels = frame_levels_db(samples)          # dBFS of each 32 ms frame of 24 kHz audio, floored at -100
    level, snr = level_and_snr(samples)        # the loud frames' level, and its distance to the quiet ones'

The level filters read them: training.prepare's silent, clipped and low_snr; voice adaptation's clipped.
"""

from __future__ import annotations

import numpy as np

from rumik_app.audio import SAMPLE_RATE
from training.audio.vad import FRAME_SECONDS

LOUD_PERCENTILE, FLOOR_PERCENTILE = 95, 10  # a clip's speech level and noise floor among its 32 ms frames
FLOOR_DB = -100.0


def clipped_fraction(samples: np.ndarray, level: float) -> float:
    """The share of samples whose magnitude is at or above `level` (full scale = 1)."""
    return float(np.mean(np.abs(samples) >= level)) if len(samples) else 0.0


def frame_levels_db(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """RMS level (dBFS, floored at -100) of each 32 ms frame of mono audio [N] -> [F]."""
    size = max(1, int(round(FRAME_SECONDS * sample_rate)))
    count = max(1, len(samples) // size)
    frames = np.asarray(samples[: count * size], np.float64).reshape(count, -1) if len(samples) >= size else \
        np.asarray(samples, np.float64).reshape(1, -1)
    return np.maximum(10 * np.log10(np.mean(frames**2, axis=1) + 1e-20), FLOOR_DB)


def level_and_snr(samples: np.ndarray) -> tuple[float, float]:
    """(speech level dBFS, SNR dB): the 95th percentile of frame levels and its distance to the 10th."""
    levels = frame_levels_db(samples)
    loud, floor = np.percentile(levels, [LOUD_PERCENTILE, FLOOR_PERCENTILE])
    return float(loud), float(loud - floor)
