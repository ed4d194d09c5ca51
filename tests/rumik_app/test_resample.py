"""The one resampler (rumik_app.resample): streamed pieces equal the one-shot conversion exactly,
at every offered rate and for any cut of the pieces; the output is librosa's, length included;
equal rates pass through; bad rates are refused.

Run: .venv/bin/python -m pytest tests/rumik_app/test_resample.py -q
"""

import math

import numpy as np
import pytest
import soxr

from rumik_app.resample import QUALITY, RATES, Resampler, fit_length, output_length, resample


@pytest.mark.parametrize("to_rate", RATES)
def test_streamed_pieces_equal_the_whole_conversion(to_rate):
    wave = np.random.default_rng(to_rate).standard_normal(24_000 * 2 + 7).astype(np.float32) * 0.1  # odd length
    cuts = [0, 1, 100, 4_000, 4_001, 17_777, wave.size]
    stream = Resampler(24_000, to_rate)
    pieces = [stream.push(wave[a:b], last=b == wave.size) for a, b in zip(cuts, cuts[1:], strict=False)]
    whole = resample(wave, 24_000, to_rate)
    assert np.array_equal(np.concatenate(pieces), whole)
    assert whole.size == output_length(wave.size, 24_000, to_rate) == math.ceil(wave.size * to_rate / 24_000)


@pytest.mark.parametrize(("from_rate", "to_rate"), [(22_050, 16_000), (44_100, 24_000), (8_000, 16_000),
                                                    (48_000, 16_000), (24_000, 22_050)])
def test_it_equals_librosa_resample_sample_for_sample_at_odd_lengths(from_rate, to_rate):
    import librosa

    for n in (83_143, 1, 4_409, 22_051):  # 83,143 at 22.05 kHz: soxr alone gives 60,331 at 16 kHz, librosa 60,332
        wave = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 0.1
        ours, theirs = resample(wave, from_rate, to_rate), librosa.resample(wave, orig_sr=from_rate, target_sr=to_rate)
        assert ours.dtype == np.float32 and ours.size == theirs.size, (n, ours.size, theirs.size)
        np.testing.assert_array_equal(ours, theirs)


def test_it_is_soxr_hq_as_librosa_loads_and_equal_rates_pass_through():
    wave = np.random.default_rng(0).standard_normal(22_050).astype(np.float32)
    soxr_alone = soxr.resample(wave, 22_050, 16_000, quality=QUALITY)
    expected = fit_length(soxr_alone, output_length(wave.size, 22_050, 16_000))
    assert np.array_equal(resample(wave, 22_050, 16_000), expected)
    assert QUALITY == "HQ"
    assert resample(wave, 16_000, 16_000) is not None and np.array_equal(resample(wave, 16_000, 16_000), wave)
    assert np.array_equal(Resampler(8_000, 8_000).push(wave), wave)
    for bad in ((0, 16_000), (16_000, -1)):
        with pytest.raises(ValueError, match="positive"):
            resample(wave, *bad)
