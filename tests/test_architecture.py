"""docs/ARCHITECTURE.md §1 against the code: no import cycle in any package, the arrows it allows,
the layers inside rumik_app, the module tables, and every citation of a section.

One module graph over every package (rumik_app, rumik_vllm, evaluation, training, webapp,
benchmarks, app.py), built from every import statement of every module, function-level and
`TYPE_CHECKING` ones included, at any depth. It must hold no loop (a strongly connected
component); an arrow between packages must be one the package table allows (rumik_app never
imports rumik_vllm, even lazily: the vLLM backend is found through an entry point); inside
rumik_app no arrow may run from a lower layer to a higher one. The layer table must name every
module of rumik_app and rumik_vllm exactly once, and the package table every subpackage. Each
check is also run on a copy of the tree with a mistake planted in it, and must find it.
"""

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = Path("docs") / "ARCHITECTURE.md"
PACKAGES = ("rumik_app", "rumik_vllm", "evaluation", "training", "webapp", "benchmarks", "app")
# What each package may not import (§1's package table, and libraries the core must not need).
FORBIDDEN = {
    "rumik_app": {"rumik_vllm", "vllm", "evaluation", "training", "webapp", "benchmarks", "app", "gradio", "jiwer"},
    "rumik_vllm": {"evaluation", "training", "webapp", "benchmarks", "app", "gradio", "jiwer"},
    "evaluation": {"rumik_vllm", "vllm", "training", "webapp", "benchmarks", "app"},
    "training": {"rumik_vllm", "vllm", "webapp", "benchmarks", "app"},
    "webapp": {"rumik_vllm", "vllm", "training", "benchmarks", "app"},
    "benchmarks": {"rumik_vllm", "vllm", "webapp", "app"},
    "app": {"rumik_vllm", "vllm", "training", "benchmarks"},
}
# rumik_app's layers, lowest first (§1): a module may import its own layer and the ones below.
# A name is a subpackage (every module in it) or a top-level module of rumik_app.
LAYERS = (
    ("errors", "files", "asgi", "resample", "sqlite"),
    ("watermark",),
    ("prompt", "audio", "cli_args"),
    ("text",),
    ("request",),
    ("align",),
    ("voices",),
    ("model",),
    ("checkpoint",),
    ("decode",),
    ("engine",),
    ("serve",),
    ("cli", "synthesize", "tiny", "normalize", "__init__"),
)
TABLED = ("rumik_app", "rumik_vllm")  # the packages whose every module §1's tables name
# Importable without torch (checked in a fresh interpreter), and the commands whose --help must be.
LIGHT_MODULES = ("rumik_app", "rumik_app.request", "rumik_app.prompt", "rumik_app.errors", "rumik_app.files",
                 "rumik_app.sqlite", "rumik_app.asgi", "rumik_app.audio", "rumik_app.cli", "rumik_app.cli_args",
                 "rumik_app.text", "rumik_app.text.chunking", "rumik_app.text.ssml", "rumik_app.model.tokens",
                 "rumik_app.engine.serving", "rumik_app.engine.planning", "rumik_app.engine.script",
                 "rumik_app.serve.protocol", "rumik_app.serve.adapters", "training.config", "training.cli",
                 "training.grpo.config", "training.dpo.config", "webapp.access", "rumik_app.voices.package",
                 "rumik_app.voices.library", "rumik_app.voices.archive", "rumik_app.watermark", "rumik_app.align",
                 "rumik_app.align.words", "rumik_app.align.captions")
LIGHT_COMMANDS = ("rumik_app.serve", "rumik_app.synthesize")
CITATION = re.compile(r"ARCHITECTURE\.md (§\d+(?:(?:-|, )§\d+)*)")


def _tracked(*patterns: str, root: Path = ROOT) -> list[Path]:
    if root != ROOT:  # a planted copy: every file in it
        return sorted(p for pattern in patterns for p in root.glob(pattern.replace("*", "**/*", 1)) if p.is_file())
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    return [root / line for line in out.splitlines() if (root / line).is_file()]


def _import_nodes(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def _imports(path: Path) -> set[str]:
    """Top-level names of every absolute import in a file."""
    names = set()
    for node in _import_nodes(path):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


# ---------------------------------------------------------------- the module graph


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    files = [root / "app.py", *_tracked(*(f"{p}/*.py" for p in PACKAGES if p != "app"), root=root)]
    return {_module_name(p, root): p for p in files}


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module an import names: the longest dotted prefix that is one of ours."""
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts) or None


def _targets(node, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's own package up
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the project modules it imports (`from pkg import sub` counts as pkg.sub)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = [t for node in _import_nodes(path) for t in _targets(node, name, path.name == "__init__.py")]
        graph[name] = {r for r in (_resolve(t, modules) for t in targets) if r} - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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


def forbidden_arrows(root: Path = ROOT) -> list[str]:
    """Every import of a package (or library) that §1 does not allow its importer."""
    return sorted({f"{path.relative_to(root)} imports {name}" for package in PACKAGES
                   for path in ([root / "app.py"] if package == "app" else _tracked(f"{package}/*.py", root=root))
                   for name in _imports(path) & FORBIDDEN[package]})


def _layer(module: str) -> int:
    part = module.split(".")[1] if "." in module else "__init__"
    for rank, names in enumerate(LAYERS):
        if part in names:
            return rank
    raise AssertionError(f"{module} is in no layer of LAYERS (add it to docs/ARCHITECTURE.md §1 and here)")


def upward_arrows(graph: dict[str, set[str]]) -> list[str]:
    core = {src: {dst for dst in edges if dst.split(".")[0] == "rumik_app"} for src, edges in graph.items()
            if src.split(".")[0] == "rumik_app"}
    return [f"{src} (layer {_layer(src)}) imports {dst} (layer {_layer(dst)})"
            for src, edges in core.items() for dst in edges if _layer(dst) > _layer(src)]


# ---------------------------------------------------------------- §1's tables


def _section_1(root: Path) -> str:
    text = (root / DOC).read_text(encoding="utf-8")
    return text[text.index("## 1. "): text.index("## 2. ")]


def table_modules(root: Path = ROOT) -> dict[str, list[str]]:
    """package -> the modules §1's tables name for it: each row of a layer or module table whose
    first cell holds a package's folder (`serve/`, `rumik_vllm/`) or its top-level modules, and
    whose second cell lists the modules (`schema`, `openai/routes`, `__init__`)."""
    named: dict[str, list[str]] = {}
    for line in _section_1(root).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[1].startswith("`"):
            continue
        first = re.findall(r"`([\w/]+)`", cells[0])
        listed = re.findall(r"`([\w/]+)`", cells[1])
        folder = first[0].rstrip("/") if len(first) == 1 and first[0].endswith("/") else None
        if folder in TABLED:  # a package of its own
            named.setdefault(folder, []).extend(f"{folder}.{m}".replace("/", ".") for m in listed)
        elif folder is not None:  # a subpackage of rumik_app
            named.setdefault("rumik_app", []).extend(f"rumik_app.{folder}.{m}".replace("/", ".") for m in listed)
        else:
            named.setdefault("rumik_app", []).extend(f"rumik_app.{m}" for m in listed)
    return {package: [m.removesuffix(".__init__") for m in names] for package, names in named.items()}


def table_drift(root: Path = ROOT) -> list[str]:
    """Modules the tables name twice or that do not exist, and modules they leave out."""
    actual = _modules(root)
    wrong = []
    for package, named in table_modules(root).items():
        files = sorted(m for m in actual if m.split(".")[0] == package)
        wrong += [f"§1 names {m} twice" for m in sorted({m for m in named if named.count(m) > 1})]
        wrong += [f"§1 names {m}, which does not exist" for m in sorted(set(named) - set(files))]
        wrong += [f"{m} is missing from §1's table" for m in files if m not in named]
    return wrong


def missing_subpackages(root: Path = ROOT) -> list[str]:
    section = _section_1(root)
    folders = {p.parent.relative_to(root) for package in PACKAGES if package != "app"
               for p in _tracked(f"{package}/*/__init__.py", root=root)}
    return sorted(str(f) for f in folders if f"`{f.name}/`" not in section)


# ---------------------------------------------------------------- the tests


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_any_package():
    graph = module_graph()
    assert len(graph) > 150 and graph["rumik_vllm.engine"] and graph["evaluation.asr"]  # the walk sees the tree
    assert {module.split(".")[0] for module in graph} == set(PACKAGES)
    assert cycles(graph) == []


def test_every_arrow_between_packages_is_one_section_1_allows():
    assert forbidden_arrows() == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
    assert upward_arrows(module_graph()) == []


def test_section_1_names_every_module_of_the_core_and_the_vllm_backend():
    named = table_modules()
    assert set(named) == set(TABLED) and len(named["rumik_app"]) > 60 and "rumik_app.serve.openai.routes" in named[
        "rumik_app"]
    assert table_drift() == []
    assert missing_subpackages() == []


def test_the_layer_table_names_every_rumik_app_layer():
    section = _section_1(ROOT)
    missing = [name for names in LAYERS[:-1] for name in names if f"`{name}" not in section]
    assert not missing, missing


def _planted_copy(tmp_path: Path) -> Path:
    """The packages' Python files and the docs, copied, for planting a mistake."""
    copy = tmp_path / "tree"
    for path in _tracked("*.py", "docs/*.md"):
        if path.relative_to(ROOT).parts[0] in (*PACKAGES, "app.py", "docs"):
            target = copy / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, target)
    return copy


def _plant(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + f"\n\ndef _planted():\n    {line}\n", encoding="utf-8")


def test_each_check_finds_a_mistake_planted_in_a_copy_of_the_tree(tmp_path):
    copy = _planted_copy(tmp_path)
    assert cycles(module_graph(copy)) == [] and forbidden_arrows(copy) == [] and table_drift(copy) == []
    _plant(copy / "evaluation" / "metrics.py", "from evaluation.run import main")  # run imports metrics
    assert any({"evaluation.metrics", "evaluation.run"} <= set(loop) for loop in cycles(module_graph(copy)))
    _plant(copy / "rumik_app" / "engine" / "loading.py", "import rumik_vllm.engine")
    assert "rumik_app/engine/loading.py imports rumik_vllm" in forbidden_arrows(copy)
    _plant(copy / "rumik_app" / "request.py", "from rumik_app.engine.local import TTSEngine")
    assert any(a.startswith("rumik_app.request (layer 4) imports rumik_app.engine.local") for a in
               upward_arrows(module_graph(copy)))
    (copy / "rumik_app" / "serve" / "extra.py").write_text('"""A module nobody wrote into §1."""\n')
    assert table_drift(copy) == ["rumik_app.serve.extra is missing from §1's table"]
    (copy / "rumik_app" / "serve" / "extra.py").unlink()
    (copy / "rumik_vllm" / "loop.py").unlink()
    assert table_drift(copy) == ["§1 names rumik_vllm.loop, which does not exist"]


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


def test_only_rumik_vllm_imports_vllm():
    """vLLM lives in its own environment (§12): everything else must import without it."""
    files = [ROOT / "app.py", *_tracked(*(f"{p}/*.py" for p in PACKAGES if p != "app"))]
    users = {str(p.relative_to(ROOT)) for p in files if "vllm" in _imports(p)}
    assert users and all(user.startswith("rumik_vllm/") for user in users), sorted(users)


# ---------------------------------------------------------------- the document


def _sections() -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\. ", (ROOT / DOC).read_text(encoding="utf-8"), flags=re.M)}


def test_every_citation_names_a_section_that_exists():
    sections, cited = _sections(), {}
    assert sections == set(range(1, 17))
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


def test_no_issue_numbers_in_code():
    """Code says what it does and why; which issue asked for it is the history's (git log, the notes)."""
    cited = re.compile(r"\bissue\s*#?\d+", re.IGNORECASE)
    stale = [str(p.relative_to(ROOT)) for p in _tracked("*.py", "*.sh", "*.toml", "*.js", "*.css")
             if cited.search(p.read_text(encoding="utf-8", errors="replace"))]
    assert not stale, stale
