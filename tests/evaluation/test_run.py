"""Tests for the benchmark runner (`python -m evaluation.run`): the espeak-ng + pocketsphinx
path end to end, per-clip errors that do not stop the run, resuming, NoVA verdicts, bad input.

Run: .venv/bin/python -m pytest tests/evaluation/test_run.py -q
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from evaluation import run as runner
from evaluation.systems import SynthesisError, Synthesizer
from evaluation.text import SEGMENTATIONS, segmentation_label
from rumik_app.audio import Audio
from rumik_app.watermark.marker import shared_watermarker

REPO = Path(__file__).resolve().parents[2]
TONE_RATE = 16_000


class ToneSystem(Synthesizer):
    """A stand-in system: a 1 s tone per clip (at 16 kHz, the runner keeps it there and the judges
    convert it); can fail or go silent for chosen ids; records every call."""

    name = "tone"
    label = "test tones"

    def __init__(self, fail: tuple[str, ...] = (), silent: tuple[str, ...] = ()) -> None:
        self.fail, self.silent, self.calls = fail, silent, []

    def _synthesize(self, request, *, clip_id, run):
        self.calls.append((run, clip_id))
        if clip_id in self.fail:
            raise SynthesisError(f"the test system refuses {clip_id}")
        t = np.arange(TONE_RATE) / TONE_RATE
        amp = 0.0 if clip_id in self.silent else 0.3
        return Audio((amp * np.sin(2 * np.pi * 220 * t)).astype(np.float32), TONE_RATE, seed=request.seed)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


PROMPTS = [
    {"id": "p1", "text": "The cat sat on the mat.", "language": "en", "domain": "conversation"},
    {"id": "p2", "text": "मैं कल दिल्ली जाऊँगा।", "language": "hi", "domain": "dates"},
    {"id": "p3", "text": "Call me at nine.", "language": "English", "domain": "digits_money"},
]
HYPS = [{"id": "p1", "hyp": "the cat sat on a mat"}, {"id": "p2", "hyp": "मैं कल दिल्ली जाऊंगा"},
        {"id": "p3", "hyp": "call me at nine"}]


@pytest.fixture()
def setup(tmp_path):
    prompts = write_jsonl(tmp_path / "prompts.jsonl", PROMPTS)
    hyps = write_jsonl(tmp_path / "hyps.jsonl", HYPS)
    return tmp_path, prompts, hyps


def run_main(system, prompts, hyps, out, *extra) -> int:
    return runner.main(["--prompts", str(prompts), "--asr", f"supplied:{hyps}", "--out", str(out), *extra],
                       system=system)


def test_runner_scores_per_language_and_domain(setup):
    tmp, prompts, hyps = setup
    out = tmp / "out"
    assert run_main(ToneSystem(), prompts, hyps, out, "--runs", "2", "--seed", "5") == 0
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert len(manifest) == 6 and {(m["run"], m["id"]) for m in manifest} == {(r, p) for r in (1, 2) for p in
                                                                             ("p1", "p2", "p3")}
    for m in manifest:
        assert m["error"] is None and m["system"] == "tone" and abs(m["duration"] - 1.0) < 0.01
        assert (out / m["path"]).is_file() and m["path"] == f"run{m['run']}/{m['id']}.wav"
        assert len(m["sha256"]) == 64 and m["settings"]["voice"] == "Ira"
        assert sf.info(out / m["path"]).samplerate == TONE_RATE  # the system's own rate: judges convert once
    seeds = {(m["run"], m["id"]): m["seed"] for m in manifest}
    assert seeds[(1, "p1")] != seeds[(2, "p1")] and seeds[(1, "p1")] == runner.clip_seed(5, "p1", 1)
    summary = {(r["level"], r["group"]): r for r in read_csv(out / "summary.csv")}
    assert float(summary[("language", "en")]["wer"]) == pytest.approx(1 / 10)  # 1 of 6+4 words, pooled
    assert float(summary[("language", "hi")]["gcer"]) > 0  # जाऊँगा vs जाऊंगा
    assert float(summary[("domain", "digits_money")]["wer"]) == 0.0
    assert summary[("overall", "all")]["scored"] == "6"
    report = (out / "report.md").read_text()
    assert "test tones" in report and all(segmentation_label(seg) in report for seg in SEGMENTATIONS)
    assert "python -m evaluation.run --prompts" in report and "supplied:hyps.jsonl" in report
    assert (out / "charts" / "by_language.png").stat().st_size > 1000
    assert (out / "charts" / "by_domain.png").is_file()
    clips = read_csv(out / "clips.csv")
    assert len(clips) == 6 and clips[0]["hyp"] == "the cat sat on a mat"
    assert {c["watermarked"] for c in clips} == {"False"} and float(clips[0]["watermark_score"]) < 0.5
    assert summary[("overall", "all")]["watermarked_fraction"] == "0.0"
    assert "## Watermark" in report and "| all | 0 of 6 clips (0%) |" in report


class MarkedNoiseSystem(ToneSystem):
    """Seeded noise (as the tiny checkpoint speaks) with the PerthNet watermark on, as the engines mark
    library voices' audio; silent for chosen ids. (Not a tone: a pure sine's mark is lost to 16-bit WAV.)"""

    def _synthesize(self, request, *, clip_id, run):
        audio = super()._synthesize(request, clip_id=clip_id, run=run)
        noise = np.random.default_rng(request.seed).normal(0, 0.1, audio.samples.size).astype(np.float32)
        wave = noise * (np.max(np.abs(audio.samples)) > 0)
        return Audio(shared_watermarker().apply(wave, audio.sample_rate), audio.sample_rate, seed=audio.seed)


def test_the_runner_reports_the_watermark_detector_per_clip_and_per_run(setup, capsys):
    tmp, prompts, hyps = setup
    out = tmp / "out"
    assert run_main(MarkedNoiseSystem(silent=("p3",)), prompts, hyps, out) == 0  # p3 silent: no audio to score
    clips = {c["id"]: c for c in read_csv(out / "clips.csv")}
    assert clips["p1"]["watermarked"] == clips["p2"]["watermarked"] == "True" and clips["p3"]["watermarked"] == ""
    assert float(clips["p1"]["watermark_score"]) > 0.9
    summary = {(r["level"], r["group"]): r for r in read_csv(out / "summary.csv")}
    assert summary[("overall", "all")]["watermarked_fraction"] == "1.0"
    assert summary[("overall", "all")]["watermark_scored"] == "2"
    assert "| 1 | 2 of 2 clips (100%) |" in (out / "report.md").read_text()
    assert "watermarked (PerthNet detector): 2 of 2 clips (100%)" in capsys.readouterr().out


# The two sentences hand-counted in tests/evaluation/test_metrics.py: GCER
# 3/24 and 4/24 under "grapheme", 4/20 and 3/22 under "unicode"; pooled 7/48 and 7/42.
GCER_PROMPTS = [
    {"id": "pm", "text": "प्रधानमंत्री ने राष्ट्र को संबोधित किया।", "language": "hi", "domain": "news"},
    {"id": "ks", "text": "क्षमा करें, मैं कल स्कूल नहीं आ पाऊँगा।", "language": "hi", "domain": "conversation"},
]
GCER_HYPS = [{"id": "pm", "hyp": "परधानमंत्री ने राष्ट्र को सम्बोधित किया"},
             {"id": "ks", "hyp": "छमा करें मैं कल इस्कूल नहीं आ पाउँगा"}]


def test_gcer_segmentation_flag_sets_gcer_and_reports_both(tmp_path, capsys):
    prompts = write_jsonl(tmp_path / "p.jsonl", GCER_PROMPTS)
    hyps = write_jsonl(tmp_path / "h.jsonl", GCER_HYPS)
    out = tmp_path / "out"
    expected = {"grapheme": {"pm": 3 / 24, "ks": 4 / 24, "all": 7 / 48},
                "unicode": {"pm": 4 / 20, "ks": 3 / 22, "all": 7 / 42}}
    for chosen in ("grapheme", "unicode"):  # the second run only rescores the same clips
        extra = () if chosen == "grapheme" else ("--gcer-segmentation", chosen)
        assert run_main(ToneSystem(), prompts, hyps, out, *extra) == 0
        clips = {r["id"]: r for r in read_csv(out / "clips.csv")}
        overall = next(r for r in read_csv(out / "summary.csv") if r["level"] == "overall")
        for row, key in ((clips["pm"], "pm"), (clips["ks"], "ks"), (overall, "all")):
            assert float(row["gcer"]) == pytest.approx(expected[chosen][key])
            assert row["gcer_segmentation"] == chosen
            for seg in SEGMENTATIONS:
                assert float(row[f"gcer_{seg}"]) == pytest.approx(expected[seg][key])
            assert "grapheme = grapheme 0.6.0, Unicode 13.0.0" in row["gcer_rules"]
            assert "unicode = regex " in row["gcer_rules"]
        assert float(clips["pm"]["content_error"]) == pytest.approx(expected[chosen]["pm"])
        report = (out / "report.md").read_text(encoding="utf-8")
        assert f"use the **{chosen}** segmentation" in report
        assert all(segmentation_label(seg) in report for seg in SEGMENTATIONS)
        assert "| **GCER " + chosen in report  # the chosen column is bold, both are shown
        assert f"| {expected['grapheme']['all']:.3f} | {expected['unicode']['all']:.3f} |" in report
        assert "Graphemes: graphemes" not in report
    printed = capsys.readouterr().out
    assert "**GCER unicode (U" in printed and "GCER grapheme (U13.0.0)" in printed


def test_unknown_gcer_segmentation_is_refused(setup, capsys):
    tmp, prompts, hyps = setup
    with pytest.raises(SystemExit):
        run_main(ToneSystem(), prompts, hyps, tmp / "out", "--gcer-segmentation", "akshara")
    assert "invalid choice: 'akshara'" in capsys.readouterr().err


def test_corrupted_silent_and_missing_clips_are_per_clip_errors(tmp_path, capsys):
    clips = tmp_path / "clips"
    clips.mkdir()
    t = np.arange(22_050) / 22_050
    sf.write(clips / "good.wav", 0.3 * np.sin(2 * np.pi * 200 * t), 22_050)
    sf.write(clips / "silent.wav", np.zeros(22_050), 22_050)
    (clips / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEnot really a wav file")
    prompts = write_jsonl(tmp_path / "p.jsonl", [
        {"id": i, "text": "hello world", "language": "en", "domain": "conversation"}
        for i in ("good", "silent", "broken", "missing")])
    hyps = write_jsonl(tmp_path / "h.jsonl", [{"id": i, "hyp": "hello world"} for i in ("good", "silent", "broken")])
    out = tmp_path / "out"
    code = runner.main(["--system", f"folder:{clips}", "--prompts", str(prompts), "--asr", f"supplied:{hyps}",
                        "--out", str(out)])
    assert code == 0
    manifest = {m["id"]: m for m in map(json.loads, (out / "manifest.jsonl").read_text().splitlines())}
    assert manifest["good"]["error"] is None
    assert "silent" in manifest["silent"]["error"] and manifest["silent"]["duration"] == 1.0
    assert "broken.wav" in manifest["broken"]["error"] and "Re-export" in manifest["broken"]["error"]
    assert "No clip for 'missing'" in manifest["missing"]["error"]
    report = (out / "report.md").read_text()
    errors = report.split("## Per-clip errors")[1].split("## Per clip")[0]
    for clip_id, words in (("silent", "silent"), ("broken", "not a readable audio file"), ("missing", "No clip")):
        assert f"| {clip_id} |" in errors and words in errors
    assert "| good |" not in errors
    summary = {(r["level"], r["group"]): r for r in read_csv(out / "summary.csv")}
    assert summary[("overall", "all")]["scored"] == "1" and summary[("overall", "all")]["failed"] == "3"
    assert float(summary[("overall", "all")]["wer"]) == 0.0
    assert "pre-generated clips" in capsys.readouterr().out


def test_synthesis_failure_and_asr_failure_do_not_stop_the_run(setup):
    tmp, prompts, _ = setup
    hyps = write_jsonl(tmp / "partial.jsonl", [HYPS[0]])  # no transcript for p3
    system = ToneSystem(fail=("p2",))
    assert run_main(system, prompts, hyps, tmp / "out") == 0
    rows = {r["id"]: r for r in read_csv(tmp / "out" / "clips.csv")}
    assert rows["p1"]["error"] == "" and float(rows["p1"]["wer"]) == pytest.approx(1 / 6)
    assert rows["p2"]["error"].startswith("synthesis: the test system refuses p2")
    assert rows["p3"]["error"].startswith("asr: No supplied transcript")
    assert not (tmp / "out" / "run1" / "p2.wav").exists()


def test_runner_resumes_without_regenerating(setup):
    tmp, prompts, hyps = setup
    out = tmp / "out"
    first = ToneSystem()
    assert run_main(first, prompts, hyps, out, "--runs", "2") == 0
    assert len(first.calls) == 6
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("run*/*.wav")}
    old_manifest = (out / "manifest.jsonl").read_text()
    second = ToneSystem()
    assert run_main(second, prompts, hyps, out, "--runs", "2") == 0
    assert second.calls == []
    assert {p: p.stat().st_mtime_ns for p in out.glob("run*/*.wav")} == mtimes
    assert (out / "manifest.jsonl").read_text() == old_manifest
    assert "0 synthesised now, 6 kept" in (out / "report.md").read_text()
    (out / "run2" / "p3.wav").unlink()  # a lost clip, and a failed one from before, are redone
    third = ToneSystem()
    assert run_main(third, prompts, hyps, out, "--runs", "3") == 0
    assert sorted(third.calls) == [(2, "p3"), (3, "p1"), (3, "p2"), (3, "p3")]
    assert len((out / "manifest.jsonl").read_text().splitlines()) == 9


def test_limit_and_failed_clips_retry(setup):
    tmp, prompts, hyps = setup
    out = tmp / "out"
    assert run_main(ToneSystem(fail=("p1",)), prompts, hyps, out, "--limit", "1") == 0
    retry = ToneSystem()
    assert run_main(retry, prompts, hyps, out, "--limit", "1") == 0
    assert retry.calls == [(1, "p1")]  # the failed clip is tried again, nothing else runs


def test_nova_prompts_get_verdicts(tmp_path):
    prompts = write_jsonl(tmp_path / "nova.jsonl", [
        {"id": "n1", "text": "That is so funny I cannot stop.",
         "text_with_mark": "That is so funny <laugh> I cannot stop.", "nvv": "laugh", "requested_index": 4,
         "n_words": 7},
        {"id": "n2", "text": "Another long day at work.", "text_with_mark": "<sigh> Another long day at work.",
         "nvv": "sigh", "requested_index": 0, "n_words": 5},
    ])
    hyps = write_jsonl(tmp_path / "h.jsonl", [
        {"id": "n1", "hyp": "that is so funny <laugh> i cannot stop"},
        {"id": "n2", "hyp": "another long day at work <sigh>"},
    ])
    system = ToneSystem()
    assert run_main(system, prompts, hyps, tmp_path / "out") == 0
    lines = (tmp_path / "out" / "nova_verdicts.jsonl").read_text().splitlines()
    verdicts = {v["id"]: v for v in map(json.loads, lines)}
    assert verdicts["n1"]["verdict_3class"] == "rendered" and verdicts["n1"]["run"] == 1
    assert verdicts["n2"]["verdict_3class"] == "misplaced"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## NoVA" in report and (tmp_path / "out" / "nova.csv").is_file()
    assert (tmp_path / "out" / "charts" / "nova.png").is_file()
    summary = {(r["level"], r["group"]): r for r in read_csv(tmp_path / "out" / "summary.csv")}
    assert ("language", "en") in summary and ("domain", "nova") in summary  # inferred from the script
    assert float(summary[("overall", "all")]["wer"]) == 0.0  # tags are not words


def test_runner_with_the_rumik_engine_on_the_tiny_checkpoint(setup, tiny_checkpoint):
    """The rumik adapter through the runner (batched synthesis), on CPU with short clips."""
    tmp, prompts, hyps = setup
    out = tmp / "out"
    code = runner.main(["--system", f"rumik:{tiny_checkpoint}", "--prompts", str(prompts), "--asr", f"supplied:{hyps}",
                        "--out", str(out), "--device", "cpu", "--max-new-tokens", "48", "--batch-size", "2"])
    assert code == 0
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert [m["id"] for m in manifest] == ["p1", "p2", "p3"]
    for m in manifest:
        assert m["settings"]["max_new_tokens"] == 48 and m["seed"] == runner.clip_seed(0, m["id"], 1)
        assert m["duration"] is not None and m["duration"] <= 48 / 100 + 0.01
        assert m["error"] is None or "silent" in m["error"]
    assert f"# Benchmark report: rumik-oss-1 ({tiny_checkpoint})" in (out / "report.md").read_text()


def test_bad_cli_numbers_are_usage_errors(setup):
    tmp, prompts, hyps = setup
    with pytest.raises(SystemExit):
        run_main(ToneSystem(), prompts, hyps, tmp / "o", "--runs", "0")


@pytest.mark.parametrize("rows, message", [
    ([{"id": "a", "text": "x", "language": "en"}, {"id": "a", "text": "y", "language": "en"}], "duplicate id"),
    ([{"id": "a", "text": "x", "language": "klingon"}], "Unknown language"),
    ([{"id": "../etc", "text": "x", "language": "en"}], "file name"),
    ([{"id": "a", "language": "en"}], "`id` and `text`"),
    ([{"id": "a", "text": "नमस्ते"}], "add one"),  # Devanagari: several languages, no language field
])
def test_bad_prompt_files_exit_2_with_a_message(tmp_path, capsys, rows, message):
    prompts = write_jsonl(tmp_path / "p.jsonl", rows)
    code = runner.main(["--system", "espeak", "--prompts", str(prompts), "--asr", "pocketsphinx",
                        "--out", str(tmp_path / "out")])
    assert code == 2 and message in capsys.readouterr().err


def test_bad_specs_exit_2(setup, capsys):
    tmp, prompts, hyps = setup
    assert runner.main(["--system", "nonsense", "--prompts", str(prompts), "--asr", "pocketsphinx",
                        "--out", str(tmp / "o")]) == 2
    assert "Valid specs" in capsys.readouterr().err
    assert runner.main(["--system", "espeak", "--prompts", str(prompts), "--asr", "google",
                        "--out", str(tmp / "o")]) == 2
    assert "Unknown ASR spec" in capsys.readouterr().err


@pytest.mark.slow
def test_espeak_english_through_pocketsphinx_end_to_end(tmp_path):
    """The full CLI: espeak-ng clips, pocketsphinx transcripts, WER well below 1; a rerun
    regenerates nothing and hits the transcript cache."""
    src = REPO / "evaluation" / "prompts" / "intelligibility_en.jsonl"
    prompts = tmp_path / "en.jsonl"
    prompts.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[:2]), encoding="utf-8")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evaluation.run", "--system", "espeak", "--prompts", str(prompts), "--runs", "1",
           "--asr", "pocketsphinx", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    overall = next(r for r in read_csv(out / "summary.csv") if r["level"] == "overall")
    assert overall["scored"] == "2"
    assert float(overall["wer"]) < 0.5, (out / "report.md").read_text()
    report = (out / "report.md").read_text()
    assert "espeak-ng (classical baseline)" in report and "`pocketsphinx`" in report
    assert "--system espeak" in report and "- GCER: " in report and "- Normaliser: NFC" in report
    cache = json.loads((out / "asr_cache.json").read_text())
    assert len(cache["entries"]) == 2
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("run1/*.wav")}
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and {p: p.stat().st_mtime_ns for p in out.glob("run1/*.wav")} == mtimes
    assert next(r for r in read_csv(out / "summary.csv") if r["level"] == "overall")["wer"] == overall["wer"]
