"""The one text normaliser shared by the metrics (WER/CER/GCER) and the GRPO rewards (docs/ARCHITECTURE.md §8).

Use it as a library; there is no command line::

    from evaluation.text import normalize, graphemes
    normalize("नमस्ते <laugh> दोस्त।")        # -> "नमस्ते दोस्त"

`normalize(text)` applies these steps, in this order:

1. Unicode NFC (Python's `unicodedata`). NFC never drops a mark. Note that the
   precomposed nukta letters क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़ (U+0958-U+095F), Bengali ড় ঢ় য় and Gurmukhi
   ਖ਼ ਗ਼ ਜ਼ ੜ ਫ਼ are composition exclusions: NFC *decomposes* them to base + nukta (U+093C
   etc.), so both spellings compare equal. The other nukta letters (ऩ ऱ ऴ) are composed:
   न + ़ -> ऩ.
2. Inline tags are replaced by a space: any `<word>` tag (`<laugh>`, `<chuckle>`,
   `<sigh>`, `<breath>`, ...) and square-bracketed sound spellings (`[laughs]`,
   `[clears throat]`), each at most 40 characters. Parentheses are left alone: they
   can be ordinary text.
3. Case: `str.lower()`. Indic scripts have no case, so only Latin (and other bicameral
   scripts) change: "Hello" -> "hello", "नमस्ते" is untouched.
4. Punctuation and symbols: apostrophes (' ‘ ’) are deleted so contractions stay one
   word ("don't" -> "dont"); every other character of Unicode category P* or S* becomes
   a space: danda । and double danda ॥, Urdu ۔ ، ؟, quotes, dashes, `₹`, `%`, `+`.
   Combining marks (Mn, Mc, Me: matras, virama, nukta, anusvara, candrabindu) are
   never touched; they are category M, not P or S. Categories come from the `regex`
   package's Unicode tables (also the backend of the "unicode" GCER segmentation).
5. Invisible format characters that are not spelling are removed: zero-width space
   U+200B, word joiner U+2060, soft hyphen U+00AD and BOM U+FEFF. ZWJ U+200D and
   ZWNJ U+200C are kept: they select conjunct or half forms in Indic scripts.
6. Whitespace (any Unicode space, tabs, newlines) collapses to single spaces; no
   leading or trailing space.

Examples::

    normalize("Hello, World!")                 -> "hello world"
    normalize("मैं ठीक हूँ। तुम?")               -> "मैं ठीक हूँ तुम"   (chandrabindu kept, danda gone)
    normalize("<laugh> सच में!! [laughs]")     -> "सच में"
    normalize("क्षत्रिय  ॥")                     -> "क्षत्रिय"          (virama conjuncts intact)
    normalize("Let's meet at 5 PM, okay?")     -> "lets meet at 5 pm okay"
    normalize("वो FIR file करो")                -> "वो fir file करो"   (code-switched)

`graphemes(text, segmentation)` splits into grapheme clusters, the units of GCER. Two
definitions are supported because they give different numbers on Indic text:

- "grapheme" (the default): the `grapheme` package (pinned in pyproject.toml), which
  implements the Unicode 13.0 extended-cluster rules. A virama ends a cluster, so a
  conjunct is several units: क्ष = [क्][ष], स्त्री = [स्][त्][री], in every script.
- "unicode": `regex`'s `\\X`, UAX #29 of Unicode 15.1 and later, whose rule GB9c keeps
  consonant + virama + consonant together: क्ष = [क्ष], स्त्री = [स्त्री]. GB9c covers
  only the scripts whose virama is an Indic_Conjunct_Break linker: Devanagari, Bengali,
  Gujarati, Odia, Telugu and Malayalam. Tamil, Kannada and Gurmukhi conjuncts still split
  as under "grapheme" (ಪ್ರ = [ಪ್][ರ], ਪ੍ਰ = [ਪ੍][ਰ]).

Neither is an akshara segmenter; `evaluation.metrics` says why "grapheme" is the
default. `grapheme_backend_info(segmentation)` names the chosen rules, the library and
Unicode version behind each, and the Unicode version of the NFC tables; every report
prints it.

`spoken_form(text, language)` is the step before `normalize` when a reference may hold
digits: `rumik_app.normalize.normalize_text`, the same function the engine applies to
what it synthesises, so "₹500" in a reference and "पाँच सौ रुपए" in a transcript compare as
equal. The benchmark runner, the Evaluate tab and the GRPO content reward apply it to the
reference and to the transcript (an ASR judge may write digits either way)::

    normalize(spoken_form("मुझे 5 मिनट दो", "hi"))   -> "मुझे पाँच मिनट दो"
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import unicodedata

import grapheme
import regex

from rumik_app.text.normalize import normalize_text

NORMAL_FORM = "NFC"
MAX_TAG_CHARS = 40
# `<laugh>`, `<chuckle>`, `</s>`, `<breath>`: anything in angle brackets without nested brackets.
ANGLE_TAG = regex.compile(r"<[^<>\n]{1,%d}>" % MAX_TAG_CHARS)
# `[laughs]`, `[clears throat]`: letters, spaces, hyphens, apostrophes in square brackets.
BRACKET_SOUND = regex.compile(r"\[[\p{L}\p{M}\s'’\-]{1,%d}\]" % MAX_TAG_CHARS)
APOSTROPHES = regex.compile(r"['‘’]")
PUNCT_OR_SYMBOL = regex.compile(r"[\p{P}\p{S}]")
INVISIBLE = regex.compile("[\u200b\u2060\u00ad\ufeff]")
GRAPHEME = regex.compile(r"\X")
# A Devanagari virama conjunct: one extended cluster under Unicode >= 15.1 (rule GB9c), two
# under the `grapheme` package's Unicode 13.0 rules.
_CONJUNCT_PROBE = "\u0915\u094d\u0937"  # क्ष

GRAPHEME_PACKAGE = "grapheme"  # segmentation by the `grapheme` package (Unicode 13.0 rules)
UNICODE_CLUSTERS = "unicode"  # segmentation by regex `\X` (Unicode 15.1+ rules, GB9c)
SEGMENTATIONS = (GRAPHEME_PACKAGE, UNICODE_CLUSTERS)
# Comparability with the release's reported GCER; see evaluation.metrics for the reasoning.
DEFAULT_SEGMENTATION = GRAPHEME_PACKAGE


def strip_tags(text: str) -> str:
    """Replace inline tags (`<laugh>`) and bracketed sound spellings (`[laughs]`) by a space."""
    return BRACKET_SOUND.sub(" ", ANGLE_TAG.sub(" ", text))


def normalize(text: str) -> str:
    """Normalise `text` for error-rate scoring; see the module docstring for the rules."""
    text = unicodedata.normalize(NORMAL_FORM, text)
    text = strip_tags(text)
    text = text.lower()
    text = APOSTROPHES.sub("", text)
    text = PUNCT_OR_SYMBOL.sub(" ", text)
    text = INVISIBLE.sub("", text)
    return " ".join(text.split())


def spoken_form(text: str, language: str | None = None) -> str:
    """`text` with numbers, money, dates and times as words (`rumik_app.text.normalize`), in
    `language` for its script (None: per clause from the script). Scoring applies it to the
    reference and the transcript before `normalize`."""
    return normalize_text(text, language)


def check_segmentation(segmentation: str) -> str:
    """`segmentation` if it is one of SEGMENTATIONS, else ValueError naming the allowed ones."""
    if segmentation not in SEGMENTATIONS:
        raise ValueError(
            f"Unknown GCER segmentation {segmentation!r}; use {GRAPHEME_PACKAGE!r} (the `grapheme` package, "
            f"Unicode 13.0 rules: a conjunct is several clusters) or {UNICODE_CLUSTERS!r} (regex \\X, "
            f"Unicode 15.1+ rules: a conjunct is one cluster)."
        )
    return segmentation


def graphemes(text: str, segmentation: str = DEFAULT_SEGMENTATION) -> list[str]:
    """Grapheme clusters of `text` under `segmentation` ("grapheme" or "unicode"; module docstring)."""
    if check_segmentation(segmentation) == GRAPHEME_PACKAGE:
        return list(grapheme.graphemes(text))
    return GRAPHEME.findall(text)


@functools.lru_cache(maxsize=1)
def regex_unicode_version() -> str:
    """The Unicode version `regex` implements.

    `regex` has no runtime attribute for it (`unicodedata.unidata_version` is Python's own
    table, 14.0.0 on Python 3.11). Its package description states it ("This module
    supports Unicode X"), so read that from the installed metadata; "unknown" if absent.
    """
    try:
        description = importlib.metadata.metadata("regex").get_payload() or ""
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - regex is a dependency
        description = ""
    found = re.search(r"supports Unicode (\d+(?:\.\d+)*)", str(description))
    return found.group(1) if found else "unknown"


def segmentation_unicode_version(segmentation: str) -> str:
    """The Unicode version whose cluster rules `segmentation` follows ("13.0.0", "18.0.0", ...)."""
    if check_segmentation(segmentation) == GRAPHEME_PACKAGE:
        return grapheme.UNICODE_VERSION
    return regex_unicode_version()


def conjunct_is_one_cluster(segmentation: str = UNICODE_CLUSTERS) -> bool:
    """True when `segmentation` keeps a virama conjunct (क्ष) together (rule GB9c)."""
    return len(graphemes(_CONJUNCT_PROBE, segmentation)) == 1


def segmentation_source(segmentation: str) -> str:
    """Library and Unicode version behind `segmentation`, e.g. "grapheme 0.6.0, Unicode 13.0.0"
    or "regex 2026.11.19 \\X, Unicode 18.0.0"."""
    if check_segmentation(segmentation) == GRAPHEME_PACKAGE:
        library = f"grapheme {importlib.metadata.version('grapheme')}"
    else:
        library = f"regex {regex.__version__} \\X"
    return f"{library}, Unicode {segmentation_unicode_version(segmentation)}"


def segmentation_label(segmentation: str) -> str:
    """`name: source rules, क्ष = N cluster(s)`; the conjunct count is measured, not assumed."""
    clusters = len(graphemes(_CONJUNCT_PROBE, segmentation))
    return (f"{segmentation}: {segmentation_source(segmentation)} rules, "
            f"क्ष = {clusters} cluster{'s' if clusters != 1 else ''}")


def normalizer_info() -> str:
    """The Unicode tables behind `normalize`: NFC from Python's unicodedata, P*/S* classes from regex."""
    return (f"NFC from Python unicodedata {unicodedata.unidata_version}; punctuation and symbol classes "
            f"from regex {regex.__version__} (Unicode {regex_unicode_version()})")


def grapheme_backend_info(segmentation: str = DEFAULT_SEGMENTATION) -> str:
    """One line: the GCER segmentation in use, the other one, and the normaliser's Unicode tables."""
    other = next(s for s in SEGMENTATIONS if s != check_segmentation(segmentation))
    return (f"GCER segmentation {segmentation_label(segmentation)} (also available: {segmentation_label(other)}). "
            f"Normaliser: {normalizer_info()}.")
