"""Word timings of one synthesis, chunk by chunk, on the output's timeline (docs/ARCHITECTURE.md §16).

    timer = WordTimer(req, [chunk.text for chunk in plan], aligners)
    for index, (start, end) in enumerate(audio.info["chunk_seconds"]):        # exact, from the plan
        words = timer.add_chunk(index, samples[int(start * sr): int(end * sr)], sr, start)
        send(words)                                  # the typed words this chunk completed, in order
    timings = timer.timings()                        # all words, the chunks' spans, what is missing

Each chunk is aligned alone, so an error never crosses a chunk and the chunk spans are exact.
Inside a chunk its words are split into runs of one script: the aligner of the chunk's main
script places every word, the other runs as wildcards (`rumik_app.align.STAR`); each other run
is then aligned again inside its span by its own script's aligner, or, where none covers it,
placed by its letters within that span (and said in `missing`). Boundaries are then snapped to
the pauses around them (`rumik_app.align.refine`). A tag takes the gap between its neighbours.
A chunk no aligner can place keeps its span; its words are listed in `missing` with the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from rumik_app.align import STAR, Aligner, AlignerSet, AlignmentError, Timings, WordTime, kind, word_script
from rumik_app.align.refine import refine_boundaries
from rumik_app.align.words import SpokenWord, letters, map_words
from rumik_app.request import SynthesisRequest
from rumik_app.text.languages import get_language
from rumik_app.text.normalize import SCRIPT_DEFAULT_LANGUAGE

Span = tuple[float, float]
log = logging.getLogger(__name__)


class WordTimer:
    """Word timings of one planned request (see the module docstring)."""

    def __init__(self, req: SynthesisRequest, chunk_texts: Sequence[str], aligners: AlignerSet):
        self.map = map_words(req, chunk_texts)
        self.aligners = aligners
        self.language = get_language(req.language).code if req.language else None
        self.words: list[WordTime] = []
        self.segments: list[dict] = []
        self.missing: list[str] = []
        self.used: list[str] = []
        self.spans: dict[int, list[Span]] = {}  # typed index -> its spoken words' spans so far
        self.last_chunk = {owner: chunk for chunk, words in enumerate(self.map.chunks) for w in words
                           if (owner := w.owner) is not None}

    def add_chunk(self, index: int, samples: np.ndarray, sample_rate: int, offset: float) -> list[WordTime]:
        """Align chunk `index`, whose audio `samples` (float32 [N]) starts `offset` seconds into the
        output; returns the typed words it completed, in order."""
        words = self.map.chunks[index]
        end = offset + len(samples) / sample_rate
        owners = {w.owner for w in words if w.owner is not None}
        shares = self.map.shares
        typed = sorted(owners | {i for i, host in shares.items() if host in owners})
        self.segments.append({"text": " ".join(self.map.typed[i] for i in typed), "start": round(offset, 3),
                              "end": round(end, 3)})
        duration = len(samples) / sample_rate
        spans = self._chunk_spans(index, words, samples, sample_rate)
        for word, span in zip(words, spans, strict=True):
            if word.owner is not None and span is not None:  # inside the chunk, whatever the aligner said
                start, stop = (min(max(t, 0.0), duration) for t in span)
                self.spans.setdefault(word.owner, []).append((offset + start, offset + stop))
        done = [self._typed_word(i, shares.get(i, i)) for i in typed
                if self.last_chunk.get(shares.get(i, i)) == index and shares.get(i, i) in self.spans]
        done = _monotonic(done, self.words[-1].end if self.words else 0.0)
        self.words.extend(done)
        return done

    def timings(self) -> Timings:
        """Every word timed so far, each chunk's span, the aligners' kinds, and what is missing."""
        return Timings(list(self.words), list(self.segments), aligner=", ".join(self.used) or None,
                       missing=" ".join(self.missing) or None)

    def _typed_word(self, index: int, host: int) -> WordTime:
        """Typed token `index`, timed by its own spoken words (host == index) or by the neighbour it
        was read with."""
        spans = self.spans[host]
        token = self.map.typed[index]
        kind = "tag" if SpokenWord(token, index).is_tag else "word"
        return WordTime(token, min(s for s, _ in spans), max(e for _, e in spans), kind)

    def _chunk_spans(self, index: int, words: list[SpokenWord], samples: np.ndarray,
                     sample_rate: int) -> list[Span | None]:
        """Seconds within the chunk per spoken word (tags from their neighbours); None where unplaced."""
        said = [i for i, w in enumerate(words) if not w.is_tag and letters(w.text)]
        placed: list[Span | None] = [None] * len(words)
        if said:
            try:
                for i, span in zip(said, self._place([words[i].text for i in said], samples, sample_rate), strict=True):
                    placed[i] = span
            except AlignmentError as exc:
                self.missing.append(f"{len(said)} words of chunk {index} have no times: {exc}")
        return _fill_tags(words, placed, len(samples) / sample_rate)

    def _place(self, texts: list[str], samples: np.ndarray, sample_rate: int) -> list[Span]:
        """Spans of a chunk's said words: the main script's aligner first; when it cannot take the
        other runs as wildcards (pocketsphinx), the next script's aligner is tried as the main."""
        scripts = _scripts(texts)
        order = sorted(set(scripts), key=lambda s: (-scripts.count(s), s))
        mains = [(s, a) for s in order if (a := self._aligner(s)) is not None]
        if not mains:
            raise AlignmentError(self.aligners.why_none(self._language_for(order[0]), order[0]))
        for attempt, (main, aligner) in enumerate(mains):
            masked = [t if s == main else STAR for t, s in zip(texts, scripts, strict=True)]
            try:
                spans = self._run(aligner, samples, sample_rate, masked, self._language_for(main))
                break
            except AlignmentError:
                if attempt == len(mains) - 1:
                    raise
        for first, last, script in _runs(scripts):
            if script != main:
                spans[first:last] = self._inner(texts[first:last], script, spans[first][0], spans[last - 1][1],
                                                samples, sample_rate)
        return refine_boundaries(samples, sample_rate, spans)

    def _inner(self, texts: list[str], script: str, start: float, end: float, samples: np.ndarray,
               sample_rate: int) -> list[Span]:
        """A run in another script, placed again inside its wildcard span [start, end] s."""
        aligner = self._aligner(script)
        if aligner is not None:
            piece = samples[int(start * sample_rate): int(np.ceil(end * sample_rate))]
            try:
                spans = self._run(aligner, piece, sample_rate, texts, self._language_for(script))
                return [(start + a, start + b) for a, b in spans]
            except AlignmentError:
                pass
        self.missing.append(f"{len(texts)} {script} words were placed by their letters within their run "
                            f"({self.aligners.why_none(self._language_for(script), script)})")
        return _by_letters(texts, start, end)

    def _run(self, aligner: Aligner, samples: np.ndarray, sample_rate: int, texts: list[str],
             language: str) -> list[Span]:
        texts = [STAR if any(ch.isdigit() for ch in t) else t for t in texts]  # normalize=False: digits as typed
        try:
            with self.aligners.lock(aligner):
                spans = aligner.align(samples, sample_rate, texts, language)
        except AlignmentError:
            raise
        except Exception as exc:  # a model's own failure (onnxruntime, pocketsphinx): said, the audio stays
            log.exception("aligner %s failed", kind(aligner))
            raise AlignmentError(f"the {kind(aligner)} aligner failed ({type(exc).__name__})") from exc
        if kind(aligner) not in self.used:
            self.used.append(kind(aligner))
        return list(spans)

    def _aligner(self, script: str) -> Aligner | None:
        return self.aligners.find(self._language_for(script), script)

    def _language_for(self, script: str) -> str:
        """The request's language where its script is this one, else the script's usual language."""
        if self.language and get_language(self.language).script == script:
            return self.language
        return SCRIPT_DEFAULT_LANGUAGE.get(script, "en")


def _monotonic(words: list[WordTime], floor: float) -> list[WordTime]:
    """Words that never start before the previous one ended: chunks overlap by the crossfade, so an
    aligner may put a chunk's first word inside the previous chunk's last 50 ms. Words that share a
    span (`WordMap.shares`) keep sharing it."""
    shared = None
    out: list[WordTime] = []
    for word in words:
        if out and (word.start, word.end) == shared:  # read together with the word before: the same span
            out.append(WordTime(word.word, out[-1].start, out[-1].end, word.kind))
            continue
        shared = (word.start, word.end)
        start = max(word.start, floor)
        floor = max(word.end, start)
        out.append(WordTime(word.word, start, floor, word.kind))
    return out


def _scripts(texts: list[str]) -> list[str]:
    """Each word's script; a word without letters of a known script takes its neighbour's."""
    scripts = [word_script(t) for t in texts]
    known = next((s for s in scripts if s), "Latin")
    out, last = [], known
    for script in scripts:
        last = script or last
        out.append(last)
    return out


def _runs(scripts: list[str]) -> list[tuple[int, int, str]]:
    """(first, end, script) of each run of one script."""
    runs, first = [], 0
    for i in range(1, len(scripts) + 1):
        if i == len(scripts) or scripts[i] != scripts[first]:
            runs.append((first, i, scripts[first]))
            first = i
    return runs


def _by_letters(texts: list[str], start: float, end: float) -> list[Span]:
    """Words shared out over [start, end] in proportion to their letters."""
    weights = np.array([max(1, len(letters(t))) for t in texts], dtype=np.float64)
    edges = start + (end - start) * np.concatenate([[0.0], np.cumsum(weights) / weights.sum()])
    return [(float(a), float(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _fill_tags(words: list[SpokenWord], placed: list[Span | None], duration: float) -> list[Span | None]:
    """A tag spans the gap between the word before it (or the chunk's start) and the word after
    it (or the chunk's end), where the model makes its sound; unplaced words stay None."""
    out = list(placed)
    for i, word in enumerate(words):
        if not word.is_tag:
            continue
        before = next((out[j][1] for j in range(i - 1, -1, -1) if out[j] is not None and not words[j].is_tag), 0.0)
        after = next((placed[j][0] for j in range(i + 1, len(words)) if placed[j] is not None), duration)
        if any(p is not None for p in placed) or not any(not w.is_tag for w in words):
            out[i] = (before, max(before, after))
    return out


def time_words(req: SynthesisRequest, chunk_texts: Sequence[str], samples: np.ndarray, sample_rate: int,
               chunk_seconds: Sequence[Sequence[float]], aligners: AlignerSet) -> Timings:
    """Timings of a finished clip: each planned chunk aligned inside its exact span (seconds)."""
    timer = WordTimer(req, chunk_texts, aligners)
    for index, (start, end) in enumerate(chunk_seconds):
        timer.add_chunk(index, samples[round(start * sample_rate): round(end * sample_rate)], sample_rate, start)
    return timer.timings()
