"""`python -m rumik_app.serve` as a process: SIGTERM drains cleanly, bad start-up is one message.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_process.py -q
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.servers import ROOT, start_server_process, wait_for

pytestmark = pytest.mark.slow

EXIT_WITHIN_S = 30.0
SPEECH = {"model": "tiny", "input": "Finishing what was started.", "voice": "Ira", "response_format": "pcm",
          "seed": 21, "max_seconds": 3.0}  # long enough to still run when the next one queues


def _stream(url: str, body: dict, first: threading.Event, out: dict) -> threading.Thread:
    def run() -> None:
        try:
            with httpx.stream("POST", url + "/v1/audio/speech", json=body, timeout=120) as resp:
                out["status"], out["headers"], data = resp.status_code, dict(resp.headers), b""
                for chunk in resp.iter_raw():
                    data += chunk
                    first.set()
                out["data"] = data
        except httpx.HTTPError as exc:
            out["error"] = exc
        first.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_sigterm_finishes_streaming_requests_refuses_queued_and_new_ones_and_exits(tiny_checkpoint):
    proc, url = start_server_process(tiny_checkpoint, "--max-batch", "1", "--shutdown-timeout", "20",
                                     "--served-model-name", "tiny")
    try:
        alone = httpx.post(url + "/v1/audio/speech", json=SPEECH, timeout=120).raise_for_status().content
        streaming, queued = {}, {}
        started = threading.Event()
        t1 = _stream(url, SPEECH, started, streaming)
        assert started.wait(60)
        t2 = _stream(url, {**SPEECH, "seed": 22, "max_seconds": 1.0}, threading.Event(), queued)
        wait_for(lambda: httpx.get(url + "/health").json()["queue_depth"] == 1, what="a request to queue")
        proc.send_signal(signal.SIGTERM)
        t2.join(30)
        assert queued["status"] == 503 and "shutting down" in queued["data"].decode()
        assert int(queued["headers"]["retry-after"]) > 0
        wait_for(lambda: _refused(url), timeout=10, what="new connections to be refused")
        t1.join(60)
        assert streaming["status"] == 200 and streaming["data"] == alone  # finished, every byte
        start = time.monotonic()
        proc.wait(timeout=EXIT_WITHIN_S)
        assert time.monotonic() - start < EXIT_WITHIN_S and proc.returncode in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.unlink(proc.log_path)


def _refused(url: str) -> bool:
    try:
        httpx.post(url + "/v1/audio/speech", json=SPEECH, timeout=5)
    except httpx.ConnectError:
        return True
    return False


def test_a_missing_checkpoint_is_one_message_and_exit_code_2():
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-m", "rumik_app.serve", "--model", "/nonexistent/rumik-oss-1"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stderr.startswith("error: ") and "Traceback" not in result.stderr
