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
