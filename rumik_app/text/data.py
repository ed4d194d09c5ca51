"""Word tables for text normalisation (`rumik_app.text.normalize`): the words no library gives us.

Library module, no command line. Three sources, in this order of preference:

1. **Number words** come from AI4Bharat's `indic-numtowords` (see `rumik_app.text.numwords`);
   nothing here spells a number.
2. **CLDR via babel** (pinned in pyproject.toml): month names, unit names (km, kg, °C, ...),
   "percent", "second" and the currency names (rupee, dollar, euro, pound). Accessors below
   return None when CLDR has no usable word for a language (it falls back to a symbol such
   as "km" or to another script), and the number is then left as typed.
3. **Hand tables** (this file): decimal point, minus, plus, range, time-of-day phrasing,
   ordinals, paise and a few abbreviations. Each table only lists languages whose words we
   could check against a published normaliser or a standard reference; a missing entry
   means "leave the pattern as typed" (and `normalize` logs one warning per language and
   category). Confidence notes sit next to the entries where the written form varies.

Forms were checked against: NVIDIA NeMo text processing's Hindi normaliser (दशमलव, बजकर,
बजे, ordinal forms), CLDR (for the words under 2.) and standard grammars of each language
(Tamil -ஆவது/-ஆம், Telugu -వ, Kannada -ನೇ, Malayalam -ആം ordinals; Sanskrit-derived
ordinals प्रथम ... दशम in Bengali, Assamese and Odia).
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal

# ---------------------------------------------------------------------------------------
# CLDR (babel) locales. None: CLDR has no data in the script this project uses
# (CLDR's Manipuri is Bengali script; Meetei Mayek `mni_Mtei` has no month or unit names).
CLDR_LOCALE: dict[str, str | None] = {
    "as": "as", "bn": "bn", "brx": "brx", "doi": "doi", "en": "en_IN", "gu": "gu", "hi": "hi",
    "kn": "kn", "ks": "ks", "kok": "kok", "mai": "mai", "ml": "ml", "mni": None, "mr": "mr",
    "ne": "ne", "or": "or", "pa": "pa", "sa": "sa", "sat": "sat", "sd": "sd", "ta": "ta",
    "te": "te", "ur": "ur",
}

# Typed unit -> CLDR unit key. Matched case-sensitively after a number ("5 km", "37°C").
UNITS: dict[str, str] = {
    "km": "length-kilometer", "m": "length-meter", "cm": "length-centimeter", "mm": "length-millimeter",
    "kg": "mass-kilogram", "g": "mass-gram", "mg": "mass-milligram",
    "l": "volume-liter", "L": "volume-liter", "ml": "volume-milliliter", "mL": "volume-milliliter",
    "°C": "temperature-celsius", "℃": "temperature-celsius", "°F": "temperature-fahrenheit",
    "km/h": "speed-kilometer-per-hour", "kmph": "speed-kilometer-per-hour",
    "GB": "digital-gigabyte", "MB": "digital-megabyte", "TB": "digital-terabyte",
    "hrs": "duration-hour", "hr": "duration-hour", "min": "duration-minute", "mins": "duration-minute",
    "sec": "duration-second", "secs": "duration-second",
}
PERCENT_UNIT = "concentr-percent"
SECOND_UNIT = "duration-second"

# Currency symbols and codes -> ISO 4217 code.
CURRENCY_SIGNS: dict[str, str] = {
    "₹": "INR", "Rs.": "INR", "Rs": "INR", "INR": "INR", "रु.": "INR",
    "$": "USD", "US$": "USD", "USD": "USD", "€": "EUR", "EUR": "EUR", "£": "GBP", "GBP": "GBP",
}
# Which words of CLDR's long currency name to keep: drop the country adjective
# ("Indian rupees" -> "rupees", "यूएस डॉलर" -> "डॉलर", "ब्रिटिश पाउंड स्टर्लिंग" -> "पाउंड स्टर्लिंग").
CURRENCY_NAME_WORDS: dict[str, slice] = {
    "INR": slice(-1, None), "USD": slice(-1, None), "EUR": slice(0, None), "GBP": slice(1, None),
}

# ---------------------------------------------------------------------------------------
# Hand tables. Keys are ISO codes; a missing language leaves the pattern as typed.

# The word read between the whole part and the digits of a decimal ("3.14").
# Formal words where they are standard (दशमलव, দশমিক, ଦଶମିକ, ਦਸ਼ਮਲਵ, புள்ளி, اعشاریہ);
# the loanword "point" where it is what speakers and newsreaders say (mr, gu, kn, te, ml).
POINT: dict[str, str] = {
    "en": "point", "hi": "दशमलव", "ne": "दशमलव", "bn": "দশমিক", "as": "দশমিক", "or": "ଦଶମିକ",
    "pa": "ਦਸ਼ਮਲਵ", "ta": "புள்ளி", "ur": "اعشاریہ", "mr": "पॉइंट", "gu": "પોઇન્ટ",
    "kn": "ಪಾಯಿಂಟ್", "te": "పాయింట్", "ml": "പോയിന്റ്",
}

# Negative numbers and temperatures ("-5", "-3°C"): the loanword "minus" as spoken;
# Urdu uses منفی ("negative"), as its weather reports do.
MINUS: dict[str, str] = {
    "en": "minus", "hi": "माइनस", "mr": "माइनस", "ne": "माइनस", "bn": "মাইনাস", "gu": "માઇનસ",
    "pa": "ਮਾਇਨਸ", "or": "ମାଇନସ୍", "ta": "மைனஸ்", "te": "మైనస్", "kn": "ಮೈನಸ್", "ml": "മൈനസ്",
    "ur": "منفی",
}

# The "+" of an international phone number. Without an entry the "+" is dropped and the
# country code is read digit by digit like the rest.
PLUS: dict[str, str] = {
    "en": "plus", "hi": "प्लस", "mr": "प्लस", "bn": "প্লাস", "gu": "પ્લસ", "pa": "ਪਲੱਸ",
    "or": "ପ୍ଲସ୍", "ta": "பிளஸ்", "te": "ప్లస్", "kn": "ಪ್ಲಸ್", "ml": "പ്ലസ്", "ur": "پلس",
}

# Ranges "10-12": {a} and {b} are the two numbers in words. Tamil, Telugu and Malayalam use
# the from ... until frame (முதல் ... வரை, నుండి ... వరకు, മുതൽ ... വരെ). Odia attaches
# the ablative -ରୁ to the first number. Kannada (-ಇಂದ changes the stem: ಹತ್ತು -> ಹತ್ತರಿಂದ)
# and Assamese (-ৰ পৰা ... -লৈ) need morphology we do not do: left as typed.
RANGE: dict[str, str] = {
    "en": "{a} to {b}", "hi": "{a} से {b}", "ur": "{a} سے {b}", "pa": "{a} ਤੋਂ {b}", "mr": "{a} ते {b}",
    "gu": "{a} થી {b}", "bn": "{a} থেকে {b}", "or": "{a}ରୁ {b}", "ta": "{a} முதல் {b} வரை",
    "te": "{a} నుండి {b} వరకు", "ml": "{a} മുതൽ {b} വരെ",
}

# Minor currency unit of the rupee (one, many).
PAISA: dict[str, tuple[str, str]] = {
    "en": ("paisa", "paise"), "hi": ("पैसा", "पैसे"), "mr": ("पैसा", "पैसे"), "bn": ("পয়সা", "পয়সা"),
    "as": ("পইচা", "পইচা"), "gu": ("પૈસો", "પૈસા"), "pa": ("ਪੈਸਾ", "ਪੈਸੇ"), "or": ("ପଇସା", "ପଇସା"),
    "ta": ("பைசா", "பைசா"), "te": ("పైసా", "పైసలు"), "kn": ("ಪೈಸೆ", "ಪೈಸೆ"), "ml": ("പൈസ", "പൈസ"),
    "ur": ("پیسہ", "پیسے"), "ne": ("पैसा", "पैसा"),
}
# Telugu number words take their attributive form before a noun: ఐదు వందలు but
# ఐదు వందల రూపాయలు, రెండు వేల కిలోమీటర్లు.
ATTRIBUTIVE: dict[str, dict[str, str]] = {"te": {"వందలు": "వందల", "వేలు": "వేల", "లక్షలు": "లక్షల", "కోట్లు": "కోట్ల"}}
# Where CLDR only has the "%" sign.
PERCENT_FALLBACK: dict[str, str] = {"ml": "{0} ശതമാനം"}
# Cents and pence are read only in English; elsewhere "$4.99" is a decimal + "dollar".
MINOR_EN: dict[str, tuple[str, str]] = {"USD": ("cent", "cents"), "EUR": ("cent", "cents"), "GBP": ("penny", "pence")}


# Clock times. `hm`: hours and minutes; `h`: on the hour; `periods`: words for night (0-3 h),
# morning (4-11), afternoon (12-15) and evening (16-19; 20-23 is night again), said before
# the time when the text gives am/pm or a 24-hour time ("सुबह दस बजकर तीस मिनट").
# `one`: the hour word for 1 o'clock where it differs from the cardinal (ஒரு மணி, ഒരു മണി;
# Telugu says ఒంటి గంట: `one_h`, `one_hm`). `trailing`: an o'clock word typed after a time
# ("10:30 बजे"), dropped because the phrasing already says it.
# Assamese is left out (unsure of the standard written form).
TIME: dict[str, dict] = {
    "hi": {"hm": "{h} बजकर {m} मिनट", "h": "{h} बजे", "periods": ("रात", "सुबह", "दोपहर", "शाम"),
           "trailing": ("बजे",)},
    "ur": {"hm": "{h} بج کر {m} منٹ", "h": "{h} بجے", "periods": ("رات", "صبح", "دوپہر", "شام"),
           "trailing": ("بجے",)},
    "pa": {"hm": "{h} ਵੱਜ ਕੇ {m} ਮਿੰਟ", "h": "{h} ਵਜੇ", "periods": ("ਰਾਤ", "ਸਵੇਰੇ", "ਦੁਪਹਿਰ", "ਸ਼ਾਮ"),
           "trailing": ("ਵਜੇ",)},
    "mr": {"hm": "{h} वाजून {m} मिनिटे", "h": "{h} वाजता",
           "periods": ("रात्री", "सकाळी", "दुपारी", "संध्याकाळी"), "trailing": ("वाजता",)},
    "gu": {"hm": "{h} વાગીને {m} મિનિટ", "h": "{h} વાગ્યે", "periods": ("રાત્રે", "સવારે", "બપોરે", "સાંજે"),
           "trailing": ("વાગ્યે",)},
    "bn": {"hm": "{h}টা বেজে {m} মিনিট", "h": "{h}টা", "periods": ("রাত", "সকাল", "দুপুর", "সন্ধ্যা")},
    "or": {"hm": "{h}ଟା {m} ମିନିଟ୍", "h": "{h}ଟା", "periods": ("ରାତି", "ସକାଳ", "ଦିପହର", "ସନ୍ଧ୍ୟା")},
    "ta": {"hm": "{h} மணி {m} நிமிடம்", "h": "{h} மணி", "periods": ("இரவு", "காலை", "மதியம்", "மாலை"),
           "one": "ஒரு"},
    "te": {"hm": "{h} గంటల {m} నిమిషాలు", "h": "{h} గంటలు",
           "periods": ("రాత్రి", "ఉదయం", "మధ్యాహ్నం", "సాయంత్రం"),
           "one_hm": "ఒంటి గంట {m} నిమిషాలు", "one_h": "ఒంటి గంట"},
    "kn": {"hm": "{h} ಗಂಟೆ {m} ನಿಮಿಷ", "h": "{h} ಗಂಟೆ", "periods": ("ರಾತ್ರಿ", "ಬೆಳಿಗ್ಗೆ", "ಮಧ್ಯಾಹ್ನ", "ಸಂಜೆ")},
    "ml": {"hm": "{h} മണി {m} മിനിറ്റ്", "h": "{h} മണി",
           "periods": ("രാത്രി", "രാവിലെ", "ഉച്ചയ്ക്ക്", "വൈകുന്നേരം"), "one": "ഒരു"},
}


# Ordinals: (masculine/default, feminine, oblique or neuter) forms of the irregular ones;
# regular ones take the suffix in ORDINAL_SUFFIX. Hindi, Urdu, Punjabi, Gujarati: cardinal +
# suffix (पाँचवाँ, پانچواں, ਪੰਜਵਾਂ, પાંચમો). Marathi beyond ten changes the stem in ways we
# do not model (एकोणिसावा), so only 1-10 and cardinals ending in -ा (अकरावा) are read.
ORDINAL_IRREGULAR: dict[str, dict[int, tuple[str, str, str]]] = {
    "hi": {1: ("पहला", "पहली", "पहले"), 2: ("दूसरा", "दूसरी", "दूसरे"), 3: ("तीसरा", "तीसरी", "तीसरे"),
           4: ("चौथा", "चौथी", "चौथे"), 6: ("छठा", "छठी", "छठे")},
    "ur": {1: ("پہلا", "پہلی", "پہلے"), 2: ("دوسرا", "دوسری", "دوسرے"), 3: ("تیسرا", "تیسری", "تیسرے"),
           4: ("چوتھا", "چوتھی", "چوتھے"), 6: ("چھٹا", "چھٹی", "چھٹے")},
    "pa": {1: ("ਪਹਿਲਾ", "ਪਹਿਲੀ", "ਪਹਿਲੇ"), 2: ("ਦੂਜਾ", "ਦੂਜੀ", "ਦੂਜੇ"), 3: ("ਤੀਜਾ", "ਤੀਜੀ", "ਤੀਜੇ"),
           4: ("ਚੌਥਾ", "ਚੌਥੀ", "ਚੌਥੇ")},
    "gu": {1: ("પહેલો", "પહેલી", "પહેલું"), 2: ("બીજો", "બીજી", "બીજું"), 3: ("ત્રીજો", "ત્રીજી", "ત્રીજું"),
           4: ("ચોથો", "ચોથી", "ચોથું"), 6: ("છઠ્ઠો", "છઠ્ઠી", "છઠ્ઠું")},
    "mr": {1: ("पहिला", "पहिली", "पहिले"), 2: ("दुसरा", "दुसरी", "दुसरे"), 3: ("तिसरा", "तिसरी", "तिसरे"),
           4: ("चौथा", "चौथी", "चौथे"), 5: ("पाचवा", "पाचवी", "पाचवे"), 6: ("सहावा", "सहावी", "सहावे"),
           7: ("सातवा", "सातवी", "सातवे"), 8: ("आठवा", "आठवी", "आठवे"), 9: ("नववा", "नववी", "नववे"),
           10: ("दहावा", "दहावी", "दहावे")},
}
ORDINAL_SUFFIX: dict[str, tuple[str, str, str]] = {
    "hi": ("वाँ", "वीं", "वें"), "ur": ("واں", "ویں", "ویں"), "pa": ("ਵਾਂ", "ਵੀਂ", "ਵੇਂ"),
    "gu": ("મો", "મી", "મું"), "mr": ("वा", "वी", "वे"),
}
# Bengali, Assamese, Odia: Sanskrit ordinals 1-10 (প্রথম ... দশম), then cardinal + -তম/-ତମ
# (পঁচিশতম), as in "৫০তম বার্ষিকী".
ORDINAL_SANSKRIT: dict[str, tuple[tuple[str, ...], str]] = {
    "bn": (("প্রথম", "দ্বিতীয়", "তৃতীয়", "চতুর্থ", "পঞ্চম", "ষষ্ঠ", "সপ্তম", "অষ্টম", "নবম", "দশম"), "তম"),
    "as": (("প্ৰথম", "দ্বিতীয়", "তৃতীয়", "চতুৰ্থ", "পঞ্চম", "ষষ্ঠ", "সপ্তম", "অষ্টম", "নৱম", "দশম"), "তম"),
    "or": (("ପ୍ରଥମ", "ଦ୍ୱିତୀୟ", "ତୃତୀୟ", "ଚତୁର୍ଥ", "ପଞ୍ଚମ", "ଷଷ୍ଠ", "ସପ୍ତମ", "ଅଷ୍ଟମ", "ନବମ", "ଦଶମ"), "ତମ"),
}
# Dravidian ordinals are the cardinal's stem + a suffix: the final -u/-i vowel sign (or the
# Malayalam samvruthokaram virama) gives way to the suffix. (stem-final marks, suffix per form)
ORDINAL_DRAVIDIAN: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "ta": (("\u0bc1", "\u0bcd"), {"vathu": "ாவது", "aam": "ாம்"}),   # பத்து -> பத்தாவது, பத்தாம்
    "te": (("\u0c41", "\u0c3f"), {"va": "వ"}),                        # ఐదు -> ఐదవ
    "kn": (("\u0cc1",), {"ne": "ನೇ", "neya": "ನೆಯ"}),                 # ಹತ್ತು -> ಹತ್ತನೇ
    "ml": (("\u0d4d",), {"aam": "ാം"}),                               # പത്ത് -> പത്താം
}

# Title abbreviations. Latin ones are expanded in any clause (the model reads code-switched
# English); native ones are the standard short forms of "doctor".
ABBREVIATIONS_LATIN: dict[str, str] = {
    "Dr.": "Doctor", "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miss", "Prof.": "Professor",
    "Jr.": "Junior", "Sr.": "Senior", "vs.": "versus", "Govt.": "Government", "Pvt.": "Private",
    "Ltd.": "Limited", "approx.": "approximately", "Dept.": "Department",
}
ABBREVIATIONS_NATIVE: dict[str, str] = {
    "डॉ.": "डॉक्टर", "ডা.": "ডাক্তার", "ডঃ": "ডক্টর", "ડૉ.": "ડૉક્ટર", "ਡਾ.": "ਡਾਕਟਰ",
    "ଡ.": "ଡକ୍ଟର", "డా.": "డాక్టర్", "ಡಾ.": "ಡಾಕ್ಟರ್", "ഡോ.": "ഡോക്ടർ",
}

# English only: scale words for numbers typed with Western grouping ("1,000,000").
EN_SCALES: tuple[tuple[int, str], ...] = ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"),
                                          (10**3, "thousand"))
EN_AM_PM = ("AM", "PM")
EN_MONTHS_SHORT = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


# ---------------------------------------------------------------------------------------
# CLDR accessors (babel imported lazily: `rumik_app.request` stays light).

@functools.lru_cache(maxsize=None)
def _locale(language: str):
    code = CLDR_LOCALE.get(language)
    if code is None:
        return None
    from babel import Locale

    return Locale.parse(code)


def _usable(words: str | None) -> bool:
    """A CLDR string we can speak: non-empty, no Latin letters (unless English), no symbols."""
    if not words:
        return False
    return not any(ch in "%°/$€£₹" for ch in words)


def _native(words: str, language: str) -> bool:
    return language == "en" or not any("a" <= ch.lower() <= "z" for ch in words)


@functools.lru_cache(maxsize=None)
def month_names(language: str) -> tuple[str, ...] | None:
    """The 12 month names (January first) from CLDR, or None."""
    loc = _locale(language)
    if loc is None:
        return None
    names = tuple(loc.months["format"]["wide"][i].replace("\u200c", "").strip() for i in range(1, 13))
    ok = all(_usable(n) and _native(n, language) and not re.fullmatch(r"M\d+", n) for n in names)
    return names if ok else None


@functools.lru_cache(maxsize=4096)
def unit_pattern(language: str, unit_key: str, value: Decimal) -> str | None:
    """CLDR's long unit pattern for `value` with `{0}` where the number goes, or None.

    "{0} किलोमीटर", "{0} kilometres", "గంటకు {0} కిలోమీటర్లు". The plural form follows the
    value (CLDR plural rules); None when CLDR only has the symbol ("{0} km").
    """
    loc = _locale(language)
    if loc is None:
        return None
    from babel.numbers import format_decimal
    from babel.units import UnknownUnitError, format_unit

    try:
        text = format_unit(value, unit_key, length="long", locale=loc)
    except UnknownUnitError:
        return None
    number = format_decimal(value, locale=loc)
    if text.count(number) != 1:
        return None
    pattern = text.replace(number, "{0}")
    words = pattern.replace("{0}", "").strip()
    if not (_usable(words) and _native(words, language)):
        return None
    return pattern if " " in pattern.strip() else pattern.replace("{0}", "{0} ")


@functools.lru_cache(maxsize=256)
def currency_word(language: str, code: str, plural: bool) -> str | None:
    """The currency's name without the country adjective ("rupees", "रुपये", "ডলার"), or None."""
    loc = _locale(language)
    if loc is None:
        return None
    from babel.numbers import get_currency_name

    name = get_currency_name(code, 2 if plural else 1, locale=loc)
    words = " ".join(name.split()[CURRENCY_NAME_WORDS[code]])
    if not (_usable(words) and _native(words, language)) or words.upper() == code:
        return None
    return words
