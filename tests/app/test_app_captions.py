"""Word timestamps in the Synthesise tab, through its handlers on the tiny checkpoint
(no browser): the streamed clip's words are aligned afterwards into SRT and WebVTT captions and a
transcript of escaped `<span data-start data-end>` words. The tiny checkpoint makes noise no real
aligner reads, so the engine gets a fake aligner that spreads the words evenly over each chunk.

Run: .venv/bin/python -m pytest -n0 tests/app/test_app_captions.py -q
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rumik_app.align import AlignerSet, AlignmentError, WordTime
from rumik_app.align.captions import cues
from webapp.forms import SynthForm
from webapp.storage import ServedFolder
from webapp.synth_tab import SynthHandlers
from webapp.systems import SYSTEM_RUMIK, LoadedSystem, SystemRegistry
from webapp.timings import ALIGNING_NOTE, SCRIPT_NOTE, TimingJob, timing_job, transcript_html

TEXT = 'Tom&Jerry say "hi" <laugh> to everyone here.'  # one tag, characters HTML must escape
SECONDS = 1.5  # of noise from the tiny checkpoint: quick on 2 CPU cores
SRT_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d),(\d{3}) --> (\d\d):(\d\d):(\d\d),(\d{3})$")
VTT_TIME = re.compile(r"^(\d\d):(\d\d):(\d\d)\.(\d{3}) --> (\d\d):(\d\d):(\d\d)\.(\d{3})$")


class EvenAligner:
    """A fake `rumik_app.align.Aligner`: every word the same share of the clip, in order."""

    name = "even"

    def covers(self, language: str, script: str) -> bool:
        return True

    def align(self, samples, sample_rate, words, language):
        seconds = len(samples) / sample_rate
        return [(seconds * i / len(words), seconds * (i + 1) / len(words)) for i in range(len(words))]


@pytest.fixture(scope="module")
def registry(tiny_checkpoint):
    """rumik-oss-1 = the tiny checkpoint, its engine aligning with EvenAligner (restored after)."""
    registry = SystemRegistry(model=str(tiny_checkpoint), device="cpu")
    engine = registry.get(SYSTEM_RUMIK).engine
    before = engine.__dict__.get("_aligners")
    engine._aligners = AlignerSet([EvenAligner()])
    yield registry
    if before is None:
        del engine._aligners
    else:
        engine._aligners = before


@pytest.fixture
def handlers(registry, tmp_path):
    return SynthHandlers(registry, ServedFolder(tmp_path / "served"))


def _synthesise(handlers: SynthHandlers, **fields) -> tuple:
    """The stream handler's last yield: (audio, seed, wav path, info, timing job)."""
    form = SynthForm(**{"text": TEXT, "seed": 3, "max_seconds": SECONDS, "system": SYSTEM_RUMIK,
                        "language": "en", **fields})
    outputs = list(handlers.stream(form))
    assert all(len(out) == 5 for out in outputs)
    assert outputs[0][4] is None  # a run starts by forgetting the previous clip's job
    return outputs[-1]


def _cue_times(text: str, pattern: re.Pattern) -> list[tuple[float, float]]:
    times = []
    for line in text.splitlines():
        if match := pattern.match(line):
            h1, m1, s1, ms1, h2, m2, s2, ms2 = map(int, match.groups())
            times.append((h1 * 3600 + m1 * 60 + s1 + ms1 / 1000, h2 * 3600 + m2 * 60 + s2 + ms2 / 1000))
    return times


def test_captions_and_transcript_of_a_streamed_clip(handlers):
    _, seed, wav, info, job = _synthesise(handlers)
    assert seed == "3" and "s of audio" in info
    assert isinstance(job, TimingJob) and job.wav == wav and not job.note and len(job.chunk_seconds) >= 1

    steps = list(handlers.word_timings(True, job))
    assert steps[0][2] == ALIGNING_NOTE  # said at once; the words follow
    html, files, note = steps[-1]
    assert "words timed by even" in note and "⚠" not in note

    # One span per typed word, in order, escaped; times within the clip and never going back.
    spans = re.findall(r'<span class="([^"]+)" data-start="([\d.]+)" data-end="([\d.]+)">([^<]*)</span>', html)
    assert len(spans) == len(TEXT.split()) == html.count("<span")
    shown = [text for *_, text in spans]
    assert shown == ["Tom&amp;Jerry", "say", "&quot;hi&quot;", "[laugh]", "to", "everyone", "here."]
    assert spans[3][0] == "word word-tag" and '"hi"' not in html
    starts = [float(start) for _, start, _, _ in spans]
    assert starts == sorted(starts) and all(float(end) >= float(start) for _, start, end, _ in spans)

    # The captions: SubRip and WebVTT, in a folder of the served place, cues in order.
    srt, vtt = map(Path, files)
    assert (srt.name, vtt.name) == ("captions.srt", "captions.vtt") and srt.parent == vtt.parent
    assert srt.parent.parent == handlers.served.root
    srt_text, vtt_text = srt.read_text(encoding="utf-8"), vtt.read_text(encoding="utf-8")
    assert vtt_text.startswith("WEBVTT\n\n")
    timings = handlers.timings.align(job)
    expected = len(cues(timings.words))
    for times in (_cue_times(srt_text, SRT_TIME), _cue_times(vtt_text, VTT_TIME)):
        assert len(times) == expected >= 1
        flat = [t for cue in times for t in cue]
        assert flat == sorted(flat)  # each cue starts before it ends, and after the one before ends
    assert [int(n) for n in re.findall(r"^(\d+)$", srt_text, re.M)] == list(range(1, expected + 1))
    assert '"hi"' in srt_text and "Tom&Jerry" in srt_text and "[laugh]" in vtt_text  # captions are plain text, not HTML


def test_nothing_unless_ticked_and_a_note_where_no_timings_are_made(handlers, registry, tmp_path):
    *_, job = _synthesise(handlers, max_seconds=0.5)
    assert list(handlers.word_timings(False, job)) == [("", None, "")]
    assert list(handlers.word_timings(True, None)) == [("", None, "")]  # no clip yet
    assert handlers.clear_timings() == ("", None, "")

    # A dialogue script: the audio, and a note instead of timings.
    *_, script = _synthesise(handlers, text="Ira: Hello there.\nAisha: Hi!", dialogue=True, max_seconds=0.5)
    assert script.note == SCRIPT_NOTE
    [(html, files, note)] = list(handlers.word_timings(True, script))
    assert (html, files) == ("", None) and note.startswith("ℹ Word timestamps are made for plain text")

    # espeak-ng (no engine): a note naming the systems that make them.
    espeak = LoadedSystem(key="espeak", label="espeak-ng (classical baseline)", synthesizer=object())
    job = timing_job(espeak, None, {}, tmp_path / "x.wav")
    [(_, _, note)] = list(handlers.word_timings("true", job))  # an API caller's string is read too
    assert "espeak-ng (classical baseline) makes no word timestamps" in note and "rumik-oss-1" in note

    # The clip pruned from the served folder meanwhile: said, not an error.
    *_, job = _synthesise(handlers, max_seconds=0.5)
    Path(job.wav).unlink()
    assert "no longer on the server" in list(handlers.word_timings(True, job))[-1][2]


def test_a_stream_that_did_not_report_its_chunks(handlers, registry):
    """On ZeroGPU the stream runs in a worker process, whose stats never come back: one chunk is
    the whole clip; several cannot be placed exactly, and the note says so."""
    *_, wav, _, job = _synthesise(handlers, max_seconds=0.5)
    rumik = registry.get(SYSTEM_RUMIK)
    whole = timing_job(rumik, job.request, {}, wav)
    assert whole.chunk_seconds == () and not whole.note
    html, files, note = list(handlers.word_timings(True, whole))[-1]
    assert html.count("<span") == len(TEXT.split()) and len(files) == 2
    long = job.request.with_(text=" ".join(["This sentence is here to make the text long."] * 12))
    assert len(rumik.engine.plan(long)) > 1
    assert timing_job(rumik, long, {}, wav).note.startswith("Word timestamps could not be made for this clip")


def test_a_missing_aligner_is_said_with_the_audio_kept(registry, tmp_path):
    class EnglishOnly(EvenAligner):
        name = "english-only"

        def covers(self, language, script):
            return script == "Latin"

    handlers = SynthHandlers(registry, ServedFolder(tmp_path / "served"), aligners=AlignerSet([EnglishOnly()]))
    *_, job = _synthesise(handlers, text="नमस्ते दोस्तों", language="hi", max_seconds=0.5)
    html, files, note = list(handlers.word_timings(True, job))[-1]
    assert (html, files) == ("", None)
    assert note.startswith("⚠ No word could be placed") and "no aligner covers Devanagari" in note


def test_transcript_escapes_every_word():
    words = [WordTime("<script>alert(1)</script>", 0.0, 0.5), WordTime("<sigh>", 0.5, 0.9, "tag"),
             WordTime("a'b&c", 0.9, 0.8)]
    html = transcript_html(words)
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert ">[sigh]</span>" in html and "a&#x27;b&amp;c" in html
    assert 'data-start="0.900" data-end="0.900"' in html  # an end before its start is never shown
    assert transcript_html([]) == ""


def test_the_app_takes_aligners_and_keeps_its_api(tmp_path):
    from webapp.main import build_demo, parse_args

    assert parse_args(["--aligner", "pocketsphinx", "--aligner", "indicconformer:/m"]).aligner == [
        "pocketsphinx", "indicconformer:/m"]
    assert parse_args([]).aligner is None
    with pytest.raises(AlignmentError, match="unknown aligner 'nosuch'"):
        build_demo(model="tiny", data_dir=tmp_path / "a", preload=False, aligners=["nosuch"])
    demo = build_demo(model="tiny", data_dir=tmp_path / "b", preload=False)
    api = demo.get_api_info()["named_endpoints"]
    # The stream's timing job is a gr.State: not an API output; the timings events are the page's own.
    assert [p["parameter_name"] for p in api["/synthesize_stream"]["parameters"]][-1] == "lexicon_entries"
    assert len(api["/synthesize_stream"]["returns"]) == 4
    assert not {"/word_timings", "/clear_timings", "/word_timings_box"} & set(api)
