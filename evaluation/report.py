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


def write_csv(path: str | Path, headers: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    """Write a CSV with a header row; None becomes an empty cell. Parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(headers)
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """Records of a JSONL file (UTF-8); blank lines are skipped."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_jsonl(path: str | Path, records: Iterable[Mapping]) -> Path:
    """Write one JSON object per line (UTF-8, non-ASCII kept), atomically; parent folders are created."""
    return atomic_write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
