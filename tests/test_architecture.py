"""docs/ARCHITECTURE.md against the code: the import arrows of §1, and every citation of a section.

The layers (§1): rumik_app imports none of the other packages (nor gradio or jiwer);
evaluation imports rumik_app; training imports rumik_app and evaluation; the app imports
rumik_app and evaluation; the vLLM plugin imports rumik_app (and vllm); nothing imports app.py. Checked on every import statement,
function-level imports included.
"""

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("rumik_app", "evaluation", "training", "webapp", "benchmarks", "app", "rumik_vllm")
FORBIDDEN = {
    "rumik_app": {"evaluation", "training", "webapp", "benchmarks", "app", "gradio", "jiwer"},
    "evaluation": {"training", "webapp", "benchmarks", "app"},
    "training": {"webapp", "benchmarks", "app"},
    "webapp": {"training", "benchmarks", "app"},
    "benchmarks": {"training", "webapp", "app"},
    "app": {"training", "benchmarks"},
    "rumik_vllm": {"evaluation", "training", "webapp", "benchmarks", "app", "gradio", "jiwer"},
}
CITATION = re.compile(r"ARCHITECTURE\.md (§\d+(?:(?:-|, )§\d+)*)")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def _imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", PACKAGES)
def test_layers_import_only_what_section_1_allows(layer):
    files = [ROOT / "app.py"] if layer == "app" else _tracked(f"{layer}/*.py")
    assert files
    wrong = {f"{p.relative_to(ROOT)} imports {name}" for p in files for name in _imports(p) & FORBIDDEN[layer]}
    assert not wrong, sorted(wrong)


def test_only_the_vllm_backend_imports_the_plugin():
    """vLLM lives in its own environment (§12): everything else must import without it."""
    files = [ROOT / "app.py", *_tracked("rumik_app/*.py", "evaluation/*.py", "training/*.py", "webapp/*.py",
                                        "benchmarks/*.py")]
    users = {str(p.relative_to(ROOT)) for p in files if {"rumik_vllm", "vllm"} & _imports(p)}
    assert users == {"rumik_app/engine/vllm.py"}, sorted(users)


def _sections() -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\. ", DOC.read_text(encoding="utf-8"), flags=re.M)}


def test_every_citation_names_a_section_that_exists():
    sections, cited = _sections(), {}
    assert sections == set(range(1, 14))
    for path in _tracked("*.py", "*.md", "*.toml", "*.json", "*.sh"):
        for match in CITATION.finditer(path.read_text(encoding="utf-8", errors="replace")):
            numbers = [int(n) for n in re.findall(r"\d+", match.group(1))]
            if "-" in match.group(1):  # a range: §1-§5
                numbers = list(range(numbers[0], numbers[-1] + 1))
            for n in numbers:
                cited.setdefault(n, []).append(str(path.relative_to(ROOT)))
    assert cited and set(cited) <= sections, {n: where for n, where in cited.items() if n not in sections}
    assert len(cited) >= 8  # the docstrings do point into it


def test_no_reference_to_the_design_file_outside_the_repository():
    old_style = "DESIGN" + " §"  # the pre-ARCHITECTURE.md citations, to a file that is not in the repository
    stale = [str(p.relative_to(ROOT)) for p in _tracked("*.py", "*.md", "*.toml", "*.json", "*.sh", "*.txt")
             if old_style in p.read_text(encoding="utf-8", errors="replace")]
    assert not stale, stale
