"""The IndicConformer judge (evaluation.indicconformer) on a tiny stand-in with the real file names
and graph I/O (evaluation.indic_standin): known CTC paths in two languages with different
vocabularies, long audio in windows, the NeMo front end, and what goes wrong.

Run: .venv/bin/python -m pytest tests/evaluation/test_indicconformer.py -q
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from evaluation.asr import load_asr
from evaluation.asr_judge import ASRError, ASRModelUnavailable
from evaluation.audio_io import LOCAL_MAX_SECONDS, load_audio
from evaluation.indic_standin import build_standin
from evaluation.indicconformer import BLANK, MODEL_RATE, IndicConformerJudge, ctc_greedy, log_mel

B = BLANK
PIECES = {"hi": ["▁नम", "स्ते", "▁दु", "निया"], "ta": ["▁வண", "க்கம்", "▁உலகம்"]}
PATHS = {  # local token id per encoder frame: repeats collapse, a blank separates two equal tokens
    "hi": [B, 1, 1, B, 2, 2, 2, B, 3, 4, 4, B, 1, B, 1, 2],
    "ta": [B, B, 1, 2, 2, B, B, 3, 3, 3],
}
EXPECTED = {"hi": "नमस्ते दुनिया नम नमस्ते", "ta": "வணக்கம் உலகம்"}


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return build_standin(tmp_path_factory.mktemp("indicconformer"), PIECES, PATHS)


@pytest.fixture(scope="module")
def judge(standin) -> IndicConformerJudge:
    return load_asr(f"indicconformer:{standin}", device="cpu")


def test_known_ctc_paths_decode_in_each_language(judge, speech_clips):
    # any audio: the stand-in's path ignores it
    samples = load_audio(speech_clips["f5_one"], 22_050, max_seconds=LOCAL_MAX_SECONDS)
    assert judge.transcribe(samples, 22_050, "hi") == EXPECTED["hi"]
    assert judge.transcribe(samples, 22_050, "Tamil") == EXPECTED["ta"]
    assert judge.languages == ["hi", "ta"] and judge.name.startswith("indicconformer:")


def test_greedy_ctc_collapses_repeats_and_drops_blanks():
    pieces = ["<unk>", "▁a", "b", "▁c"] + ["x"] * 252 + ["<blank>"]
    path = [B, 1, 1, 2, B, 2, 3, 3, B]
    scores = np.full((len(path), 257), -5.0)
    scores[np.arange(len(path)), path] = 0.0
    assert ctc_greedy(scores, pieces) == "abb c"


def test_long_audio_is_decoded_in_15_second_windows(judge):
    rng = np.random.default_rng(0)
    samples = (0.1 * rng.standard_normal(35 * MODEL_RATE)).astype(np.float32)  # 35 s -> three windows
    assert judge.transcribe(samples, MODEL_RATE, "ta") == " ".join([EXPECTED["ta"]] * 3)


def test_language_must_be_given_and_covered(judge):
    audio = np.zeros(MODEL_RATE, np.float32)
    with pytest.raises(ASRError, match="no language identification"):
        judge.transcribe(audio, MODEL_RATE, None)
    with pytest.raises(ASRError, match="does not cover language 'en'.*hi, ta"):
        judge.transcribe(audio, MODEL_RATE, "en")


def _nemo_features(x: torch.Tensor) -> torch.Tensor:
    """AI4Bharat's NeMo FilterbankFeatures in eval mode, transcribed with torch ops (torch.stft)."""
    import librosa

    n = x.shape[-1]
    x = torch.cat([x[:1], x[1:] - 0.97 * x[:-1]])
    spec = torch.stft(x, n_fft=512, hop_length=160, win_length=400, center=True, return_complex=True,
                      window=torch.hann_window(400, periodic=False, dtype=torch.float64))
    power = spec.abs() ** 2
    bank = torch.tensor(librosa.filters.mel(sr=16000, n_fft=512, n_mels=80, fmin=0, fmax=8000, norm="slaney"),
                        dtype=torch.float64)
    feats = torch.log(bank @ power + 2 ** -24)
    frames = n // 160 + 1
    valid = feats[:, :frames]
    return (feats - valid.mean(1, keepdim=True)) / (valid.std(1, keepdim=True) + 1e-5)


def test_front_end_matches_the_nemo_fork(speech_clips):
    samples = load_audio(speech_clips["f5_two"], MODEL_RATE, max_seconds=LOCAL_MAX_SECONDS)
    ours, frames = log_mel(samples)
    assert ours.shape == (80, len(samples) // 160 + 1) == (80, frames)
    reference = _nemo_features(torch.from_numpy(samples.astype(np.float64))).numpy()
    assert np.abs(ours - reference).max() < 1e-3
    np.testing.assert_allclose(ours.mean(axis=1), 0.0, atol=1e-4)


def test_broken_assets_and_offline_hub_fail_fast(standin, tmp_path, hub_downloads):
    broken = shutil.copytree(standin, tmp_path / "broken")
    (broken / "assets" / "ctc_decoder.onnx").unlink()
    with pytest.raises(ASRError, match="lacks ctc_decoder.onnx"):
        load_asr(f"indicconformer:{broken}")
    shutil.copy(standin / "assets" / "ctc_decoder.onnx", broken / "assets")
    masks = json.loads((broken / "assets" / "language_masks.json").read_text())
    masks["hi"][3] = not masks["hi"][3]
    (broken / "assets" / "language_masks.json").write_text(json.dumps(masks))
    with pytest.raises(ASRError, match="tables disagree for language 'hi'"):
        load_asr(f"indicconformer:{broken}")
    with pytest.raises(ASRError, match="does not exist"):
        load_asr(f"indicconformer:{tmp_path / 'nowhere'}")
    with pytest.raises(ASRModelUnavailable, match="--asr indicconformer:/path/to/folder"):
        load_asr("indicconformer")  # the tests run with HF_HUB_OFFLINE=1: the cache only, no download
    assert hub_downloads and all(call.get("local_files_only") for call in hub_downloads)


def test_benchmark_runner_scores_its_transcripts(standin, tmp_path):
    """--asr indicconformer:PATH in evaluation.run: its transcripts feed GCER unchanged."""
    import csv

    from evaluation import run as runner
    from evaluation.metrics import gcer
    from evaluation.systems import Synthesizer
    from rumik_app.audio import Audio

    class Tone(Synthesizer):
        name = label = "tone"

        def _synthesize(self, request, *, clip_id, run):
            t = np.arange(2 * MODEL_RATE) / MODEL_RATE
            return Audio((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), MODEL_RATE, seed=request.seed)

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "h1", "text": "नमस्ते दुनिया", "language": "hi"}, ensure_ascii=False) + "\n",
                       encoding="utf-8")
    out = tmp_path / "out"
    assert runner.main(["--prompts", str(prompts), "--asr", f"indicconformer:{standin}", "--out", str(out)],
                       system=Tone()) == 0
    with open(out / "clips.csv", newline="", encoding="utf-8") as fh:
        [row] = list(csv.DictReader(fh))
    assert row["hyp"] == EXPECTED["hi"] and row["error"] == ""
    assert float(row["gcer"]) == pytest.approx(gcer("नमस्ते दुनिया", EXPECTED["hi"]))
