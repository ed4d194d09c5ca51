"""Lexicon files ("Say it right"): PLS, TSV and JSON read into and written from a
`rumik_app.text.lexicon.Lexicon` (the data model, its bounds and the matching live there).

    from rumik_app.text.lexicon_io import load_lexicon, read_lexicon, to_json, to_pls, to_tsv
    lexicon = load_lexicon("brands.pls")                     # .pls/.xml, .tsv or .json (else sniffed)
    read_lexicon(to_pls(lexicon)) == lexicon                 # to_tsv, to_json: the same entries
    read_lexicon("SBI\tएस बी आई\thi\n", "tsv", name="banks")  # fmt None: sniff_format(data)

Formats (each reads back to the same entries; an error names the line, lexeme or entry):
- PLS 1.0: `<lexicon version="1.0" xmlns="http://www.w3.org/2005/01/pronunciation-lexicon"
  alphabet="ipa" xml:lang="hi-IN"><lexeme><grapheme>SBI</grapheme><alias>एस बी आई</alias>
  </lexeme></lexicon>`. A lexeme may give several graphemes (an entry each); its alias is the
  one with prefer="true", else the first; a lexeme with a `<phoneme>` and no alias is refused.
  xml:lang scopes every entry ("mul" or "und": every language); per lexeme, attributes in
  xmlns:rumik="urn:x-rumik:lexicon" override: `rumik:languages="hi,mr"`,
  `rumik:case-sensitive="true"`, `rumik:whole-word="false"`; `<meta name="name" content=..>`
  names it. Parsed by defusedxml only: no DTD, no entities, at most MAX_XML_DEPTH levels.
- TSV (UTF-8), an entry a line: `grapheme<TAB>alias[<TAB>languages[<TAB>flags]]`; languages
  comma-separated codes or names (empty: all); flags comma-separated: `case-sensitive`,
  `inside-words` (not whole-word). An optional first line `grapheme<TAB>alias...` is a header;
  blank lines are skipped; no comments (a grapheme may start with "#"). Carries no name.
- JSON: `{"name": "banks", "entries": [{"grapheme": "SBI", "alias": "एस बी आई", "languages":
  ["hi"], "case_sensitive": false, "whole_word": true}]}`; only grapheme and alias are
  required; unknown keys are refused.

Every document or file is at most MAX_LEXICON_BYTES (checked before parsing); an error is a
PromptError(field="lexicon") naming the limit or the place and the fix.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal
from xml.sax.saxutils import escape, quoteattr

from rumik_app.errors import PromptError
from rumik_app.text.languages import LANGUAGE_BY_CODE
from rumik_app.text.lexicon import (
    DEFAULT_NAME,
    MAX_LEXICON_BYTES,
    MAX_LEXICONS,
    MAX_NAME_CHARS,
    Lexicon,
    lexicon_from_dict,
    lexicon_from_rows,
    lexicon_to_dict,
)

MAX_XML_DEPTH = 32  # a lexicon needs 3 (lexicon > lexeme > grapheme); <metadata> may nest a little

Format = Literal["pls", "tsv", "json"]
SUFFIX_FORMATS: dict[str, Format] = {".pls": "pls", ".xml": "pls", ".tsv": "tsv", ".json": "json"}
PLS_NS = "http://www.w3.org/2005/01/pronunciation-lexicon"
RUMIK_NS = "urn:x-rumik:lexicon"
TSV_HEADER = ("grapheme", "alias", "languages", "flags")
TSV_FLAGS = ("case-sensitive", "inside-words")
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def _error(message: str) -> PromptError:  # as rumik_app.text.lexicon's
    return PromptError(message, field="lexicon")


def _shown(value: object) -> str:  # as rumik_app.text.lexicon's
    text = repr(value)
    return text if len(text) <= 42 else text[:40] + "…'"


# ---------------------------------------------------------------------------------------
# Reading

def read_lexicon(data: str | bytes, fmt: Format | None = None, name: str | None = None) -> Lexicon:
    """A Lexicon from a PLS, TSV or JSON document (fmt None: `sniff_format`). Named `name`,
    else the document's own name (JSON "name", PLS meta), else DEFAULT_NAME."""
    return _read(data, fmt, name, DEFAULT_NAME)


def load_lexicon(path: str | Path, fmt: Format | None = None, name: str | None = None) -> Lexicon:
    """A Lexicon from a file, at most MAX_LEXICON_BYTES read: format by suffix (.pls .xml .tsv
    .json, else sniffed); named `name`, else the document's own name, else the file's stem."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_LEXICON_BYTES + 1)
    except OSError as exc:
        raise _error(f"Cannot read lexicon file {str(path)!r}: {exc.strerror or exc}. Check the path.") from None
    fallback = path.stem[:MAX_NAME_CHARS] or DEFAULT_NAME
    return _read(data, fmt or SUFFIX_FORMATS.get(path.suffix.lower()), name, fallback)


def sniff_format(data: str | bytes) -> Format:
    """"pls" when the document starts with "<" (or a UTF-16 mark), "json" with "{" or "[", else "tsv"."""
    if isinstance(data, bytes) and data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "pls"  # only XML says its own encoding
    head = (data[:64].decode("utf-8", "ignore") if isinstance(data, bytes) else data[:64]).lstrip("\ufeff \t\r\n")
    return "pls" if head.startswith("<") else "json" if head.startswith(("{", "[")) else "tsv"


def _read(data: str | bytes, fmt: str | None, name: str | None, fallback: str) -> Lexicon:
    if not isinstance(data, (str, bytes)):
        raise _error(f"A lexicon document is text or bytes, not {type(data).__name__}.")
    if isinstance(data, bytes) or len(data) > MAX_LEXICON_BYTES:  # UTF-8 has at least a byte a character
        size = len(data)
    else:
        size = len(data.encode("utf-8", "surrogatepass"))
    if size > MAX_LEXICON_BYTES:
        raise _error(f"The lexicon is over {MAX_LEXICON_BYTES:,} bytes (the limit, 1 MB); split it into several "
                     f"lexicons (up to {MAX_LEXICONS} per request).")
    fmt = fmt or sniff_format(data)
    if fmt == "json":
        return lexicon_from_dict(_json(_text(data)), name, fallback)
    if fmt == "tsv":
        return lexicon_from_rows(_tsv_rows(_text(data)), name or fallback)
    if fmt == "pls":
        root, ns = _parse_pls(data)
        own = next((m.get("content") for m in root.iterfind(f"{ns}meta") if m.get("name") == "name"), None)
        return lexicon_from_rows(_pls_rows(root, ns), name or own or fallback)
    raise _error(f"Unknown lexicon format {fmt!r}: use 'pls', 'tsv' or 'json'.")


def _text(data: str | bytes) -> str:
    if isinstance(data, str):
        return data.lstrip("\ufeff")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _error("The lexicon is not UTF-8 text; save it as UTF-8.") from None


def _tsv_rows(text: str) -> Iterator[tuple[str, dict]]:
    first = True
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split("\t")
        header, first = first and [c.strip().lower() for c in cells[:2]] == ["grapheme", "alias"], False
        if header:
            continue
        if not 2 <= len(cells) <= 4:
            raise _error(f"TSV line {number} has {len(cells)} column(s); write grapheme<TAB>alias[<TAB>languages"
                         "[<TAB>flags]], separated by tabs (not spaces).")
        grapheme, alias, languages, flags = (*cells, "", "")[:4]
        names = [f.strip().lower() for f in flags.split(",") if f.strip()]
        if unknown := [f for f in names if f not in TSV_FLAGS]:
            raise _error(f"TSV line {number}: unknown flag {_shown(unknown[0])}; flags are {', '.join(TSV_FLAGS)}.")
        yield f"line {number}", {"grapheme": grapheme, "alias": alias, "languages": languages,
                                 "case_sensitive": "case-sensitive" in names, "whole_word": "inside-words" not in names}


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _error(f"The lexicon is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}).") from None
    except RecursionError:
        raise _error('The JSON lexicon nests too deeply; a lexicon is {"name": ..., "entries": [...]}.') from None


class _Reader:
    """A file over `data` that reads slices (io.StringIO would copy a text at 4 bytes a character)."""

    def __init__(self, data: str | bytes):
        self.data, self.position = data, 0

    def read(self, size: int = -1) -> str | bytes:
        chunk = self.data[self.position:None if size < 0 else self.position + size]
        self.position += len(chunk)
        return chunk


def _parse_pls(data: str | bytes):
    """(root element, namespace prefix) of a PLS document, parsed by defusedxml: no DTD, no entities."""
    from xml.etree.ElementTree import ParseError

    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import iterparse

    depth, root = 0, None
    try:
        for event, element in iterparse(_Reader(data), events=("start", "end"), forbid_dtd=True):
            depth += 1 if event == "start" else -1
            if depth > MAX_XML_DEPTH:
                raise _error(f"The PLS lexicon nests elements more than {MAX_XML_DEPTH} deep; a lexicon needs 3 "
                             "(lexicon > lexeme > grapheme, alias).")
            root = element if root is None else root
    except DefusedXmlException:
        raise _error("The PLS lexicon declares a DTD or entities, which are refused (they can blow a small file up "
                     "to gigabytes or read local files); remove <!DOCTYPE ...> and write the characters.") from None
    except ParseError as exc:
        raise _error(f"The PLS lexicon is not well-formed XML: {exc}.") from None
    if root.tag not in (f"{{{PLS_NS}}}lexicon", "lexicon"):
        raise _error(f'This is not a PLS lexicon: the root element must be <lexicon xmlns="{PLS_NS}">.')
    if root.get("version", "1.0") != "1.0":
        raise _error(f'PLS version {_shown(root.get("version"))} is not supported; write version="1.0".')
    return root, root.tag[:-len("lexicon")]


def _pls_rows(root, ns: str) -> Iterator[tuple[str, dict]]:
    tag = root.get(_XML_LANG) or ""
    primary = tag.replace("_", "-").split("-")[0].strip().lower()
    if primary not in ("mul", "und", "zxx", "") and primary not in LANGUAGE_BY_CODE:
        raise _error(f"The PLS lexicon's xml:lang {_shown(tag)} is not a language this model speaks; use one of "
                     f"its codes ({', '.join(LANGUAGE_BY_CODE)}) or \"mul\" for every language.")
    languages = (primary,) if primary in LANGUAGE_BY_CODE else ()
    for number, lexeme in enumerate(root.iterfind(f"{ns}lexeme"), 1):
        yield from _lexeme_rows(lexeme, f"lexeme {number}", ns, languages)


def _lexeme_rows(lexeme, where: str, ns: str, languages: tuple[str, ...]) -> Iterator[tuple[str, dict]]:
    graphemes = ["".join(g.itertext()) for g in lexeme.iterfind(f"{ns}grapheme")]
    aliases = lexeme.findall(f"{ns}alias")
    if not graphemes:
        raise _error(f"PLS {where} has no <grapheme>; each lexeme needs the written word.")
    if not aliases:
        fix = ("gives a <phoneme> but no <alias>: this model reads text, not phonemes, so write the pronunciation "
               "as an <alias> (the text to say instead)") if lexeme.find(f"{ns}phoneme") is not None else \
            "has no <alias> (the text to say instead)"
        raise _error(f"PLS {where} ({_shown(graphemes[0].strip())}) {fix}.")
    alias = "".join(next((a for a in aliases if a.get("prefer") == "true"), aliases[0]).itertext())
    fields = {"alias": alias, "languages": lexeme.get(f"{{{RUMIK_NS}}}languages", languages)}
    for attribute, default in (("case-sensitive", "false"), ("whole-word", "true")):
        if (value := lexeme.get(f"{{{RUMIK_NS}}}{attribute}", default)) not in ("true", "false"):
            raise _error(f'PLS {where}: rumik:{attribute} is {_shown(value)}; write "true" or "false".')
        fields[attribute.replace("-", "_")] = value == "true"
    for grapheme in graphemes:
        yield where, {"grapheme": grapheme, **fields}


# ---------------------------------------------------------------------------------------
# Writing

def to_json(lexicon: Lexicon) -> str:
    """JSON with an entry a line."""
    entries = ",\n".join("  " + json.dumps(e, ensure_ascii=False) for e in lexicon_to_dict(lexicon)["entries"])
    return f'{{"name": {json.dumps(lexicon.name, ensure_ascii=False)}, "entries": [\n{entries}\n]}}\n'


def to_tsv(lexicon: Lexicon) -> str:
    """TSV with a header; trailing empty columns left out. It carries no name (a file's is its stem)."""
    rows = ["\t".join(TSV_HEADER)]
    for e in lexicon.entries:
        flags = ",".join(f for f, on in zip(TSV_FLAGS, (e.case_sensitive, not e.whole_word), strict=True) if on)
        cells = [e.grapheme, e.alias, ",".join(e.languages), flags]
        rows.append("\t".join(cells[:4 if flags else 3 if e.languages else 2]))
    return "\n".join(rows) + "\n"


def to_pls(lexicon: Lexicon) -> str:
    """PLS 1.0: xml:lang is the entries' one shared language, else "mul" and rumik:languages per lexeme."""
    scopes = {e.languages for e in lexicon.entries}
    shared = next(iter(scopes)) if len(scopes) == 1 and len(next(iter(scopes))) == 1 else ()
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             f'<lexicon version="1.0" xmlns="{PLS_NS}" xmlns:rumik="{RUMIK_NS}" alphabet="ipa" '
             f'xml:lang="{shared[0] if shared else "mul"}">',
             f'  <meta name="name" content={quoteattr(lexicon.name)}/>']
    for e in lexicon.entries:
        attributes = f" rumik:languages={quoteattr(','.join(e.languages))}" if e.languages != shared else ""
        attributes += ' rumik:case-sensitive="true"' * e.case_sensitive
        attributes += ' rumik:whole-word="false"' * (not e.whole_word)
        lines.append(f"  <lexeme{attributes}><grapheme>{escape(e.grapheme)}</grapheme>"
                     f"<alias>{escape(e.alias)}</alias></lexeme>")
    return "\n".join([*lines, "</lexicon>"]) + "\n"
