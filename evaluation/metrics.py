"""Intelligibility metrics: WER, CER and GCER, per utterance and corpus-pooled (DESIGN §8).

Library module (no command line); the benchmark runner, the app and the GRPO content
reward all call it::

    from evaluation.metrics import score_pair, corpus_rate, word_errors
    score_pair("मैं घर जा रहा हूँ।", "मैं घर जाता हूँ")["wer"]     # 0.4

All three rates are Levenshtein distance (substitutions + deletions + insertions) divided
by the reference length, over three kinds of unit:

- WER: words (whitespace-separated after normalisation);
- CER: Unicode code points. The single spaces left between words by the normaliser are
  units too (as in `jiwer.cer`), so a split or merged word costs one edit;
- GCER: extended grapheme clusters (`regex` `\\X`, Unicode 15.1+ rules, so क्ष and त्रि
  are one unit each; spaces are units as in CER). This is the content metric for Indic
  scripts, where one visible syllable is several code points.

Alignment is `jiwer.process_words` (rapidfuzz Levenshtein) over the unit sequences.
Texts go through `evaluation.text.normalize` first unless `normalize_text=False`.

Empty reference: a rate is undefined there; `ErrorCounts.rate` returns 0.0 when the
hypothesis is empty too (silence correctly predicted) and 1.0 otherwise (every output
unit is an insertion; counted as fully wrong, not as infinity). Corpus pooling sums
errors and reference lengths first, so an empty-reference utterance's insertions still
count towards the corpus rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import jiwer
from jiwer import transforms as jiwer_transforms

from evaluation.text import grapheme_backend_info, graphemes, normalize
from rumik_app.languages import INDIC_SCRIPTS, get_language, is_indic

__all__ = [
    "ErrorCounts",
    "char_errors",
    "cer",
    "content_error",
    "corpus_rate",
    "gcer",
    "grapheme_backend_info",
    "grapheme_errors",
    "score_pair",
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
_GRAPHEMES = _ReduceToUnits(graphemes)


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


def grapheme_errors(ref: str, hyp: str, normalize_text: bool = True) -> ErrorCounts:
    """Extended-grapheme-cluster Levenshtein errors and reference length (spaces count)."""
    return _errors(ref, hyp, _GRAPHEMES, normalize_text)


def wer(ref: str, hyp: str) -> float:
    """Word error rate of one utterance (normalised)."""
    return word_errors(ref, hyp).rate


def cer(ref: str, hyp: str) -> float:
    """Character (code point) error rate of one utterance (normalised)."""
    return char_errors(ref, hyp).rate


def gcer(ref: str, hyp: str) -> float:
    """Grapheme-cluster error rate of one utterance (normalised)."""
    return grapheme_errors(ref, hyp).rate


def corpus_rate(counts: Iterable[ErrorCounts]) -> float:
    """Pooled rate: summed errors / summed reference length (not the mean of rates)."""
    total = ErrorCounts(0, 0)
    for c in counts:
        total = total + c
    return total.rate


def score_pair(ref: str, hyp: str) -> dict:
    """All three metrics for one (reference, hypothesis) pair, with the raw counts for pooling."""
    w, c, g = word_errors(ref, hyp), char_errors(ref, hyp), grapheme_errors(ref, hyp)
    return {
        "wer": w.rate,
        "cer": c.rate,
        "gcer": g.rate,
        "word_errors": w.errors,
        "word_ref_len": w.ref_len,
        "char_errors": c.errors,
        "char_ref_len": c.ref_len,
        "grapheme_errors": g.errors,
        "grapheme_ref_len": g.ref_len,
    }


def uses_graphemes(ref: str, language: str | None = None) -> bool:
    """True when GCER is the content metric: the language's script (or the reference's dominant
    script when no language is given) is an Indian script (rumik_app.languages)."""
    if language:
        return get_language(language).script in INDIC_SCRIPTS
    return is_indic(normalize(ref))


def content_error(ref: str, hyp: str, language: str | None = None, wer_weight: float = DEFAULT_WER_WEIGHT) -> float:
    """The GRPO content stream's error (DESIGN §7): GCER for Indic scripts, otherwise
    `wer_weight * WER + (1 - wer_weight) * CER`. Unclipped (can exceed 1 with insertions);
    the reward is `1 - min(1, err)`. Script decision: `uses_graphemes(ref, language)`;
    tags like `<laugh>` do not vote because the reference is normalised first."""
    if not 0.0 <= wer_weight <= 1.0:
        raise ValueError(f"wer_weight must be in [0, 1], got {wer_weight}")
    if uses_graphemes(ref, language):
        return gcer(ref, hyp)
    return wer_weight * wer(ref, hyp) + (1.0 - wer_weight) * cer(ref, hyp)
