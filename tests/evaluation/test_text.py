"""Tests for evaluation.text: the shared normaliser and grapheme clusters.

Run: .venv/bin/python -m pytest tests/evaluation/test_text.py -q
"""

import unicodedata

import pytest

from evaluation.text import (
    DEFAULT_SEGMENTATION,
    SEGMENTATIONS,
    conjunct_is_one_cluster,
    grapheme_backend_info,
    graphemes,
    normalize,
    regex_unicode_version,
    segmentation_label,
    strip_tags,
)


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


# Hand-counted cluster sequences of conjuncts (C = consonant, V = virama) under both GCER
# segmentations. "grapheme" (the `grapheme` package, Unicode 13.0 rules) ends a cluster
# after every virama. "unicode" (regex \\X, Unicode 15.1+, rule GB9c) keeps C V C together
# only where the virama is an Indic_Conjunct_Break linker: Devanagari, Bengali, Telugu
# (also Gujarati, Odia, Malayalam), not Tamil, Kannada or Gurmukhi.
CONJUNCTS = [
    # Devanagari क्षत्रिय = क ् ष | त ् र ि | य
    ("क्षत्रिय", ["क्", "ष", "त्", "रि", "य"], ["क्ष", "त्रि", "य"]),
    # Devanagari स्त्री = स ् त ् र ी: a three-consonant conjunct with a vowel sign.
    ("स्त्री", ["स्", "त्", "री"], ["स्त्री"]),
    # Devanagari राष्ट्र = र ा | ष ् ट ् र
    ("राष्ट्र", ["रा", "ष्", "ट्", "र"], ["रा", "ष्ट्र"]),
    # Devanagari with ZWJ (half form requested): क ् ZWJ ष joins under GB9c (ZWJ is Extend);
    # with ZWNJ (explicit virama) it splits under both.
    ("क्\u200dष", ["क्\u200d", "ष"], ["क्\u200dष"]),
    ("क्\u200cष", ["क्\u200c", "ष"], ["क्\u200c", "ष"]),
    # Bengali ক্ষমা = ক ্ ষ | ম া
    ("ক্ষমা", ["ক্", "ষ", "মা"], ["ক্ষ", "মা"]),
    # Bengali চন্দ্র = চ | ন ্ দ ্ র
    ("চন্দ্র", ["চ", "ন্", "দ্", "র"], ["চ", "ন্দ্র"]),
    # Tamil க்ஷ = க ் ஷ: the pulli is visible and not a linker, so both split.
    ("க்ஷ", ["க்", "ஷ"], ["க்", "ஷ"]),
    # Tamil ஸ்ரீ = ஸ ் ர ீ
    ("ஸ்ரீ", ["ஸ்", "ரீ"], ["ஸ்", "ரீ"]),
    # Telugu సత్యం = స | త ్ య ం
    ("సత్యం", ["స", "త్", "యం"], ["స", "త్యం"]),
    # Telugu క్ష = క ్ ష
    ("క్ష", ["క్", "ష"], ["క్ష"]),
    # Kannada ಕ್ಷಮೆ = ಕ ್ ಷ | ಮ ೆ: Kannada's virama is not a GB9c linker, so both split.
    ("ಕ್ಷಮೆ", ["ಕ್", "ಷ", "ಮೆ"], ["ಕ್", "ಷ", "ಮೆ"]),
    # Kannada ಪ್ರ = ಪ ್ ರ
    ("ಪ್ರ", ["ಪ್", "ರ"], ["ಪ್", "ರ"]),
    # Gurmukhi ਪ੍ਰੇਮ = ਪ ੍ ਰ ੇ | ਮ (subjoined ra): both split.
    ("ਪ੍ਰੇਮ", ["ਪ੍", "ਰੇ", "ਮ"], ["ਪ੍", "ਰੇ", "ਮ"]),
    # Gurmukhi ਸ੍ਵਰ = ਸ ੍ ਵ | ਰ
    ("ਸ੍ਵਰ", ["ਸ੍", "ਵ", "ਰ"], ["ਸ੍", "ਵ", "ਰ"]),
    # Spaces are units under both.
    ("a b", ["a", " ", "b"], ["a", " ", "b"]),
]


@pytest.mark.parametrize("text, by_grapheme, by_unicode", CONJUNCTS)
def test_conjunct_clusters_under_both_segmentations(text, by_grapheme, by_unicode):
    assert graphemes(text, "grapheme") == by_grapheme
    assert graphemes(text, "unicode") == by_unicode
    assert "".join(by_grapheme) == "".join(by_unicode) == text  # a segmentation, nothing lost
    assert graphemes(text) == graphemes(text, DEFAULT_SEGMENTATION)


def test_unknown_segmentation_is_a_clear_error():
    with pytest.raises(ValueError, match="Unknown GCER segmentation 'akshara'; use 'grapheme' .* or 'unicode'"):
        graphemes("क्ष", "akshara")


def test_backend_info_names_both_libraries_and_unicode_versions():
    import importlib.metadata

    import grapheme
    import regex

    for segmentation in SEGMENTATIONS:
        info = grapheme_backend_info(segmentation)
        assert info.startswith(f"GCER segmentation {segmentation}: ")
        assert f"grapheme {importlib.metadata.version('grapheme')}, Unicode {grapheme.UNICODE_VERSION}" in info
        assert f"regex {regex.__version__} \\X, Unicode {regex_unicode_version()}" in info
        assert f"NFC from Python unicodedata {unicodedata.unidata_version}" in info
        assert "Unicode unknown" not in info and "graphemes: graphemes" not in info.lower()
    assert grapheme.UNICODE_VERSION == "13.0.0"
    assert segmentation_label("grapheme").endswith("क्ष = 2 clusters")
    assert segmentation_label("unicode").endswith("क्ष = 1 cluster")
    assert conjunct_is_one_cluster("unicode") and not conjunct_is_one_cluster("grapheme")
