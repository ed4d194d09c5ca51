"""Text normalisation (docs/ARCHITECTURE.md §11): numbers, money, dates, times and a few abbreviations become words.

    from rumik_app.text.normalize import normalize_text
    normalize_text("₹2,50,000 15/08/2026 को 10:30 am पर")
    # 'दो लाख पचास हज़ार रुपए पंद्रह अगस्त दो हज़ार छब्बीस को सुबह दस बजकर तीस मिनट पर'
    normalize_text("कल meeting 3 बजे")            # 'कल meeting तीन बजे' (the clause is Hindi)
    normalize_text("Call +91 98765 43210", "en")  # 'Call plus nine one, nine eight seven six five, ...'

    python -m rumik_app.normalize "Dr. Rao paid $4.99 on 1st Jan" [--language en]
    python -m rumik_app.normalize --coverage        # what is read in which language (markdown)

`language` (ISO code or name) reads numbers in clauses of that language's script in that
language; clauses in another script, and every clause when `language` is None, use the
script's most widely read language (Devanagari -> hi, Bengali-Assamese -> bn, Arabic -> ur,
Latin -> en, ...). A clause is the text between , ; : । . ? ! and line breaks; Indic
letters outvote Latin ones there, so code-switched "कल meeting 3 बजे" reads Hindi "तीन"; the
pattern's own Latin letters (the "pm" of "समय: 10:30 pm", "km", "Rs.") do not vote. A clause
without letters takes its sentence's language, then the whole text's.

Patterns, in the order they are tried: abbreviations (Dr. Mr. Mrs. ... and डॉ. ডা. ...),
phone numbers (+91 98765 43210, 98765-43210, 080-2345 6789: digit by digit in the typed
groups, 5+5 when unbroken), dates (15/08/2026 day first as in India, 2026-08-15,
15 Aug 2026, Aug 15, 2026), times (10:30, 10:30 am, 22:15, 7 pm), currency (₹ Rs. INR $ €
£ with paise/cents, lakh/crore/million/k, "/-"), percentages, units (km kg °C ...), ordinals
(1st; 5वां ৩য় 10வது 5ನೇ 10-ാം ...), ranges (10-12), then numbers (Indian 2,50,000 or
Western 250,000 grouping, decimals, negatives, years, leading-zero codes digit by digit).
Native digits (०-९ ০-৯ ੦-੯ ૦-૯ ୦-୯ ௦-௯ ౦-౯ ೦-೯ ൦-൯ ۰-۹ ᱐-᱙ ꯰-꯹) work everywhere.
Inline tags (<laugh>) and all other text pass through unchanged.

A pattern is read completely or left exactly as typed: when a language has no verified
word for part of it (see `rumik_app.text.data` and `coverage()`), the span stays and
one warning per language and category is logged. Normalising twice changes nothing (tested
on every hand-checked case and prompt; a random fuzz of 20,000 strings of digits, signs and
suffixes glued together finds a handful where one pass's words change a neighbour's context).

Layout: this module decides the language of each span and runs the passes;
`rumik_app.text.rules` holds the patterns and their handlers; `rumik_app.text.numwords` the
number words (indic-numtowords); `rumik_app.text.data` every other word (CLDR + tables).
"""

from __future__ import annotations

import argparse
import bisect
import logging
import re
import sys
import unicodedata
from decimal import InvalidOperation

from rumik_app.prompt import TAG_PATTERN
from rumik_app.text.languages import INDIC_SCRIPTS, LANGUAGES, SCRIPT_RANGES, get_language
from rumik_app.text.numwords import Unsupported
from rumik_app.text.rules import ANY_WORK, HANDLERS, NEEDS, PATTERNS, NotThis

logger = logging.getLogger(__name__)

SCRIPT_DEFAULT_LANGUAGE = {
    "Devanagari": "hi", "Bengali": "bn", "Gurmukhi": "pa", "Gujarati": "gu", "Odia": "or", "Tamil": "ta",
    "Telugu": "te", "Kannada": "kn", "Malayalam": "ml", "Arabic": "ur", "OlChiki": "sat",
    "MeeteiMayek": "mni", "Latin": "en",
}
LANGUAGE_SCRIPT = {lang.code: lang.script for lang in LANGUAGES}

_PROTECT_BASE = 0xF0000  # Supplementary Private Use Area-A: placeholders for spans left as typed
_CLAUSE_BREAK = re.compile(r"[।॥?!;\n\u06d4\u061f\u061b\u060c\u1c7e\u1c7f\uabeb]|[.,:](?=\s|$)")
_SENTENCE_BREAK = re.compile(r"[।॥?!\n\u06d4\u061f\u1c7e\u1c7f\uabeb]|\.(?=\s|$)")


# ---------------------------------------------------------------------------------------
# Language of a span


class _Context:
    """Language decisions for spans of one string: clause, then sentence, then whole text."""

    def __init__(self, text: str, language: str | None, force: bool = False):
        self.text, self.language, self.force = text, language, force
        self.clause_ends = [m.end() for m in _CLAUSE_BREAK.finditer(text)]
        self.sentence_ends = [m.end() for m in _SENTENCE_BREAK.finditer(text)]
        self._cache: dict[tuple[int, int], dict[str, int]] = {}

    def _bounds(self, ends: list[int], start: int, end: int) -> tuple[int, int]:
        i = bisect.bisect_right(ends, start)
        lo = ends[i - 1] if i else 0
        j = bisect.bisect_left(ends, end)
        hi = ends[j] if j < len(ends) else len(self.text)
        return lo, hi

    def _counts(self, lo: int, hi: int) -> dict[str, int]:
        """Letters (and native digits) per script in text[lo:hi], cached per clause."""
        key = (lo, hi)
        if key not in self._cache:
            tags = self.text[lo:hi].translate(_SCRIPT_TAGS)  # each letter -> its script's tag
            self._cache[key] = {script: n for script, tag in _TAG_OF_SCRIPT.items() if (n := tags.count(tag))}
        return self._cache[key]

    def _script(self, lo: int, hi: int, start: int, end: int) -> str | None:
        """Dominant script of text[lo:hi], Indic before Latin; the span's own Latin letters
        ("pm", "km", "Rs") do not vote, its native digits do ("৩", "१५/०८")."""
        counts = dict(self._counts(lo, hi))
        if "Latin" in counts:
            counts["Latin"] -= self.text[max(lo, start):min(hi, end)].translate(_SCRIPT_TAGS).count(
                _TAG_OF_SCRIPT["Latin"])
        counts = {s: c for s, c in counts.items() if c > 0}
        indic = {s: c for s, c in counts.items() if s in INDIC_SCRIPTS}
        pool = indic or counts
        return max(pool, key=pool.get) if pool else None

    def language_at(self, start: int, end: int) -> str:
        if self.force and self.language:
            return self.language
        for ends in (self.clause_ends, self.sentence_ends, []):
            script = self._script(*self._bounds(ends, start, end), start, end)
            if script:
                if self.language and LANGUAGE_SCRIPT[self.language] == script:
                    return self.language
                return SCRIPT_DEFAULT_LANGUAGE[script]
        return self.language or "en"


def _script_tags() -> tuple[dict[int, str], dict[str, str]]:
    """A str.translate table mapping every letter, mark and native digit of our scripts to a
    private-use tag character per script (counting tags is C-speed; the text has no such tags)."""
    tag_of = {script: chr(0xE000 + i) for i, script in enumerate(SCRIPT_RANGES)}
    table: dict[int, str] = {}
    for script, ranges in SCRIPT_RANGES.items():
        for lo, hi in ranges:
            for code in range(lo, hi + 1):
                ch = chr(code)
                if ch.isalpha() or unicodedata.category(ch)[0] in "MN":
                    table[code] = tag_of[script]
    return table, tag_of


_SCRIPT_TAGS, _TAG_OF_SCRIPT = _script_tags()


# ---------------------------------------------------------------------------------------
# Warnings: one per (language, category)

_warned: set[tuple[str, str]] = set()


def _warn_once(exc: Unsupported) -> None:
    key = (exc.language, exc.category)
    if key not in _warned:
        _warned.add(key)
        logger.warning("normalize: %s left as typed in %s (%s); see rumik_app.normalize.coverage()",
                       exc.category, exc.language, exc.reason or "no verified words")


def reset_warnings() -> None:
    """Forget which warnings were logged (tests)."""
    _warned.clear()


# ---------------------------------------------------------------------------------------
# The pass loop


def normalize_text(text: str, language: str | None = None) -> str:
    """Spoken form of `text`: numbers, money, dates, times, ordinals, units and abbreviations as
    words in the language of each clause (see the module docstring). Tags pass unchanged.

    language: ISO code or English name (`get_language`); None decides per clause from the script.
    Raises ValueError for an unknown language.
    """
    return _normalize(text, get_language(language).code if language else None)


def _normalize(text: str, code: str | None, force: bool = False) -> str:
    """normalize_text with a resolved code; force=True reads every span in `code` (coverage probes)."""
    if not text:
        return text
    text = unicodedata.normalize("NFC", text)
    if not ANY_WORK.search(text):
        return text
    kept: list[str] = []

    def protect(span: str) -> str:
        kept.append(span)
        return chr(_PROTECT_BASE + len(kept) - 1)

    work = TAG_PATTERN.sub(lambda t: protect(t.group(0)), text)
    for category, pattern in PATTERNS:
        needs = NEEDS.get(category)
        if needs is None or any(n in work for n in needs):
            work = _run_pass(work, category, pattern, code, protect, force)
    work = re.sub("[\U000F0000-\U000FFFFD]", lambda p: kept[ord(p.group(0)) - _PROTECT_BASE], work)
    return unicodedata.normalize("NFC", work)  # library and CLDR words may come decomposed


def _run_pass(work: str, category: str, pattern: re.Pattern, code: str | None, protect, force: bool) -> str:
    context: list[_Context] = []
    handler = HANDLERS[category]

    def replace(m: re.Match) -> str:
        if not context:
            context.append(_Context(work, code, force))
        language = context[0].language_at(m.start(), m.end())
        try:
            return handler(m, language, work)
        except NotThis:
            return m.group(0)
        except Unsupported as exc:
            _warn_once(exc)
            return protect(m.group(0))
        except (ValueError, InvalidOperation):  # malformed grouping: leave for the cardinal pass
            return m.group(0)

    return pattern.sub(replace, work)


# ---------------------------------------------------------------------------------------
# Coverage: what each language reads (probed, so the table cannot drift from the code)

COVERAGE_PROBES: dict[str, str] = {
    "cardinal": "2,50,000", "decimal": "3.14", "negative": "-5", "currency": "₹500", "paise": "₹12.50",
    "percent": "50%", "unit": "5 km", "ordinal": "5th", "range": "10-12", "date": "15/08/2026",
    "time": "10:30 am", "phone": "98765 43210", "abbreviation": "Dr.",
}


def coverage() -> dict[str, dict[str, bool]]:
    """{language: {category: read aloud?}} for every language, probed through normalize_text."""
    out: dict[str, dict[str, bool]] = {}
    for lang in LANGUAGES:
        row = {}
        for category, probe in COVERAGE_PROBES.items():
            spoken = _quiet(probe, lang.code)
            row[category] = spoken != probe and not re.search(r"\d", spoken)
        out[lang.code] = row
    return out


def _quiet(text: str, language: str) -> str:
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return _normalize(text, language, force=True)
    finally:
        logger.setLevel(level)


def coverage_markdown() -> str:
    """The coverage table as markdown (✓ read aloud, · left as typed). "abbreviation" is the
    Latin set (Dr. Mr. Mrs. ...), expanded in every language."""
    table, cols = coverage(), list(COVERAGE_PROBES)
    lines = ["| language | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for lang in LANGUAGES:
        marks = " | ".join("✓" if table[lang.code][c] else "·" for c in cols)
        lines.append(f"| {lang.name} ({lang.code}) | {marks} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("text", nargs="?", help="text to normalise")
    p.add_argument("--language", help="ISO code or name; default: per clause from the script")
    p.add_argument("--coverage", action="store_true", help="print what is read in which language (markdown)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.coverage:
        print(coverage_markdown())
        return 0
    if args.text is None:
        p.error("give a text or --coverage")
    print(normalize_text(args.text, args.language))
    return 0


if __name__ == "__main__":
    sys.exit(main())
