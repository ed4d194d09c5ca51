"""Say it right in the Synthesise tab: a visitor's lexicon, SSML and dialogue scripts.

Library module for `webapp.synth_tab` (no command line; gradio is not imported here):

    lexicons = read_lexicon_upload(path)          # () without an upload; PromptError naming the file
    mine = read_lexicon_editor(rows)              # the editor's table: () when every row is blank
    note = lexicon_note(mine, lexicons)           # the preview's line about them ("" without any)
    kind = script_kind(text, dialogue=True)       # "dialogue", "ssml" (text starts with <speak>) or None
    parts = script_parts(kind, fields, voices=engine.voices, gap_s=0.3, limits=APP_LIMITS)
    result = synthesize_script(engine, parts, limits=APP_LIMITS)   # rumik_app.engine.script
    info = spans_table(result.spans)              # Markdown: one row per part, speaker, start, end

The lexicon is an input of the visitor's own event (Gradio hands over its temporary upload),
so it applies to that visitor's requests only; nothing here keeps it. The upload is refused
before it is read when its name is not .pls/.xml/.tsv/.json or it is over the lexicon
module's MAX_LEXICON_BYTES; a bad document is the lexicon module's PromptError, naming the
file (never the server's path).

The lexicon editor ("My words") is a table of grapheme | alias | languages rows, also an input
of the visitor's own events: its non-blank rows make one Lexicon (EDITOR_NAME), listed before
the uploaded file's, so on a tie (the same word in both) the table's alias wins. It is bounded
like a file: at most MAX_EDITOR_ROWS rows (blank ones count: the table is refused before any
row is read), EDITOR_COLUMNS cells a row, each cell within the lexicon module's limits
(MAX_GRAPHEME_CHARS, MAX_ALIAS_CHARS; MAX_LANGUAGES_CHARS for the languages cell). A bad row is
one PromptError(field "lexicon") naming the row as the table numbers it.

A script (SSML or a dialogue) is several requests joined with exact pauses: the form's other
fields (voice, seed, sampling, lexicons, ...) make the base request every part starts from,
built with the script's first text in place of the form's text (the raw SSML or script is not
a request's text: `validate_text` refuses `<speak>` as an unknown tag). The script's typed and
spoken totals and its audio budget are checked by `plan_script` against the app's limits.
Only rumik engines speak scripts: `NEEDS_ENGINE` is the refusal for other systems (espeak-ng
reads lexicons, through the request's spoken text, but neither SSML nor dialogue).
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path

from rumik_app.engine.script import DEFAULT_GAP_SECONDS, Part, build_script
from rumik_app.errors import PromptError
from rumik_app.request import APP_LIMITS, RequestLimits
from rumik_app.text.lexicon import MAX_ALIAS_CHARS, MAX_ENTRIES, MAX_LEXICON_BYTES, Lexicon, LexiconEntry
from rumik_app.text.lexicon_io import SUFFIX_FORMATS, load_lexicon
from rumik_app.text.ssml import is_ssml

LEXICON_SUFFIXES = tuple(SUFFIX_FORMATS)  # .pls .xml .tsv .json
MAX_GAP_SECONDS = 2.0  # the app's dialogue gap slider (the library allows up to MAX_PAUSE_SECONDS)
DEFAULT_GAP = DEFAULT_GAP_SECONDS
KIND_SSML, KIND_DIALOGUE = "ssml", "dialogue"
KIND_NAMES = {KIND_SSML: "SSML", KIND_DIALOGUE: "dialogue"}
NEEDS_ENGINE = ("{what} needs a rumik system (rumik-oss-1 or tiny); {label} reads plain text only. Choose "
                "rumik-oss-1 under System, or {fix}.")
NEEDS_ENGINE_FIX = {KIND_SSML: "write plain text (without <speak>)", KIND_DIALOGUE: "turn Dialogue off"}
# parse_dialogue's hint for the Python API's `speakers` mapping, which the app does not offer
STREAM_NOTE = ("SSML and dialogue scripts are made whole, then played: the player gets them in one piece, "
               "not while they are generated.")
TEXT_CELL_CHARS = 40
EDITOR_COLUMNS = ("grapheme", "alias", "languages")  # the lexicon editor's table, in this order
EDITOR_NAME = "my words"  # the editor's Lexicon
EDITOR_ROWS = 4  # blank rows the editor starts with
MAX_EDITOR_ROWS = 200  # rows in the editor's table (a file takes up to MAX_ENTRIES entries)
MAX_LANGUAGES_CHARS = MAX_ALIAS_CHARS  # the languages cell ("hi, mr" or names); grapheme and alias: LexiconEntry's
EDITOR_MORE = (f"Put longer lists in a lexicon file (PLS, TSV or JSON, up to {MAX_ENTRIES:,} entries) and upload "
               "it instead.")


def read_lexicon_upload(path: str | None) -> tuple[Lexicon, ...]:
    """The lexicon of a visitor's upload (Gradio's temporary copy), as a request's `lexicons`;
    () without one. PromptError(field "lexicon") names the file by its own name, never the path."""
    if not path:
        return ()
    path = Path(str(path))
    name = path.name
    if path.suffix.lower() not in LEXICON_SUFFIXES:
        raise PromptError(f"Lexicon file {name!r}: not a lexicon ({path.suffix or 'no extension'}). Upload a PLS "
                          "(.pls or .xml), TSV (.tsv) or JSON (.json) file.", field="lexicon")
    try:
        size = path.stat().st_size
    except OSError:
        raise PromptError(f"Lexicon file {name!r} is no longer on the server; upload it again.",
                          field="lexicon") from None
    if size > MAX_LEXICON_BYTES:
        raise PromptError(f"Lexicon file {name!r} is {size / 1e6:.1f} MB; the limit is {MAX_LEXICON_BYTES / 1e6:g} MB. "
                          "Split it or drop entries you do not need.", field="lexicon")
    try:
        return (load_lexicon(path),)
    except PromptError as exc:
        message = str(exc).replace(str(path), name)
        if name not in message:
            message = f"Lexicon file {name!r}: {message}"
        raise PromptError(message, field="lexicon") from None


def _blank(cell: object) -> bool:
    return cell is None or (isinstance(cell, str) and not cell.strip())


def editor_rows(value: object) -> list:
    """The rows of the editor's value: None, a list of rows, or the API's {"headers", "data"} object."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        value = value.get("data")
        if value is None:
            return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise PromptError(f"My words: the table must be a list of rows ({' | '.join(EDITOR_COLUMNS)}).",
                          field="lexicon")
    return list(value)


def read_lexicon_editor(value: object) -> tuple[Lexicon, ...]:
    """The lexicon editor's table as a request's `lexicons`: one Lexicon (EDITOR_NAME) of its
    non-blank rows, in order; () when every row is blank. PromptError(field "lexicon") for more
    than MAX_EDITOR_ROWS rows, or naming the first bad row (1-based, as the table shows it)."""
    rows = editor_rows(value)
    if len(rows) > MAX_EDITOR_ROWS:
        raise PromptError(f"My words: the table has {len(rows):,} rows; the limit is {MAX_EDITOR_ROWS}. Remove rows "
                          f"you do not need. {EDITOR_MORE}", field="lexicon")
    entries: list[LexiconEntry] = []
    for number, row in enumerate(rows, 1):
        where = f"My words, row {number}"
        if isinstance(row, (str, bytes)) or not isinstance(row, Sequence):
            raise PromptError(f"{where}: a row is a list of cells ({' | '.join(EDITOR_COLUMNS)}).", field="lexicon")
        if all(_blank(cell) for cell in row):
            continue
        if any(not _blank(cell) for cell in row[len(EDITOR_COLUMNS):]):
            raise PromptError(f"{where} has {len(row)} cells; the table has {len(EDITOR_COLUMNS)} columns: "
                              f"{', '.join(EDITOR_COLUMNS)}.", field="lexicon")
        grapheme, alias, languages = (list(row[:len(EDITOR_COLUMNS)]) + [None] * len(EDITOR_COLUMNS))[:3]
        if isinstance(languages, str) and len(languages.strip()) > MAX_LANGUAGES_CHARS:
            raise PromptError(f"{where}: the languages cell is {len(languages.strip()):,} characters; the limit is "
                              f"{MAX_LANGUAGES_CHARS:,}. List language codes such as hi, mr.", field="lexicon")
        try:
            entries.append(LexiconEntry("" if grapheme is None else grapheme, "" if alias is None else alias,
                                        languages=() if _blank(languages) else languages))
        except PromptError as exc:
            raise PromptError(f"{where}: {exc}", field="lexicon") from None
    return (Lexicon(EDITOR_NAME, tuple(entries)),) if entries else ()


def _entries(n: int) -> str:
    return f"{n:,} entr{'y' if n == 1 else 'ies'}"


def _code(name: str) -> str:
    """A lexicon's name inside a Markdown code span (a backtick would end it)."""
    return name.replace("`", "'")


def lexicon_note(mine: Sequence[Lexicon], uploaded: Sequence[Lexicon]) -> str:
    """The preview's line about the visitor's lexicons (the editor's, the uploaded file's); "" without any."""
    named = [f"*My words* ({_entries(len(lex.entries))})" for lex in mine]
    named += [f"your lexicon `{_code(lex.name)}` ({_entries(len(lex.entries))})" for lex in uploaded]
    if not named:
        return ""
    text = " and ".join(named)
    one = len(named) == 1
    tie = "" if one else " (where both give the same word, *My words* wins)"
    return (f"{text[0].upper()}{text[1:]} appl{'ies' if one else 'y'} to your requests only{tie}: the prompt shows "
            f"{'its' if one else 'their'} aliases.")


def script_kind(text: str | None, dialogue: bool) -> str | None:
    """KIND_DIALOGUE when Dialogue is on, KIND_SSML for text starting with <speak>, else None."""
    ssml = is_ssml(text or "")
    if dialogue and ssml:
        raise PromptError("Dialogue is on, but this text is SSML: a dialogue is `Name: text` lines. Turn Dialogue "
                          "off to speak SSML (its <voice name> changes speakers).", field="text")
    return KIND_DIALOGUE if dialogue else KIND_SSML if ssml else None


def check_gap(value: object) -> float:
    """The dialogue gap in seconds: a number 0 to MAX_GAP_SECONDS (None: the default)."""
    if value is None:
        return DEFAULT_GAP
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    if not ok or not 0.0 <= value <= MAX_GAP_SECONDS:
        raise PromptError(f"Gap between turns {value!r} is out of range: use 0 to {MAX_GAP_SECONDS:g} seconds.",
                          field="dialogue_gap")
    return float(value)


def script_parts(kind: str, fields: Mapping[str, object], voices: Sequence[str], gap_s: float = DEFAULT_GAP,
                 limits: RequestLimits = APP_LIMITS, **build) -> list[Part]:
    """The parts of the script in `fields["text"]` (`kind`: KIND_SSML or KIND_DIALOGUE), each
    a request made from the other fields (`rumik_app.engine.script.build_script`); `build`
    goes on to `build_request` (tokens_for). PromptError names what is wrong (the line, the element)."""
    if kind not in (KIND_DIALOGUE, KIND_SSML):
        raise ValueError(f"unknown script kind {kind!r}")
    return build_script(fields, dialogue=kind == KIND_DIALOGUE, gap_s=gap_s, voices=tuple(voices), limits=limits,
                        **build)


def script_prompts(parts: Sequence[Part], voices: Sequence[str], max_chars: int) -> str:
    """The preview of a script: each part's exact prompt on a line, each pause as a line."""
    lines = []
    for part in parts:
        if part.request is not None:
            lines.append("[BOS]" + part.request.prompt(voices=voices, max_chars=max_chars))
        if part.pause_after_s:
            lines.append(f"[{part.pause_after_s:g} s of silence]")
    return "\n".join(lines)


def script_summary(kind: str, parts: Sequence[Part]) -> str:
    """One line: what the script holds ("Dialogue: 3 turns by Ira, Aisha; 0.6 s of pauses.")."""
    spoken = [p for p in parts if p.request is not None]
    pauses = sum(p.pause_after_s for p in parts)
    speakers = ", ".join(dict.fromkeys(p.speaker or p.request.voice for p in spoken))
    unit = "turn" if kind == KIND_DIALOGUE else "part"
    name = KIND_NAMES[kind]
    return (f"{name[0].upper() + name[1:]}: {len(spoken)} {unit}{'s' * (len(spoken) != 1)} by {speakers}; "
            f"{pauses:g} s of pauses. {STREAM_NOTE}")


def _cell(text: str) -> str:
    """Visitor text safe in a Markdown table cell: shortened, HTML and Markdown escaped."""
    text = " ".join(text.split())
    text = text if len(text) <= TEXT_CELL_CHARS else text[:TEXT_CELL_CHARS - 1] + "…"
    text = html.escape(text, quote=False)
    return "".join("\\" + ch if ch in "\\`*_[]()#+!|~" else ch for ch in text)


def spans_table(spans: Sequence[Mapping]) -> str:
    """The parts of a spoken script as a Markdown table: speaker, start and end (seconds), pause
    after, seed and the start of its text; a pause-only part says so."""
    rows = ["| # | Speaker | Start (s) | End (s) | Pause after (s) | Seed | Text |", "|---|---|---|---|---|---|---|"]
    for span in spans:
        speaker = _cell(span["speaker"] or "(pause)")
        seed = "" if span["seed"] is None else str(span["seed"])
        rows.append(f"| {span['index'] + 1} | {speaker} | {span['start']:.2f} | {span['end']:.2f} | "
                    f"{span['pause_after']:.2f} | {seed} | {_cell(span['text'])} |")
    return "\n".join(rows)
