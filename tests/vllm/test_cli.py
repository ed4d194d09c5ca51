"""`python -m rumik_app.synthesize --backend vllm` as a user runs it, from the vLLM environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from tests.vllm.conftest import SKIP_REASON

pytest.importorskip("vllm", reason=SKIP_REASON)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_cli_streams_a_wav_through_vllm(calibrated, tmp_path):
    out = tmp_path / "v.wav"
    proc = subprocess.run(
        [sys.executable, "-m", "rumik_app.synthesize", "--backend", "vllm", "--model", str(calibrated[0]),
         "--text", "नमस्ते <laugh> दोस्तों", "--seed", "3", "--max-seconds", "0.64", "--stream", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = sf.info(out)
    assert info.samplerate == 24_000 and info.channels == 1 and info.frames > 0
    assert "seed 3" in proc.stdout and "first audio after" in proc.stdout
    lines = proc.stdout.splitlines()  # only the tool's two lines: vLLM logs go to stderr
    assert len(lines) == 2 and lines[0].startswith("wrote ") and " tokens in " in lines[1]
