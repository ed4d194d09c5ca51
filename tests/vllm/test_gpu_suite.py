"""`benchmarks/gpu_suite.sh --smoke`: the one GPU script's CPU dry run, every step at tiny size.

Whoever is first lent a GPU runs `benchmarks/gpu_suite.sh` there in one go; this keeps the
script working in between (it needs both backends, so it runs from the vLLM environment).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = ("gpu_speed", "gpu_speed_int8", "serve_load", "grpo_rollouts")


@pytest.mark.slow
def test_the_gpu_suite_dry_run_fills_every_table(tmp_path):
    out = tmp_path / "suite"
    proc = subprocess.run(["bash", "benchmarks/gpu_suite.sh", "--smoke", "--out", str(out)], cwd=ROOT,
                          env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=1500)
    summary = (out / "README.md").read_text()
    assert proc.returncode == 0, summary + proc.stdout[-3000:] + proc.stderr[-3000:]
    for step in STEPS:
        assert f"| {step} | ok |" in summary, summary
        table = (out / f"{step}.md").read_text()
        assert table.count("|") > 10 and "FAILED" not in table, (step, table[-2000:])  # a whole table
        assert (out / f"{step}.json").exists()
