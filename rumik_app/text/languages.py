"""Languages, scripts and speaking rates (docs/ARCHITECTURE.md §3, §5, §7).

The language is not a prompt field: the model reads it from the script. This table is used
for examples and script checks in the app, for long-text chunking (expected seconds of
speech per chunk) and as the default per-language rates of the GRPO duration reward.

Rates are characters (Unicode code points, spaces included, tags excluded) per second of
speech at a steady pace. They are rough defaults, not a calibration of the released voices;
training configs override them per language.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from rumik_app.errors import PromptError


@dataclass(frozen=True)
class Language:
    """One supported language: ISO code, English name, primary script, speaking rate (chars/s)."""

    code: str
    name: str
    script: str
    chars_per_second: float


# Unicode blocks of the scripts we meet. Ranges are inclusive code point bounds.
SCRIPT_RANGES: dict[str, tuple[tuple[int, int], ...]] = {
    "Devanagari": ((0x0900, 0x097F), (0xA8E0, 0xA8FF)),
    "Bengali": ((0x0980, 0x09FF),),
    "Gurmukhi": ((0x0A00, 0x0A7F),),
    "Gujarati": ((0x0A80, 0x0AFF),),
    "Odia": ((0x0B00, 0x0B7F),),
    "Tamil": ((0x0B80, 0x0BFF),),
    "Telugu": ((0x0C00, 0x0C7F),),
    "Kannada": ((0x0C80, 0x0CFF),),
    "Malayalam": ((0x0D00, 0x0D7F),),
    "Arabic": ((0x0600, 0x06FF), (0x0750, 0x077F), (0xFB50, 0xFDFF), (0xFE70, 0xFEFF)),
    "OlChiki": ((0x1C50, 0x1C7F),),
    "MeeteiMayek": ((0xABC0, 0xABFF), (0xAAE0, 0xAAFF)),
    "Latin": ((0x0041, 0x005A), (0x0061, 0x007A), (0x00C0, 0x024F)),
}
INDIC_SCRIPTS = frozenset(SCRIPT_RANGES) - {"Latin"}

LANGUAGES: tuple[Language, ...] = (
    Language("as", "Assamese", "Bengali", 13.0),
    Language("bn", "Bengali", "Bengali", 13.0),
    Language("brx", "Bodo", "Devanagari", 12.5),
    Language("doi", "Dogri", "Devanagari", 12.5),
    Language("gu", "Gujarati", "Gujarati", 13.0),
    Language("hi", "Hindi", "Devanagari", 13.0),
    Language("kn", "Kannada", "Kannada", 14.0),
    Language("ks", "Kashmiri", "Arabic", 12.0),
    Language("kok", "Konkani", "Devanagari", 12.5),
    Language("mai", "Maithili", "Devanagari", 12.5),
    Language("ml", "Malayalam", "Malayalam", 15.0),
    Language("mni", "Manipuri", "MeeteiMayek", 12.0),
    Language("mr", "Marathi", "Devanagari", 13.0),
    Language("ne", "Nepali", "Devanagari", 13.0),
    Language("or", "Odia", "Odia", 13.0),
    Language("pa", "Punjabi", "Gurmukhi", 13.0),
    Language("sa", "Sanskrit", "Devanagari", 11.0),
    Language("sat", "Santali", "OlChiki", 12.0),
    Language("sd", "Sindhi", "Arabic", 12.0),
    Language("ta", "Tamil", "Tamil", 15.0),
    Language("te", "Telugu", "Telugu", 14.0),
    Language("ur", "Urdu", "Arabic", 12.5),
    Language("en", "English", "Latin", 15.0),
)
LANGUAGE_BY_CODE: dict[str, Language] = {lang.code: lang for lang in LANGUAGES}
LANGUAGE_BY_NAME: dict[str, Language] = {lang.name.lower(): lang for lang in LANGUAGES}
DEFAULT_CHARS_PER_SECOND = 13.0
# Speaking-rate multipliers for the pace field of the description.
PACE_RATE = {"slow": 0.8, "steady": 1.0, "fast": 1.2}

# Sentence terminators: Latin . ? !, danda and double danda, Urdu full stop and Arabic
# question mark, Ol Chiki mucaad, Meetei Mayek cheikhei, fullwidth and ideographic forms.
SENTENCE_END = ".?!\u0964\u0965\u06D4\u061F\u1C7E\u1C7F\uABEB\u3002\uFF01\uFF1F\u2026"
CLAUSE_END = ",;:\u060C\u061B\u3001\uFF0C\u2014"
_TAG = re.compile(r"<[^<>\s]{1,40}>")


def get_language(code_or_name: str) -> Language:
    """Look up a language by ISO code (`"hi"`) or English name (`"Hindi"`)."""
    key = code_or_name.strip()
    lang = LANGUAGE_BY_CODE.get(key.lower()) or LANGUAGE_BY_NAME.get(key.lower())
    if lang is None:
        names = ", ".join(f"{lang.name} ({lang.code})" for lang in LANGUAGES)
        raise PromptError(f"Unknown language {code_or_name!r}. Supported: {names}.",  # a ValueError too
                          field="language")
    return lang


def char_script(ch: str) -> str | None:
    """Script name of one character, or None for digits, punctuation, spaces, unknown."""
    cp = ord(ch)
    for script, ranges in SCRIPT_RANGES.items():
        if any(lo <= cp <= hi for lo, hi in ranges):
            return script
    return None


def script_counts(text: str) -> dict[str, int]:
    """Number of letters (and combining marks) per script in `text`."""
    counts: dict[str, int] = {}
    for ch in text:
        script = char_script(ch)
        if script is not None:
            counts[script] = counts.get(script, 0) + 1
    return counts


def dominant_script(text: str) -> str:
    """The script with the most characters in `text`; `"Latin"` when there are no letters."""
    counts = script_counts(text)
    return max(counts, key=counts.get) if counts else "Latin"


def is_indic(text: str) -> bool:
    """True when the dominant script of `text` is an Indian script (GCER is the content metric)."""
    return dominant_script(text) in INDIC_SCRIPTS


def speakable_length(text: str) -> int:
    """Characters that take time to say: NFC code points without inline tags, spaces collapsed."""
    text = _TAG.sub(" ", unicodedata.normalize("NFC", text))
    return len(" ".join(text.split()))


def rate_for_text(text: str, language: str | None = None, pace: str | None = None) -> float:
    """Chars/s for `text`: the language's rate if given, else the mean over its scripts."""
    if language:
        rate = get_language(language).chars_per_second
    else:
        counts = script_counts(text)
        rates = {
            script: [lang.chars_per_second for lang in LANGUAGES if lang.script == script] for script in counts
        }
        total = sum(counts.values())
        rate = (
            sum(counts[s] * (sum(r) / len(r)) for s, r in rates.items()) / total
            if total
            else DEFAULT_CHARS_PER_SECOND
        )
    return rate * PACE_RATE.get((pace or "steady").lower(), 1.0)


def expected_seconds(text: str, language: str | None = None, pace: str | None = None) -> float:
    """Expected duration of `text` in seconds at the language's (or scripts') rate."""
    return speakable_length(text) / rate_for_text(text, language, pace)
