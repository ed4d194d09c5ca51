"""docs/ARCHITECTURE.md §1 and §12 against the code: no import cycle in any package, the arrows §1
allows, the layers inside rumik_app, training and webapp, the module tables, the server's routers,
and every citation of a section.

One module graph over every package (rumik_app, rumik_vllm, evaluation, training, webapp,
benchmarks, app.py), built from every import statement of every module, function-level and
`TYPE_CHECKING` ones included, at any depth. It must hold no loop (a strongly connected
component); an arrow between packages must be one the package table allows (rumik_app never
imports rumik_vllm, even lazily: the vLLM backend is found through an entry point); inside
a layered package (§1's layer tables: rumik_app, training, webapp) no arrow may run from a lower
layer to a higher one, and every module is in one layer. An import the graph cannot see is a
string: no string in rumik_app names a module of a package above it (its commands, backends and
aligners are entry points). The module tables must name every module of rumik_app and rumik_vllm
exactly once, and §1 every subpackage; §12's router table lists `rumik_app.serve.app.ROUTERS` in
order. Each check is also run on a copy of the tree with a mistake planted in it, and must find it.
"""

import ast
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
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
# The packages §1 gives a layer table ("**Inside `PACKAGE`**"), lowest layer first: a module may import
# its own layer and the ones below. A layer names top-level modules (`errors`), folders at any depth
# (`serve/`, `campaign/designs/`: every module under it) or modules inside folders (`voice/cli`); a module
# belongs to the longest name that holds it.
LAYERED = ("rumik_app", "training", "webapp")
# Packages whose modules rumik_app may not name even in a string (an importlib call, an entry point value).
ABOVE_THE_CORE = ("rumik_vllm", "evaluation", "training", "webapp", "benchmarks")
IMPORTERS = ("import_module", "__import__", "find_spec", "resolve_name")
ROUTERS_FILE = Path("rumik_app") / "serve" / "app.py"
DESIGNS_FOLDER = Path("webapp") / "campaign" / "designs"
TABLED = ("rumik_app", "rumik_vllm")  # the packages whose every module §1's tables name
# Importable without torch (checked in a fresh interpreter), and the commands whose --help must be.
LIGHT_MODULES = ("rumik_app", "rumik_app.request", "rumik_app.settings", "rumik_app.prompt", "rumik_app.errors",
                 "rumik_app.files", "rumik_app.sqlite", "rumik_app.asgi", "rumik_app.audio", "rumik_app.cli",
                 "rumik_app.cli_args", "rumik_app.text", "rumik_app.text.chunking", "rumik_app.text.ssml",
                 "rumik_app.model.tokens", "rumik_app.engine.serving", "rumik_app.engine.planning",
                 "rumik_app.engine.script", "rumik_app.serve.protocol", "rumik_app.serve.adapters",
                 "rumik_app.voices.package", "rumik_app.voices.library", "rumik_app.voices.archive",
                 "rumik_app.watermark", "rumik_app.align", "rumik_app.align.words", "rumik_app.align.captions",
                 "training.config", "training.cli", "training.audio.vad", "training.audio.levels",
                 "training.grpo.config", "training.dpo.config", "training.sft.__main__", "training.grpo.__main__",
                 "training.dpo.__main__", "webapp.access")
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


# ---------------------------------------------------------------- the document's tables


def _section(root: Path, number: int) -> str:
    text = (root / DOC).read_text(encoding="utf-8")
    start = text.index(f"## {number}. ")
    following = re.search(r"^## \d+\. ", text[start + 1:], flags=re.M)
    return text[start: start + 1 + following.start()] if following else text[start:]


@dataclass
class Table:
    """A Markdown table of the document: the package a "**Inside `PACKAGE`**" line before it names
    (None before the first), its header cells and its rows' cells."""

    package: str | None
    header: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[Table]:
    """Every table in `text`, in order."""
    found, package, current = [], None, None
    for line in text.splitlines():
        inside = re.match(r"\*\*Inside `(\w+)`\*\*", line)
        package = inside.group(1) if inside else package
        if not line.startswith("|"):
            current = None
        elif current is None:
            current = Table(package, _cells(line), [])
            found.append(current)
        elif not set(line.strip()) <= set("|-: "):  # not the header's rule
            current.rows.append(_cells(line))
    return found


def _names(cell: str) -> list[str]:
    return re.findall(r"`([\w/.]+)`", cell)


def layer_tables(root: Path = ROOT) -> dict[str, list[list[str]]]:
    """package -> its layers, lowest first, each the names in its row's first cell (`errors`, `text/`)."""
    return {table.package: [_names(row[0]) for row in table.rows] for table in tables(_section(root, 1))
            if table.package and table.header[0].startswith("layer")}


def _holds(name: str, module: str) -> int:
    """How many path parts of `module` (`training.voice.cli`) a layer's name (`voice/`, `voice/cli`)
    covers, or 0 when it does not hold the module. The package itself is `__init__`."""
    parts = module.split(".")[1:] or ["__init__"]
    named = name.rstrip("/").split("/")
    return len(named) if (parts[: len(named)] if name.endswith("/") else parts) == named else 0


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The layer (0 = lowest) whose longest name holds `module`, or None."""
    depth, rank = max(((_holds(name, module), rank) for rank, names in enumerate(layers) for name in names),
                      default=(0, None))
    return rank if depth else None


def layer_drift(root: Path = ROOT) -> list[str]:
    """Modules of a layered package in no layer, and layer names that hold no module or come twice."""
    modules, wrong = _modules(root), []
    for package, layers in layer_tables(root).items():
        inside = sorted(m for m in modules if m.split(".")[0] == package)
        named = [name for names in layers for name in names]
        wrong += [f"§1's {package} layers name {n} twice" for n in sorted({n for n in named if named.count(n) > 1})]
        wrong += [f"§1's {package} layers name {n}, which holds no module" for n in named
                  if not any(_holds(n, m) for m in inside)]
        wrong += [f"{m} is in no layer of §1's {package} table" for m in inside if layer_of(m, layers) is None]
    return wrong


def upward_arrows(graph: dict[str, set[str]], root: Path = ROOT) -> list[str]:
    """Arrows inside a layered package from a lower layer to a higher one."""
    layered, out = layer_tables(root), []
    for src, edges in graph.items():
        package = src.split(".")[0]
        for dst in (d for d in edges if d.split(".")[0] == package and package in layered):
            low, high = layer_of(src, layered[package]), layer_of(dst, layered[package])
            if None not in (low, high) and high > low:
                out.append(f"{src} (layer {low}) imports {dst} (layer {high})")
    return sorted(out)


def table_modules(root: Path = ROOT) -> dict[str, list[str]]:
    """package -> the modules §1's tables name for it: each row of a table with a `modules` column, whose
    first cell holds a package's folder (`rumik_vllm/`), a subpackage's (`serve/`) or top-level modules,
    and whose `modules` cell lists them (`schema`, `openai/routes`, `__init__`)."""
    named: dict[str, list[str]] = {}
    for table in tables(_section(root, 1)):
        column = table.header.index("modules") if "modules" in table.header else 0
        for row in table.rows if column else ():
            first, listed = _names(row[0]), _names(row[column])
            folder = first[0].rstrip("/") if len(first) == 1 and first[0].endswith("/") else None
            package = folder if folder in TABLED else table.package
            prefix = package if folder in (None, package) else f"{package}.{folder}"
            named.setdefault(package, []).extend(f"{prefix}.{m}".replace("/", ".") for m in listed)
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
    section = _section(root, 1)
    folders = {p.parent.relative_to(root) for package in PACKAGES if package != "app"
               for p in _tracked(f"{package}/*/__init__.py", root=root)}
    return sorted(str(f) for f in folders if f"`{f.name}/`" not in section)


# ---------------------------------------------------------------- what the graph cannot see


def _names_above(node: ast.AST) -> str | None:
    """What `node` names of a package above the core, if it is a string that does (hidden_imports)."""
    above = "|".join(ABOVE_THE_CORE)
    if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in IMPORTERS:
        first = node.args[0] if node.args else None
        value = first.value if isinstance(first, ast.Constant) else None
        return value if isinstance(value, str) and re.fullmatch(rf"(?:{above})(?:[.:][\w.:]*)?", value) else None
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return ast.unparse(node) if re.match(rf"(?:{above})[.:]", str(node.values[0].value)) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.strip()
        return text if re.fullmatch(rf"(?:{above})(?:\.\w+)*(?::[\w.]+)?", text) and re.search("[.:]", text) else None
    return None


def hidden_imports(root: Path = ROOT) -> list[str]:
    """Strings in rumik_app that name a module of a package above it: a dotted path or an entry point
    value (`"webapp.main"`, `"evaluation.aligners:CTCFolderAligner"`), an f-string that starts as one
    (`f"training.{wing}"`), or any of those packages given to an importer (`import_module("webapp")`)."""
    found = {f"{path.relative_to(root)}:{node.lineno} names {named!r}"
             for path in _tracked("rumik_app/*.py", root=root)
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if (named := _names_above(node)) is not None}
    return sorted(found)


# ---------------------------------------------------------------- §12's routers


def code_routers(root: Path = ROOT) -> list[str]:
    """The modules of `rumik_app.serve.app.ROUTERS`' routers in order, relative to rumik_app.serve
    (`openai.routes`), from the file's imports and its ROUTERS tuple of `MODULE.router`."""
    tree = ast.parse((root / ROUTERS_FILE).read_text(encoding="utf-8"))
    modules = {alias.asname or alias.name: f"{node.module}.{alias.name}" for node in tree.body
               if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    routers = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                   and any(getattr(target, "id", None) == "ROUTERS" for target in node.targets))
    assert all(isinstance(e, ast.Attribute) and e.attr == "router" and isinstance(e.value, ast.Name)
               for e in routers.elts), "ROUTERS holds something other than MODULE.router"
    return [modules[e.value.id].removeprefix("rumik_app.serve.") for e in routers.elts]


def _first_cells(root: Path, number: int, after: str) -> list[str]:
    """The names in the first column of section `number`'s first table after the text `after`."""
    section = _section(root, number)
    return [_names(row[0])[0] for row in tables(section[section.index(after):])[0].rows]


def documented_routers(root: Path = ROOT) -> list[str]:
    """The first cells of §12's router table: the table after the line that names `ROUTERS`."""
    return _first_cells(root, 12, "`rumik_app.serve.app.ROUTERS`")


def router_drift(root: Path = ROOT) -> list[str]:
    """Routers §12 leaves out, lists without ROUTERS including them, or lists in another order."""
    code, doc = code_routers(root), documented_routers(root)
    wrong = [f"{r} is missing from §12's router table" for r in code if r not in doc]
    wrong += [f"§12 lists {r}, which ROUTERS does not include" for r in doc if r not in code]
    if not wrong and code != doc:
        wrong.append(f"§12 lists the routers in another order than ROUTERS: {doc} != {code}")
    return wrong


# ---------------------------------------------------------------- §13's designs


def code_designs(root: Path = ROOT) -> list[str]:
    """The modules of webapp/campaign/designs/ that define a design (a top-level `DESIGN = ...`), sorted."""
    found = []
    for path in sorted((root / DESIGNS_FOLDER).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DESIGN" for t in node.targets)
               for node in tree.body):
            found.append(path.stem)
    return found


def documented_designs(root: Path = ROOT) -> list[str]:
    """The first cells of §13's designs table: the table after the line that introduces it."""
    return _first_cells(root, 13, "The designs, one module of `webapp/campaign/designs/` each")


def design_drift(root: Path = ROOT) -> list[str]:
    """Designs §13 leaves out, and designs it lists that no module defines."""
    code, doc = code_designs(root), documented_designs(root)
    return ([f"the design {d} is missing from §13's designs table" for d in code if d not in doc]
            + [f"§13 lists the design {d}, which no module of {DESIGNS_FOLDER} defines" for d in doc if d not in code])


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


def test_section_1_layers_rumik_app_training_and_webapp():
    layers = layer_tables()
    assert set(layers) == set(LAYERED) and all(len(layers[package]) >= 5 for package in LAYERED), layers
    assert layer_drift() == []


def test_the_core_names_no_module_above_it_even_in_a_string():
    """Its subcommands, backends and aligners are entry points (pyproject.toml), so every arrow out of
    rumik_app is an import statement the graph sees."""
    assert hidden_imports() == []


def test_section_13_lists_every_listening_test_design():
    assert code_designs() == ["ab", "cmos", "mos", "mushra", "smos"]
    assert design_drift() == []


def test_section_12_lists_the_servers_routers_in_order():
    assert len(code_routers()) >= 8 and "openai.routes" in code_routers()
    assert router_drift() == []


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
               upward_arrows(module_graph(copy), copy))
    (copy / "rumik_app" / "serve" / "extra.py").write_text('"""A module nobody wrote into §1."""\n')
    assert table_drift(copy) == ["rumik_app.serve.extra is missing from §1's table"]
    (copy / "rumik_app" / "serve" / "extra.py").unlink()
    (copy / "rumik_vllm" / "loop.py").unlink()
    assert table_drift(copy) == ["§1 names rumik_vllm.loop, which does not exist"]


def test_the_layer_string_and_router_checks_find_a_mistake_planted_in_a_copy_of_the_tree(tmp_path):
    copy = _planted_copy(tmp_path)
    assert upward_arrows(module_graph(copy), copy) == [] and layer_drift(copy) == []
    assert hidden_imports(copy) == [] and router_drift(copy) == []
    _plant(copy / "training" / "prepare" / "rows.py", "from training.voice.data import Clip")  # prepare/ < voice/
    _plant(copy / "webapp" / "storage.py", "from webapp.campaign.cli import main")  # storage < campaign/
    arrows = upward_arrows(module_graph(copy), copy)
    assert [a.split(" (layer")[0] + " -> " + a.split(" imports ")[1].split(" (")[0] for a in arrows] == [
        "training.prepare.rows -> training.voice.data", "webapp.storage -> webapp.campaign.cli"], arrows
    (copy / "training" / "extra").mkdir()
    (copy / "training" / "extra" / "__init__.py").write_text('"""A folder no layer holds."""\n')
    assert layer_drift(copy) == ["training.extra is in no layer of §1's training table"]
    cli = copy / "rumik_app" / "cli.py"
    _plant(cli, 'importlib.import_module("webapp.main")')  # an arrow the graph cannot see
    assert "webapp.main" not in module_graph(copy)["rumik_app.cli"]
    line = len(cli.read_text(encoding="utf-8").splitlines())
    assert hidden_imports(copy) == [f"rumik_app/cli.py:{line} names 'webapp.main'"]
    doc = copy / DOC
    text = doc.read_text(encoding="utf-8")
    doc.write_text("".join(row for row in text.splitlines(keepends=True) if not row.startswith("| `ops` |")),
                   encoding="utf-8")
    assert router_drift(copy) == ["ops is missing from §12's router table"]
    assert design_drift(copy) == []
    (copy / DESIGNS_FOLDER / "pref3.py").write_text('"""A design nobody wrote into §13."""\nDESIGN = None\n')
    assert design_drift(copy) == ["the design pref3 is missing from §13's designs table"]


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
