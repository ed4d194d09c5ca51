"""The Evaluate tab: WER/CER/GCER per clip and pooled, NoVA verdicts, per-file messages, chart.

Run: .venv/bin/python -m pytest tests/app/test_evaluate.py -q
"""

from __future__ import annotations

import csv
import subprocess

import pytest
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from evaluation.metrics import score_pair
from webapp import scoring, uploads
from webapp.scoring import score_uploads


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Two espeak-ng English clips, one as MP3, a corrupt WAV and a text file."""
    d = tmp_path_factory.mktemp("clips")
    for name, text in (("hello.wav", "hello world this is a test"), ("laugh.wav", "that was funny I cannot stop")):
        subprocess.run(["espeak-ng", "-w", str(d / name), text], check=True, timeout=60)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(d / "hello.wav"), str(d / "again.mp3")],
                   check=True, timeout=60)
    (d / "broken.wav").write_bytes(b"RIFF not really a wave file")
    (d / "notes.txt").write_text("not audio")
    return d


def by_file(report):
    return {c.file: c for c in report.clips}


def test_pasted_transcripts_metrics_nova_and_per_file_messages(clips):
    files = [str(clips / n) for n in ("hello.wav", "laugh.wav", "broken.wav", "again.mp3", "notes.txt")]
    refs = "\n".join(["hello.wav | hello world this is a test", "laugh | that was funny <laugh> I cannot stop",
                      "broken.wav | anything", "again.mp3 | hello world", "notes.txt | x"])
    hyps = "hello.wav | hello world this is test\nlaugh.wav | that was funny (laughs) I cannot stop\nagain | hello word"
    report = score_uploads(files, references=refs, transcripts=hyps)
    got = by_file(report)
    assert got["hello.wav"].scores["wer"] == pytest.approx(1 / 6)
    assert got["again.mp3"].scores == score_pair("hello world", "hello word")
    assert got["laugh.wav"].nova["verdict_3class"] == "rendered"  # (laughs) before "I": the requested word
    assert "unreadable" in got["broken.wav"].message and str(clips) not in got["broken.wav"].message
    assert "not a WAV, FLAC, OGG or MP3" in got["notes.txt"].message
    assert not got["broken.wav"].scores and not got["notes.txt"].scores
    words = [got[n].scores for n in ("hello.wav", "laugh.wav", "again.mp3")]
    pooled = sum(s["word_errors"] for s in words) / sum(s["word_ref_len"] for s in words)
    assert report.corpus["wer"] == pytest.approx(pooled)
    assert "3 of 5 clip(s) scored" in report.markdown() and "GCER segmentation grapheme: grapheme " in report.markdown()
    assert scoring.chart(report) is not None


def test_oversized_and_missing_reference_get_their_own_message(clips, monkeypatch):
    monkeypatch.setattr(uploads, "MAX_CLIP_MB", 0.001)
    report = score_uploads([str(clips / "hello.wav")], references="hello world", transcripts="hello world")
    assert report.clips[0].message.startswith("too large") and "limit is 0.001 MB" in report.clips[0].message
    monkeypatch.undo()
    report = score_uploads([str(clips / "hello.wav"), str(clips / "laugh.wav")], references="only one line",
                           transcripts="a\nb")
    assert "1 reference line(s) for 2 file(s)" in by_file(report)["laugh.wav"].message


def test_manifest_csv_and_grapheme_metric(clips, tmp_path):
    manifest = tmp_path / "m.csv"
    with open(manifest, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["file", "text", "language", "transcript"])
        w.writerow(["hello", "नमस्ते दोस्तों", "hi", "नमस्ते दोस्त"])
        w.writerow(["laugh.wav", "that was funny", "en", "that was funny"])
    report = score_uploads([str(clips / "hello.wav"), str(clips / "laugh.wav")], manifest=str(manifest))
    got = by_file(report)
    assert got["hello.wav"].scores == score_pair("नमस्ते दोस्तों", "नमस्ते दोस्त")
    assert got["hello.wav"].row()[8] == "GCER" and got["laugh.wav"].row()[8] == "WER/CER"
    assert got["laugh.wav"].scores["wer"] == 0.0 and got["hello.wav"].language == "hi"


# The sentences hand-counted in tests/evaluation/test_metrics.py: GCER 3/24 and 4/24 under "grapheme",
# 4/20 and 3/22 under "unicode"; pooled 7/48 and 7/42.
HINDI_REFS = ("hello.wav | प्रधानमंत्री ने राष्ट्र को संबोधित किया।\n"
              "laugh.wav | क्षमा करें, मैं कल स्कूल नहीं आ पाऊँगा।")
HINDI_HYPS = ("hello.wav | परधानमंत्री ने राष्ट्र को सम्बोधित किया\n"
              "laugh.wav | छमा करें, मैं कल इस्कूल नहीं आ पाउँगा")
HINDI_GCER = {"grapheme": (3 / 24, 4 / 24, 7 / 48), "unicode": (4 / 20, 3 / 22, 7 / 42)}


@pytest.mark.parametrize("segmentation", ["grapheme", "unicode"])
def test_gcer_segmentation_is_chosen_and_named(clips, segmentation):
    from evaluation.text import segmentation_source

    files = [str(clips / "hello.wav"), str(clips / "laugh.wav")]
    report = score_uploads(files, references=HINDI_REFS, transcripts=HINDI_HYPS, language="hi",
                           segmentation=segmentation)
    got = by_file(report)
    first, second, pooled = HINDI_GCER[segmentation]
    assert got["hello.wav"].scores["gcer"] == pytest.approx(first)
    assert got["laugh.wav"].scores["gcer"] == pytest.approx(second)
    assert report.corpus["gcer"] == pytest.approx(pooled)
    rules = f"{segmentation}: {segmentation_source(segmentation)}"
    assert got["hello.wav"].row()[6] == pytest.approx(first) and got["hello.wav"].row()[7] == rules
    assert f"GCER ({segmentation}) {pooled:.3f}" in report.markdown()
    assert f"GCER segmentation {segmentation}: {segmentation_source(segmentation)}" in report.markdown()


def test_bad_forms_are_one_message():
    with pytest.raises(ValueError, match="Upload at least one clip"):
        score_uploads([])
    with pytest.raises(ValueError, match="Unknown GCER segmentation 'akshara'; use 'grapheme'"):
        score_uploads(["a.wav"], segmentation="akshara")


def test_evaluate_endpoint_with_uploads_and_an_asr_judge(client, clips):
    summary, table, plot, csv_path = client.predict(
        files=[handle_file(str(clips / "hello.wav")), handle_file(str(clips / "broken.wav"))],
        references="hello.wav | hello world this is a test\nbroken.wav | hello", manifest=None, judge="pocketsphinx",
        transcripts="", language="en", api_name="/evaluate")
    rows = {r[0]: r for r in table["data"]}
    assert isinstance(rows["hello.wav"][3], str) and rows["hello.wav"][4] is not None  # transcribed and scored
    assert "unreadable" in rows["broken.wav"][-1]
    assert "1 of 2 clip(s) scored" in summary and "pocketsphinx" in summary
    assert plot is not None and csv_path.endswith(".csv")
    summary, table, _, csv_path = client.predict(
        files=[handle_file(str(clips / "hello.wav")), handle_file(str(clips / "laugh.wav"))],
        references=HINDI_REFS, manifest=None, judge="pasted", transcripts=HINDI_HYPS, language="hi",
        segmentation="unicode", api_name="/evaluate")
    assert f"GCER (unicode) {7 / 42:.3f}" in summary and "GCER segmentation unicode: regex" in summary
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = {r["file"]: r for r in csv.DictReader(f)}
    assert float(rows["hello.wav"]["GCER"]) == pytest.approx(4 / 20)
    assert rows["hello.wav"]["GCER rules"].startswith("unicode: regex ")
    with pytest.raises(AppError, match="Upload at least one clip"):
        client.predict(files=[], references="", manifest=None, judge="pasted", transcripts="",
                       language="", api_name="/evaluate")


def test_an_unavailable_hub_judge_fails_at_once_in_the_forms_own_terms(clips, monkeypatch, hub_downloads):
    """Offline (or the hub out of reach), an offered Hugging Face judge that is not cached fails
    without a download attempt; the first output already cleared the old scores; the fix names
    the form's choices and the operator's flag."""
    import gradio as gr

    from webapp.evaluate_tab import EvaluateHandlers
    from webapp.scoring import JudgeCatalog

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    calls = hub_downloads
    handlers = EvaluateHandlers(JudgeCatalog(["nobody-here/asr-xyz"]))
    runs = handlers.evaluate([str(clips / "hello.wav")], "hello.wav | hello world", None, "hf:nobody-here/asr-xyz",
                             "", "en")
    first = next(runs)
    assert first[0].startswith("Loading the ASR judge") and first[1:] == (None, None, None)
    shown = next(runs)
    assert shown[0].startswith("⚠ Not scored: The ASR model 'nobody-here/asr-xyz' is not on this machine and "
                               "downloads are off") and shown[1:] == (None, None, None)
    with pytest.raises(gr.Error) as err:
        next(runs)
    message = err.value.message
    assert "“pocketsphinx (English, offline)”" in message and "--asr-model" in message
    assert "“Pasted transcripts”" in message and "hf download nobody-here/asr-xyz" in message
    assert calls and all(c.get("local_files_only") for c in calls), calls  # the cache was read; nothing downloaded


def test_table_rounds_the_rates_and_the_csv_keeps_them(clips):
    report = score_uploads([str(clips / "hello.wav")], "hello.wav | hello big world", None, "pasted",
                           "hello.wav | hello world")
    row = report.table_rows(3)[0]
    assert row[4:7] == [0.333, 0.267, 0.267] and report.rows()[0][4] == pytest.approx(1 / 3)
    fig = scoring.chart(report)
    try:  # bars for the clip and the corpus, each with its value
        assert [t.get_text() for t in fig.axes[0].texts] == ["0.33", "0.33", "0.27", "0.27", "0.27", "0.27"]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
