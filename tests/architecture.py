"""The checks behind tests/test_architecture.py, as functions over a tree (the repository, or a copy
with a mistake planted in it): the module graph and its cycles, the arrows between packages, the
layer and module tables of docs/ARCHITECTURE.md §1, the strings that name a module above the core,
§12's routers and §13's designs. Each returns what it finds wrong, as readable lines (empty: none).
"""

import ast
import re
import subprocess
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


def tracked(*patterns: str, root: Path = ROOT) -> list[Path]:
    if root != ROOT:  # a planted copy: every file in it
        return sorted(p for pattern in patterns for p in root.glob(pattern.replace("*", "**/*", 1)) if p.is_file())
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    return [root / line for line in out.splitlines() if (root / line).is_file()]


def _import_nodes(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def imported_names(path: Path) -> set[str]:
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
    files = [root / "app.py", *tracked(*(f"{p}/*.py" for p in PACKAGES if p != "app"), root=root)]
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
                   for path in ([root / "app.py"] if package == "app" else tracked(f"{package}/*.py", root=root))
                   for name in imported_names(path) & FORBIDDEN[package]})


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
               for p in tracked(f"{package}/*/__init__.py", root=root)}
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
             for path in tracked("rumik_app/*.py", root=root)
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
