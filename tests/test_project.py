"""The project's own checks: lint (ruff), the docs site (`mkdocs build --strict`), the README's
size, and the lists that must agree (pyproject's pins, the Space's requirements.txt, the apt list).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_README_LINES = 250


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_ruff_finds_nothing():
    proc = _run("ruff", "check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.mark.slow
def test_the_docs_site_builds_strictly(tmp_path):
    proc = _run("mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").exists()


def test_the_readme_fits_a_few_screens():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {MAX_README_LINES})"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pins(lines: list[str]) -> set[str]:
    return {line.strip() for line in lines if line.strip() and not line.lstrip().startswith(("#", "rumik-oss"))}


def test_every_dependency_is_pinned_exactly():
    project = _project()
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    loose = [r for r in _pins(requirements) if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][0-9A-Za-z.+]*", r)]
    assert loose == []


def test_the_spaces_requirements_are_the_app_extras_pins():
    project = _project()
    extras = project["optional-dependencies"]
    expected = _pins(project["dependencies"] + extras["eval"] + extras["app"])
    assert _pins((ROOT / "requirements.txt").read_text().splitlines()) == expected


def _apt(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def test_one_apt_list_read_by_setup_and_quoted_by_the_docs():
    packages = _apt((ROOT / "packages.txt").read_text())
    setup = (ROOT / "setup.sh").read_text()
    assert "packages.txt" in setup and "APT_PACKAGES=\"$(grep" in setup  # setup.sh reads the file itself
    dev_only = re.search(r'^DEV_APT_PACKAGES="([^"]*)"', setup, re.M).group(1).split()
    install = (ROOT / "docs" / "install.md").read_text()
    quoted = re.search(r"apt-get install (?:-y )?([a-z0-9\- ]+)", install)
    assert quoted, "docs/install.md quotes the apt-get install line"
    assert quoted.group(1).split() == packages + dev_only
