"""`python -m rumik_app.serve --backend vllm` as a process: it serves, drains on SIGTERM and
leaves no vLLM process behind; at --max-batch 64 it answers 64 concurrent seeded requests (vLLM's
chunked prefill used to kill its CPU engine core there), and when its engine core dies anyway,
requests waiting for audio get 503 with Retry-After and the server exits with status 3. Two
vLLM engine starts (~30 s each on 2 cores).

Run: .venv/bin/python -m pytest tests/vllm/test_serve_process.py -q
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import httpx
import pytest

from tests.servers import (
    FULL_BATCH_SPEECH,
    check_full_batch,
    check_sigterm_drain,
    start_server_process,
    stream_in_thread,
    wait_for,
)
from tests.vllm.conftest import KV_CACHE_FLAGS

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


def _stop(proc) -> None:
    """Kill the server if it still runs; show the end of its log."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    print(Path(proc.log_path).read_text()[-3000:])
    os.unlink(proc.log_path)


def test_serve_backend_vllm_streams_drains_on_sigterm_and_exits(calibrated):
    proc, url = start_server_process(
        calibrated[0], "--backend", "vllm", "--max-batch", "1", "--max-queue", "4", "--tensor-parallel-size", "1",
        "--data-parallel-size", "1", "--gpu-memory-utilization", "0.5", "--no-compile", "--shutdown-timeout", "30",
        "--served-model-name", "tiny", *KV_CACHE_FLAGS, timeout=START_TIMEOUT_S)
    try:
        engine_processes = _descendants(proc.pid)
        assert engine_processes, "vLLM's engine core runs in a child process"
        health = httpx.get(url + "/health").json()
        assert health["backend"] == "vllm" and health["max_batch"] == 1  # --max-batch is vLLM's max_num_seqs
        check_sigterm_drain(proc, url, SPEECH)
        wait_for(lambda: not any(_alive(pid) for pid in engine_processes), timeout=10,
                 what="vLLM's engine processes to exit")
    finally:
        _stop(proc)


def _engine_core(pid: int) -> int:
    """The pid of the server's vLLM engine-core process (its process title names it)."""
    for child in sorted(_descendants(pid)):
        try:
            title = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "EngineCore" in title:
            return child
    raise AssertionError(f"no EngineCore process among {sorted(_descendants(pid))}")


def _in_vllm(url: str) -> int:
    health = httpx.get(url + "/health").json()
    return health["active"] + health["queue_depth"]


def test_full_batch_of_seeded_requests_then_a_dead_engine_core_gives_503_and_exit_status_3(calibrated):
    proc, url = start_server_process(
        calibrated[0], "--backend", "vllm", "--max-batch", "64", "--no-compile", "--gpu-memory-utilization", "0.5",
        "--shutdown-timeout", "10", "--served-model-name", "tiny", *KV_CACHE_FLAGS, timeout=START_TIMEOUT_S)
    try:
        check_full_batch(url, 64)
        processes, core = _descendants(proc.pid), _engine_core(proc.pid)
        os.kill(core, signal.SIGSTOP)  # frozen: the next requests are admitted and wait for their first audio
        outs = [{} for _ in range(3)]
        threads = [stream_in_thread(url, {**FULL_BATCH_SPEECH, "input": f"Waiting {i}.", "seed": i},
                                    threading.Event(), out) for i, out in enumerate(outs)]
        wait_for(lambda: _in_vllm(url) >= 3, what="three requests in vLLM")
        os.kill(core, signal.SIGKILL)
        for thread in threads:
            thread.join(60)
        for out in outs:
            assert out["status"] == 503 and int(out["headers"]["retry-after"]) > 0, out
            assert "restarting" in out["data"].decode()
        assert proc.wait(timeout=60) == 3
        wait_for(lambda: not any(_alive(pid) for pid in processes), timeout=30, what="vLLM's processes to exit")
    finally:
        _stop(proc)
