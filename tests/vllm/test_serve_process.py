"""`python -m rumik_app.serve --backend vllm` as a process: it serves, drains on SIGTERM and
leaves no vLLM process behind. One more vLLM engine start (~30 s on 2 cores), so one test.

Run: .venv-vllm/bin/python -m pytest tests/vllm/test_serve_process.py -q
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from tests.vllm.conftest import SKIP_REASON

pytest.importorskip("vllm", reason=SKIP_REASON)

from tests.servers import check_sigterm_drain, start_server_process, wait_for  # noqa: E402

pytestmark = pytest.mark.slow

START_TIMEOUT_S = 300.0  # vLLM's engine processes start and warm up
# Greedy: runs to max_seconds on the calibrated checkpoint (long enough to still stream at SIGTERM).
SPEECH = {"model": "tiny", "input": "Finishing what was started.", "voice": "Ira", "response_format": "pcm",
          "temperature": 0, "seed": 21, "max_seconds": 5.0}


def _descendants(pid: int) -> set[int]:
    """Every live process below pid (vLLM's engine core and its workers)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_serve_backend_vllm_streams_drains_on_sigterm_and_exits(calibrated):
    proc, url = start_server_process(
        calibrated[0], "--backend", "vllm", "--max-batch", "1", "--max-queue", "4", "--tensor-parallel-size", "1",
        "--data-parallel-size", "1", "--gpu-memory-utilization", "0.5", "--no-compile", "--shutdown-timeout", "30",
        "--served-model-name", "tiny", timeout=START_TIMEOUT_S)
    try:
        engine_processes = _descendants(proc.pid)
        assert engine_processes, "vLLM's engine core runs in a child process"
        health = httpx.get(url + "/health").json()
        assert health["backend"] == "vllm" and health["max_batch"] == 1  # --max-batch is vLLM's max_num_seqs
        check_sigterm_drain(proc, url, SPEECH)
        wait_for(lambda: not any(_alive(pid) for pid in engine_processes), timeout=10,
                 what="vLLM's engine processes to exit")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        print(Path(proc.log_path).read_text()[-3000:])
        os.unlink(proc.log_path)
