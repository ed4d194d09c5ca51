"""Small I/O helpers shared by the evaluation scorers: markdown tables, CSV and JSONL files.

Library module, no command line::

    from evaluation.report import markdown_table, write_csv
    print(markdown_table(["system", "score"], [["rumik", 0.884]]))
    write_csv("out.csv", ["system", "score"], [["rumik", 0.884]])
    records = read_jsonl("verdicts.jsonl")

Floats are printed with `FLOAT_DIGITS` decimals in markdown and in full in CSV; `None`
prints as an empty cell in CSV and as "n/a" in markdown.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rumik_app.files import atomic_write

FLOAT_DIGITS = 3
MISSING_MARKDOWN = "n/a"


def format_cell(value: object, digits: int = FLOAT_DIGITS) -> str:
    """A value as a markdown cell: floats rounded, None and NaN as "n/a", pipes escaped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING_MARKDOWN
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value).replace("|", "\\|")


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[object]], digits: int = FLOAT_DIGITS) -> str:
    """A GitHub-flavoured markdown table (no trailing newline)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(format_cell(v, digits) for v in row) + " |")
    return "\n".join(lines)


# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection: a
# rater's comment "=HYPERLINK(...)" in an export); such text cells get a leading apostrophe.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A value as a CSV cell: None empty, formula-like text defused, numbers as they are."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def write_csv(path: str | Path, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    """Write a CSV with a header row, atomically (owner-only, like every file written through
    `rumik_app.files`); None becomes an empty cell, formula-like text is defused (`csv_cell`).
    Parent folders are created."""
    def write(f) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", newline="")
        writer = csv.writer(text)
        writer.writerow(headers)
        for row in rows:
            writer.writerow([csv_cell(v) for v in row])
        text.flush()
        text.detach()  # atomic_write flushes, syncs and closes the file itself

    return atomic_write(path, write)


def read_jsonl(path: str | Path) -> list[dict]:
    """Records of a JSONL file (UTF-8); blank lines are skipped."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: str | Path, records: Iterable[Mapping]) -> Path:
    """Write one JSON object per line (UTF-8, non-ASCII kept), atomically; parent folders are created."""
    return atomic_write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
