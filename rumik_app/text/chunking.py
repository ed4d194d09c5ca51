"""Split long text into sentence chunks of at most ~25 s of expected speech (docs/ARCHITECTURE.md §5).

    split_text("पहला वाक्य। दूसरा वाक्य! Third one.", max_seconds=25.0)

Sentences end at `.`, `?`, `!`, danda `।`, double danda `॥` and their script variants
(`rumik_app.text.languages.SENTENCE_END`). Consecutive sentences are packed greedily into chunks
up to `max_seconds` at the text's speaking rate. A single sentence longer than that is split
at clause punctuation, then between words, so any length of text works. Inline tags stay
attached to the words around them.
"""

from __future__ import annotations

import re

from rumik_app.text.languages import CLAUSE_END, SENTENCE_END, expected_seconds

MAX_CHUNK_SECONDS = 25.0
_SENTENCE = re.compile(rf"[^{re.escape(SENTENCE_END)}]*(?:[{re.escape(SENTENCE_END)}]+[\"'”’)\]]*|$)")
_CLAUSE = re.compile(rf"[^{re.escape(CLAUSE_END)}]*(?:[{re.escape(CLAUSE_END)}]+|$)")


def _pieces(pattern: re.Pattern, text: str) -> list[str]:
    return [p.strip() for p in pattern.findall(text) if p.strip()]


def sentences(text: str) -> list[str]:
    """Sentences of `text`, each keeping its terminator."""
    return _pieces(_SENTENCE, text)


def _split_long(piece: str, max_seconds: float, language: str | None, pace: str | None) -> list[str]:
    """Split one over-long sentence at clauses, then words, into parts under `max_seconds`."""
    def fits(s: str) -> bool:
        return expected_seconds(s, language, pace) <= max_seconds

    if fits(piece):
        return [piece]
    clauses = _pieces(_CLAUSE, piece)
    units = clauses if len(clauses) > 1 else piece.split()
    if len(units) == 1:  # one enormous "word": cut by characters
        word = units[0]
        step = max(1, int(len(word) * max_seconds / expected_seconds(word, language, pace)))
        return [word[i : i + step] for i in range(0, len(word), step)]
    out: list[str] = []
    for unit in units:
        out.extend(_split_long(unit, max_seconds, language, pace))
    return _pack(out, max_seconds, language, pace)


def _pack(pieces: list[str], max_seconds: float, language: str | None, pace: str | None) -> list[str]:
    """Greedily join consecutive pieces while the joined text stays under `max_seconds`."""
    chunks: list[str] = []
    for piece in pieces:
        candidate = f"{chunks[-1]} {piece}" if chunks else piece
        if chunks and expected_seconds(candidate, language, pace) <= max_seconds:
            chunks[-1] = candidate
        else:
            chunks.append(piece)
    return chunks


def split_text(
    text: str, max_seconds: float = MAX_CHUNK_SECONDS, language: str | None = None, pace: str | None = None
) -> list[str]:
    """Chunks of `text`, each at most ~`max_seconds` of expected speech; never empty pieces."""
    parts: list[str] = []
    for sentence in sentences(text):
        parts.extend(_split_long(sentence, max_seconds, language, pace))
    return _pack(parts, max_seconds, language, pace)


# Text streamed in (an LLM's deltas) is cut into units as it arrives (`SentenceCutter`).
# A unit with fewer words than this waits for the next sentence ("Dr." or "Hi." alone).
MIN_UNIT_WORDS = 2
# A unit whose text runs on without a sentence end is cut anyway: at a clause mark once it
# holds CLAUSE_CUT_CHARS, at any word boundary once it holds MAX_UNIT_CHARS (about 16 s of
# speech at the fastest rate), inside a word once it holds twice that. Bounds what waits.
CLAUSE_CUT_CHARS = 150
MAX_UNIT_CHARS = 300
_CLOSERS = "\"'”’)]"


class SentenceCutter:
    """Cut text that arrives in pieces into units to speak, as soon as each is complete.

        cut = SentenceCutter()
        cut.push("Hello there.")          # [] - "there." may still become "there..." or "there.)"
        cut.push(" How are you? I")       # ["Hello there.", "How are you?"]
        cut.flush()                       # ["I"] - the end of the input: the rest

    The sentence rules of `sentences()` (SENTENCE_END, then closing quotes), decided on the
    text alone: a sentence ends where its terminator run (and closers) is followed by
    whitespace, so "3.14" and "..." never cut, and the cut points do not depend on how the
    text was split into pieces (`push("ab")` == `push("a"); push("b")`). Units of fewer
    than MIN_UNIT_WORDS words join the next; run-on text is cut at CLAUSE_CUT_CHARS /
    MAX_UNIT_CHARS (see above). `pending` counts the characters not yet returned.
    """

    def __init__(self) -> None:
        self.buffer = ""
        self.scanned = 0  # buffer[:scanned] has been checked for cut points

    @property
    def pending(self) -> int:
        return len(self.buffer)

    def push(self, delta: str) -> list[str]:
        """Add `delta`; returns the units it completed (stripped, never empty)."""
        self.buffer += delta
        units: list[str] = []
        i = max(self.scanned, 1)
        while i < len(self.buffer):
            cut = self._cut_at(i)
            if cut:
                unit, self.buffer = self.buffer[:cut].strip(), self.buffer[cut:]
                if unit:
                    units.append(unit)
                i = 1
            else:
                i += 1
        self.scanned = len(self.buffer)
        return units

    def flush(self) -> list[str]:
        """The end of the input: whatever is left, as one unit (or none)."""
        unit, self.buffer, self.scanned = self.buffer.strip(), "", 0
        return [unit] if unit else []

    def _cut_at(self, i: int) -> int:
        """Where to cut if buffer[i] completes a unit (0: not here)."""
        text = self.buffer
        if len(text.lstrip()) == 0:
            return 0
        if not text[i].isspace():  # past every word boundary a cut could use: one enormous word
            return i if len(text[:i].strip()) >= 2 * MAX_UNIT_CHARS else 0
        before = text[:i].rstrip(_CLOSERS)
        if not text[i - 1].isspace() and before and before[-1] in SENTENCE_END:
            return i if len(text[:i].split()) >= MIN_UNIT_WORDS else 0
        size = len(text[:i].strip())
        if text[i - 1] in CLAUSE_END and size >= CLAUSE_CUT_CHARS:
            return i
        return i if size >= MAX_UNIT_CHARS and not text[i - 1].isspace() else 0
