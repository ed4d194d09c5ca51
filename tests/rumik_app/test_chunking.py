"""Long-text chunking and crossfaded joins."""

import numpy as np

from rumik_app.audio import CrossfadeStream, chunk_spans, crossfade_concat
from rumik_app.text.chunking import sentences, split_text
from rumik_app.text.languages import expected_seconds


def test_sentences_split_on_danda_and_latin_punctuation():
    text = "पहला वाक्य। दूसरा वाक्य॥ Third one! Fourth? اردو جملہ۔ last"
    assert sentences(text) == ["पहला वाक्य।", "दूसरा वाक्य॥", "Third one!", "Fourth?", "اردو جملہ۔", "last"]


def test_chunks_respect_limit_and_keep_all_words():
    text = " ".join(f"यह वाक्य संख्या {i} है, और यह थोड़ा लंबा है।" for i in range(60))
    chunks = split_text(text, max_seconds=10.0)
    assert len(chunks) > 1
    assert all(expected_seconds(c) <= 10.0 for c in chunks)
    assert " ".join(chunks).split() == text.split()


def test_overlong_sentence_splits_at_clauses_then_words():
    sentence = ", ".join("one two three four five six" for _ in range(20)) + "."
    chunks = split_text(sentence, max_seconds=3.0)
    assert all(expected_seconds(c) <= 3.0 for c in chunks)
    assert " ".join(chunks).split() == sentence.split()
    no_punct = " ".join(["word"] * 300)
    assert all(expected_seconds(c) <= 3.0 for c in split_text(no_punct, max_seconds=3.0))


def test_tags_stay_with_their_words():
    chunks = split_text("Hello there <laugh> friend. " * 30, max_seconds=4.0)
    assert all(c.count("<") == c.count(">") for c in chunks)
    assert sum(c.count("<laugh>") for c in chunks) == 30


def _reference_crossfade(chunks, fade):
    chunks = [np.asarray(c, np.float32) for c in chunks if len(c)]
    out = chunks[0]
    for nxt in chunks[1:]:
        n = min(fade, len(out), len(nxt))
        t = np.linspace(0, np.pi / 2, n, dtype=np.float32)
        out = np.concatenate([out[: len(out) - n], out[len(out) - n:] * np.cos(t) + nxt[:n] * np.sin(t), nxt[n:]])
    return out


def test_crossfade_concat_matches_direct_formula():
    rng = np.random.default_rng(1)
    for _ in range(200):
        chunks = [rng.standard_normal(rng.integers(0, 60)) for _ in range(rng.integers(1, 6))]
        if not any(len(c) for c in chunks):
            continue
        fade = int(rng.integers(0, 25))
        np.testing.assert_allclose(crossfade_concat(chunks, fade), _reference_crossfade(chunks, fade), atol=1e-6)


def test_chunk_spans_locate_each_chunk_in_the_joined_audio():
    rng = np.random.default_rng(3)
    for _ in range(200):
        chunks = [rng.standard_normal(rng.integers(0, 60)) for _ in range(rng.integers(1, 6))]
        fade = int(rng.integers(0, 25))
        joined, spans = crossfade_concat(chunks, fade), chunk_spans([len(c) for c in chunks], fade)
        assert spans[-1][1] == len(joined) and all(b - a == len(c) for (a, b), c in zip(spans, chunks, strict=True))
        full = [(j, a, b) for j, ((a, b), c) in enumerate(zip(spans, chunks, strict=True)) if len(c)]
        for i, ((start, end), chunk) in enumerate(zip(spans, chunks, strict=True)):
            # samples shared with an earlier chunk's tail, and with a later chunk's head (seams)
            head = max([0] + [b - start for j, a, b in full if j < i])
            tail = max([0] + [end - a for j, a, b in full if j > i])
            if len(chunk) > head + tail:  # the unshared middle is the chunk itself
                np.testing.assert_allclose(joined[start + head:end - tail], chunk[head:len(chunk) - tail], atol=1e-6)


def test_crossfade_stream_equals_offline_join_for_any_piece_sizes():
    rng = np.random.default_rng(2)
    chunks = [rng.standard_normal(n).astype(np.float32) for n in (500, 30, 800, 5, 400)]
    stream, out = CrossfadeStream(64), []
    for chunk in chunks:
        out.append(stream.start_chunk())
        pos = 0
        while pos < len(chunk):
            step = int(rng.integers(1, 90))
            out.append(stream.push(chunk[pos: pos + step]))
            pos += step
        out.append(stream.end_chunk())
    out.append(stream.finish())
    np.testing.assert_allclose(np.concatenate(out), crossfade_concat(chunks, 64), atol=1e-6)
    seam = crossfade_concat([np.ones(100), np.ones(100)], 50)
    assert len(seam) == 150 and seam.max() <= np.sqrt(2) + 1e-6  # equal-power: no gap, no spike


# ---------------------------------------------------------------- text arriving in pieces
STREAMED = ('Dr. Sharma earned 3.14 lakh... Really?! "Yes." she said. नमस्ते दोस्तों। कैसे हो? Hi. ok '
            + "word " * 90 + "x" * 1300 + " tail, and more, " + "y, " * 80 + "end.")


def test_the_cut_points_depend_on_the_text_not_on_how_it_arrives():
    import random

    from rumik_app.text.chunking import SentenceCutter

    whole = SentenceCutter()
    expected = whole.push(STREAMED) + whole.flush()
    rng = random.Random(0)
    for _ in range(30):
        cutter, got, i = SentenceCutter(), [], 0
        while i < len(STREAMED):
            j = i + rng.randint(1, 9)
            got += cutter.push(STREAMED[i:j])
            i = j
        assert got + cutter.flush() == expected
    assert "".join(expected).replace(" ", "") == STREAMED.replace(" ", "")  # nothing lost or repeated


def test_sentences_are_cut_where_they_end_and_run_on_text_is_bounded():
    from rumik_app.text.chunking import MAX_UNIT_CHARS, SentenceCutter

    cutter = SentenceCutter()
    units = cutter.push(STREAMED) + cutter.flush()
    assert units[:5] == ["Dr. Sharma earned 3.14 lakh...", 'Really?! "Yes."', "she said.", "नमस्ते दोस्तों।", "कैसे हो?"]
    assert all(len(u) <= 2 * MAX_UNIT_CHARS for u in units)
    assert any(u.endswith(",") and len(u) < MAX_UNIT_CHARS for u in units)  # run-on text cut at a clause
    first = SentenceCutter()
    assert first.push("Hello there.") == [] and first.pending == len("Hello there.")  # "..." or ".)" may follow
    assert first.push(" How") == ["Hello there."]
