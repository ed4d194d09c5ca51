"""Typed words map back from the spoken text, and the timeline places them inside their chunks.

The aligner here is a stand-in (`EvenAligner`: words spread evenly over the clip, deterministic),
because what is tested is the bookkeeping around any aligner: which typed word owns each spoken
word, chunk offsets, tags, scripts, captions. Accuracy on real speech is tests/evaluation/test_aligners.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from rumik_app.align import STAR, AlignerSet, AlignmentError, Timings, WordTime
from rumik_app.align.captions import check_caption_path, cues, to_srt, to_vtt
from rumik_app.align.timeline import WordTimer, time_words
from rumik_app.align.words import map_words
from rumik_app.errors import RumikError
from rumik_app.request import SynthesisRequest

RATE = 24_000


class EvenAligner:
    """Every word an equal share of the clip, a small gap between words; records its calls."""

    def __init__(self, name: str = "even", scripts: tuple[str, ...] = ("Latin",), star: bool = True):
        self.name, self.scripts, self.star, self.calls = name, scripts, star, []

    def covers(self, language: str, script: str) -> bool:
        return script in self.scripts

    def align(self, samples, sample_rate, words, language):
        self.calls.append((list(words), len(samples) / sample_rate))
        if STAR in words and not self.star:
            raise AlignmentError("no wildcard here")
        step = len(samples) / sample_rate / max(1, len(words))
        return [(i * step + 0.01, (i + 1) * step - 0.01) for i in range(len(words))]


def _chunk_texts(req: SynthesisRequest) -> list[str]:
    return [req.spoken_text()]


def test_numbers_money_dates_and_a_tag_map_back_to_the_typed_tokens():
    req = SynthesisRequest("Pay ₹2,50,000 on 15/08/2026 <laugh> at 10:30 am.", language="en")
    words = map_words(req, _chunk_texts(req))
    assert words.typed == ["Pay", "₹2,50,000", "on", "15/08/2026", "<laugh>", "at", "10:30", "am."]
    owners = [w.owner for w in words.chunks[0]]
    spoken = [w.text for w in words.chunks[0]]
    money = [t for t, o in zip(spoken, owners, strict=True) if o == 1]
    assert len(money) >= 4 and "lakh" in " ".join(money).lower()  # "two lakh fifty thousand rupees"
    assert [t for t, o in zip(spoken, owners, strict=True) if o == 4] == ["<laugh>"]
    assert owners == sorted(owners)  # spoken order follows typed order
    assert set(owners) == set(range(len(words.typed)))  # "10:30 am." may be read as one phrase: 6 or 7 owners


def test_a_chunked_text_maps_every_chunk_and_keeps_order(tiny_engine):
    text = " ".join(f"Sentence number {n} is here." for n in range(1, 40))
    req = SynthesisRequest(text, seed=1)
    plan = tiny_engine.plan(req)
    assert len(plan) > 1
    words = map_words(req, [c.text for c in plan])
    owners = [w.owner for chunk in words.chunks for w in chunk]
    assert None not in owners and owners == sorted(owners)
    assert {w.owner for w in words.chunks[1]} & {w.owner for w in words.chunks[0]} == set()


def test_the_timeline_puts_each_word_inside_its_chunk_and_tags_between_their_neighbours():
    req = SynthesisRequest("Hello there <laugh> my friend. Pay ₹250 now.", language="en")
    texts = ["Hello there <laugh> my friend.", "Pay two hundred fifty rupees now."]
    aligner = EvenAligner()
    samples = np.zeros(int(4.0 * RATE), np.float32)
    spans = [[0.0, 1.8], [1.75, 4.0]]
    timings = time_words(req, texts, samples, RATE, spans, AlignerSet([aligner]))
    assert [w.word for w in timings.words] == ["Hello", "there", "<laugh>", "my", "friend.", "Pay", "₹250", "now."]
    assert [w.kind for w in timings.words].count("tag") == 1
    starts = [w.start for w in timings.words]
    assert starts == sorted(starts) and all(w.end >= w.start for w in timings.words)
    assert all(0.0 <= w.start and w.end <= 1.8 for w in timings.words[:5])
    assert all(1.75 <= w.start and w.end <= 4.0 for w in timings.words[5:])
    there, laugh, my = timings.words[1:4]
    assert laugh.start == pytest.approx(there.end) and laugh.end == pytest.approx(my.start)
    money = timings.words[6]  # one typed word over its four spoken ones
    assert money.end - money.start > 3 * (timings.words[5].end - timings.words[5].start)
    assert [s["text"] for s in timings.segments] == ["Hello there <laugh> my friend.", "Pay ₹250 now."]
    assert timings.missing is None and timings.aligner == "even"
    assert aligner.calls[0][0] == ["Hello", "there", "my", "friend."]  # tags are not handed to the aligner


def test_words_come_out_chunk_by_chunk_in_order():
    req = SynthesisRequest("One two. Three four.")
    timer = WordTimer(req, ["One two.", "Three four."], AlignerSet([EvenAligner()]))
    first = timer.add_chunk(0, np.zeros(RATE, np.float32), RATE, 0.0)
    second = timer.add_chunk(1, np.zeros(RATE, np.float32), RATE, 0.95)
    assert [w.word for w in first] == ["One", "two."] and [w.word for w in second] == ["Three", "four."]
    assert second[0].start >= 0.95


def test_code_switched_text_is_aligned_run_by_run():
    req = SynthesisRequest("कल meeting है ok")
    main = EvenAligner("indic", scripts=("Devanagari",))
    latin = EvenAligner("latin", scripts=("Latin",))
    timings = time_words(req, ["कल meeting है ok"], np.zeros(2 * RATE, np.float32), RATE, [[0.0, 2.0]],
                         AlignerSet([latin, main]))
    assert [w.word for w in timings.words] == ["कल", "meeting", "है", "ok"]
    assert main.calls[0][0] == ["कल", STAR, "है", STAR]  # the main script's aligner, the other run as wildcards
    assert [c[0] for c in latin.calls] == [["meeting"], ["ok"]]  # then each Latin run inside its span
    assert timings.words[1].start >= timings.words[0].end and timings.missing is None


def test_without_an_aligner_the_chunks_are_still_timed_and_the_reason_is_given():
    req = SynthesisRequest("नमस्ते दुनिया")
    timings = time_words(req, ["नमस्ते दुनिया"], np.zeros(RATE, np.float32), RATE, [[0.0, 1.0]],
                         AlignerSet([EvenAligner()]))
    assert timings.words == [] and timings.segments == [{"text": "नमस्ते दुनिया", "start": 0.0, "end": 1.0}]
    assert "Devanagari" in timings.missing and "indicconformer" in timings.missing


def test_a_run_no_aligner_covers_is_placed_by_its_letters_and_said():
    req = SynthesisRequest("hello नमस्ते world")
    timings = time_words(req, ["hello नमस्ते world"], np.zeros(RATE, np.float32), RATE, [[0.0, 1.0]],
                         AlignerSet([EvenAligner()]))
    assert [w.word for w in timings.words] == ["hello", "नमस्ते", "world"]
    assert "placed by their letters" in timings.missing


def test_an_aligner_failure_is_said_and_the_other_chunks_keep_their_words():
    class Fails(EvenAligner):
        def align(self, samples, sample_rate, words, language):
            if "broken" in words:
                raise AlignmentError("the path was lost")
            return super().align(samples, sample_rate, words, language)

    req = SynthesisRequest("good words. broken words.")
    timings = time_words(req, ["good words.", "broken words."], np.zeros(2 * RATE, np.float32), RATE,
                         [[0.0, 1.0], [1.0, 2.0]], AlignerSet([Fails()]))
    assert [w.word for w in timings.words] == ["good", "words."]
    assert "chunk 1" in timings.missing and "the path was lost" in timings.missing


def test_engine_synthesize_returns_timings_inside_each_chunk(tiny_engine):
    saved = tiny_engine._aligners
    tiny_engine._aligners = AlignerSet([EvenAligner()])
    try:
        req = SynthesisRequest("Call me at 10:30 <sigh> tomorrow.", seed=5, max_new_tokens=240)
        audio = tiny_engine.synthesize(req, timestamps=True)
    finally:
        tiny_engine._aligners = saved
    assert isinstance(audio.timings, Timings)
    assert [w.word for w in audio.timings.words] == ["Call", "me", "at", "10:30", "<sigh>", "tomorrow."]
    assert all(0 <= w.start <= w.end <= audio.duration + 1e-6 for w in audio.timings.words)
    assert audio.timings.segments[0]["end"] == pytest.approx(audio.duration, abs=1e-3)


def test_captions_group_words_into_cues_in_both_formats():
    words = [WordTime("Hello", 0.0, 0.4), WordTime("world.", 0.5, 0.9), WordTime("<laugh>", 0.9, 1.4, "tag"),
             WordTime("Again", 2.5, 2.9)]
    assert [c[2] for c in cues(words)] == ["Hello world.", "[laugh]", "Again"]
    srt = to_srt(words)
    assert srt.startswith("1\n00:00:00,000 --> 00:00:00,900\nHello world.\n") and "3\n00:00:02,500" in srt
    vtt = to_vtt(words)
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:00.900\nHello world.")
    with pytest.raises(RumikError, match="srt or .vtt"):
        check_caption_path("out.txt")


def test_a_token_read_with_its_neighbour_shares_its_span_and_inserted_words_keep_an_owner():
    req = SynthesisRequest("Pay Rs 500 now.", language="en")
    spoken = req.spoken_text()
    words = map_words(req, [spoken])
    assert None not in [w.owner for w in words.chunks[0]]
    timings = time_words(req, [spoken], np.zeros(2 * RATE, np.float32), RATE, [[0.0, 2.0]],
                         AlignerSet([EvenAligner()]))
    assert [w.word for w in timings.words] == ["Pay", "Rs", "500", "now."]
    rupees, number = timings.words[1], timings.words[2]
    if "rupees" in spoken.lower().split()[1:4]:  # read "five hundred rupees": "Rs" shares "500"'s span
        assert (rupees.start, rupees.end) == (number.start, number.end)
    assert timings.words[-1].word == "now." and timings.words[-1].start >= number.end


def test_a_long_text_maps_in_linear_time_chunk_by_chunk():
    sentence = "On 15/08/2026 she paid ₹2,50,000 and Rs 500 for 3 tickets. "
    req = SynthesisRequest(sentence * 120, language="en")
    texts = [req.with_(text=sentence).spoken_text()] * 120
    words = map_words(req, texts)
    owners = [w.owner for chunk in words.chunks for w in chunk]
    assert None not in owners and owners == sorted(owners) and max(owners) >= len(words.typed) - 2


def test_an_aligner_that_crashes_is_said_and_never_raises():
    class Crashes(EvenAligner):
        def align(self, samples, sample_rate, words, language):
            raise RuntimeError("onnxruntime went away")

    req = SynthesisRequest("good words.")
    timings = time_words(req, ["good words."], np.zeros(RATE, np.float32), RATE, [[0.0, 1.0]],
                         AlignerSet([Crashes()]))
    assert timings.words == [] and "the even aligner failed (RuntimeError)" in timings.missing


def test_digits_left_as_typed_are_wildcards_and_times_stay_inside_the_chunk():
    class Overshoots(EvenAligner):
        def align(self, samples, sample_rate, words, language):
            spans = super().align(samples, sample_rate, words, language)
            return [*spans[:-1], (spans[-1][0], spans[-1][1] + 0.5)]  # past the clip's end

    aligner = Overshoots()
    req = SynthesisRequest("Call 100 now", normalize=False)
    timings = time_words(req, ["Call 100 now"], np.zeros(RATE, np.float32), RATE, [[0.0, 1.0]], AlignerSet([aligner]))
    assert aligner.calls[0][0] == ["Call", STAR, "now"]
    assert [w.word for w in timings.words] == ["Call", "100", "now"] and timings.words[-1].end <= 1.0
