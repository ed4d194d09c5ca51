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
from dataclasses import dataclass

from rumik_app.prompt import TAG_PATTERN, split_tags
from rumik_app.request import SynthesisRequest


@dataclass(frozen=True)
class SpokenWord:
    """One word of a chunk's text as the model reads it; owner: index into `WordMap.typed` (None:
    a word nothing typed explains, which keeps its neighbour's owner when timed)."""

    text: str
    owner: int | None

    @property
    def is_tag(self) -> bool:
        return bool(TAG_PATTERN.fullmatch(self.text))


@dataclass
class WordMap:
    typed: list[str]  # the typed tokens (words and tags), in order
    chunks: list[list[SpokenWord]]  # per planned chunk, its spoken words


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
    """Each chunk's spoken words with the typed token each comes from (see the module docstring)."""
    typed = split_tags(req.text)
    expected = [(word, index) for index, token in enumerate(typed) for word in spoken_words_of(token, req)]
    actual = [(word, chunk) for chunk, text in enumerate(chunk_texts) for word in split_tags(text)]
    owners = _owners([letters(w) for w, _ in expected], [i for _, i in expected], [letters(w) for w, _ in actual])
    chunks: list[list[SpokenWord]] = [[] for _ in chunk_texts]
    for (word, chunk), owner in zip(actual, owners, strict=True):
        chunks[chunk].append(SpokenWord(word, owner))
    return WordMap(typed, chunks)


def _owners(expected: list[str], expected_owner: list[int], actual: list[str]) -> list[int | None]:
    """The owner of each actual word: matched words take their match's, a replaced run shares its
    expected run's owners in proportion, an inserted word has none."""
    owners: list[int | None] = [None] * len(actual)
    matcher = difflib.SequenceMatcher(None, expected, actual, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            owners[j1:j2] = expected_owner[i1:i2]
        elif op == "replace":
            for j in range(j1, j2):
                owners[j] = expected_owner[i1 + (j - j1) * (i2 - i1) // (j2 - j1)]
    return owners
