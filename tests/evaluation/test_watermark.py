"""The watermark's port against resemble-perth's own output (rumik_app.watermark), detection on espeak-ng
speech, the weights-only load, and evaluation.watermark: the attacks, the command and the runner's columns.

data/perth_fixture.npz holds perth 1.0.1's apply_watermark output and get_watermark scores on three
clips (data/make_perth_fixture.py, run in a scratch environment with torch 2.11 and torchaudio).
Tolerances: at perth's own 32 kHz the port must agree to 1e-5 in every sample (max |diff| 3.7e-9
measured: `apply` adds perth's residual back to the input, wave + (perth(wave) - wave), float
rounding) and in its scores to 1e-4 (they agreed exactly). At 24 kHz perth resamples the whole
marked clip back through soxr, while `apply` adds only the mark, resampled with the same soxr, to
the untouched clip: the two differ by soxr's round trip of the clip, which must stay 55 dB below
it (58.0 dB measured). Perth scores through scipy's polyphase filter, the port through soxr:
scores within 2e-3 at 24 kHz (9.7e-4 measured).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from evaluation.watermark import (
    THRESHOLD,
    Watermarker,
    WatermarkError,
    detection_rates,
    main,
    mp3,
    mu_law_8k,
    resampled,
)
from rumik_app.cli import find_command
from rumik_app.watermark import perth_net
from rumik_app.watermark.marker import weights_path
from tests.evaluation.conftest import espeak_wav

FIXTURE = Path(__file__).with_name("data") / "perth_fixture.npz"
SAMPLE_TOLERANCE = 1e-5  # max |ours - perth| at 32 kHz
RESAMPLED_SNR_DB = 55.0  # perth's output over (ours - perth) at 24 kHz
SCORE_TOLERANCE = 1e-4  # at 32 kHz
RESAMPLED_SCORE_TOLERANCE = 2e-3  # at 24 kHz: perth detects through scipy's resampler, the port through soxr


@pytest.fixture(scope="module")
def marker() -> Watermarker:
    return Watermarker.load()


@pytest.fixture(scope="module")
def perth() -> dict[str, tuple[np.ndarray, int, np.ndarray, np.ndarray]]:
    """name -> (input float32, rate, perth's watermarked output, perth's scores [clean, marked])."""
    data = np.load(FIXTURE)
    assert json.loads(str(data["versions"]))["resemble-perth"] == "1.0.1"
    names = {key.rsplit("_", 1)[0] for key in data.files if key.endswith("_input")}
    return {name: (data[f"{name}_input"].astype(np.float32) / 32768, int(data[f"{name}_rate"]),
                   data[f"{name}_perth"], data[f"{name}_scores"]) for name in names}


@pytest.mark.parametrize("name", ["en_32k", "tone_32k"])
def test_the_port_matches_perth_sample_for_sample_at_32k(marker, perth, name):
    wave, rate, theirs, scores = perth[name]
    ours = marker.apply(wave, rate)
    assert ours.shape == wave.shape and ours.dtype == np.float32  # perth's stops at a whole hop
    assert np.max(np.abs(ours[: theirs.size] - theirs)) <= SAMPLE_TOLERANCE
    assert abs(marker.detect(wave, rate) - scores[0]) <= SCORE_TOLERANCE
    assert abs(marker.detect(theirs, rate) - scores[1]) <= SCORE_TOLERANCE


def test_the_port_matches_perth_through_resampling(marker, perth):
    wave, rate, theirs, scores = perth["hi_24k"]
    ours = marker.apply(wave, rate)
    difference = ours[: theirs.size] - theirs
    snr = 10 * np.log10(np.sum(theirs**2) / np.sum(difference**2))
    assert snr >= RESAMPLED_SNR_DB, f"ours differs from perth by {snr:.1f} dB"
    assert abs(marker.detect(wave, rate) - scores[0]) <= RESAMPLED_SCORE_TOLERANCE
    assert abs(marker.detect(theirs, rate) - scores[1]) <= RESAMPLED_SCORE_TOLERANCE


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> list[tuple[np.ndarray, int]]:
    """espeak-ng speech in English and Hindi at its own 22.05 kHz."""
    folder = tmp_path_factory.mktemp("watermark")
    lines = [("en-us+f5", "The meeting moved to Thursday at four."), ("hi", "कल सुबह बारिश होने की संभावना है।"),
             ("en-us+m3", "Please call me back when you get this message.")]
    clips = [sf.read(espeak_wav(folder / f"{i}.wav", voice, text), dtype="float32") for i, (voice, text)
             in enumerate(lines)]
    return [(wave, int(rate)) for wave, rate in clips]


def test_speech_is_clean_until_watermarked(marker, speech):
    for wave, rate in speech:
        marked = marker.apply(wave, rate)
        assert marked.shape == wave.shape
        assert marker.detect(wave, rate) < 0.1 and not marker.is_watermarked(wave, rate)
        assert marker.detect(marked, rate) > 0.9 and marker.is_watermarked(marked, rate)
        assert 10 * np.log10(np.sum(wave**2) / np.sum((marked - wave) ** 2)) > 10  # a residual, not new audio


def test_silence_scores_zero_and_bad_input_names_the_fix(marker):
    assert marker.detect(np.zeros(24_000, np.float32), 24_000) == 0.0
    with pytest.raises(WatermarkError, match="too short"):
        marker.apply(np.zeros(100, np.float32), 24_000)
    with pytest.raises(WatermarkError, match="mono"):
        marker.detect(np.zeros((2, 24_000), np.float32), 24_000)


class _Payload:
    ran = False

    def __reduce__(self):
        return (_Payload._run, ())

    @staticmethod
    def _run():
        _Payload.ran = True


def test_weights_come_from_the_wheel_and_load_weights_only(tmp_path):
    path = weights_path()
    assert path.name == "perth_net_250000.pth.tar" and "site-packages" in str(path)
    payload = pickle.dumps({"model": _Payload(), "step": 1}, protocol=2)
    pickle.loads(payload)  # what a full unpickle would do: run the payload
    assert _Payload.ran
    _Payload.ran = False
    hostile = tmp_path / "hostile.pth.tar"
    hostile.write_bytes(payload)
    with pytest.raises(perth_net.WeightsError, match="tensors-only"):
        perth_net.load_weights(hostile)
    assert not _Payload.ran
    (tmp_path / "text.pth.tar").write_text("not a checkpoint")
    with pytest.raises(perth_net.WeightsError, match="reinstall"):
        perth_net.load_weights(tmp_path / "text.pth.tar")


def test_attacks_keep_the_length_and_detection_rates_count(marker, speech):
    wave, rate = speech[0]
    for attack in (mp3, resampled, mu_law_8k):
        attacked = attack(wave, rate)
        assert attacked.shape == wave.shape and np.corrcoef(wave, attacked)[0, 1] > 0.9, attack.__name__
    clean = [w for w, _rate in speech]
    marked = [marker.apply(w, rate) for w in clean[:2]]
    rates = detection_rates(clean, marked, rate, {"none": lambda w, _r: w, "resample": resampled}, marker)
    assert rates["none"].true_positive == 1.0 and rates["none"].false_positive == 0.0
    assert (rates["resample"].marked, rates["resample"].clean) == (len(marked), 3)
    assert rates["none"].marked_median > 0.9 > 0.1 > rates["none"].clean_max


def test_the_command_prints_a_line_a_file_and_names_bad_ones(marker, speech, tmp_path, capsys):
    wave, rate = speech[0]
    sf.write(tmp_path / "marked.wav", marker.apply(wave, rate), rate, subtype="PCM_16")
    sf.write(tmp_path / "clean.flac", wave, rate)
    (tmp_path / "notes.wav").write_text("not audio")
    sf.write(tmp_path / "long.flac", np.zeros(8000 * 660, np.int16), 8000)  # 11 minutes, a few KB
    files = [str(tmp_path / name) for name in ("marked.wav", "clean.flac", "notes.wav", "long.flac")]
    assert main(files) == 2
    out, err = capsys.readouterr()
    lines = [line.split("\t") for line in out.splitlines()]
    assert [(path, verdict) for path, verdict, _score in lines] == [(files[0], "watermarked"), (files[1], "clean")]
    assert float(lines[0][2]) >= THRESHOLD > float(lines[1][2])
    assert f"{files[2]}: not a readable audio file" in err
    assert f"{files[3]}: the clip is 660.0 s or longer; the limit here is 600 s" in err
    assert main(files[:2]) == 0


def test_rumik_watermark_detect_is_the_command():
    assert find_command(["watermark", "detect", "a.wav", "b.wav"]) == ("watermark detect", ["a.wav", "b.wav"])


@pytest.mark.slow
def test_the_robustness_benchmark_fills_its_table(capsys):
    from benchmarks import watermark_robustness

    result = watermark_robustness.main(["--clips", "2"])
    assert result["clips"] == 2 and result["rates"]["none"]["true_positive"] == 1.0
    assert "| 8 kHz mu-law |" in capsys.readouterr().out
