"""The audio judges in the benchmark runner (evaluation.acoustic through `python -m evaluation.run`):
DNSMOS and speaker-similarity columns with means and bootstrap CIs, reuse on a rerun, a user's
reference clip, long-form speaker drift over the engine's chunks, and the errors.

Run: .venv/bin/python -m pytest tests/evaluation/test_acoustic.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evaluation import acoustic
from evaluation import run as runner
from evaluation.audio_io import LOCAL_MAX_SECONDS, load_audio, load_native
from evaluation.listening_stats import bootstrap_mean
from evaluation.quality import DNSMOS
from evaluation.systems import EspeakSystem, FolderSystem, Synthesizer
from evaluation.systems.espeak import ESPEAK_RATE
from rumik_app.audio import SAMPLE_RATE, Audio
from tests.evaluation.test_run import read_csv, write_jsonl

PROMPTS = [{"id": "p1", "text": "Please open the window before you leave.", "language": "en"},
           {"id": "p2", "text": "The bus leaves at half past seven.", "language": "en", "voice": "Aisha"},
           {"id": "p3", "text": "मैं कल दिल्ली जाऊँगा।", "language": "hi"}]
FAST = ["--quality-max-windows", "1"]  # one DNSMOS window per clip keeps the test short


def _run(tmp: Path, system: Synthesizer, prompts: list[dict], *flags: str) -> int:
    p = write_jsonl(tmp / "prompts.jsonl", prompts)
    hyps = write_jsonl(tmp / "hyps.jsonl", [{"id": x["id"], "hyp": x["text"]} for x in prompts])
    return runner.main(["--prompts", str(p), "--asr", f"supplied:{hyps}", "--out", str(tmp / "out"), *flags],
                       system=system)


def test_runner_reports_quality_and_similarity_with_cis(tmp_path, capsys, monkeypatch):
    assert _run(tmp_path, EspeakSystem(), PROMPTS, "--quality", "--speaker", *FAST) == 0
    # the clips stay at espeak-ng's own rate: each judge converts them once, straight to 16 kHz
    assert {load_native(p, max_seconds=60).sample_rate for p in (tmp_path / "out" / "run1").glob("*.wav")} == \
        {ESPEAK_RATE}
    clips = read_csv(tmp_path / "out" / "clips.csv")
    for col in ("dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak"):
        assert all(1.0 <= float(c[col]) <= 5.0 for c in clips), col
    sims = [float(c["speaker_sim"]) for c in clips]
    assert all(0.5 < s <= 1.0 for s in sims) and all(c["speaker_drift"] == "" for c in clips)  # one chunk each
    overall = read_csv(tmp_path / "out" / "summary.csv")[0]
    est = bootstrap_mean([float(c["dnsmos_ovrl"]) for c in clips])  # the CI code the campaigns use
    assert float(overall["dnsmos_ovrl"]) == pytest.approx(est.mean)
    ci = (float(overall["dnsmos_ovrl_ci_low"]), float(overall["dnsmos_ovrl_ci_high"]))
    assert ci == pytest.approx((est.low, est.high))
    assert float(overall["speaker_sim"]) == pytest.approx(np.mean(sims)) and overall["speaker_sim_n"] == "3"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Audio quality and speaker similarity" in report and "`dnsmos_first1`" in report
    assert "espeak's own voice" in report and "DNSMOS OVRL:" in capsys.readouterr().out

    def refuse(*args, **kwargs):
        raise AssertionError("DNSMOS ran again on unchanged clips")

    monkeypatch.setattr(DNSMOS, "score", refuse)
    assert _run(tmp_path, EspeakSystem(), PROMPTS, "--quality", "--speaker", *FAST) == 0
    assert read_csv(tmp_path / "out" / "clips.csv") == clips  # reused from acoustic.jsonl


def test_a_users_clip_is_the_reference(tmp_path, speech_clips):
    ref = str(speech_clips["m3_two"])  # a male espeak voice: further from the female variants
    assert _run(tmp_path, EspeakSystem(), PROMPTS[:2], "--speaker-ref", ref) == 0
    with_clip = [float(c["speaker_sim"]) for c in read_csv(tmp_path / "out" / "clips.csv")]
    assert "clip m3_two.wav" in (tmp_path / "out" / "report.md").read_text()
    assert "dnsmos_ovrl" not in read_csv(tmp_path / "out" / "clips.csv")[0]  # no --quality
    assert _run(tmp_path, EspeakSystem(), PROMPTS[:2], "--speaker") == 0
    own = [float(c["speaker_sim"]) for c in read_csv(tmp_path / "out" / "clips.csv")]
    assert all(a < b for a, b in zip(with_clip, own, strict=True))


class TwoChunkSystem(Synthesizer):
    """Every clip is two recorded sentences joined, as the engine joins a long request's chunks,
    with the spans the engine reports (`chunk_seconds`)."""

    name = label = "two-chunk"

    def __init__(self, second: dict[str, Path], first: Path) -> None:
        self.first = load_audio(first, max_seconds=LOCAL_MAX_SECONDS)
        self.second = {k: load_audio(v, max_seconds=LOCAL_MAX_SECONDS) for k, v in second.items()}

    def _synthesize(self, request, *, clip_id, run):
        a, b = self.first, self.second[clip_id]
        end = len(a) / SAMPLE_RATE
        return Audio(np.concatenate([a, b]), SAMPLE_RATE, seed=request.seed,
                     info={"chunk_seconds": [[0.0, end], [end, end + len(b) / SAMPLE_RATE]]})


def test_speaker_drift_compares_each_chunk_with_the_first(tmp_path, speech_clips):
    system = TwoChunkSystem({"same": speech_clips["f5_two"], "other": speech_clips["m3_two"]},
                            speech_clips["f5_one"])
    prompts = [{"id": "same", "text": "One voice throughout.", "language": "en"},
               {"id": "other", "text": "The voice changes half way.", "language": "en"}]
    assert _run(tmp_path, system, prompts, "--speaker-ref", str(speech_clips["f5_one"])) == 0
    manifest = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert all(len(r["chunks"]) == 2 for r in manifest)  # the spans reach the manifest
    rows = {c["id"]: c for c in read_csv(tmp_path / "out" / "clips.csv")}
    same, other = float(rows["same"]["speaker_drift"]), float(rows["other"]["speaker_drift"])
    assert same > other + 0.1 and rows["same"]["speaker_drift_chunks"] == f"{same:.4f}"
    assert "speaker drift" in (tmp_path / "out" / "report.md").read_text()


def test_chunk_audio_needs_two_usable_pieces():
    samples = np.zeros(3 * SAMPLE_RATE, np.float32)
    assert len(acoustic.chunk_audio(samples, [[0, 1.5], [1.5, 3.0]])) == 2
    assert acoustic.chunk_audio(samples, [[0, 2.8], [2.8, 3.0]]) == []  # the second is too short to embed
    assert acoustic.chunk_audio(samples, None) == []


def test_clips_made_elsewhere_need_a_reference_clip(tmp_path, capsys):
    folder = tmp_path / "clips"
    folder.mkdir()
    assert _run(tmp_path, FolderSystem(folder), PROMPTS[:1], "--speaker") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--speaker-ref CLIP" in err
