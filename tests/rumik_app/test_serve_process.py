"""`python -m rumik_app.serve` as a process: SIGTERM drains cleanly, a full batch of seeded
requests is answered, bad start-up is one message.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_process.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.servers import ROOT, check_full_batch, check_sigterm_drain, start_server_process

pytestmark = pytest.mark.slow

SPEECH = {"model": "tiny", "input": "Finishing what was started.", "voice": "Ira", "response_format": "pcm",
          "seed": 21, "max_seconds": 3.0}  # long enough to still run when the next one queues


def test_sigterm_finishes_streaming_requests_refuses_queued_and_new_ones_and_exits(tiny_checkpoint):
    proc, url = start_server_process(tiny_checkpoint, "--max-batch", "1", "--shutdown-timeout", "20",
                                     "--served-model-name", "tiny")
    try:
        check_sigterm_drain(proc, url, SPEECH)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.unlink(proc.log_path)


def test_64_concurrent_seeded_requests_at_max_batch_64_are_all_answered(tiny_checkpoint):
    """The engine backend's side of the full-batch check (tests/vllm/test_serve_process.py has vLLM's)."""
    proc, url = start_server_process(tiny_checkpoint, "--max-batch", "64", "--served-model-name", "tiny")
    try:
        check_full_batch(url, 64)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        os.unlink(proc.log_path)


def test_a_missing_checkpoint_is_one_message_and_exit_code_2():
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "rumik_app.serve", "--model", "/nonexistent/rumik-oss-1"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr
