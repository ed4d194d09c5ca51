"""The vLLM backend from the command line, in one fresh process: `rumik_app.synthesize --backend vllm` run as
`python -m` runs it, from a `python - <<EOF` script with no main guard.

Two things only a fresh process shows, from one vLLM start: the command streams a WAV through vLLM and
prints only its own two lines (vLLM logs go to stderr); and vLLM starts while `__main__` is a stdin script
without `if __name__ == "__main__":` (vLLM's spawned engine process used to re-import `__main__` there and
fail with "Failed core proc(s): {}"). The script hands the command to `runpy.run_module(..., run_name=
"__main__")`, which is what `python -m` does, except that `__main__` stays the script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from tests.vllm.conftest import KV_CACHE_FLAGS

ROOT = Path(__file__).resolve().parents[2]
# No main guard: the whole script runs at import, as a user's `python - <<EOF` does.
STDIN_SCRIPT = """
import runpy, sys
sys.argv = ["rumik_app.synthesize", *ARGS]
runpy.run_module("rumik_app.synthesize", run_name="__main__")  # `python -m`, with __main__ left as this script
"""


@pytest.mark.slow
def test_the_cli_streams_a_wav_through_vllm_from_a_script_without_a_main_guard(calibrated, tmp_path):
    out = tmp_path / "v.wav"
    args = ["--backend", "vllm", "--model", str(calibrated[0]), "--text", "नमस्ते <laugh> दोस्तों", "--seed", "3",
            "--max-seconds", "0.64", "--stream", "--out", str(out), *KV_CACHE_FLAGS]
    proc = subprocess.run([sys.executable, "-"], input=f"ARGS = {args!r}\n" + STDIN_SCRIPT, cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = sf.info(out)
    assert info.samplerate == 24_000 and info.channels == 1 and info.frames > 0
    assert "seed 3" in proc.stdout and "first audio after" in proc.stdout
    lines = proc.stdout.splitlines()  # only the tool's two lines: vLLM logs go to stderr
    assert len(lines) == 2 and lines[0].startswith("wrote ") and " tokens in " in lines[1]
