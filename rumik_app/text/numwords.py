"""Numbers as words in 21 Indian languages and English, from AI4Bharat's `indic-numtowords`.

Library module, no command line; `rumik_app.text.normalize` is the caller::

    cardinal(250000, "hi")          # 'दो लाख पचास हज़ार'
    cardinal(1_000_000, "en", western=True)   # 'one million'
    decimal("3", "14", "ta")        # 'மூன்று புள்ளி ஒன்று நான்கு'
    ordinal(5, "kn")                # 'ಐದನೇ'
    digits("0987", "te")            # 'సున్నా తొమ్మిది ఎనిమిది ఏడు'

`indic-numtowords` 1.1.0 spells 0 to 99,99,99,999 (Indian grouping: lakh, crore) in
as bn brx doi en gu hi kn kok ks mai ml mni mr ne or pa sa sat ta te ur and reads longer
numbers digit by digit. On top of it this module adds, from the library's own words:
numbers of 100 crore and more as "<n> crore <rest>" (when the language's crore word is a
separate word), English in Western grouping (million, billion), years read in hundreds
where that is the idiom (hi, ur, pa: उन्नीस सौ सैंतालीस; en: nineteen forty-seven),
ordinals (rules per language, tables in `rumik_app.text.data`).

Not covered: Sindhi. The library writes Sindhi numbers in Devanagari (this project reads
Sindhi in Perso-Arabic script) and fails on 100 and 1,000; `Unsupported` is raised.

Library defects we repair, each pinned by a test that fails when upstream changes:
Kannada hundreds + a multiple of ten are cut off (150 -> ನೂ; rebuilt from the library's own
151), 83 is spelt as 82, and standalone thousands/lakhs end in the connective -ದ (ಒಂದು
ಸಾವಿರದ for 1000; on its own it is ಸಾವಿರ); Tamil 81/89 use ஓ for ஒ; Urdu 5, 23, 26, 27, 28
are misspelt (پاںچ for پانچ, ...) and some numbers use Arabic ي/ك for Urdu ی/ک. Manipuri
gives 99 the words of 89: numbers ending in 99 are left as typed.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from rumik_app.text import data

# Languages with number words (everything but Sindhi, see the module docstring).
LANGUAGES = frozenset({"as", "bn", "brx", "doi", "en", "gu", "hi", "kn", "kok", "ks", "mai", "ml", "mni", "mr",
                       "ne", "or", "pa", "sa", "sat", "ta", "te", "ur"})
UNSUPPORTED_REASON = {
    "sd": "indic-numtowords 1.1.0 writes Sindhi numbers in Devanagari (this project reads Sindhi in "
          "Perso-Arabic script) and fails on 100 and 1,000",
}
LIBRARY_MAX = 10**9 - 1  # the library reads longer numbers digit by digit
CRORE = 10**7
MAX_COMPOSED = 10**15 - 1  # beyond this, read digit by digit (IDs, not quantities)
HUNDREDS_YEAR_LANGUAGES = ("hi", "ur", "pa")
_ZERO_WIDTH = re.compile("[\u200b\u200c]")
_WORD_FIXES: dict[str, tuple[tuple[re.Pattern, str], ...]] = {
    "kn": ((re.compile("ಸಾವಿರದ$"), "ಸಾವಿರ"), (re.compile("ಲಕ್ಷದ$"), "ಲಕ್ಷ")),
    "ta": ((re.compile("ஓன்"), "ஒன்"),),  # 81, 89: ஓன்று, ஓன்பது for ஒன்று, ஒன்பது
    "ur": ((re.compile("\u064a"), "\u06cc"), (re.compile("\u0643"), "\u06a9"), (re.compile("پاںچ"), "پانچ"),
           (re.compile("تےیس"), "تئیس"), (re.compile("چھببیس"), "چھبیس"), (re.compile("ستااس"), "ستائیس"),
           (re.compile("اٹھااس"), "اٹھائیس")),
}
_KN_TRUNCATED = "\u0cc2"  # a Kannada number word never ends in the long -ū sign: "ಇನ್ನೂ" is cut off


class Unsupported(ValueError):
    """No verifiable words for this number in this language; the caller leaves it as typed."""

    def __init__(self, language: str, category: str, reason: str = ""):
        super().__init__(f"{category} in {language!r} is not read aloud: {reason or 'no verified words'}")
        self.language, self.category, self.reason = language, category, reason


def supported(language: str) -> bool:
    return language in LANGUAGES


@functools.lru_cache(maxsize=8192)
def _raw(n: int, language: str) -> str:
    from indic_numtowords import num2words

    words = unicodedata.normalize("NFC", num2words(n, lang=language))  # Telugu ై comes decomposed
    return " ".join(_ZERO_WIDTH.sub("", words).split())


@functools.lru_cache(maxsize=8192)
def _library(n: int, language: str) -> str:
    """The library's words for 0 <= n <= LIBRARY_MAX, cleaned and with its known defects fixed."""
    if language == "mni" and n % 100 == 99:
        raise Unsupported(language, "number", "indic-numtowords gives 99 the words of 89 in Manipuri")
    words = _raw(n, language)
    if language == "kn":
        words = _fix_kannada(n, words)
    for pattern, fixed in _WORD_FIXES.get(language, ()):
        words = pattern.sub(fixed, words)
    return words


def _fix_kannada(n: int, words: str) -> str:
    """Two indic-numtowords 1.1.0 defects in Kannada, repaired from the library's own words.

    - x10, x20, ..., x90 after hundreds come out cut off (150 -> 'ನೂ'): the library joins
      hundreds and tens only for non-multiples of ten. Its words for n + 1 (151 ->
      'ನೂರೈವತ್ತೊಂದು') end in its words for the tens + 1 ('ಐವತ್ತೊಂದು', maybe without the
      first letter, which merges into the joint); swapping that tail for the tens' words
      gives n ('ನೂರೈವತ್ತು').
    - 83 is spelt as 82 (ಎಂಬತ್ತೆರಡು); 83 is ಎಂಬತ್ತ್ಮೂರು, spelt like the library's own
      73 (ಎಪ್ಪತ್ತ್ಮೂರು) and 93 (ತೊಂಬತ್ತ್ಮೂರು).
    """
    if words.endswith(_KN_TRUNCATED) and n % 10 == 0:
        nxt, tens, tens1 = _raw(n + 1, "kn"), _raw(n % 100, "kn"), _raw(n % 100 + 1, "kn")
        for k in (0, 1):
            if nxt.endswith(tens1[k:]):
                return nxt[: len(nxt) - len(tens1) + k] + tens[k:]
    if n % 100 == 83:
        return re.sub("ಂಬತ್ತೆರಡು$", "ಂಬತ್ತ್ಮೂರು", words)
    return words


def _check(language: str, category: str = "number") -> None:
    if language not in LANGUAGES:
        raise Unsupported(language, category, UNSUPPORTED_REASON.get(language, "no number words"))


def digits(text: str, language: str) -> str:
    """Each digit of `text` (ASCII digits) as its word: '0987' -> 'zero nine eight seven'."""
    _check(language)
    return " ".join(_library(int(d), language) for d in text)


def cardinal(n: int, language: str, western: bool = False) -> str:
    """n >= 0 in words. western: English only, read in thousands/millions (typed '1,000,000')."""
    _check(language)
    if n < 0:
        raise ValueError("cardinal() takes n >= 0; the caller says 'minus'")
    if language == "en" and western and n >= 10**5:
        return _english_western(n)
    if n <= LIBRARY_MAX:
        return _library(n, language)
    if n > MAX_COMPOSED:
        return digits(str(n), language)
    return _crores(n, language)


def _english_western(n: int) -> str:
    parts, rest = [], n
    for scale, word in data.EN_SCALES:
        if rest >= scale:
            head, rest = divmod(rest, scale)
            parts.append(f"{cardinal(head, 'en', western=True)} {word}")
    if rest:
        parts.append(_library(rest, "en"))
    return " ".join(parts)


@functools.lru_cache(maxsize=None)
def _crore_forms(language: str) -> tuple[str, str] | None:
    """(crore alone, crore before a remainder) from the library's 1,00,00,000 and 1,00,00,001,
    when both are '<one> <crore> [rest]' with separate words; else None (read digit by digit)."""
    alone, joined = _library(CRORE, language).split(), _library(CRORE + 1, language).split()
    if len(alone) == 2 and len(joined) >= 3 and joined[0] == alone[0]:
        return alone[1], joined[1]
    return None


def _crores(n: int, language: str) -> str:
    """n >= 100 crore as '<n // crore> crore <rest>', the rest as the library says it after a crore."""
    forms = _crore_forms(language)
    if forms is None:
        return digits(str(n), language)
    head, rest = divmod(n, CRORE)
    if not rest:
        return f"{cardinal(head, language)} {forms[0]}"
    tail = _library(CRORE + rest, language).split()[2:]
    return f"{cardinal(head, language)} {forms[1]} {' '.join(tail)}"


def decimal(whole: str, fraction: str, language: str) -> str:
    """'3', '14' -> 'three point one four' (the fraction digit by digit)."""
    _check(language, "decimal")
    point = data.POINT.get(language)
    if point is None:
        raise Unsupported(language, "decimal", "no verified decimal-point word")
    return f"{cardinal(int(whole or '0'), language)} {point} {digits(fraction, language)}"


def year(n: int, language: str) -> str:
    """A year: hundreds in en/hi/ur/pa (nineteen forty-seven, उन्नीस सौ सैंतालीस), else the cardinal."""
    _check(language)
    if language == "en" and 1000 <= n <= 2099:
        return _english_year(n)
    if language in HUNDREDS_YEAR_LANGUAGES and 1100 <= n <= 1999:
        hundred = _library(200, language).split()
        if len(hundred) == 2:
            head, rest = divmod(n, 100)
            tail = f" {_library(rest, language)}" if rest else ""
            return f"{_library(head, language)} {hundred[1]}{tail}"
    return cardinal(n, language)


def _english_year(n: int) -> str:
    head, rest = divmod(n, 100)
    if 2000 <= n <= 2009 or n % 1000 == 0:
        return _library(n, "en")
    if rest == 0:
        return f"{_library(head, 'en')} hundred"
    if rest < 10:
        return f"{_library(head, 'en')} oh {_library(rest, 'en')}"
    return f"{_library(head, 'en')} {_library(rest, 'en')}"


_EN_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                     "nine": "ninth", "twelve": "twelfth"}
FORMS = ("m", "f", "o")  # masculine/default, feminine, oblique (Gujarati: neuter)


def ordinal(n: int, language: str, form: str = "m", suffix: str | None = None) -> str:
    """n-th in words. form: 'm', 'f' or 'o' (Indo-Aryan gender/oblique); suffix: the Dravidian
    suffix kind typed ('vathu', 'aam', 'va', 'ne', 'neya'), default the language's first."""
    _check(language, "ordinal")
    if n <= 0:
        raise Unsupported(language, "ordinal", "only positive ordinals")
    idx = FORMS.index(form)
    if language == "en":
        words = cardinal(n, "en").split()
        last = words[-1]
        last = _EN_ORDINAL_WORDS.get(last) or (last[:-1] + "ieth" if last.endswith("y") else last + "th")
        return " ".join(words[:-1] + [last])
    if language in data.ORDINAL_IRREGULAR:
        if n in data.ORDINAL_IRREGULAR[language]:
            return data.ORDINAL_IRREGULAR[language][n][idx]
        words = cardinal(n, language)
        # Marathi past ten and Punjabi 11-18 (-ਾਂ) change the stem (एकोणिसावा, ਬਾਰ੍ਹਵਾਂ): not modelled.
        if (language == "mr" and not words.endswith("\u093e")) or (language == "pa" and words.endswith("\u0a3e\u0a02")):
            raise Unsupported(language, "ordinal", f"the ordinal of {words!r} changes the stem")
        return words + data.ORDINAL_SUFFIX[language][idx]
    if language in data.ORDINAL_SANSKRIT:
        table, tama = data.ORDINAL_SANSKRIT[language]
        return table[n - 1] if n <= len(table) else cardinal(n, language) + tama
    if language in data.ORDINAL_DRAVIDIAN:
        finals, suffixes = data.ORDINAL_DRAVIDIAN[language]
        ending = suffixes[suffix] if suffix in suffixes else next(iter(suffixes.values()))
        words = cardinal(n, language)
        if words[-1] in finals:
            return words[:-1] + ending
        if language in ("te", "kn") and _ends_in_consonant(words):  # వంద -> వందవ
            return words + ending
        raise Unsupported(language, "ordinal", f"no rule for the ending of {words!r}")
    raise Unsupported(language, "ordinal", "no verified ordinal forms")


# Consonant letters (with their inherent vowel when written alone) of Telugu and Kannada.
_CONSONANTS = {"te": (0x0C15, 0x0C39), "kn": (0x0C95, 0x0CB9)}


def _ends_in_consonant(words: str) -> bool:
    code = ord(words[-1])
    return any(lo <= code <= hi for lo, hi in _CONSONANTS.values())
