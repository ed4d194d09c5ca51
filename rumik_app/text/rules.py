"""The patterns of `rumik_app.text.normalize` and how each is read aloud (library module).

Each entry of `PATTERNS` is (category, compiled regex); `HANDLERS[category](match, language,
text)` returns the words for one match, raises `NotThis` when the match is not that pattern
after all (a 4-digit "phone", month 13; later passes see it again), or
`rumik_app.text.numwords.Unsupported` when the language has no verified words for it (the span is
then left as typed). Words come from `rumik_app.text.numwords` and `rumik_app.text.data`.
"""

from __future__ import annotations

import re
from decimal import Decimal

from rumik_app.text import data
from rumik_app.text import numwords as nw
from rumik_app.text.numwords import Unsupported

_SENTENCE_FOLLOWS = re.compile(r"\s*(?:$|\n|[A-Z])")
ANY_WORK = re.compile(r"\d|[A-Za-z]\.|[\u0900-\u0D7F]\.|ডঃ")

NUM = r"\d{1,3}(?:,\d{2,3})+|\d+"  # grouped (validated later) or plain
DEC = rf"(?:{NUM})(?:\.\d+)?"
_NOT_BEFORE = r"(?<![\d.,/:])"
_NOT_AFTER = r"(?![\d]|[.,/:]\d)"
_LETTER_OR_MARK = r"\w\u0900-\u0DFF\u0600-\u06FF\u1C50-\u1C7F\uABC0-\uABFF"
_MONTHS_EN = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
              "november", "december")
_MONTH_RE = r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sept?(?:ember)?|" \
            r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)"
# "a.m." takes its own final dot; in "am." the dot ends the sentence and stays.
_AMPM_BODY = r"[AaPp](?:\.\s?[Mm]\.?|\s?[Mm])(?![A-Za-z])"
_AMPM = rf"(?P<ampm>{_AMPM_BODY})"
_SCALE_VALUES = {"lakh": 10**5, "lakhs": 10**5, "l": 10**5, "crore": 10**7, "crores": 10**7, "cr": 10**7,
                 "thousand": 10**3, "k": 10**3, "million": 10**6, "mn": 10**6, "billion": 10**9, "bn": 10**9}
_WESTERN_SCALES = {"million", "mn", "billion", "bn"}
_YEAR_CUE_WORDS = ("in", "since", "year", "from", "till", "until", "by", "of", "before", "after", "circa", "c.")
_YEAR_CUES = re.compile(r"\b(?:" + "|".join(map(re.escape, _YEAR_CUE_WORDS)) + r")$", re.I)
_LONGEST_CUE = max(map(len, _YEAR_CUE_WORDS))
_ERA_AFTER = re.compile(r"\s*(?:AD|BC|BCE|CE)\b")  # matched at a number's end (`match(text, pos)`)
_ORDINAL_SUFFIXES: dict[str, tuple[str, str | None]] = {  # typed suffix -> (form, Dravidian suffix kind)
    **{s: ("m", None) for s in ("st", "nd", "rd", "th", "ST", "ND", "RD", "TH")},
    **{s: ("m", None) for s in ("ला", "रा", "था", "ठा", "वाँ", "वां", "वा", "લો", "જો", "થો", "ઠ્ઠો", "મો",
                                "ਵਾਂ", "واں", "ম", "য়", "য়", "র্থ", "ৰ্থ", "ষ্ঠ", "তম", "ମ", "ୟ", "ଯ଼", "ର୍ଥ",
                                "ଷ୍ଠ", "ତମ")},
    **{s: ("f", None) for s in ("ली", "री", "थी", "ठी", "वीं", "वी", "લી", "જી", "થી", "ઠ્ઠી", "મી", "ਵੀਂ", "ویں")},
    **{s: ("o", None) for s in ("ले", "रे", "थे", "ठे", "वें", "वे", "લું", "જું", "થું", "ઠ્ઠું", "મું", "ਵੇਂ")},
    **{s: ("m", "vathu") for s in ("வது", "ஆவது")}, **{s: ("m", "aam") for s in ("ம்", "ஆம்")},
    "వ": ("m", "va"), "ನೇ": ("m", "ne"), "ನೆಯ": ("m", "neya"), "ാം": ("m", "aam"), "ആം": ("m", "aam"),
}
_ORDINAL_ALT = "|".join(re.escape(s) for s in sorted(_ORDINAL_SUFFIXES, key=len, reverse=True))
_UNIT_ALT = "|".join(re.escape(u) for u in sorted(data.UNITS, key=len, reverse=True))
_CURRENCY_ALT = "|".join(re.escape(s) for s in sorted(data.CURRENCY_SIGNS, key=len, reverse=True))
_TRAILING_ALT = "|".join(sorted({w for t in data.TIME.values() for w in t.get("trailing", ())}))
_RANGE_TAIL = rf"(?:\s?[-–]\s?(?P<hi>{DEC}))?"

_UNGATED: list[tuple[str, re.Pattern]] = [
    ("abbreviation", re.compile(r"(?<![A-Za-z])(?P<abbr>" + "|".join(re.escape(a) for a in data.ABBREVIATIONS_LATIN)
                                + r")(?=\s|$)|(?<![A-Za-z])(?P<no>No\.)(?=\s?\d)|(?<![A-Za-z])(?P<etc>etc\.)|(?<!["
                                + _LETTER_OR_MARK + r"])(?P<native>" + "|".join(
                                    re.escape(a) for a in data.ABBREVIATIONS_NATIVE) + r")")),
    ("phone", re.compile(r"(?<![\w+])(?P<plus>\+)\d{1,3}(?:[\s-]?\d{2,5}){2,4}(?!\d)"
                         r"|(?<![\d,.+])(?:0|[6-9])\d{1,10}(?:[\s-]\d{2,5}){0,3}(?![\d,.]\d|\d)")),
    ("date", re.compile(_NOT_BEFORE + r"(?:(?P<iy>\d{4})-(?P<im>\d{1,2})-(?P<id>\d{1,2})"
                        r"|(?P<d>\d{1,2})(?P<sep>[/.-])(?P<m>\d{1,2})(?P=sep)(?P<y>\d{4}|\d{2}))" + _NOT_AFTER
                        + r"|(?<![A-Za-z\d])(?P<td>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<tm>" + _MONTH_RE
                        + r")\.?(?![A-Za-z])(?:,?\s+(?P<ty>\d{4}))?(?!\d)"
                        + r"|(?<![A-Za-z])(?P<mm>" + _MONTH_RE + r")\.?\s+(?P<md>\d{1,2})(?:st|nd|rd|th)?(?!\d)"
                        r"(?:,?\s+(?P<my>\d{4}))?(?!\d)", re.I)),
    ("time", re.compile(r"(?<![\d:.])(?P<h>\d{1,2}):(?P<min>\d{2})(?::(?P<s>\d{2}))?(?![\d:])(?:\s*" + _AMPM + r")?"
                        + (rf"(?:\s*(?P<trail>{_TRAILING_ALT}))?" if _TRAILING_ALT else "")
                        + r"|(?<![\d:.,])(?P<h2>\d{1,2})\s*(?P<ampm2>" + _AMPM_BODY + ")")),
    ("currency", re.compile(r"(?<![A-Za-z])(?P<sign>" + _CURRENCY_ALT + r")\s?(?P<neg>-)?(?P<lo>" + DEC + r")"
                            + _RANGE_TAIL
                            + r"(?:\s?(?P<scale>lakhs?|crores?|thousand|million|billion|mn|bn|[kK]|L|[cC]r)"
                            r"(?![A-Za-z]))?(?P<dash>\s?/-)?")),
    ("percent", re.compile(r"(?P<neg>(?<![\w\d])-)?" + _NOT_BEFORE + r"(?P<lo>" + DEC + r")" + _RANGE_TAIL
                           + r"\s?%")),
    ("unit", re.compile(r"(?P<neg>(?<![\w\d])[-−])?" + _NOT_BEFORE + r"(?P<lo>" + DEC + r")" + _RANGE_TAIL
                        + r"\s?(?P<unit>" + _UNIT_ALT + r")(?![A-Za-z0-9])")),
    ("ordinal", re.compile(_NOT_BEFORE + r"(?P<n>\d+)-?(?P<suf>" + _ORDINAL_ALT + r")(?![" + _LETTER_OR_MARK
                           + r"])")),
    ("range", re.compile(_NOT_BEFORE + r"(?P<lo>" + DEC + r")\s?[-–]\s?(?P<hi>" + DEC + r")" + _NOT_AFTER)),
    ("cardinal", re.compile(r"(?P<neg>(?:^|(?<=[\s(\[{=]))[-−])?" + _NOT_BEFORE + r"(?P<num>" + NUM
                            + r")(?:\.(?P<frac>\d+))?" + _NOT_AFTER)),
    ("digits", re.compile(r"\d+")),  # what is left: 24/7, 3:1, 1,2,3, v1.2.3 -> each run as a number
]
# What each pattern can start with besides a digit. The lookahead gate lets Python's `re`
# reject most positions at once (3x faster on number-dense text; benchmarks/normalize_speed.py).
_STARTS = {
    "abbreviation": "".join({a[0] for a in [*data.ABBREVIATIONS_LATIN, *data.ABBREVIATIONS_NATIVE, "No.", "etc."]}),
    "phone": "+", "date": "JFMASONDjfmasond", "time": "", "currency": "".join({s[0] for s in data.CURRENCY_SIGNS}),
    "percent": "-", "unit": "-−", "ordinal": "", "range": "", "cardinal": "-−", "digits": "",
}
PATTERNS: list[tuple[str, re.Pattern]] = [
    (category, re.compile(rf"(?=[{re.escape(''.join(sorted(_STARTS[category])))}\d])(?:{p.pattern})", p.flags))
    for category, p in _UNGATED
]
# Passes that cannot match without one of these characters are skipped.
NEEDS = {"currency": tuple(data.CURRENCY_SIGNS), "percent": ("%",), "time": (":", "m", "M")}


# ---------------------------------------------------------------------------------------
# Number pieces


def _amount(text: str) -> tuple[str, str, bool]:
    """'2,50,000.50' -> ('250000', '50', western?); Unsupported-free; ValueError on bad grouping."""
    whole, _, frac = text.partition(".")
    western = False
    if "," in whole:
        groups = whole.split(",")
        indian = len(groups[0]) <= 2 and all(len(g) == 2 for g in groups[1:-1]) and len(groups[-1]) == 3
        western = len(groups[0]) <= 3 and all(len(g) == 3 for g in groups[1:])
        if not (indian or western):
            raise ValueError(f"{text!r} is neither Indian nor Western grouping")
        western = western and not indian
        whole = "".join(groups)
    return whole, frac, western


def _number_words(text: str, language: str, year_ok: bool = False) -> str:
    """Words for one typed number (grouped, decimal or plain; no sign)."""
    whole, frac, western = _amount(text)
    if frac:
        return nw.decimal(whole, frac, language)
    if len(whole) > 1 and whole.startswith("0"):
        return nw.digits(whole, language)
    n = int(whole)
    if "," not in text and len(whole) >= 10:
        return nw.digits(whole, language)
    if year_ok and "," not in text and len(whole) == 4:
        return nw.year(n, language)
    return nw.cardinal(n, language, western=western)


def _signed(neg: str | None, words: str, language: str) -> str:
    if not neg:
        return words
    minus = data.MINUS.get(language)
    if minus is None:
        raise Unsupported(language, "negative", "no verified word for minus")
    return f"{minus} {words}"


def _range(lo: str, hi: str | None, language: str, year_ok: bool = False) -> str:
    a = _number_words(lo, language, year_ok)
    if hi is None:
        return a
    template = data.RANGE.get(language)
    if template is None:
        raise Unsupported(language, "range", "no verified range construction")
    return template.format(a=a, b=_number_words(hi, language, year_ok))


def _plural_value(lo: str, hi: str | None) -> Decimal:
    whole, frac, _ = _amount(hi or lo)
    return Decimal(f"{whole}.{frac}" if frac else whole)


# ---------------------------------------------------------------------------------------
# Handlers: (match, language, text) -> replacement; raise Unsupported to leave the span


def _abbreviation(m: re.Match, language: str, text: str) -> str:
    if m.group("abbr"):
        return data.ABBREVIATIONS_LATIN[m.group("abbr")]
    if m.group("no"):
        return "number"
    if m.group("etc"):
        return "etcetera." if _SENTENCE_FOLLOWS.match(text, m.end()) else "etcetera"
    return data.ABBREVIATIONS_NATIVE[m.group("native")]


def _phone(m: re.Match, language: str, text: str) -> str:
    typed = m.group(0)
    plus = typed.startswith("+")
    groups = [g for g in re.split(r"[\s-]+", typed.lstrip("+")) if g]
    total = sum(len(g) for g in groups)
    if not plus and not (total == 10 and typed[0] != "0" or total == 11 and typed[0] == "0"):
        raise NotThis
    if plus and not 10 <= total <= 13:
        raise NotThis
    if len(groups) == 1 and not plus:  # unbroken: 98765 43210, 0 98765 43210
        g = groups[0]
        groups = [g[:-10], g[-10:-5], g[-5:]] if len(g) > 10 else [g[:5], g[5:]]
        groups = [x for x in groups if x]
    elif plus and len(groups) == 1:
        g = groups[0]
        groups = [g[:-10], g[-10:-5], g[-5:]]
    comma = "، " if language in ("ur", "ks", "sd") else ", "
    spoken = comma.join(nw.digits(g, language) for g in groups)
    if plus and data.PLUS.get(language):
        spoken = f"{data.PLUS[language]} {spoken}"
    return spoken


def _date(m: re.Match, language: str, text: str) -> str:
    g = m.groupdict()
    month_first = False
    if g["iy"]:
        day, month, year = int(g["id"]), int(g["im"]), g["iy"]
    elif g["d"]:
        day, month, year = int(g["d"]), int(g["m"]), g["y"]
        if month > 12 and day <= 12:  # 08/15/2026: US order
            day, month = month, day
    elif g["td"]:
        day, month, year = int(g["td"]), _month_index(g["tm"]), g["ty"]
    else:
        day, month, year, month_first = int(g["md"]), _month_index(g["mm"]), g["my"], True
    if not (1 <= day <= 31 and 1 <= month <= 12):
        raise NotThis
    names = data.month_names(language)
    if names is None:
        raise Unsupported(language, "date", "no CLDR month names in this script")
    day_words = nw.ordinal(day, "en") if language == "en" else nw.cardinal(day, language)
    parts = [names[month - 1], day_words] if month_first and language == "en" else [day_words, names[month - 1]]
    if year:
        parts.append(nw.year(int(year), language) if len(year) == 4 else nw.cardinal(int(year), language))
    return " ".join(parts)


def _month_index(name: str) -> int:
    return [m[:3] for m in _MONTHS_EN].index(name[:3].lower()) + 1


def _time(m: re.Match, language: str, text: str) -> str:
    hour = int(m.group("h") or m.group("h2"))
    minute = int(m.group("min") or 0)
    second = int(m.group("s") or 0)
    ampm = (m.group("ampm") or m.group("ampm2") or "").lower().replace(".", "").replace(" ", "")
    if hour > 23 or minute > 59 or second > 59 or (ampm and not 1 <= hour <= 12):
        raise NotThis
    h24 = hour % 12 + (12 if ampm == "pm" else 0) if ampm else hour
    has_period = bool(ampm) or hour == 0 or hour > 12
    h12 = (h24 % 12) or 12 if has_period else hour
    if language == "en":
        words = _english_time(h12, minute, has_period, h24)
    else:
        words = _native_time(language, h12, minute, h24 if has_period else None)
    if second:
        pattern = data.unit_pattern(language, data.SECOND_UNIT, Decimal(second))
        if pattern is None:
            raise Unsupported(language, "time", "no CLDR word for seconds")
        words += " " + pattern.format(nw.cardinal(second, language)).strip()
    if m.group(0).endswith(".") and _SENTENCE_FOLLOWS.match(text, m.end()):
        words += "."  # "at 5 p.m." ended the sentence
    return words


def _english_time(h12: int, minute: int, has_period: bool, h24: int) -> str:
    hour = nw.cardinal(h12, "en")
    if minute == 0:
        words = hour if has_period else f"{hour} o'clock"
    elif minute < 10:
        words = f"{hour} oh {nw.cardinal(minute, 'en')}"
    else:
        words = f"{hour} {nw.cardinal(minute, 'en')}"
    return f"{words} {data.EN_AM_PM[h24 >= 12]}" if has_period else words


def _period_index(h24: int) -> int:
    """0 night, 1 morning, 2 afternoon, 3 evening."""
    return 1 if 4 <= h24 <= 11 else 2 if 12 <= h24 <= 15 else 3 if 16 <= h24 <= 19 else 0


def _native_time(language: str, h12: int, minute: int, h24: int | None) -> str:
    table = data.TIME.get(language)
    if table is None:
        raise Unsupported(language, "time", "no verified clock-time phrasing")
    hour = nw.cardinal(h12, language)
    if h12 == 1 and "one" in table:
        hour = table["one"]
    if h12 == 1 and "one_h" in table:
        words = table["one_hm"].format(m=nw.cardinal(minute, language)) if minute else table["one_h"]
    elif minute:
        words = table["hm"].format(h=hour, m=nw.cardinal(minute, language))
    else:
        words = table["h"].format(h=hour)
    return f"{table['periods'][_period_index(h24)]} {words}" if h24 is not None else words


def _currency(m: re.Match, language: str, text: str) -> str:
    code = data.CURRENCY_SIGNS[m.group("sign")]
    lo, hi, scale = m.group("lo"), m.group("hi"), (m.group("scale") or "").lower()
    if scale:
        lo, hi = _scaled(lo, scale, language), _scaled(hi, scale, language) if hi else None
    value = _plural_value(lo, hi)
    major = data.currency_word(language, code, plural=value != 1)
    if major is None:
        raise Unsupported(language, "currency", f"no CLDR name for {code}")
    whole, frac, _ = _amount(lo)
    if frac and hi is None and len(frac) <= 2 and (code == "INR" or language == "en"):
        return _signed(m.group("neg"), _with_minor(code, whole, frac.ljust(2, "0"), major, language), language)
    return _signed(m.group("neg"), f"{_before_noun(_range(lo, hi, language), language)} {major}", language)


def _scaled(typed: str, scale: str, language: str) -> str:
    """'2.5', 'crore' -> '25000000' when whole; else Unsupported (the scale word stays typed)."""
    whole, frac, western = _amount(typed)
    value = Decimal(f"{whole}.{frac}" if frac else whole) * _SCALE_VALUES[scale]
    if value != value.to_integral_value():
        raise Unsupported(language, "currency", f"{typed} {scale} is not a whole amount")
    n = int(value)
    if scale in _WESTERN_SCALES or western:
        return f"{n:,}"  # Western grouping -> read in millions in English
    return str(n)


def _with_minor(code: str, whole: str, cents: str, major: str, language: str) -> str:
    if code == "INR":
        minor = data.PAISA.get(language)
        if minor is None:
            raise Unsupported(language, "paise", "no verified word for paise")
    else:
        minor = data.MINOR_EN[code]
    parts = []
    if int(whole or 0):
        parts.append(f"{_before_noun(_number_words(whole, language), language)} {major}")
    if int(cents):
        parts.append(f"{nw.cardinal(int(cents), language)} {minor[int(cents) != 1]}")
    if not parts:
        parts.append(f"{nw.cardinal(0, language)} {major}")
    return (" and " if language == "en" else " ").join(parts)


def _percent(m: re.Match, language: str, text: str) -> str:
    return _measure(m, language, data.PERCENT_UNIT, "percent")


def _unit(m: re.Match, language: str, text: str) -> str:
    return _measure(m, language, data.UNITS[m.group("unit")], "unit")


def _measure(m: re.Match, language: str, unit_key: str, category: str) -> str:
    pattern = data.unit_pattern(language, unit_key, _plural_value(m.group("lo"), m.group("hi")))
    if pattern is None and unit_key == data.PERCENT_UNIT:
        pattern = data.PERCENT_FALLBACK.get(language)
    if pattern is None:
        raise Unsupported(language, category, f"no CLDR word for {unit_key}")
    words = _signed(m.group("neg"), _range(m.group("lo"), m.group("hi"), language), language)
    return pattern.format(_before_noun(words, language)).strip()


def _before_noun(words: str, language: str) -> str:
    """The attributive form of a number before a noun (Telugu ఐదు వందలు -> ఐదు వందల రూపాయలు)."""
    forms = data.ATTRIBUTIVE.get(language)
    if not forms:
        return words
    head, _, last = words.rpartition(" ")
    return f"{head} {forms.get(last, last)}".strip()


def _ordinal(m: re.Match, language: str, text: str) -> str:
    form, kind = _ORDINAL_SUFFIXES[m.group("suf")]
    return nw.ordinal(int(m.group("n")), language, form, kind)


def _range_handler(m: re.Match, language: str, text: str) -> str:
    lo, hi = m.group("lo"), m.group("hi")
    years = len(lo) == 4 and len(hi) in (2, 4) and lo.isdigit() and hi.isdigit()
    return _range(lo, hi, language, year_ok=years)


def _cardinal(m: re.Match, language: str, text: str) -> str:
    typed, frac = m.group("num"), m.group("frac")
    try:
        _amount(typed)
    except ValueError:  # "1,2,3": a list, not one number
        return re.sub(r"\d+", lambda d: nw.cardinal(int(d.group(0)), language), typed)
    year_ok = not frac and (language != "en" or _after_year_cue(text, m.start())
                            or _ERA_AFTER.match(text, m.end()) is not None)
    words = _number_words(typed + (f".{frac}" if frac else ""), language, year_ok=year_ok)
    return _spaced(_signed(m.group("neg"), words, language), m, text)


def _after_year_cue(text: str, start: int) -> bool:
    """Whether a year cue ("in", "since", ... and whitespace) ends at `start`. It looks back over
    that whitespace and one cue's length only, never the whole text before the number, so a pass
    stays linear in its text however many numbers it holds."""
    end = start
    while end > 0 and text[end - 1].isspace():  # runs before different numbers never overlap
        end -= 1
    if end == start:
        return False
    window = text[max(0, end - _LONGEST_CUE - 1):end]  # one character more: the cue's word boundary
    return _YEAR_CUES.search(window) is not None


def _spaced(words: str, m: re.Match, text: str) -> str:
    """Words with a space towards Latin letters the digits touched ("MP3" -> "MP three");
    Indic suffixes stay attached ("৩টা" -> "তিনটা")."""
    before, after = text[m.start() - 1:m.start()], text[m.end():m.end() + 1]
    if before and before.isascii() and before.isalpha():
        words = " " + words
    if after and after.isascii() and after.isalpha():
        words += " "
    return words


def _digits(m: re.Match, language: str, text: str) -> str:
    run = m.group(0)
    words = nw.digits(run, language) if len(run) > 1 and run.startswith("0") else nw.cardinal(int(run), language)
    return _spaced(words, m, text)


class NotThis(Exception):
    """The match is not this pattern after all (a 4-digit 'phone', month 13): leave it for later passes."""


HANDLERS = {"abbreviation": _abbreviation, "phone": _phone, "date": _date, "time": _time, "currency": _currency,
             "percent": _percent, "unit": _unit, "ordinal": _ordinal, "range": _range_handler, "cardinal": _cardinal,
             "digits": _digits}


