"""Our example texts: one per language in its own script; the showcase covers the benchmark set.

Run: .venv/bin/python -m pytest tests/app/test_examples.py -q
"""

from __future__ import annotations

from rumik_app.prompt import validate_text
from rumik_app.text.languages import LANGUAGES, dominant_script
from webapp.examples import LANGUAGE_EXAMPLES, SHOWCASE, example_for, script_note

BENCHMARK_LANGUAGES = {"en", "hi", "te", "ta", "kn", "bn", "pa"}


def test_every_language_has_an_example_in_its_script():
    assert set(LANGUAGE_EXAMPLES) == {lang.code for lang in LANGUAGES} and len(LANGUAGE_EXAMPLES) == 23
    for lang in LANGUAGES:
        text = example_for(lang.code)
        assert validate_text(text) == text
        assert dominant_script(text) == lang.script, (lang.name, text)
        assert script_note(text, lang.code) == ""
    assert example_for("Tamil") == LANGUAGE_EXAMPLES["ta"]


def test_showcase_covers_benchmark_languages_code_switching_and_tags():
    assert {lang for _, _, lang, *_ in SHOWCASE} >= BENCHMARK_LANGUAGES
    tagged = [text for text, *_ in SHOWCASE if "<" in text]
    assert len(tagged) >= 5 and {t for text in tagged for t in ("<laugh>", "<chuckle>", "<sigh>") if t in text} == {
        "<laugh>", "<chuckle>", "<sigh>"}
    mixed = [text for text, *_ in SHOWCASE
             if dominant_script(text) != "Latin" and any(c.isascii() and c.isalpha() for c in text)]
    assert mixed  # Devanagari with English words
    for text, *_ in SHOWCASE:
        validate_text(text)
