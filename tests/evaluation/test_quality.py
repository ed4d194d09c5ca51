"""DNSMOS (evaluation.quality) against speechmos's own `dnsmos.run` on espeak-ng clips, its
windowing quirk, noise lowering OVRL, the command line and its errors.

Run: .venv/bin/python -m pytest tests/evaluation/test_quality.py -q
"""

from __future__ import annotations

import importlib.util
import json
import warnings

import numpy as np
import pytest

from evaluation import quality
from evaluation.audio_io import LOCAL_MAX_SECONDS, load_audio, resample
from evaluation.quality import DNSMOS, MODEL_RATE, QualityError, scaled_ovrl, windows
from rumik_app.audio import write_wav

KEYS = {"sig": "sig_mos", "bak": "bak_mos", "ovrl": "ovrl_mos", "p808": "p808_mos"}


def speechmos_run(samples: np.ndarray, personalized: bool = False) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from speechmos import dnsmos
    return dnsmos.run(samples, MODEL_RATE, model_type="dnsmos_personalized" if personalized else "dnsmos")


@pytest.fixture(scope="module")
def judge() -> DNSMOS:
    return DNSMOS(device="cpu", threads=1)


# Clips of 2.26-2.75 s, 4.51-5.5 s or 9.01-10.5 s fill exactly one 9.01 s window once tiled: one model call.
ONE_WINDOW_S = 5


@pytest.fixture(scope="module")
def speech(speech_clips) -> np.ndarray:
    return load_audio(speech_clips["f5_one"], MODEL_RATE, max_seconds=LOCAL_MAX_SECONDS)[: ONE_WINDOW_S * MODEL_RATE]


def test_windows_keep_speechmos_slicing_and_its_dropped_windows():
    clip = np.arange(20 * MODEL_RATE, dtype=np.float32)
    starts = [int(w[0]) for w in windows(clip)]
    # 11 one-second hops fit a 20 s clip; int((i + 9.01) * 16000) falls one sample short for
    # i = 7..23, so speechmos skips windows 7-10 (it scores the first 16 s), and so do we.
    assert starts == [i * MODEL_RATE for i in range(7)]
    assert all(len(w) == quality.WINDOW_SAMPLES for w in windows(clip))
    short = windows(np.arange(3 * MODEL_RATE, dtype=np.float32))  # tiled by doubling: 3 -> 6 -> 12 s
    assert len(short) == 3 and np.array_equal(short[0][3 * MODEL_RATE: 6 * MODEL_RATE], np.arange(3 * MODEL_RATE))


def test_scores_equal_speechmos_run(judge, speech):
    rng = np.random.default_rng(0)
    noise = np.clip(0.1 * rng.standard_normal(12 * MODEL_RATE // 5), -1, 1).astype(np.float32)  # tiled to 9.6 s
    gap = 0.01 * rng.standard_normal(7 * MODEL_RATE + 1600).astype(np.float32)
    long = np.concatenate([speech, gap, speech])  # 17.1 s: eight hops, the last one dropped
    assert len(windows(long)) == 7
    clips = [speech, long, noise]
    for clip, ours in zip(clips, judge.score(clips, MODEL_RATE), strict=True):
        theirs = speechmos_run(clip)
        for ours_key, their_key in KEYS.items():
            assert getattr(ours, ours_key) == pytest.approx(float(theirs[their_key]), abs=1e-6), ours_key
    assert 1.0 <= judge.score([speech], MODEL_RATE)[0].ovrl <= 5.0


def test_other_rates_are_resampled_to_16k_first(judge, speech_clips):
    at24 = load_audio(speech_clips["f5_two"], 24_000, max_seconds=LOCAL_MAX_SECONDS)[: ONE_WINDOW_S * 24_000]
    [ours] = judge.score([at24], 24_000)
    theirs = speechmos_run(np.clip(resample(at24, 24_000, MODEL_RATE), -1, 1))
    assert ours.ovrl == pytest.approx(float(theirs["ovrl_mos"]), abs=1e-6)


def test_personalized_model_equals_speechmos(speech):
    [ours] = DNSMOS(personalized=True, device="cpu", threads=1).score([speech], MODEL_RATE)
    theirs = speechmos_run(speech, personalized=True)
    assert ours.sig == pytest.approx(float(theirs["sig_mos"]), abs=1e-6)
    assert ours.ovrl == pytest.approx(float(theirs["ovrl_mos"]), abs=1e-6)


def test_batching_does_not_change_scores(speech):
    clips = [speech, speech[: 12 * MODEL_RATE // 5], np.tile(speech, 2)[: 19 * MODEL_RATE // 2]]  # a window each
    one = DNSMOS(device="cpu", threads=1, batch_windows=1).score(clips, MODEL_RATE)
    many = DNSMOS(device="cpu", threads=1, batch_windows=16).score(clips, MODEL_RATE)
    for a, b in zip(one, many, strict=True):
        assert a.as_dict() == pytest.approx(b.as_dict(), abs=1e-5)


def test_heavy_noise_lowers_overall_quality(judge, speech):
    rng = np.random.default_rng(1)
    rms = float(np.sqrt(np.mean(speech ** 2)))
    noisy = np.clip(speech + rms * rng.standard_normal(len(speech)).astype(np.float32), -1, 1)  # 0 dB SNR
    clean, dirty = judge.score([speech, noisy], MODEL_RATE)
    assert dirty.ovrl < clean.ovrl - 0.5 and dirty.bak < clean.bak - 0.5
    assert 0.0 <= scaled_ovrl(dirty) < scaled_ovrl(clean) <= 1.0


def test_bad_input_gets_a_clear_error(judge, monkeypatch):
    with pytest.raises(QualityError, match="empty clip"):
        judge.score([np.zeros(0, np.float32)], MODEL_RATE)
    with pytest.raises(QualityError, match="NaN"):
        judge.score([np.full(1000, np.nan, np.float32)], MODEL_RATE)
    with pytest.raises(QualityError, match="onnxruntime-gpu"):
        DNSMOS(device="cuda")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(QualityError, match=r"pip install speechmos==0\.0\.1\.1"):
        DNSMOS()


def test_cli_writes_one_row_per_clip(speech_clips, tmp_path, capsys):
    out = tmp_path / "dnsmos.jsonl"
    clips = []
    for name in ("f5_one", "m3_two"):
        samples = load_audio(speech_clips[name], 22_050, max_seconds=LOCAL_MAX_SECONDS)[: ONE_WINDOW_S * 22_050]
        clips.append(str(write_wav(tmp_path / f"{name}.wav", samples, 22_050)))
    assert quality.main([*clips, "--out", str(out), "--threads", "1"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["clip"] for r in rows] == clips and all(set(r) == {"clip", "sig", "bak", "ovrl", "p808"} for r in rows)
    assert "OVRL" in capsys.readouterr().out


@pytest.mark.parametrize("make, message", [
    (lambda p: p.write_bytes(b"not audio at all"), "not a readable audio file"),
    (None, "no such audio file"),
    ("long", "the limit here is 2 s"),
])
def test_cli_errors_are_one_line_with_status_2(tmp_path, capsys, speech_clips, make, message):
    path = tmp_path / "bad.wav"
    args = [str(path)]
    if make == "long":
        args = [str(speech_clips["f5_one"]), "--max-seconds", "2"]
    elif make is not None:
        make(path)
    with pytest.raises(SystemExit) as exit_info:
        quality.main([*args, "--out", str(tmp_path / "o.jsonl")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_without_p808_and_with_the_first_window_only(judge, speech_clips):
    # 6.4 s: tiled to 12.7 s, three windows
    clip = load_audio(speech_clips["f5_one"], MODEL_RATE, max_seconds=LOCAL_MAX_SECONDS)
    assert len(windows(clip)) > 1
    [full] = judge.score([clip], MODEL_RATE)
    [lean] = DNSMOS(device="cpu", threads=1, p808=False).score([clip], MODEL_RATE)
    assert lean.p808 is None and (lean.sig, lean.bak, lean.ovrl) == pytest.approx((full.sig, full.bak, full.ovrl))
    first = DNSMOS(device="cpu", threads=1, max_windows=1)
    [one] = first.score([clip], MODEL_RATE)
    [alone] = judge.score([windows(clip)[0]], MODEL_RATE)  # that window as a clip of its own
    assert one.as_dict() == pytest.approx(alone.as_dict()) and one.ovrl != full.ovrl
    assert first.name == "dnsmos_first1"
