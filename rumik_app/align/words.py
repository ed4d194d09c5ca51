"""Typed words and spoken words: which word the user typed each spoken word comes from.

    plan = engine.plan(req)
    words = map_words(req, [chunk.text for chunk in plan])
    words.typed                # ["Pay", "₹2,50,000", "<laugh>", "now."]: what the timestamps name
    words.chunks[0]            # [SpokenWord("Pay", 0), SpokenWord("two", 1), SpokenWord("lakh", 1), ...]

The model reads the spoken text (lexicons, then normalisation: "₹2,50,000" becomes "two lakh
fifty thousand rupees") cut into chunks. Each typed token is read as spoken on its own, and the
sequence of those words is matched to the chunks' actual words (difflib, on letters only), so a
normalisation that reads differently in context ("15 Aug 2026") still maps its words to the
typed tokens that produced them: matched runs transfer their owner, a differing run shares its
typed tokens in order. A typed token that is only punctuation owns no spoken word and gets no
timestamp; a tag (`<laugh>`) is its own typed word. Light: no torch, no numpy.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from rumik_app.prompt import TAG_PATTERN, split_tags
from rumik_app.request import SynthesisRequest

WINDOW_SLACK = 64  # expected words looked at beyond twice a chunk's own count (normalisation may lengthen)


@dataclass(frozen=True)
class SpokenWord:
    """One word of a chunk's text as the model reads it; owner: index into `WordMap.typed` (None
    only when nothing typed could explain any word of its chunk)."""

    text: str
    owner: int | None

    @property
    def is_tag(self) -> bool:
        return bool(TAG_PATTERN.fullmatch(self.text))


@dataclass
class WordMap:
    typed: list[str]  # the typed tokens (words and tags), in order
    chunks: list[list[SpokenWord]]  # per planned chunk, its spoken words
    # typed tokens with letters that own no spoken word, read together with a neighbour ("Rs" of
    # "Rs 500", read "five hundred rupees"): token index -> the neighbour whose span it shares
    shares: dict[int, int] = field(default_factory=dict)


def letters(word: str) -> str:
    """The comparison key: letters and digits only, lower case (punctuation never decides a match)."""
    return "".join(ch for ch in word.casefold() if ch.isalnum())


def is_silent(token: str) -> bool:
    """A typed token that speaks nothing: punctuation alone (a dash, an ellipsis)."""
    return not TAG_PATTERN.fullmatch(token) and not letters(token)


def spoken_words_of(token: str, req: SynthesisRequest) -> list[str]:
    """A typed token read on its own, as the request reads its text (its lexicons, normalisation
    and language)."""
    if is_silent(token):
        return []
    if TAG_PATTERN.fullmatch(token):
        return [token]
    try:
        return split_tags(req.with_(text=token).spoken_text())
    except ValueError:  # a token alone may fail a check its sentence passes: read as typed
        return [token]


def map_words(req: SynthesisRequest, chunk_texts: Sequence[str]) -> WordMap:
    """Each chunk's spoken words with the typed token each comes from (see the module docstring).
    Matched chunk by chunk against a window of the expected words, so a chapter costs linear time."""
    typed = split_tags(req.text)
    expected = [(letters(word), index) for index, token in enumerate(typed) for word in spoken_words_of(token, req)]
    chunks: list[list[SpokenWord]] = []
    position = 0
    for text in chunk_texts:
        words = split_tags(text)
        window = expected[position: position + 2 * len(words) + WINDOW_SLACK]
        owners, used = _owners([k for k, _ in window], [i for _, i in window], [letters(w) for w in words])
        chunks.append([SpokenWord(word, owner) for word, owner in zip(words, owners, strict=True)])
        position += used if used else len(words)
    owned = {w.owner for chunk in chunks for w in chunk}
    return WordMap(typed, chunks, _shares(typed, owned))


def _owners(expected: list[str], expected_owner: list[int], actual: list[str]) -> tuple[list[int | None], int]:
    """The owner of each actual word, and how many expected words the match used: matched words
    take their match's owner, a replaced run shares its expected run's owners in proportion, an
    inserted word takes its neighbour's ("rupees" read after "500")."""
    owners: list[int | None] = [None] * len(actual)
    used = 0
    matcher = difflib.SequenceMatcher(None, expected, actual, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            owners[j1:j2] = expected_owner[i1:i2]
        elif op == "replace":
            for j in range(j1, j2):
                owners[j] = expected_owner[i1 + (j - j1) * (i2 - i1) // (j2 - j1)]
        if op in ("equal", "replace"):
            used = i2
    for j in range(len(owners)):  # inserted words: the word before's owner, else the next one's
        if owners[j] is None:
            owners[j] = owners[j - 1] if j else next((o for o in owners if o is not None), None)
    return owners, used


def _shares(typed: list[str], owned: set[int | None]) -> dict[int, int]:
    """Typed tokens with letters that own no spoken word -> the next owning token (else the previous)."""
    shares = {}
    for index, token in enumerate(typed):
        if index in owned or is_silent(token) or TAG_PATTERN.fullmatch(token):
            continue
        after = next((j for j in range(index + 1, len(typed)) if j in owned), None)
        before = next((j for j in range(index - 1, -1, -1) if j in owned), None)
        if (host := after if after is not None else before) is not None:
            shares[index] = host
    return shares
