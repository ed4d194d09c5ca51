"""The `rumik` console command (rumik_app.cli): its registered subcommands, their light --help, its errors.

Each `--help` runs in a fresh interpreter, so the check that it imported no torch, transformers
or gradio sees only what that one command imported; `rumik --help` imports none of the command
modules at all (their summaries are read from source).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rumik_app.cli import COMMAND_GROUP, commands, find_command, main, summary

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "gradio")
HELP_PROBE = """
import json, sys
from rumik_app.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit_:
    assert exit_.code in (0, None), exit_.code
print(json.dumps(sorted(name for name in {heavy!r} if name in sys.modules)))
"""


def _python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_help_lists_every_subcommand(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert len(commands()) >= 14 and all(f"  {name} " in out for name in commands())


def test_the_installed_commands_are_pyprojects():
    """The entry points a rumik run finds are the ones pyproject.toml registers (a stale install is
    said here: pip install -e . or ./setup.sh refreshes it)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    registered = declared["project"]["entry-points"][COMMAND_GROUP]
    installed = {name.replace(" ", "."): entry.value for name, entry in commands().items()}
    assert installed == registered, "reinstall: pip install -e ."


def test_a_summary_is_the_first_paragraph_of_the_modules_docstring_and_help_imports_no_command():
    assert summary(commands()["train sft"]) == "Supervised fine-tuning or continued pre-training."
    code = ("import sys\nfrom rumik_app.cli import commands, main\nmain(['--help'])\n"
            "print(sorted(e.module for e in commands().values() if e.module in sys.modules))\n")
    proc = _python("-c", code)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout[-500:] + proc.stderr
    assert "  train sft" in proc.stdout and "Supervised fine-tuning" in proc.stdout


def test_no_command_and_an_unknown_one_exit_2_with_the_list(capsys):
    assert main([]) == 2
    assert main(["synthesise"]) == 2 and "unknown command 'synthesise'" in capsys.readouterr().err
    assert main(["train", "ppo"]) == 2 and "train takes dpo, grpo or sft" in capsys.readouterr().err


def test_two_word_commands_come_before_one_word_ones():
    assert find_command(["train", "sft", "--config", "x.toml"]) == ("train sft", ["--config", "x.toml"])
    assert find_command(["serve", "--port", "1"]) == ("serve", ["--port", "1"])
    assert find_command(["train"]) is None
    assert find_command(["a", "b", "c"], ["a", "a b"]) == ("a b", ["c"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(commands()))
def test_each_help_is_the_modules_own_and_imports_no_torch(name):
    proc = _python("-c", HELP_PROBE.format(heavy=HEAVY), *name.split(), "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    help_text, imported = proc.stdout.rsplit("\n", 2)[0], json.loads(proc.stdout.strip().splitlines()[-1])
    assert help_text.startswith(f"usage: rumik {name}"), help_text[:200]
    assert imported == [], f"`rumik {name} --help` imported {imported}"


def test_the_installed_console_script_runs_a_subcommand():
    rumik = Path(sys.executable).with_name("rumik")
    assert rumik.exists(), "no rumik command next to this interpreter: pip install -e . (./setup.sh)"
    proc = subprocess.run([str(rumik), "normalize", "₹250 on 15/08/2026", "--language", "en"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "rupees" in proc.stdout and "August" in proc.stdout, proc.stderr
