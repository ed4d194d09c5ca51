"""Word timestamps: what an aligner is, what it returns, and how one is found (docs/ARCHITECTURE.md §16).

    from rumik_app.align import AlignerSet
    aligners = AlignerSet.load(["pocketsphinx", "indicconformer:/models/indicconf"])
    aligner = aligners.for_words(["hello", "world"], "en")   # None (and a reason) when none covers them
    spans = aligner.align(samples, 24000, ["hello", "world"], "en")   # [(start_s, end_s), ...] per word

An aligner places known words in a clip (forced alignment): CTC Viterbi over a model's frame
log-probabilities, or pocketsphinx's own alignment. The aligners themselves live in
`evaluation.aligners` (they load judges' models) and are found through the `rumik_app.aligners`
entry-point group (pyproject.toml), as backends are, so this core never imports them. Light: no
torch; the Viterbi (`rumik_app.align.ctc`) needs numpy only.

A word that an aligner's script cannot spell (a Devanagari word handed to an English model)
is passed as `STAR`: a CTC aligner aligns it as a wildcard token (MMS's `<star>`), so the words
around it still land, and the caller aligns that run again with its own script's aligner.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

import numpy as np

from rumik_app.errors import RumikError
from rumik_app.text.languages import script_counts

log = logging.getLogger(__name__)

ALIGNER_GROUP = "rumik_app.aligners"  # entry points: aligner name -> a factory taking the spec's argument (or None)
DEFAULT_ALIGNERS = ("pocketsphinx",)  # offline English; Indic languages need an IndicConformer folder
STAR = "*"  # a word the aligner cannot spell: matched to whatever audio lies between its neighbours
# The most audio one align() call may be given, as every judge is bounded: a chunk is at most ~30 s.
MAX_ALIGN_SECONDS = 60.0
ROUND = 3  # decimals of a second in what a user reads (1 ms)


class AlignmentError(RumikError, RuntimeError):
    """An aligner could not place the words; the audio is still returned, the message says why."""


@dataclass(frozen=True)
class WordTime:
    """One word as the user typed it (or an inline tag such as `<laugh>`), on the output's timeline.

    start, end: seconds from the start of the returned audio; kind: "word" or "tag"."""

    word: str
    start: float
    end: float
    kind: str = "word"

    def to_dict(self) -> dict:
        return {**asdict(self), "start": round(self.start, ROUND), "end": round(self.end, ROUND)}


@dataclass
class Timings:
    """What a synthesis returns beside its audio: its words, its chunks' exact spans, and why any
    words are missing. segments: [{"text", "start", "end"}] per planned chunk (a sentence or a few);
    missing: None, or one sentence naming the words without times and the reason."""

    words: list[WordTime]
    segments: list[dict]
    aligner: str | None = None
    missing: str | None = None

    def to_dict(self) -> dict:
        return {"words": [w.to_dict() for w in self.words], "segments": self.segments, "aligner": self.aligner,
                "missing": self.missing}


@runtime_checkable
class Aligner(Protocol):
    """A forced aligner (see the module docstring). `name` is its spec, as `AlignerSet.load` took it."""

    name: str

    def covers(self, language: str, script: str) -> bool:
        """True when it can place words of this language (ISO code) written in this script
        (`rumik_app.text.languages.char_script` names: "Latin", "Devanagari", ...)."""

    def align(self, samples: np.ndarray, sample_rate: int, words: Sequence[str],
              language: str) -> list[tuple[float, float]]:
        """One (start, end) in seconds within the clip per word, in order, non-overlapping.

        samples: float32 [N] mono, at most MAX_ALIGN_SECONDS; words: as spoken (normalised text,
        punctuation possibly attached; STAR for a word it cannot spell). AlignmentError when the
        words cannot be placed."""


def word_script(word: str) -> str | None:
    """The script of a word's letters ("Latin", "Devanagari", ...): the most common; None without letters."""
    counts = script_counts(word)
    return max(counts, key=counts.get) if counts else None


class AlignerSet:
    """Aligners in the operator's order; the first that covers a language and script is used.
    Each aligner is used by one thread at a time (pocketsphinx's decoder is not thread-safe)."""

    def __init__(self, aligners: Sequence[Aligner], errors: dict[str, str] | None = None):
        self.aligners = list(aligners)
        self.errors = dict(errors or {})  # spec -> why it did not load (said when it was needed)
        self.locks = {id(aligner): threading.Lock() for aligner in self.aligners}

    @classmethod
    def load(cls, specs: Sequence[str] = DEFAULT_ALIGNERS, strict: bool = False) -> AlignerSet:
        """Load `name[:argument]` specs through the entry points. strict: a spec that fails to load
        raises AlignmentError (an operator's explicit choice); otherwise its reason is kept and
        said when a request needs it."""
        aligners, errors = [], {}
        for spec in specs:
            try:
                aligners.append(load_aligner(spec))
            except RumikError as exc:
                if strict:
                    raise
                log.warning("aligner %s did not load: %s", spec, exc)
                errors[spec] = str(exc)
        return cls(aligners, errors)

    def find(self, language: str, script: str) -> Aligner | None:
        """The first aligner that covers this language (ISO code) and script, or None."""
        return next((a for a in self.aligners if a.covers(language, script)), None)

    def why_none(self, language: str, script: str) -> str:
        """Why no aligner covers this language and script, and the fix; aligners by kind only
        (their folders stay in the operator's log: this reaches a server's clients)."""
        loaded = ", ".join(kind(a) for a in self.aligners) or "none"
        failed = "".join(f" {spec.partition(':')[0]} did not load." for spec in self.errors)
        return (f"no aligner covers {script} text in language {language!r} (loaded: {loaded}).{failed} "
                f"Indian languages need an IndicConformer folder: --aligner indicconformer:PATH; other Latin-script "
                f"speech a local CTC model: --aligner ctc:PATH.")

    def lock(self, aligner: Aligner) -> threading.Lock:
        """The lock an aligner is used under (one thread at a time)."""
        return self.locks[id(aligner)]


def kind(aligner: Aligner) -> str:
    """An aligner's name without its folder ("indicconformer:/models/ic" -> "indicconformer")."""
    return aligner.name.partition(":")[0]


def load_aligner(spec: str) -> Aligner:
    """One aligner from `name[:argument]` (e.g. "pocketsphinx", "indicconformer:/models/ic",
    "ctc:/models/wav2vec2"); AlignmentError names the known names when it is not one."""
    name, _, argument = spec.partition(":")
    known = {entry.name: entry for entry in entry_points(group=ALIGNER_GROUP)}
    if name not in known:
        raise AlignmentError(f"unknown aligner {name!r}; installed: {', '.join(sorted(known)) or 'none'} "
                             "(they come with the eval extra: pip install -e .[eval]).")
    try:
        return known[name].load()(argument or None)
    except ImportError as exc:
        raise AlignmentError(f"aligner {name!r} cannot load ({exc}); install the eval extra: "
                             "pip install -e .[eval].") from exc
