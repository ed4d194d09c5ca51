"""The one resampler (rumik_app.resample): streamed pieces equal the one-shot conversion exactly,
at every offered rate and for any cut of the pieces; equal rates pass through; bad rates are refused.

Run: .venv/bin/python -m pytest tests/rumik_app/test_resample.py -q
"""

import numpy as np
import pytest
import soxr

from rumik_app.resample import QUALITY, RATES, Resampler, resample


@pytest.mark.parametrize("to_rate", RATES)
def test_streamed_pieces_equal_the_whole_conversion(to_rate):
    wave = np.random.default_rng(to_rate).standard_normal(24_000 * 2).astype(np.float32) * 0.1
    cuts = [0, 1, 100, 4_000, 4_001, 17_777, wave.size]
    stream = Resampler(24_000, to_rate)
    pieces = [stream.push(wave[a:b], last=b == wave.size) for a, b in zip(cuts, cuts[1:], strict=False)]
    whole = resample(wave, 24_000, to_rate)
    assert np.array_equal(np.concatenate(pieces), whole)
    assert abs(whole.size - wave.size * to_rate / 24_000) <= 1


def test_it_is_soxr_hq_as_librosa_loads_and_equal_rates_pass_through():
    wave = np.random.default_rng(0).standard_normal(22_050).astype(np.float32)
    assert np.array_equal(resample(wave, 22_050, 16_000), soxr.resample(wave, 22_050, 16_000, quality=QUALITY))
    assert QUALITY == "HQ"
    assert resample(wave, 16_000, 16_000) is not None and np.array_equal(resample(wave, 16_000, 16_000), wave)
    assert np.array_equal(Resampler(8_000, 8_000).push(wave), wave)
    for bad in ((0, 16_000), (16_000, -1)):
        with pytest.raises(ValueError, match="positive"):
            resample(wave, *bad)
