"""Pronunciation lexicons ("Say it right"): words said the way their owners say them.

    from rumik_app.text.lexicon import Lexicon, LexiconEntry, apply_lexicons
    banks = Lexicon("banks", (LexiconEntry("SBI", "एस बी आई", languages=("hi",)),
                              LexiconEntry("HDFC", "एच डी एफ सी")))
    apply_lexicons("मेरा SBI खाता <laugh>", [banks], "hi")   # 'मेरा एस बी आई खाता <laugh>'
    # files: rumik_app.text.lexicon_io's load_lexicon, read_lexicon, to_pls, to_tsv, to_json

This model reads text, not phonemes, so a pronunciation is an *alias*: the text to say
instead (W3C PLS `<alias>`, SSML `<sub>`). Lexicons apply before normalisation
(docs/ARCHITECTURE.md §11): an alias may hold numbers ("T20" -> "टी 20", read "टी बीस"), and an
entry beats the normaliser's abbreviations ("Dr." -> "डॉक्टर", not "Doctor").

Matching, left to right: at each position the longest grapheme (in characters) wins; on a tie
the first lexicon listed, then its first entry. Text is compared extended grapheme cluster by
cluster (`regex`'s `\\X`), so an entry never matches part of one: "क" matches neither in "क्ष"
nor in "कि". Case-insensitive (each cluster case-folded) unless `case_sensitive`. `whole_word`
(default): the match is neither preceded nor followed by a word character (a letter, mark or
digit of any script, "_", ZWJ, ZWNJ). Aliases are not matched again; inline tags (`<laugh>`)
are never touched and no match spans one. Language scope: an entry with `languages` applies
when the request's language is one of them; with no language (normalize_text then decides
per clause), when the text's main script (most letters, Indic before Latin) is the script of
one of them, so a "mr" entry then applies to any Devanagari text. Others apply everywhere.

Formats: PLS 1.0, TSV and JSON, read and written by `rumik_app.text.lexicon_io` (its docstring
describes each); the JSON format's object is also `lexicon_from_dict` / `lexicon_to_dict` here.

Bounds (PromptError, field "lexicon", naming the limit and the fix): MAX_ENTRIES per lexicon,
MAX_GRAPHEME_CHARS, MAX_ALIAS_CHARS, MAX_LEXICON_BYTES per document or file (checked before
parsing), MAX_LEXICONS per request, and the text with its aliases (`apply_lexicons`'
max_chars: the caller's spoken bound, MAX_SPOKEN_CHARS by default), checked as aliases are added.
Each lexicon's match table is built on its first use and lives as long as the lexicon
(docs/say-it-right.md).
"""

from __future__ import annotations

import itertools
import unicodedata
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import regex

from rumik_app.errors import PromptError
from rumik_app.prompt import MAX_TEXT_CHARS, TAG_PATTERN
from rumik_app.text.languages import INDIC_SCRIPTS, LANGUAGE_BY_CODE, SCRIPT_RANGES, get_language

MAX_ENTRIES = 5_000
MAX_GRAPHEME_CHARS = 100
MAX_ALIAS_CHARS = 300
MAX_NAME_CHARS = 100
MAX_LEXICON_BYTES = 1_000_000  # per document or file; `lexicon_io` checks it before parsing
MAX_LEXICONS = 8
MAX_SPOKEN_CHARS = 4 * MAX_TEXT_CHARS  # the text with its aliases (as LIBRARY_LIMITS' spoken bound)

DEFAULT_NAME = "lexicon"
JSON_KEYS = ("grapheme", "alias", "languages", "case_sensitive", "whole_word")
_CLUSTER = regex.compile(r"\X")
_SEP = "\x00"  # joins a key's clusters: a grapheme holds no control character, so keys cannot collide


def _error(message: str) -> PromptError:
    return PromptError(message, field="lexicon")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 42 else text[:40] + "…'"


def _clean(value: object, what: str, limit: int, label: str) -> str:
    """`value` NFC'd and stripped, or PromptError: not text, empty, too long, control or bracket characters."""
    if not isinstance(value, str):
        raise _error(f"{label}: the {what} must be text, not {type(value).__name__}.")
    text = unicodedata.normalize("NFC", value).strip()
    if not text:
        fix = {"grapheme": "give the word to replace", "alias": "give the text to say instead"}.get(what, "name it")
        raise _error(f"{label}: the {what} is empty; {fix}.")
    if len(text) > limit:
        raise _error(f"{label}: the {what} is {len(text):,} characters; the limit is {limit:,}. Shorten it.")
    for i, ch in enumerate(text, 1):
        if unicodedata.category(ch) in ("Cc", "Cs", "Co", "Zl", "Zp") or (ord(ch) & 0xFFFE) == 0xFFFE:
            raise _error(f"{label}: the {what} has the control or non-text character U+{ord(ch):04X} at position "
                         f"{i}; write it on one line in plain characters.")
    if "<" in text or ">" in text:
        raise _error(f"{label}: the {what} has '<' or '>'; inline tags (<laugh>, <chuckle>, <sigh>) belong in the "
                     "text and angle brackets nowhere else, so remove them.")
    return text


def _languages(value: object, label: str) -> tuple[str, ...]:
    """Canonical codes without repeats, from codes or names: a list, or a string "hi,mr"."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) for v in items):
        raise _error(f'{label}: languages must be a list of language codes such as ["hi", "mr"].')
    try:
        return tuple(dict.fromkeys(get_language(v).code for v in items if v.strip()))
    except PromptError as exc:
        raise _error(f"{label}: {exc}") from None


@dataclass(frozen=True)
class LexiconEntry:
    """One pronunciation: say `alias` where the text has `grapheme` (checked and NFC'd when made)."""

    grapheme: str
    alias: str
    languages: tuple[str, ...] = ()
    case_sensitive: bool = False
    whole_word: bool = True

    def __post_init__(self) -> None:
        label = f"Lexicon entry {_shown(self.grapheme)}"
        grapheme = _clean(self.grapheme, "grapheme", MAX_GRAPHEME_CHARS, label)
        if unicodedata.category(grapheme[0])[0] == "M":
            raise _error(f"{label}: the grapheme starts with a combining mark, which belongs to the letter before "
                         "it; start it with a letter.")
        object.__setattr__(self, "grapheme", grapheme)
        object.__setattr__(self, "alias", _clean(self.alias, "alias", MAX_ALIAS_CHARS, label))
        object.__setattr__(self, "languages", _languages(self.languages, label))
        for flag in ("case_sensitive", "whole_word"):
            if not isinstance(getattr(self, flag), bool):
                raise _error(f"{label}: {flag} must be true or false, not {_shown(getattr(self, flag))}.")


@dataclass(frozen=True)
class Lexicon:
    """A named, ordered set of at most MAX_ENTRIES entries; hashable, so a request can carry it."""

    name: str
    entries: tuple[LexiconEntry, ...] = ()

    def __post_init__(self) -> None:
        name = _clean(self.name, "name", MAX_NAME_CHARS, "Lexicon")
        if isinstance(self.entries, (str, bytes, Mapping)) or not isinstance(self.entries, Iterable):
            raise _error(f"Lexicon {name!r}: entries must be a list of LexiconEntry.")
        entries = tuple(self.entries)
        if len(entries) > MAX_ENTRIES:
            raise _too_many(name)
        if any(not isinstance(e, LexiconEntry) for e in entries):
            raise _error(f"Lexicon {name!r}: entries must be LexiconEntry objects (read_lexicon makes them).")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "entries", entries)

    def __hash__(self) -> int:  # cheap for thousands of entries; equal lexicons still hash alike
        return hash((self.name, len(self.entries), self.entries[:4]))


def _too_many(name: str) -> PromptError:
    return _error(f"Lexicon {name!r} has more than {MAX_ENTRIES:,} entries (the limit per lexicon). Split it into "
                  f"several lexicons (up to {MAX_LEXICONS} per request) or drop entries you do not need.")


def check_lexicons(value: object) -> tuple[Lexicon, ...]:
    """A request's lexicons from None, a Lexicon, or a list of Lexicons or JSON-format dicts
    (`lexicon_from_dict`, so `SynthesisRequest(**req.to_dict())` works); at most MAX_LEXICONS."""
    if value is None:
        return ()
    if isinstance(value, (Lexicon, Mapping)):
        value = (value,)
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise _error("Lexicons must be a list of lexicons; read_lexicon makes one from PLS, TSV or JSON.")
    items = tuple(value)
    if len(items) > MAX_LEXICONS:
        raise _error(f"A request may use at most {MAX_LEXICONS} lexicons; this one has {len(items)}. Merge some "
                     f"(a lexicon holds up to {MAX_ENTRIES:,} entries).")
    lexicons = tuple(lexicon_from_dict(x) if isinstance(x, Mapping) else x for x in items)
    if any(not isinstance(lex, Lexicon) for lex in lexicons):
        raise _error('Lexicons must be Lexicon objects or {"name": ..., "entries": [...]} objects.')
    return lexicons


# ---------------------------------------------------------------------------------------
# The JSON form (`lexicon_io` reads and writes the formats)

def lexicon_from_rows(rows: Iterable[tuple[str, dict]], name: str) -> Lexicon:
    """A Lexicon from (where, fields) rows, fields as LexiconEntry's; the first bad row's error says where
    it is (the readers in `rumik_app.text.lexicon_io` use it)."""
    entries: list[LexiconEntry] = []
    for where, row in rows:
        if len(entries) == MAX_ENTRIES:
            raise _too_many(name)
        try:
            entries.append(LexiconEntry(**row))
        except PromptError as exc:
            raise _error(f"Lexicon {name!r}, {where}: {exc}") from None
    if not entries:
        raise _error(f"Lexicon {name!r} has no entries; check its format (PLS, TSV or JSON: see "
                     "rumik_app.text.lexicon).")
    return Lexicon(name, tuple(entries))


def lexicon_from_dict(obj: object, name: str | None = None, fallback: str = DEFAULT_NAME) -> Lexicon:
    """A Lexicon from the JSON format's object (a request body may carry one inline)."""
    shape = 'write {"name": "...", "entries": [{"grapheme": "SBI", "alias": "एस बी आई"}]}'
    if not isinstance(obj, Mapping):
        raise _error(f"A JSON lexicon is an object: {shape}.")
    if unknown := sorted(set(obj) - {"name", "entries"}, key=str):
        raise _error(f"A JSON lexicon has no key {_shown(unknown[0])}: {shape}.")
    if not isinstance(items := obj.get("entries"), (list, tuple)):
        raise _error(f"A JSON lexicon needs a list of entries: {shape}.")
    return lexicon_from_rows(_json_rows(items), name or obj.get("name") or fallback)


def _json_rows(items: Sequence[object]) -> Iterator[tuple[str, dict]]:
    for number, item in enumerate(items, 1):
        if not isinstance(item, Mapping):
            raise _error(f'JSON lexicon entry {number} is not an object with "grapheme" and "alias".')
        if unknown := sorted(set(item) - set(JSON_KEYS), key=str):
            raise _error(f"JSON lexicon entry {number} has an unknown key {_shown(unknown[0])}; the keys are "
                         f"{', '.join(JSON_KEYS)}.")
        if missing := [k for k in ("grapheme", "alias") if k not in item]:
            raise _error(f"JSON lexicon entry {number} has no {missing[0]!r}; an entry needs a grapheme and an alias.")
        yield f"entry {number}", dict(item)


def lexicon_to_dict(lexicon: Lexicon) -> dict:
    """The JSON format's object (`lexicon_from_dict` reads it back)."""
    return {"name": lexicon.name, "entries": [
        {"grapheme": e.grapheme, "alias": e.alias, "languages": list(e.languages), "case_sensitive": e.case_sensitive,
         "whole_word": e.whole_word} for e in lexicon.entries]}


# ---------------------------------------------------------------------------------------
# Applying

def apply_lexicons(text: str, lexicons: Sequence[Lexicon], language: str | None = None,
                   max_chars: int = MAX_SPOKEN_CHARS) -> str:
    """`text` with each matched grapheme replaced by its alias (see the module docstring), inline
    tags untouched. language: the request's code or name; None: the text's script decides
    scoped entries. max_chars: the caller's bound on the spoken text, checked as aliases are
    added, so a text that would grow past it stops growing there. PromptError when lexicons are
    invalid or the result exceeds `max_chars`."""
    lexicons = check_lexicons(lexicons)
    if not text or not any(lex.entries for lex in lexicons):
        return text
    text = unicodedata.normalize("NFC", text)
    tables = tuple(_table(lex) for lex in lexicons)
    code = get_language(language).code if language else None
    scoped = any(table.scoped for table in tables)
    matcher = _Matcher(tables, code, _main_script(text) if scoped and not code else None)
    out: list[str] = []
    budget, position = max(max_chars - len(text), 0), 0  # what the aliases may add
    for tag in [*TAG_PATTERN.finditer(text), None]:
        budget = matcher.apply(text[position:tag.start() if tag else len(text)], out, budget)
        if budget < 0:
            raise _error(f"With the lexicons' aliases this text grows past {max_chars:,} characters (the limit); "
                         "shorten the text or the aliases.")
        out.append(tag.group() if tag else "")
        position = tag.end() if tag else position
    return "".join(out)


_SCRIPT_CHARS = {script: regex.compile("[" + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in ranges) + "]")
                 for script, ranges in SCRIPT_RANGES.items()}


def _main_script(text: str) -> str | None:
    """The script with most characters, Indic before Latin (as normalize_text decides a clause)."""
    text = TAG_PATTERN.sub(" ", text)
    counts = {script: n for script, chars in _SCRIPT_CHARS.items() if (n := len(chars.findall(text)))}
    pool = {s: n for s, n in counts.items() if s in INDIC_SCRIPTS} or counts
    return max(pool, key=pool.get) if pool else None


def _in_scope(entry: LexiconEntry, code: str | None, script: str | None) -> bool:
    if not entry.languages:
        return True
    if code is not None:
        return code in entry.languages
    return any(LANGUAGE_BY_CODE[c].script == script for c in entry.languages)


def _is_word(ch: str) -> bool:
    category = unicodedata.category(ch)
    return category[0] in "LMN" or category == "Pc" or ch in "\u200c\u200d"


class _Table:
    """One lexicon's entries by key (its grapheme's case-folded clusters joined by _SEP), a key's
    entries in the lexicon's order, and per first cluster the cluster counts of its keys, longest
    first. A dict keyed by grapheme is about the size of the lexicon's text (a trie of one dict per
    character was a thousand times it)."""

    __slots__ = ("entries", "counts", "scoped")

    def __init__(self, lexicon: Lexicon):
        entries: dict[str, list[LexiconEntry]] = {}
        counts: dict[str, set[int]] = {}
        for entry in lexicon.entries:
            keys = [cluster.casefold() for cluster in _CLUSTER.findall(entry.grapheme)]
            entries.setdefault(_SEP.join(keys), []).append(entry)
            counts.setdefault(keys[0], set()).add(len(keys))
        self.entries = {key: tuple(found) for key, found in entries.items()}
        self.counts = {first: tuple(sorted(found, reverse=True)) for first, found in counts.items()}
        self.scoped = any(entry.languages for entry in lexicon.entries)


# Each lexicon's table lives as long as the lexicon (weakly keyed, found by equality): a stored
# lexicon's goes when its owner deletes it, an uploaded one's with the request that read it. No
# table is shared between lexicons, so neither their order in a request nor another key's lexicons
# make a new one.
_TABLES: weakref.WeakKeyDictionary[Lexicon, _Table] = weakref.WeakKeyDictionary()


def _table(lexicon: Lexicon) -> _Table:
    """The lexicon's table, built on its first use."""
    table = _TABLES.get(lexicon)
    if table is None:
        table = _TABLES[lexicon] = _Table(lexicon)
    return table


class _Matcher:
    """A request's tables in its lexicons' order (the order breaks ties) and the scope that
    decides which language-scoped entries apply."""

    def __init__(self, tables: Sequence[_Table], code: str | None, script: str | None):
        self.tables, self.code, self.script = tables, code, script

    def apply(self, text: str, out: list[str], budget: int) -> int:
        """Append `text` with aliases to `out`; returns how much more the result may grow (< 0: too much)."""
        clusters = _CLUSTER.findall(text)
        keys = [c.casefold() for c in clusters]
        folded = _SEP.join(keys)  # keys of spans are slices of it, as the tables' keys are joined
        key_starts = list(itertools.accumulate((len(k) + 1 for k in keys), initial=0))
        starts = list(itertools.accumulate(map(len, clusters), initial=0))
        i = 0
        while i < len(clusters):
            counts = self._counts(keys[i])
            found = self._longest(text, folded, key_starts, starts, i, counts) if counts else None
            if found is None:
                out.append(clusters[i])
                i += 1
                continue
            entry, j = found
            out.append(entry.alias)
            budget -= len(entry.alias) - (starts[j] - starts[i])
            if budget < 0:
                return budget
            i = j
        return budget

    def _counts(self, first: str) -> Sequence[int]:
        """The cluster counts of the entries starting with cluster `first`, longest first."""
        found = [counts for table in self.tables if (counts := table.counts.get(first))]
        if len(found) <= 1:
            return found[0] if found else ()
        return sorted(set().union(*found), reverse=True)

    def _longest(self, text: str, folded: str, key_starts: list[int], starts: list[int], i: int,
                 counts: Sequence[int]) -> tuple[LexiconEntry, int] | None:
        """The entry matching at cluster i, longest first, and the cluster after it; None if none."""
        for count in counts:
            j = i + count
            if j >= len(starts):
                continue
            key, a, b = folded[key_starts[i]:key_starts[j] - 1], starts[i], starts[j]
            for table in self.tables:
                for entry in table.entries.get(key, ()):
                    if self._fits(entry, text, a, b):
                        return entry, j
        return None

    def _fits(self, entry: LexiconEntry, text: str, a: int, b: int) -> bool:
        """Whether `entry`, whose key matches text[a:b], applies there: scope, case and word edges."""
        if not _in_scope(entry, self.code, self.script):
            return False
        if entry.case_sensitive and text[a:b] != entry.grapheme:
            return False
        return not (entry.whole_word and ((a > 0 and _is_word(text[a - 1])) or (b < len(text) and _is_word(text[b]))))
