"""The word-timestamp aligners (evaluation.aligners) and their command line (evaluation.align):
pocketsphinx's accuracy on speech whose word boundaries are known to the sample, IndicConformer on
the stand-in's planted CTC paths (Hindi and Tamil), a tiny transformers CTC folder, wildcards,
and what each refuses.

Run: .venv/bin/python -m pytest tests/evaluation/test_aligners.py -q -s   (-s prints the accuracy)
"""

from __future__ import annotations

import io
import itertools
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from evaluation.aligners import (
    CTCFolderAligner,
    IndicConformerAligner,
    PocketSphinxAligner,
    indic_frame_seconds,
    rough_phones,
    tokenize_pieces,
)
from evaluation.indic_standin import build_standin
from evaluation.indicconformer import BLANK as B
from evaluation.systems.espeak import espeak_synthesize
from rumik_app.align import MAX_ALIGN_SECONDS, STAR, AlignerSet, AlignmentError, load_aligner
from rumik_app.align.refine import refine_boundaries

ROOT = Path(__file__).resolve().parents[2]
ACCURACY_JSON = ROOT / "artifacts" / "align" / "accuracy.json"
RATE = 16_000

# ---------------------------------------------------------------- pocketsphinx accuracy
# Common words in pocketsphinx's dictionary, each said alone by espeak-ng (American English).
# Not "a" or "the": said alone, espeak gives their stressed forms (/eɪ/, /ðiː/), which the
# dictionary's first pronunciations are not.
ACCURACY_WORDS = (
    "water people little house before number morning yellow garden simple window mother table happy river "
    "orange family money music doctor paper winter summer silver market letter animal forest kitchen school "
    "travel problem student flower dinner coffee purple button rabbit pencil ticket basket candle circle castle "
    "bottle jacket monkey planet rocket sister brother teacher picture").split()
UTTERANCES, WORDS_PER_UTTERANCE = 12, 18
GAP_S = (0.01, 0.4)
ESPEAK_THRESHOLD = 0.01  # a word's true edges: its first and last sample above this
MEDIAN_GOAL_S, P95_GOAL_S = 0.040, 0.120


def espeak_word(word: str) -> tuple[np.ndarray, int]:
    """One word said by `espeak-ng -v en-us`, trimmed to its first and last sample above the threshold."""
    wav = subprocess.run(["espeak-ng", "-v", "en-us", "--stdout", word], capture_output=True, check=True).stdout
    samples, rate = sf.read(io.BytesIO(wav), dtype="float32")
    loud = np.flatnonzero(np.abs(samples) > ESPEAK_THRESHOLD)
    return samples[loud[0]: loud[-1] + 1], rate


def utterances(seed: int = 36):
    """(samples [N], rate, words, true (start_s, end_s) per word): words joined by random silences."""
    rng = np.random.default_rng(seed)
    said = {w: espeak_word(w) for w in ACCURACY_WORDS}
    rate = said[ACCURACY_WORDS[0]][1]
    out = []
    for _ in range(UTTERANCES):
        words = [str(w) for w in rng.choice(ACCURACY_WORDS, WORDS_PER_UTTERANCE, replace=False)]
        parts, truth = [np.zeros(int(rng.uniform(*GAP_S) * rate), np.float32)], []
        t = len(parts[0])
        for w in words:
            samples = said[w][0]
            gap = np.zeros(int(rng.uniform(*GAP_S) * rate), np.float32)
            truth.append((t / rate, (t + len(samples)) / rate))
            parts += [samples, gap]
            t += len(samples) + len(gap)
        out.append((np.concatenate(parts), rate, words, truth))
    return out


@pytest.fixture(scope="module")
def sphinx() -> PocketSphinxAligner:
    return PocketSphinxAligner(None)


@pytest.mark.slow
def test_pocketsphinx_with_refinement_places_words_within_tens_of_milliseconds(sphinx):
    raw, refined = [], []
    for samples, rate, words, truth in utterances():
        spans = sphinx.align(samples, rate, words, "en")
        snapped = refine_boundaries(samples, rate, spans)
        assert len(spans) == len(words)
        for (a, b), (c, d), (e, f) in zip(truth, spans, snapped, strict=True):
            raw += [abs(a - c), abs(b - d)]
            refined += [abs(a - e), abs(b - f)]
    figures = {"boundaries": len(refined), "words": len(refined) // 2, "utterances": UTTERANCES,
               "median_s": round(float(np.median(refined)), 4), "p95_s": round(float(np.percentile(refined, 95)), 4),
               "max_s": round(float(np.max(refined)), 4),
               "aligner_only": {"median_s": round(float(np.median(raw)), 4),
                                "p95_s": round(float(np.percentile(raw, 95)), 4)},
               "goal": {"median_s": MEDIAN_GOAL_S, "p95_s": P95_GOAL_S},
               "data": "espeak-ng -v en-us words trimmed at |x| > 0.01, joined by 10-400 ms silences (seed 36)",
               "aligner": "pocketsphinx + rumik_app.align.refine.refine_boundaries"}
    ACCURACY_JSON.parent.mkdir(parents=True, exist_ok=True)
    ACCURACY_JSON.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"\nword boundary error over {figures['boundaries']} boundaries ({figures['words']} words): "
          f"median {figures['median_s'] * 1000:.1f} ms, p95 {figures['p95_s'] * 1000:.1f} ms "
          f"(pocketsphinx alone: median {figures['aligner_only']['median_s'] * 1000:.1f} ms, "
          f"p95 {figures['aligner_only']['p95_s'] * 1000:.1f} ms) -> {ACCURACY_JSON}")
    assert figures["words"] >= 200
    assert figures["median_s"] <= MEDIAN_GOAL_S and figures["p95_s"] <= P95_GOAL_S, figures


# ---------------------------------------------------------------- pocketsphinx behaviour
def sentence(text: str, language: str = "en") -> np.ndarray:
    return espeak_synthesize(text, language, voice="Ira", sample_rate=RATE).samples


def test_a_wildcard_takes_the_speech_english_cannot_spell(sphinx):
    gap = np.zeros(RATE // 5, np.float32)
    english1, hindi, english2 = sentence("the quick brown fox"), sentence("नमस्ते दुनिया", "hi"), sentence("jumps over")
    samples = np.concatenate([gap, english1, gap, hindi, gap, english2, gap])
    hindi_start = (2 * len(gap) + len(english1)) / RATE
    hindi_end = hindi_start + len(hindi) / RATE
    words = ["the", "quick", "brown", "fox", STAR, "jumps", "over"]
    spans = refine_boundaries(samples, RATE, sphinx.align(samples, RATE, words, "en"))
    star = spans[4]
    assert abs(star[0] - hindi_start) < 0.1 and hindi_start < star[1] <= hindi_end + 0.05, (star, hindi_start)
    assert spans[3][1] <= star[0] and spans[5][0] >= star[1] and spans[5][0] > hindi_end - 0.3
    two = sphinx.align(samples, RATE, ["the", "quick", "brown", "fox", STAR, STAR, "jumps", "over"], "en")
    assert two[4][1] == two[5][0] and two[4][1] - two[4][0] == pytest.approx(two[5][1] - two[5][0])  # halves
    two = refine_boundaries(samples, RATE, two)
    assert abs(two[4][0] - star[0]) < 0.1 and abs(two[5][1] - star[1]) < 0.1


def test_unknown_words_punctuation_and_fillers_still_align(sphinx):
    samples = sentence("The zorblax jumped over the fence.")
    words = ["The", "zorblax", "jumped", "—", "over", "the", "fence."]
    spans = sphinx.align(samples, RATE, words, "en")
    assert len(spans) == len(words)
    assert spans[3][0] == spans[3][1] == spans[2][1]  # a word without letters: empty, after the one before
    assert all(a <= b for a, b in spans) and all(b <= c for (_, b), (c, _) in itertools.pairwise(spans))
    assert spans[1][1] - spans[1][0] > 0.2 and spans[-1][1] <= len(samples) / RATE + 0.01
    assert rough_phones("zorblax") == "Z AA R B L AE K S"
    assert sphinx.decoder.lookup_word("zorblax") == "Z AA R B L AE K S"


def test_pocketsphinx_refusals(sphinx):
    speech = sentence("hello world")
    assert sphinx.covers("en", "Latin") and sphinx.covers("fr", "Latin") and not sphinx.covers("hi", "Devanagari")
    with pytest.raises(AlignmentError, match="only spell Latin-script words, not 'नमस्ते'"):
        sphinx.align(speech, RATE, ["hello", "नमस्ते"], "hi")
    with pytest.raises(AlignmentError, match="normalise the text first"):
        sphinx.align(speech, RATE, ["hello", "2"], "en")
    with pytest.raises(AlignmentError, match="silent"):
        sphinx.align(np.zeros(RATE, np.float32), RATE, ["hello"], "en")
    with pytest.raises(AlignmentError, match=f"at most {MAX_ALIGN_SECONDS:g} s"):
        sphinx.align(np.zeros(int((MAX_ALIGN_SECONDS + 1) * RATE), np.float32), RATE, ["hello"], "en")
    with pytest.raises(AlignmentError, match="lost the alignment path|does not follow"):
        sphinx.align(speech[: RATE // 4], RATE, "hello world how are you all today my friends".split() * 6, "en")
    with pytest.raises(AlignmentError, match="takes no argument"):
        PocketSphinxAligner("en")


def test_aligners_load_by_name_through_the_entry_points():
    aligners = AlignerSet.load(["pocketsphinx", "nosuch", "ctc"])
    assert [type(a) for a in aligners.aligners] == [PocketSphinxAligner]
    assert "unknown aligner 'nosuch'" in aligners.errors["nosuch"] and "ctc:PATH" in aligners.errors["ctc"]
    assert aligners.find("hi", "Devanagari") is None and "indicconformer:PATH" in aligners.why_none("hi", "Devanagari")
    with pytest.raises(AlignmentError, match="unknown aligner 'nosuch'; installed: ctc, indicconformer, pocketsphinx"):
        load_aligner("nosuch")


# ---------------------------------------------------------------- IndicConformer on the stand-in
PIECES = {"hi": ["▁नम", "स्ते", "▁दु", "निया"], "ta": ["▁வண", "க்கம்", "▁உலகம்"]}
# The local token id the stand-in emits at each 80 ms frame, then blanks. The blank is shared, so
# where one language has a token the other has one too (or its path has ended): otherwise the
# blank would tie with that token and the best path would not be unique.
PATHS = {
    "hi": [B, 1, 1, B, 2, 2, 2, B, 3, 4, 4, B, 1, B, 1, 2],
    "ta": [B, 1, 2, B, 1, 2, 3, B, 3, 3, 3, B],
}
# the frames of each word's pieces on those paths: (first, last + 1)
PLANTED = {
    "hi": (["नमस्ते", "दुनिया", "नम", "नमस्ते"], [(1, 7), (8, 11), (12, 13), (14, 16)]),
    "ta": (["வணக்கம்", "வணக்கம்", "உலகம்", "உலகம்"], [(1, 3), (4, 6), (6, 7), (8, 11)]),
}
FRAME_S = 0.08


def flat(spans) -> list[float]:
    return [t for span in spans for t in span]


@pytest.fixture(scope="module")
def indic(tmp_path_factory) -> IndicConformerAligner:
    folder = build_standin(tmp_path_factory.mktemp("indicconformer"), PIECES, PATHS)
    return load_aligner(f"indicconformer:{folder}")


@pytest.mark.parametrize("language", ["hi", "ta"])
def test_indicconformer_returns_the_planted_word_spans(indic, language):
    noise = (0.05 * np.random.default_rng(0).standard_normal(3 * 24_000)).astype(np.float32)  # the path ignores it
    words, frames = PLANTED[language]
    spans = indic.align(noise, 24_000, words, language)
    assert flat(spans) == pytest.approx(flat([(a * FRAME_S, b * FRAME_S) for a, b in frames]), abs=1e-6)


def test_indicconformer_frames_are_80_ms_and_it_covers_its_own_scripts(indic):
    assert indic_frame_seconds(301, 38) == pytest.approx(FRAME_S)  # 3 s: 301 feature frames, 38 encoder frames
    assert indic_frame_seconds(51, 7) == pytest.approx(FRAME_S)  # 0.5 s: the ratio is 7.3, still 8x
    assert indic.covers("hi", "Devanagari") and indic.covers("Tamil", "Tamil")
    assert not indic.covers("hi", "Latin") and not indic.covers("ta", "Devanagari") and not indic.covers("en", "Latin")


def test_indicconformer_wildcards_and_empty_words(indic):
    noise = np.zeros(2 * RATE, np.float32)
    spans = indic.align(noise, RATE, ["नमस्ते", STAR, "।", "नम", "नमस्ते"], "hi")
    # the wildcard takes the frames of the pieces no target spells (दु निया), the blank frames stay blank
    want = [(0.08, 0.56), (0.64, 0.88), (0.88, 0.88), (0.96, 1.04), (1.12, 1.28)]
    assert flat(spans) == pytest.approx(flat(want), abs=1e-6)


def test_indicconformer_refusals(indic, tmp_path):
    noise = np.zeros(RATE, np.float32)
    with pytest.raises(AlignmentError, match="'x' .*U\\+0078.*no piece"):
        indic.align(noise, RATE, ["नमx"], "hi")
    with pytest.raises(AlignmentError, match="does not cover language 'en'"):
        indic.align(noise, RATE, ["hello"], "en")
    with pytest.raises(AlignmentError, match="too short for its text"):
        indic.align(noise[: RATE // 4], RATE, ["नमस्ते"] * 4, "hi")
    with pytest.raises(AlignmentError, match="cannot take clips this long"):  # the stand-in lights 15.4 s
        indic.align(np.zeros(20 * RATE, np.float32), RATE, ["नमस्ते"], "hi")
    with pytest.raises(AlignmentError, match="does not exist.*--aligner indicconformer:PATH"):
        IndicConformerAligner(str(tmp_path / "nothing"))
    assert tokenize_pieces("नमस्ते!", {"▁नम": 1, "स्ते": 2, "▁": 3}) == [1, 2]
    assert tokenize_pieces("स्ते", {"▁नम": 1, "स्ते": 2, "▁": 3}) == [3, 2]  # a bare word-start piece first


# ---------------------------------------------------------------- a local transformers CTC folder
CHARS = ["<pad>", "<s>", "</s>", "<unk>", "|", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ'"]


def save_tiny_ctc(folder: Path) -> Path:
    """A random-weight Wav2Vec2ForCTC with a character vocabulary, saved as safetensors."""
    import torch
    from transformers import (
        Wav2Vec2Config,
        Wav2Vec2CTCTokenizer,
        Wav2Vec2FeatureExtractor,
        Wav2Vec2ForCTC,
        Wav2Vec2Processor,
    )

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(CHARS)}))
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), unk_token="<unk>", pad_token="<pad>",
                                     word_delimiter_token="|")
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=RATE, padding_value=0.0, do_normalize=True)
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    torch.manual_seed(0)
    config = Wav2Vec2Config(vocab_size=len(CHARS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                            intermediate_size=32, conv_dim=(8,) * 7, num_conv_pos_embeddings=16,
                            num_conv_pos_embedding_groups=2, pad_token_id=0)
    Wav2Vec2ForCTC(config).save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.mark.slow
def test_a_ctc_folder_places_one_span_per_word_in_order(tmp_path):
    aligner = load_aligner(f"ctc:{save_tiny_ctc(tmp_path / 'w2v')}")
    assert isinstance(aligner, CTCFolderAligner) and aligner.covers("de", "Latin")
    assert not aligner.covers("hi", "Devanagari")
    noise = (0.1 * np.random.default_rng(1).standard_normal(int(2.5 * 24_000))).astype(np.float32)
    words = ["Hello,", "wörld", "...", STAR, "again"]
    spans = aligner.align(noise, 24_000, words, "en")
    assert len(spans) == len(words)
    assert all(0 <= a <= b <= 2.5 for a, b in spans)
    assert all(b <= c for (_, b), (c, _) in itertools.pairwise(spans))
    assert all(b - a >= 0.02 for (a, b), w in zip(spans, words, strict=True) if w != "...")  # a frame at least
    assert spans[2][0] == spans[2][1]
    assert aligner.spell("wörld") == [CHARS.index(c) for c in "WORLD"]
    with pytest.raises(AlignmentError, match="spells none of the letters of 'नमस्ते'"):
        aligner.align(noise, 24_000, ["नमस्ते"], "hi")


def test_a_ctc_folder_without_safetensors_is_refused(tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(AlignmentError, match=r"no \.safetensors weights \(only pytorch_model\.bin\).*safe_serializ"):
        load_aligner(f"ctc:{folder}")
    with pytest.raises(AlignmentError, match="no config.json"):
        CTCFolderAligner(str(tmp_path))
    with pytest.raises(AlignmentError, match="needs a local model folder"):
        CTCFolderAligner(None)


# ---------------------------------------------------------------- the command line
def test_the_command_line_writes_the_words_and_their_times(tmp_path, capsys):
    from evaluation.align import main

    clip = tmp_path / "clip.wav"
    sf.write(clip, np.concatenate([np.zeros(RATE // 4, np.float32), sentence("I have two cats.")]), RATE)
    out = tmp_path / "words.json"
    assert main([str(clip), "--text", "I have 2 cats.", "--language", "en", "--normalize", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["word"] for r in rows] == ["I", "have", "two", "cats."]
    assert 0.2 < rows[0]["start"] < 0.35 and all(r["start"] < r["end"] for r in rows)
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(rows))
    assert "4 words ->" in capsys.readouterr().out


def test_the_command_line_reports_what_it_cannot_do_in_one_line(tmp_path, capsys):
    from evaluation.align import main

    clip = tmp_path / "clip.wav"
    sf.write(clip, sentence("hello"), RATE)
    long_clip = tmp_path / "long.wav"
    sf.write(long_clip, np.zeros(int((MAX_ALIGN_SECONDS + 1) * RATE), np.float32), RATE)
    cases = {"no aligner covers Devanagari": [str(clip), "--text", "नमस्ते", "--language", "hi"],
             "the limit here is 60 s": [str(long_clip), "--text", "hello", "--language", "en"],
             "unknown aligner 'nosuch'": [str(clip), "--text", "hello", "--language", "en", "--aligner", "nosuch"]}
    for message, argv in cases.items():
        with pytest.raises(SystemExit) as stop:
            main([*argv, "--out", str(tmp_path / "w.json")])
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "w.json").exists()
