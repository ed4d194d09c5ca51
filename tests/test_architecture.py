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

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.architecture import (
    DESIGNS_FOLDER,
    DOC,
    LAYERED,
    PACKAGES,
    ROOT,
    TABLED,
    code_designs,
    code_routers,
    cycles,
    design_drift,
    forbidden_arrows,
    hidden_imports,
    imported_names,
    layer_drift,
    layer_tables,
    missing_subpackages,
    module_graph,
    router_drift,
    table_drift,
    table_modules,
    tracked,
    upward_arrows,
)

# Importable without torch (checked in a fresh interpreter), and the commands whose --help must be.
LIGHT_MODULES = ("rumik_app", "rumik_app.request", "rumik_app.settings", "rumik_app.prompt", "rumik_app.errors",
                 "rumik_app.files", "rumik_app.environment", "rumik_app.sqlite", "rumik_app.asgi", "rumik_app.audio",
                 "rumik_app.cli",
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
    for path in tracked("*.py", "docs/*.md"):
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
    files = [ROOT / "app.py", *tracked(*(f"{p}/*.py" for p in PACKAGES if p != "app"))]
    users = {str(p.relative_to(ROOT)) for p in files if "vllm" in imported_names(p)}
    assert users and all(user.startswith("rumik_vllm/") for user in users), sorted(users)


# ---------------------------------------------------------------- the document


def _sections() -> set[int]:
    return {int(n) for n in re.findall(r"^## (\d+)\. ", (ROOT / DOC).read_text(encoding="utf-8"), flags=re.M)}


def test_every_citation_names_a_section_that_exists():
    sections, cited = _sections(), {}
    assert sections == set(range(1, 17))
    for path in tracked("*.py", "*.md", "*.toml", "*.json", "*.sh"):
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
    stale = [str(p.relative_to(ROOT)) for p in tracked("*.py", "*.md", "*.toml", "*.json", "*.sh", "*.txt")
             if old_style in p.read_text(encoding="utf-8", errors="replace")]
    assert not stale, stale


def test_no_issue_numbers_in_code():
    """Code says what it does and why; which issue asked for it is the history's (git log, the notes)."""
    cited = re.compile(r"\bissue\s*#?\d+", re.IGNORECASE)
    stale = [str(p.relative_to(ROOT)) for p in tracked("*.py", "*.sh", "*.toml", "*.js", "*.css")
             if cited.search(p.read_text(encoding="utf-8", errors="replace"))]
    assert not stale, stale
