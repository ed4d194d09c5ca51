"""docs/ARCHITECTURE.md against the code: the import arrows of §1, inside rumik_app too, and
every citation of a section.

Between packages (§1): rumik_app imports none of the other packages (nor gradio or jiwer);
evaluation imports rumik_app; training imports rumik_app and evaluation; the app imports
rumik_app and evaluation; the vLLM plugin imports rumik_app (and vllm); nothing imports app.py.
Inside rumik_app: no import cycle between its modules, and no arrow from a lower layer to a
higher one (the layer table of §1). Every import statement counts, function-level ones
included, at any depth.
"""

import ast
import re
import subprocess
import sys
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
# rumik_app's layers, lowest first (§1): a module may import its own layer and the ones below.
# A name is a subpackage (every module in it) or a top-level module of rumik_app.
LAYERS = (
    ("errors", "files"),
    ("prompt", "audio", "cli_args"),
    ("text",),
    ("request",),
    ("model",),
    ("checkpoint",),
    ("decode",),
    ("engine",),
    ("serve",),
    ("synthesize", "tiny", "normalize", "__init__"),
)
# Importable without torch (checked in a fresh interpreter), and the commands whose --help must be.
LIGHT_MODULES = ("rumik_app", "rumik_app.request", "rumik_app.prompt", "rumik_app.errors", "rumik_app.files",
                 "rumik_app.audio", "rumik_app.cli_args", "rumik_app.text", "rumik_app.text.chunking",
                 "rumik_app.model.tokens", "rumik_app.serve.protocol", "rumik_app.serve.adapters",
                 "training.config")
LIGHT_COMMANDS = ("rumik_app.serve", "rumik_app.synthesize")
CITATION = re.compile(r"ARCHITECTURE\.md (§\d+(?:(?:-|, )§\d+)*)")


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).is_file()]


def _import_nodes(path: Path):
    return [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file."""
    names = set()
    for node in _import_nodes(path):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


# ---------------------------------------------------------------- inside rumik_app


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _core_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in _tracked("rumik_app/*.py")}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The rumik_app module an import names: the longest dotted prefix that is one."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or None


def _module_graph() -> dict[str, set[str]]:
    """module -> the rumik_app modules it imports (`from pkg import sub` counts as pkg.sub)."""
    modules = _core_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in _import_nodes(path):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif node.level == 0 and node.module:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                targets = []
            edges |= {t for t in (_resolve(t, modules) for t in targets if t.startswith("rumik_app")) if t}
        graph[name] = edges - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on_stack.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    for rank, names in enumerate(LAYERS):
        if part in names:
            return rank
    raise AssertionError(f"{module} is in no layer of LAYERS (add it to docs/ARCHITECTURE.md §1 and here)")


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_inside_rumik_app():
    graph = _module_graph()
    assert len(graph) > 40 and graph["rumik_app.engine.vllm"]  # the walk sees the tree
    assert _cycles(graph) == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
    wrong = [f"{src} (layer {_layer(src)}) imports {dst} (layer {_layer(dst)})"
             for src, edges in _module_graph().items() for dst in edges if _layer(dst) > _layer(src)]
    assert not wrong, wrong


def test_light_modules_and_commands_do_not_import_torch():
    code = ("import importlib, sys\n"
            f"for name in {LIGHT_MODULES!r}:\n    importlib.import_module(name)\n"
            "from rumik_app import SynthesisRequest\nSynthesisRequest('नमस्ते <laugh>').prompt()\n"
            "heavy = sorted({'torch', 'transformers', 'fastapi'} & set(sys.modules))\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for command in LIGHT_COMMANDS:  # --help runs the whole argument parser, then exits
        code = (f"import runpy, sys\nsys.argv = ['{command}', '--help']\n"
                f"try:\n    runpy.run_module('{command}', run_name='__main__', alter_sys=True)\n"
                "except SystemExit:\n    pass\nassert 'torch' not in sys.modules, 'torch was imported'\n")
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "usage:" in proc.stdout, (command, proc.stderr)


# ---------------------------------------------------------------- between packages


@pytest.mark.parametrize("layer", PACKAGES)
def test_layers_import_only_what_section_1_allows(layer):
    files = [ROOT / "app.py"] if layer == "app" else _tracked(f"{layer}/*.py")
    assert files
    wrong = {f"{p.relative_to(ROOT)} imports {name}" for p in files for name in _imports(p) & FORBIDDEN[layer]}
    assert not wrong, sorted(wrong)


def test_only_the_vllm_engine_imports_the_plugin():
    """vLLM lives in its own environment (§12): everything else must import without it."""
    files = [ROOT / "app.py", *_tracked("rumik_app/*.py", "evaluation/*.py", "training/*.py", "webapp/*.py",
                                        "benchmarks/*.py")]
    users = {str(p.relative_to(ROOT)) for p in files if {"rumik_vllm", "vllm"} & _imports(p)}
    assert users == {"rumik_app/engine/vllm.py"}, sorted(users)


# ---------------------------------------------------------------- the document


def _sections() -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\. ", DOC.read_text(encoding="utf-8"), flags=re.M)}


def test_every_citation_names_a_section_that_exists():
    sections, cited = _sections(), {}
    assert sections == set(range(1, 16))
    for path in _tracked("*.py", "*.md", "*.toml", "*.json", "*.sh"):
        for match in CITATION.finditer(path.read_text(encoding="utf-8", errors="replace")):
            numbers = [int(n) for n in re.findall(r"\d+", match.group(1))]
            if "-" in match.group(1):  # a range: §1-§5
                numbers = list(range(numbers[0], numbers[-1] + 1))
            for n in numbers:
                cited.setdefault(n, []).append(str(path.relative_to(ROOT)))
    assert cited and set(cited) <= sections, {n: where for n, where in cited.items() if n not in sections}
    assert len(cited) >= 8  # the docstrings do point into it


def test_the_layer_table_names_every_rumik_app_layer():
    text = DOC.read_text(encoding="utf-8")
    missing = [name for names in LAYERS[:-1] for name in names if f"`{name}" not in text]
    assert not missing, missing


def test_no_reference_to_the_design_file_outside_the_repository():
    old_style = "DESIGN" + " §"  # the pre-ARCHITECTURE.md citations, to a file that is not in the repository
    stale = [str(p.relative_to(ROOT)) for p in _tracked("*.py", "*.md", "*.toml", "*.json", "*.sh", "*.txt")
             if old_style in p.read_text(encoding="utf-8", errors="replace")]
    assert not stale, stale
