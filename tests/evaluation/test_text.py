"""Tests for evaluation.text: the shared normaliser and grapheme clusters.

Run: .venv/bin/python -m pytest tests/evaluation/test_text.py -q
"""

import unicodedata

import pytest

from evaluation.text import grapheme_backend_info, graphemes, normalize, strip_tags


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("<laugh> सच में <chuckle>!", "सच में"),
        ("so<sigh>tired", "so tired"),  # a tag glued to words still separates them
        ("<breath> any tag [laughs] goes [clears throat]", "any tag goes"),
        ("[Laughter] okay", "okay"),
    ],
)
def test_tags_removed(raw, expected):
    assert normalize(raw) == expected


def test_parentheses_are_text_not_tags():
    assert normalize("(laughs) ok") == "laughs ok"


def test_danda_and_double_danda_removed():
    assert normalize("राम घर गया। सीता आई॥") == "राम घर गया सीता आई"
    assert normalize("ठीक है।।") == "ठीक है"


def test_latin_lowercased_devanagari_untouched():
    assert normalize("Hello WORLD") == "hello world"
    # Every kind of mark survives: anusvara ं, candrabindu ँ, visarga ः, virama ्, matras.
    text = "मैं दुःख में हूँ क्षत्रिय श्रीमान् कृपया"
    assert normalize(text) == text


def test_code_switched_only_latin_changes():
    assert normalize("मेरा Phone CHARGE नहीं हो रहा!") == "मेरा phone charge नहीं हो रहा"


def test_nfc_composes_decomposed_nukta():
    decomposed = "\u0928\u093c"  # न + nukta
    assert normalize(decomposed) == "\u0929"  # ऩ, one code point
    # ज़ (U+095B) is a composition exclusion: NFC decomposes it, so the precomposed and
    # decomposed spellings become identical (ज + nukta), and the nukta is never lost.
    assert normalize("\u095b\u0930\u0942\u0930") == normalize("\u091c\u093c\u0930\u0942\u0930")
    assert normalize("\u095b") == "\u091c\u093c"
    assert normalize("\u095b") != normalize("\u091c")  # ज़ still differs from ज


def test_combining_marks_never_dropped():
    for mark in ("\u093c", "\u094d", "\u0902", "\u0901", "\u0903", "\u093f", "\u0bcd", "\u0a70"):
        assert unicodedata.category(mark).startswith("M")
    tamil = "வணக்கம்"  # two pulli (virama) marks
    assert normalize(tamil) == tamil
    gurmukhi = "ਪੰਜਾਬ"  # tippi
    assert normalize(gurmukhi) == gurmukhi


def test_punctuation_symbols_apostrophes_and_spaces():
    assert normalize("Let's   meet,\tat 5 PM —  okay?\n") == "lets meet at 5 pm okay"
    assert normalize("“नमस्ते” ‘दोस्त’") == "नमस्ते दोस्त"
    assert normalize("₹500 + 20%") == "500 20"
    assert normalize("کیا حال ہے؟ ٹھیک۔") == "کیا حال ہے ٹھیک"  # Urdu ؟ and ۔
    assert normalize("zero\u200bwidth\ufeff") == "zerowidth"
    assert normalize("  ।  ") == ""


def test_zwj_zwnj_kept():
    assert normalize("क्\u200dष") == "क्\u200dष"
    assert normalize("क्\u200cष") == "क्\u200cष"


def test_idempotent():
    once = normalize("<laugh> Hello, दुनिया! [sighs] क़िस्सा।")
    assert normalize(once) == once
    assert once == "hello दुनिया क\u093cिस्सा"


def test_strip_tags_only_touches_tags():
    assert strip_tags("a <laugh> b [sighs] c.") == "a   b   c."


def test_grapheme_clusters_keep_conjuncts():
    # GB9c (Unicode 15.1+): consonant + virama + consonant is one cluster in Devanagari,
    # Bengali and Telugu; Tamil's pulli is not a conjunct linker, so க் and ஷ stay apart.
    assert graphemes("क्षत्रिय") == ["क्ष", "त्रि", "य"]
    assert graphemes("ক্ষ") == ["ক্ষ"]
    assert graphemes("క్ష") == ["క్ష"]
    assert graphemes("க்ஷ") == ["க்", "ஷ"]
    assert graphemes("a b") == ["a", " ", "b"]


def test_backend_info_names_regex_and_unicode_version():
    import regex

    info = grapheme_backend_info()
    assert f"regex {regex.__version__}" in info
    assert "Unicode " in info and "Unicode unknown" not in info
    assert "GB9c on" in info
