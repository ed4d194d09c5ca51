"""`python -m rumik_app.synthesize --backend vllm` as a user runs it, from the vLLM environment, and
`load_engine(..., backend="vllm")` from `python - <<EOF` with no main guard (vLLM's spawned engine
process used to re-import `__main__` there and fail with "Failed core proc(s): {}")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

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


STDIN_SCRIPT = """
from rumik_app import SynthesisRequest
from rumik_app.engine.loading import load_engine
engine = load_engine(CHECKPOINT, backend="vllm", device="cpu", dtype="float32", warmup=False)
rollouts = engine.generate_batch([SynthesisRequest("From standard input.", seed=4, max_new_tokens=16)])
print("generated", int(rollouts.lengths[0]))
engine.close()
"""


@pytest.mark.slow
def test_load_engine_from_stdin_without_a_main_guard(calibrated):
    proc = subprocess.run([sys.executable, "-"], input=f"CHECKPOINT = {str(calibrated[0])!r}\n" + STDIN_SCRIPT,
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "generated 16" in proc.stdout.splitlines()  # (vLLM logs to stdout too here)
