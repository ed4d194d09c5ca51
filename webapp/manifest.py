"""The Evaluate tab's reference manifest: a CSV or JSONL file, streamed and bounded.

Library module (no command line; no gradio), below `webapp.scoring`, which reads a visitor's
manifest through it:

    from webapp.manifest import read_manifest
    info, notes = read_manifest("refs.jsonl", ["a.wav", "b.wav"])
    info["a.wav"]  # {"text": "...", "language": "hi", "transcript": None}

A manifest is a CSV (columns) or a JSONL file (`.jsonl`/`.ndjson`, one object a line, keys)
with the same names: `file` (or `id`, `clip`, `path`, `filename`), `text` (or `reference`,
`ref`), optional `language` and `transcript` (or `hyp`); a file is matched by its name or its
name without extension (`name_index`, which the typed references use too), in a dict (a folder
in the manifest's path is ignored). It is streamed a row at a time and only the uploaded
clips' rows are kept (the first row of a clip wins; the notes name clips listed again);
MAX_MANIFEST_ROWS, MAX_MANIFEST_ROW_CHARS and MAX_MANIFEST_FIELD_CHARS bound it, each refusal
a ValueError whose message names the limit and the fix.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

from webapp.uploads import MAX_CLIPS, MAX_NOTES

# A manifest (CSV or JSONL) is streamed: these bound what one row and the whole file may cost.
MAX_MANIFEST_ROWS = 50_000  # a whole test set's manifest; only the uploaded clips' rows are kept
MAX_MANIFEST_FIELD_CHARS = 20_000  # one reference or transcript: a 300 s clip's text, with room
MAX_MANIFEST_ROW_CHARS = 100_000  # one CSV row (which may span lines) or JSONL line, every column
MANIFEST_FILE_KEYS = ("file", "id", "clip", "path", "filename")
MANIFEST_TEXT_KEYS = ("text", "reference", "ref")
MANIFEST_HYP_KEYS = ("transcript", "hyp")
JSONL_SUFFIXES = (".jsonl", ".ndjson")


def name_index(names: Sequence[str]) -> dict[str, str]:
    """Every key a clip may be named by -> its file name: the file name, and the name without
    its extension (the first clip in file-name order keeps a stem two clips share)."""
    index = {name: name for name in names}
    for name in names:
        index.setdefault(Path(name).stem, name)
    return index


class _Records:
    """A manifest's lines for csv.reader (or one JSONL line at a time), refusing a record over
    MAX_MANIFEST_ROW_CHARS characters before it is read whole; `next_record()` starts the next."""

    def __init__(self, fh):
        self.fh, self.used, self.number = fh, 0, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.fh.readline(MAX_MANIFEST_ROW_CHARS + 1 - self.used)
        if not line:
            raise StopIteration
        self.used += len(line)
        if self.used > MAX_MANIFEST_ROW_CHARS:
            raise ValueError(f"Row {self.number + 1} of the manifest is over {MAX_MANIFEST_ROW_CHARS:,} characters; "
                             f"each row may hold at most {MAX_MANIFEST_ROW_CHARS:,} (one reference at most "
                             f"{MAX_MANIFEST_FIELD_CHARS:,}). Shorten it.")
        return line

    def next_record(self) -> None:
        self.used = 0
        self.number += 1
        if self.number > MAX_MANIFEST_ROWS:
            raise ValueError(f"The manifest has more than {MAX_MANIFEST_ROWS:,} rows, the most one run reads. Keep "
                             f"the rows of the clips you upload (at most {MAX_CLIPS} a run) and try again.")


def _csv_rows(records: _Records) -> Iterator[dict[str, object]]:
    """A CSV manifest's rows as {lower-case column: value}, one at a time."""
    reader = csv.reader(records)
    header = next(reader, None)
    if header is None:
        raise ValueError("The manifest CSV has no rows.")
    columns = [c.strip().lower() for c in header]
    if not any(c in columns for c in MANIFEST_FILE_KEYS) or not any(c in columns for c in MANIFEST_TEXT_KEYS):
        shown = ", ".join(f"`{c[:40]}`" for c in columns[:10] if c) + (", ..." if len(columns) > 10 else "")
        raise ValueError(f"The manifest needs a `file` and a `text` column; it has {shown or 'none'}.")
    records.used = 0  # rows are counted from the first below the header
    for row in reader:
        records.next_record()
        if row:  # a blank line
            yield dict(zip(columns, row + [""] * (len(columns) - len(row)), strict=False))


def _jsonl_rows(records: _Records) -> Iterator[dict[str, object]]:
    """A JSONL manifest's rows (one JSON object a line) as {lower-case key: value}, one at a time."""
    for line in records:
        records.next_record()
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"Line {records.number} of the manifest is not JSON; a JSONL manifest has one object "
                             'a line, e.g. {"file": "a.wav", "text": "..."}.') from None
        if not isinstance(row, dict):
            raise ValueError(f"Line {records.number} of the manifest is not a JSON object "
                             '(e.g. {"file": "a.wav", "text": "..."}).')
        yield {str(k).strip().lower(): v for k, v in row.items()}


def _field(row: dict[str, object], keys: Sequence[str], number: int) -> str | None:
    """The first of `keys` in `row` as text (None if absent); ValueError if over the field cap or not text."""
    key = next((k for k in keys if k in row), None)
    if key is None:
        return None
    value = row[key]
    if value is None or isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = "" if value is None else str(value)
    else:
        raise ValueError(f"Row {number} of the manifest: `{key}` must be text.")
    if len(text) > MAX_MANIFEST_FIELD_CHARS:
        raise ValueError(f"Row {number} of the manifest: `{key}` is {len(text):,} characters; the limit is "
                         f"{MAX_MANIFEST_FIELD_CHARS:,}. Split the clip or shorten the text.")
    return text


def read_manifest(path: str | Path, names: list[str]) -> tuple[dict[str, dict], list[str]]:
    """({uploaded file name: {"text", "language", "transcript"}}, notes) from a CSV or JSONL
    (`.jsonl`, `.ndjson`) manifest, streamed: only the rows of uploaded clips are kept, the first
    row of a clip wins (the notes say which clips were listed again). ValueError naming the
    problem and the fix: a missing column, more than MAX_MANIFEST_ROWS rows, a row over
    MAX_MANIFEST_ROW_CHARS or a field over MAX_MANIFEST_FIELD_CHARS characters, not UTF-8."""
    index, out, repeats = name_index(names), {}, Counter()
    with open(path, newline="", encoding="utf-8-sig") as fh:
        records = _Records(fh)
        rows = _jsonl_rows(records) if Path(path).suffix.lower() in JSONL_SUFFIXES else _csv_rows(records)
        try:
            for row in rows:
                _keep_row(row, records.number, index, out, repeats)
        except UnicodeDecodeError:
            raise ValueError("The manifest is not UTF-8 text; save it as UTF-8 (CSV UTF-8, or JSONL).") from None
        except csv.Error as exc:
            raise ValueError(f"Row {records.number} of the manifest is not valid CSV ({exc}); save it as CSV "
                             "UTF-8.") from None
    if records.number == 0:
        raise ValueError("The manifest has no rows.")
    return out, _capped([f"The manifest lists `{n}` {k + 1} times; its first row was used."
                         for n, k in sorted(repeats.items())])


def _capped(notes: list[str]) -> list[str]:
    """At most MAX_NOTES notes, then one line saying how many more."""
    more = len(notes) - MAX_NOTES
    return notes[:MAX_NOTES] + ([f"... and {more} more like that."] if more > 0 else [])


def _keep_row(row: dict, number: int, index: dict[str, str], out: dict[str, dict], repeats: Counter) -> None:
    """Check one manifest row's fields and keep it in `out` if it names an uploaded clip first."""
    key, text = _field(row, MANIFEST_FILE_KEYS, number), _field(row, MANIFEST_TEXT_KEYS, number)
    if key is None:
        raise ValueError(f"Row {number} of the manifest names no clip: give it a `file` key (or "
                         f"{', '.join(MANIFEST_FILE_KEYS[1:])}).")
    lang, hyp = _field(row, ("language",), number), _field(row, MANIFEST_HYP_KEYS, number)
    name = index.get(re.split(r"[\\/]", key.strip())[-1])
    if name is None:
        return
    if name in out:
        repeats[name] += 1
        return
    out[name] = {"text": text or "", "language": lang or "", "transcript": hyp}
