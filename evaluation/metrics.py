"""Intelligibility metrics: WER, CER and GCER, per utterance and corpus-pooled (docs/ARCHITECTURE.md §8).

Library module (no command line); the benchmark runner, the app and the GRPO content
reward all call it::

    from evaluation.metrics import score_pair, corpus_rate, word_errors, gcer
    score_pair("मैं घर जा रहा हूँ।", "मैं घर जाता हूँ")["wer"]     # 0.4
    gcer("क्षमा", "छमा")                          # 2/3: [क्][ष][मा] -> [छ][मा]
    gcer("क्षमा", "छमा", segmentation="unicode")  # 1/2: [क्ष][मा] -> [छ][मा]

All three rates are Levenshtein distance (substitutions + deletions + insertions) divided
by the reference length, over three kinds of unit:

- WER: words (whitespace-separated after normalisation);
- CER: Unicode code points. The single spaces left between words by the normaliser are
  units too (as in `jiwer.cer`), so a split or merged word costs one edit;
- GCER: grapheme clusters, spaces again units as in CER. This is the content metric for
  Indic scripts, where one visible syllable is several code points.

GCER segmentation (`segmentation=` on `gcer`, `grapheme_errors`, `score_pair`,
`content_error`; `evaluation.text.graphemes` does the splitting):

- "grapheme" (DEFAULT_SEGMENTATION): the `grapheme` package, Unicode 13.0 rules. A
  virama ends a cluster, so a conjunct is several units: प्रधानमंत्री = [प्][र][धा][न][मं][त्][री].
- "unicode": `regex` `\\X`, Unicode 15.1+ rules (GB9c): a conjunct is one unit,
  [प्र][धा][न][मं][त्री], but only in Devanagari, Bengali, Gujarati, Odia, Telugu and
  Malayalam; Tamil, Kannada and Gurmukhi conjuncts split as under "grapheme".

Everything else (normaliser, spaces as units, alignment, pooling) is the same for both.
"grapheme" is the default because:

1. Comparability. The release's brief lists the `grapheme` package, so the GCER it
   reports (and the content reward the released model was post-trained against) was most
   likely computed with it, and a GCER compares only under the same units. On
   "प्रधानमंत्री ने राष्ट्र को संबोधित किया" -> "परधानमंत्री ने राष्ट्र को सम्बोधित किया" the two
   give 3/24 = 0.125 and 4/20 = 0.200; on "क्षमा करें, मैं कल स्कूल नहीं आ पाऊँगा" ->
   "छमा करें, मैं कल इस्कूल नहीं आ पाउँगा" 4/24 = 0.167 and 3/22 = 0.136. Neither rule
   is uniformly stricter, so no fixed factor converts one into the other.
2. Stability. The package's rules are frozen at Unicode 13.0; `\\X` follows the Unicode
   tables of whichever `regex` is installed, which already changed the unit once (15.1)
   and will again if more scripts get conjunct linkers.
3. One definition for all 22 languages. Under "unicode" a Hindi cluster is an akshara
   but a Kannada or Punjabi one is not, so per-language GCERs use different units.

The price: "grapheme" units are smaller than aksharas, so a mangled conjunct costs more
edits (क्ष -> छ is 2 errors, not 1) and every reference is longer. Choose "unicode" when
units close to aksharas matter more than comparability with published numbers, and say
so: the benchmark report prints both GCERs side by side, and every report, CSV and the
Evaluate tab name the segmentation and the Unicode version behind each GCER
(`grapheme_backend_info`).

Alignment is `jiwer.process_words` (rapidfuzz Levenshtein) over the unit sequences.
Texts go through `evaluation.text.normalize` first unless `normalize_text=False`.

Empty reference: a rate is undefined there; `ErrorCounts.rate` returns 0.0 when the
hypothesis is empty too (silence correctly predicted) and 1.0 otherwise (every output
unit is an insertion; counted as fully wrong, not as infinity). Corpus pooling sums
errors and reference lengths first, so an empty-reference utterance's insertions still
count towards the corpus rate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import jiwer
from jiwer import transforms as jiwer_transforms

from evaluation.text import (
    DEFAULT_SEGMENTATION,
    SEGMENTATIONS,
    check_segmentation,
    grapheme_backend_info,
    graphemes,
    normalize,
    segmentation_source,
)
from rumik_app.text.languages import INDIC_SCRIPTS, get_language, is_indic

__all__ = [
    "DEFAULT_SEGMENTATION",
    "ErrorCounts",
    "SEGMENTATIONS",
    "char_errors",
    "cer",
    "content_error",
    "corpus_rate",
    "gcer",
    "grapheme_backend_info",
    "grapheme_errors",
    "score_pair",
    "segmentation_source",
    "wer",
    "word_errors",
]

EMPTY_REF_WITH_OUTPUT_RATE = 1.0
DEFAULT_WER_WEIGHT = 0.5


@dataclass(frozen=True)
class ErrorCounts:
    """Levenshtein errors against a reference of `ref_len` units."""

    errors: int  # Levenshtein distance (S + D + I)
    ref_len: int  # reference length in units

    @property
    def rate(self) -> float:
        """errors / ref_len; for an empty reference 0.0 if no errors, else 1.0."""
        if self.ref_len == 0:
            return 0.0 if self.errors == 0 else EMPTY_REF_WITH_OUTPUT_RATE
        return self.errors / self.ref_len

    def __add__(self, other: ErrorCounts) -> ErrorCounts:
        return ErrorCounts(self.errors + other.errors, self.ref_len + other.ref_len)


class _ReduceToUnits(jiwer_transforms.AbstractTransform):
    """jiwer transform: one sentence -> one list of units produced by `split`."""

    def __init__(self, split: Callable[[str], list[str]]) -> None:
        self.split = split

    def process_string(self, s: str) -> list[list[str]]:
        return [self.split(s)]

    def process_list(self, inp: list[str]) -> list[list[str]]:
        return [self.split(s) for s in inp] or [[]]


_WORDS = _ReduceToUnits(str.split)
_CODE_POINTS = _ReduceToUnits(list)
_CLUSTERS = {seg: _ReduceToUnits(functools.partial(graphemes, segmentation=seg)) for seg in SEGMENTATIONS}


def _errors(ref: str, hyp: str, units: _ReduceToUnits, normalize_text: bool) -> ErrorCounts:
    if normalize_text:
        ref, hyp = normalize(ref), normalize(hyp)
    out = jiwer.process_words(ref, hyp, reference_transform=units, hypothesis_transform=units)
    return ErrorCounts(
        errors=out.substitutions + out.deletions + out.insertions,
        ref_len=out.hits + out.substitutions + out.deletions,
    )


def word_errors(ref: str, hyp: str, normalize_text: bool = True) -> ErrorCounts:
    """Word-level Levenshtein errors and reference word count."""
    return _errors(ref, hyp, _WORDS, normalize_text)


def char_errors(ref: str, hyp: str, normalize_text: bool = True) -> ErrorCounts:
    """Code-point Levenshtein errors and reference length; inner spaces count as units."""
    return _errors(ref, hyp, _CODE_POINTS, normalize_text)


def grapheme_errors(ref: str, hyp: str, normalize_text: bool = True,
                    segmentation: str = DEFAULT_SEGMENTATION) -> ErrorCounts:
    """Grapheme-cluster Levenshtein errors and reference length (spaces count); `segmentation`
    is "grapheme" or "unicode" (module docstring)."""
    return _errors(ref, hyp, _CLUSTERS[check_segmentation(segmentation)], normalize_text)


def wer(ref: str, hyp: str) -> float:
    """Word error rate of one utterance (normalised)."""
    return word_errors(ref, hyp).rate


def cer(ref: str, hyp: str) -> float:
    """Character (code point) error rate of one utterance (normalised)."""
    return char_errors(ref, hyp).rate


def gcer(ref: str, hyp: str, segmentation: str = DEFAULT_SEGMENTATION) -> float:
    """Grapheme-cluster error rate of one utterance (normalised), under `segmentation`."""
    return grapheme_errors(ref, hyp, segmentation=segmentation).rate


def corpus_rate(counts: Iterable[ErrorCounts]) -> float:
    """Pooled rate: summed errors / summed reference length (not the mean of rates)."""
    total = ErrorCounts(0, 0)
    for c in counts:
        total = total + c
    return total.rate


def score_pair(ref: str, hyp: str, segmentation: str = DEFAULT_SEGMENTATION) -> dict:
    """All metrics for one (reference, hypothesis) pair, with the raw counts for pooling.

    `gcer`, `grapheme_errors` and `grapheme_ref_len` use `segmentation` (named in
    `gcer_segmentation`); `gcer_<s>`, `clusters_<s>_errors` and `clusters_<s>_ref_len` hold
    the GCER under every segmentation s in SEGMENTATIONS, so reports can show them side by side.
    """
    check_segmentation(segmentation)
    ref, hyp = normalize(ref), normalize(hyp)
    w, c = word_errors(ref, hyp, normalize_text=False), char_errors(ref, hyp, normalize_text=False)
    clusters = {seg: grapheme_errors(ref, hyp, normalize_text=False, segmentation=seg) for seg in SEGMENTATIONS}
    g = clusters[segmentation]
    out = {
        "wer": w.rate,
        "cer": c.rate,
        "gcer": g.rate,
        "gcer_segmentation": segmentation,
        "word_errors": w.errors,
        "word_ref_len": w.ref_len,
        "char_errors": c.errors,
        "char_ref_len": c.ref_len,
        "grapheme_errors": g.errors,
        "grapheme_ref_len": g.ref_len,
    }
    for seg, counts in clusters.items():
        out[f"gcer_{seg}"] = counts.rate
        out[f"clusters_{seg}_errors"] = counts.errors
        out[f"clusters_{seg}_ref_len"] = counts.ref_len
    return out


def uses_graphemes(ref: str, language: str | None = None) -> bool:
    """True when GCER is the content metric: the language's script (or the reference's dominant
    script when no language is given) is an Indian script (rumik_app.text.languages)."""
    if language:
        return get_language(language).script in INDIC_SCRIPTS
    return is_indic(normalize(ref))


def content_error(ref: str, hyp: str, language: str | None = None, wer_weight: float = DEFAULT_WER_WEIGHT,
                  segmentation: str = DEFAULT_SEGMENTATION) -> float:
    """The GRPO content stream's error (docs/ARCHITECTURE.md §7): GCER (under `segmentation`) for
    Indic scripts, otherwise `wer_weight * WER + (1 - wer_weight) * CER`. Unclipped (can exceed 1 with insertions);
    the reward is `1 - min(1, err)`. Script decision: `uses_graphemes(ref, language)`;
    tags like `<laugh>` do not vote because the reference is normalised first."""
    if not 0.0 <= wer_weight <= 1.0:
        raise ValueError(f"wer_weight must be in [0, 1], got {wer_weight}")
    check_segmentation(segmentation)
    if uses_graphemes(ref, language):
        return gcer(ref, hyp, segmentation)
    return wer_weight * wer(ref, hyp) + (1.0 - wer_weight) * cer(ref, hyp)
