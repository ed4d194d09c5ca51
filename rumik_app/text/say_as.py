"""SSML `<say-as>`: a checked interpret-as, format and content, and its words.

    from rumik_app.text.say_as import check_say_as, render_say_as
    say = check_say_as("date", None, "15/08/2026")                  # PromptError(field="text") if wrong
    render_say_as(say.kind, say.fmt, say.content, "hi")             # 'पंद्रह अगस्त दो हज़ार छब्बीस'
    render_say_as("currency", "USD", "4.99", "en")                  # 'four dollars and ninety nine cents'

The kinds: cardinal, ordinal, digits, characters = spell-out, date (format DATE_FORMATS),
time, telephone, currency (format CURRENCY_FORMATS). The words are the normaliser's own
(`rumik_app.text.rules`, `rumik_app.text.numwords`); native digits read as ASCII; where the
language has no verified words the content stays as typed. `rumik_app.text.ssml` checks a
<say-as> while it parses and renders it once the segment's language is known.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from decimal import InvalidOperation

from rumik_app.errors import PromptError
from rumik_app.text import data
from rumik_app.text import numwords as nw
from rumik_app.text.numwords import Unsupported
from rumik_app.text.rules import HANDLERS, PATTERNS, NotThis

MAX_SAY_AS_CHARS = 200
DATE_FORMATS = ("dmy", "mdy", "ymd", "dm", "md")
CURRENCY_FORMATS = ("INR", "USD", "EUR", "GBP")
_NUMBER = re.compile(r"(?P<neg>[-−])?(?P<num>[0-9]{1,3}(?:,[0-9]{2,3})+|[0-9]+)(?:\.(?P<frac>[0-9]+))?")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_PATTERN = dict(PATTERNS)
_EXAMPLES = {
    "cardinal": "a number such as 2,50,000, 1,000,000 or -3.5", "ordinal": "a number such as 5 or 5th",
    "digits": "digits such as 2026 or 080-2345", "characters": "letters or digits", "spell-out": "letters or digits",
    "date": f"a date such as 15/08/2026, 2026-08-15 or 15 Aug 2026, or numbers in the format's order "
            f"({', '.join(DATE_FORMATS)}; 4-digit years)",
    "time": "a time such as 10:30, 10:30 pm, 22:15 or 7 pm", "telephone": "a number such as +91 98765 43210",
    "currency": f"an amount such as ₹500, $4.99 or Rs. 2,50,000 (format {'/'.join(CURRENCY_FORMATS)} for 4.99)",
}


@dataclass(frozen=True)
class SayAs:
    """One checked <say-as>: its interpret-as, format and content (whitespace collapsed)."""

    kind: str
    fmt: str | None
    content: str


def _error(message: str) -> PromptError:
    return PromptError(f"SSML: {message}", field="text")


def check_say_as(kind: str | None, fmt: str | None, text: str | None) -> SayAs:
    """A <say-as interpret-as=kind format=fmt>text</say-as>, or PromptError(field="text") naming the fix."""
    if kind not in _RENDERERS:
        raise _error(f'<say-as interpret-as="{kind or ""}">: use one of {", ".join(_RENDERERS)}.')
    allowed = {"date": DATE_FORMATS, "currency": CURRENCY_FORMATS}.get(kind, ())
    if fmt is not None and fmt not in allowed:
        fix = f"use one of {', '.join(allowed)}" if allowed else "format is only for date and currency"
        raise _error(f'<say-as interpret-as="{kind}" format="{fmt}">: {fix}.')
    content = " ".join((text or "").split())
    if not content or len(content) > MAX_SAY_AS_CHARS or "<" in content or ">" in content:
        raise _error(f'<say-as interpret-as="{kind}"> needs 1 to {MAX_SAY_AS_CHARS} characters of text, no < or >.')
    return SayAs(kind, fmt, content)


def render_say_as(kind: str, fmt: str | None, content: str, language: str) -> str:
    """The words for one say-as (native digits read as ASCII); as typed where `language` has no words.
    PromptError(field="text") when the content is not what `kind` reads."""
    text = "".join(str(unicodedata.decimal(ch)) if ch.isdecimal() else ch for ch in content)
    try:
        return _RENDERERS[kind](text, fmt, language)
    except Unsupported:
        return content


def _bad(kind: str, text: str) -> PromptError:
    return _error(f'<say-as interpret-as="{kind}"> needs {_EXAMPLES[kind]}; got {text!r}.')


def _rule(category: str, kind: str, text: str, language: str) -> str:
    """The normaliser's own reading of `text` as one whole `category` pattern (rumik_app.text.rules)."""
    m = _PATTERN[category].fullmatch(text)
    if m is None:
        raise _bad(kind, text)
    try:
        return HANDLERS[category](m, language, text)
    except Unsupported:
        raise
    except (NotThis, ValueError, InvalidOperation):  # month 13, "1,2,3" grouping
        raise _bad(kind, text) from None


def _cardinal(text: str, fmt: str | None, language: str) -> str:
    """A strict cardinal (1947 is a number, not a year), Indian or Western grouping, decimals, minus."""
    m = _NUMBER.fullmatch(text)
    groups = m["num"].split(",") if m else []
    indian = len(groups) > 1 and all(len(g) == 2 for g in groups[1:-1]) and len(groups[-1]) == 3
    western = len(groups) > 1 and all(len(g) == 3 for g in groups[1:]) and not indian
    if m is None or (len(groups) > 1 and not (indian or western)):
        raise _bad("cardinal", text)
    whole = "".join(groups)
    words = nw.decimal(whole, m["frac"], language) if m["frac"] else nw.cardinal(int(whole), language, western)
    if m["neg"] and language not in data.MINUS:
        raise Unsupported(language, "negative", "no verified word for minus")
    return f"{data.MINUS[language]} {words}" if m["neg"] else words


def _digits(text: str, fmt: str | None, language: str) -> str:
    if not re.fullmatch(r"[0-9][0-9 ./()+-]*", text):
        raise _bad("digits", text)
    return " ".join(nw.digits(run, language) for run in re.findall("[0-9]+", text))


def _characters(text: str, fmt: str | None, language: str) -> str:
    """Letters (an akshara: consonants joined by a virama, with their marks) and digits one at a time."""
    units: list[str] = []
    for ch in text:
        after_virama = bool(units) and unicodedata.combining(units[-1].rstrip("\u200c\u200d")[-1]) == 9
        joins = unicodedata.category(ch)[0] == "M" or ch in "\u200c\u200d" or (ch.isalpha() and after_virama)
        if units and joins and not units[-1].isdigit():
            units[-1] += ch
        elif ch.isalnum():  # punctuation and spaces are dropped
            units.append(ch)
    if not units:
        raise _bad("characters", text)
    return " ".join(_letter(unit, language) for unit in units)


def _letter(unit: str, language: str) -> str:
    if not unit.isdigit():
        return unit.upper() if unit.isascii() else unit
    try:
        return nw.digits(unit, language)
    except Unsupported:
        return unit


def _typed_date(text: str, fmt: str) -> str:
    """Numbers in `fmt` order -> '15 Aug 2026' or, month first (mdy, md), 'Aug 15, 2026'."""
    parts = re.split(r"[\s/.-]+", text)
    value = dict(zip(fmt, parts, strict=False))
    if len(parts) != len(fmt) or not all(p.isdigit() for p in parts) or not 1 <= int(value["m"]) <= 12 \
            or len(value.get("y", "0000")) != 4:
        raise _bad("date", text)
    day, name, year = int(value["d"]), _MONTHS[int(value["m"]) - 1], value.get("y")
    if fmt in ("mdy", "md"):
        return f"{name} {day}" + (f", {year}" if year else "")
    return f"{day} {name}" + (f" {year}" if year else "")


def _telephone(text: str, fmt: str | None, language: str) -> str:
    """The normaliser's phone reading (digit by digit in the typed groups); other digit groups alike."""
    if not re.fullmatch(r"\+?[0-9][0-9 ()-]*", text):
        raise _bad("telephone", text)
    if m := _PATTERN["phone"].fullmatch(text):
        try:
            return HANDLERS["phone"](m, language, text)
        except NotThis:
            pass
    comma = "، " if language in ("ur", "ks", "sd") else ", "
    spoken = comma.join(nw.digits(run, language) for run in re.findall("[0-9]+", text))
    plus = data.PLUS.get(language) if text.startswith("+") else None
    return f"{plus} {spoken}" if plus else spoken


_RENDERERS: dict[str, Callable[[str, str | None, str], str]] = {
    "characters": _characters, "spell-out": _characters, "cardinal": _cardinal, "digits": _digits,
    "ordinal": lambda text, fmt, lang: (nw.ordinal(int(text), lang) if text.isdigit()
                                        else _rule("ordinal", "ordinal", text, lang)),
    "date": lambda text, fmt, lang: _rule("date", "date", _typed_date(text, fmt) if fmt else text, lang),
    "time": lambda text, fmt, lang: _rule("time", "time", text, lang),
    "telephone": _telephone,
    "currency": lambda text, fmt, lang: _rule("currency", "currency", f"{fmt} {text}" if fmt else text, lang),
}
