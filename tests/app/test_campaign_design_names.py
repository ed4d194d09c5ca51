"""Nothing outside `webapp/campaign/designs/` tells designs apart by name: in every module of
`webapp/` and `evaluation/` but the designs' own, no design's name is compared (`==`, `!=`, `in`,
`match`), used as a dict key or looked up by subscript or `.get`. The store, queues, page, results
and exports ask the design's record instead (docs/campaigns.md).

Run: .venv/bin/python -m pytest tests/app/test_campaign_design_names.py -q
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.servers import ROOT
from webapp.campaign.designs import names

SCANNED = ("webapp", "evaluation")
DESIGNS_PACKAGE = Path("webapp") / "campaign" / "designs"


def _strings(node: ast.AST) -> list[str]:
    """The string constants `node` is, or holds as a tuple, list or set of constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def name_uses(source: str, design_names: set[str]) -> list[tuple[int, str]]:
    """(line, what) of every place `source` tells designs apart by one of `design_names`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            hits = [s for operand in (node.left, *node.comparators) for s in _strings(operand)]
            kind = "compared"
        elif isinstance(node, ast.Dict):
            hits = [s for key in node.keys if key is not None for s in _strings(key)]
            kind = "a dict key"
        elif isinstance(node, ast.MatchValue):
            hits, kind = _strings(node.value), "a match case"
        elif isinstance(node, ast.Subscript):
            hits, kind = _strings(node.slice), "a subscript"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            hits, kind = (_strings(node.args[0]) if node.args else []), "looked up"
        else:
            continue
        found += [(node.lineno, f"{name!r} {kind}") for name in hits if name in design_names]
    return found


def test_no_module_outside_the_designs_tells_designs_apart_by_name():
    design_names = set(names())
    assert {"ab", "mos", "cmos", "smos", "mushra"} <= design_names
    uses = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if DESIGNS_PACKAGE in path.relative_to(ROOT).parents:
                continue
            uses += [f"{path.relative_to(ROOT)}:{line}: {what}"
                     for line, what in name_uses(path.read_text(encoding="utf-8"), design_names)]
    assert not uses, "\n".join(uses)


def test_the_check_finds_each_kind_of_name_use():
    planted = ('if design == "mos": pass\nok = d in ("ab", "x")\nSCALES = {"mushra": 1}\nSCALES["cmos"]\n'
               'SCALES.get("smos")\nmatch design:\n    case "mos": pass\nfine = "mos-like" == x\n')
    assert [line for line, _ in name_uses(planted, {"ab", "mos", "cmos", "smos", "mushra"})] == [1, 2, 3, 4, 5, 7]
