"""What the suite's CPU went to, from a run with RUMIK_TEST_CPU_LOG=DIR (tests/conftest.py).

    RUMIK_TEST_CPU_LOG=/tmp/cpu .venv/bin/python -m pytest
    .venv/bin/python -m tests.cpu_report /tmp/cpu --top 25      # modules by CPU seconds, then tests

Wall time under xdist mixes work with waiting for a core; CPU seconds (the worker's own and its
reaped children's) are what the suite's cores must fit, so this is the table to cut from.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def read_rows(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.open(encoding="utf-8")]


def table(totals: Counter, walls: Counter, top: int, title: str) -> str:
    lines = [f"| {title} | CPU s | wall s |", "|---|---:|---:|"]
    lines += [f"| `{name}` | {cpu:.0f} | {walls[name]:.0f} |" for name, cpu in totals.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    rows = read_rows(args.folder)
    tests, test_walls, modules, module_walls = Counter(), Counter(), Counter(), Counter()
    for row in rows:
        cpu, module = row["cpu_s"] + row["children_cpu_s"], row["test"].split("::", 1)[0]
        tests[row["test"]] += cpu
        test_walls[row["test"]] += row["wall_s"]
        modules[module] += cpu
        module_walls[module] += row["wall_s"]
    print(f"{len(rows)} tests, {sum(tests.values()):.0f} CPU s in all\n")
    print(table(modules, module_walls, args.top, "module") + "\n")
    print(table(tests, test_walls, args.top, "test"))


if __name__ == "__main__":
    main()
