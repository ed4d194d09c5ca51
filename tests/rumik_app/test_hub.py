"""No network, no minute of retries: the hub probe (rumik_app.checkpoint.hub) and the commands that use it.

The machine the tests run on may or may not reach huggingface.co, so each test points
HF_ENDPOINT at a local socket whose behaviour it controls: a port nobody listens on (refused
at once), a server that accepts connections and never answers (the worst case: a hanging
network), or a tiny HTTP server (a working hub). The command-line tests unset HF_HUB_OFFLINE
and TRANSFORMERS_OFFLINE (tests/conftest.py sets them), as a user's shell would, and bound
the wall time of the whole command, imports included.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rumik_app.checkpoint import hub

ROOT = Path(__file__).resolve().parents[2]
CLI_LIMIT_S = 15.0  # the bound for a failed command, start to exit
PROBE_SLACK_S = 1.5


@pytest.fixture
def hanging_endpoint():
    """http://127.0.0.1:PORT: connections are accepted (by the kernel's backlog) and never answered."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def closed_endpoint():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"  # closed again: connections are refused


@pytest.fixture
def answering_endpoint():
    """A minimal HTTP server that answers every request with 404 (a hub that is up)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 - http.server's naming
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def fresh_probe():
    hub.forget_probe()
    yield
    hub.forget_probe()


def test_probe_fails_fast_on_a_refused_connection(closed_endpoint):
    start = time.monotonic()
    reason = hub.probe(closed_endpoint)
    assert time.monotonic() - start < hub.PROBE_TIMEOUT_S
    assert reason.startswith(f"{closed_endpoint} cannot be reached (") and "ConnectError" in reason


def test_probe_gives_up_on_a_hanging_hub_within_its_timeout(hanging_endpoint):
    start = time.monotonic()
    reason = hub.probe(hanging_endpoint)
    took = time.monotonic() - start
    assert hub.PROBE_TIMEOUT_S - 0.5 < took < hub.PROBE_TIMEOUT_S + PROBE_SLACK_S, took
    assert "cannot be reached" in reason and "Timeout" in reason
    start = time.monotonic()
    assert hub.probe(hanging_endpoint) == reason and time.monotonic() - start < 0.1  # remembered: one probe


def test_a_hub_that_answers_is_used(answering_endpoint, monkeypatch):
    """Online use is unchanged: any HTTP answer means reachable, and the download runs as before."""
    assert hub.probe(answering_endpoint) is None
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", answering_endpoint)
    monkeypatch.setattr("huggingface_hub.constants.is_offline_mode", lambda: False)
    calls = []

    def fake_download(repo_id, **kwargs):
        calls.append((repo_id, kwargs))
        return "/cache/snapshot"

    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_download)
    assert hub.hub_snapshot("org/model", allow_patterns=["*.json"]) == Path("/cache/snapshot")
    assert calls == [("org/model", {"allow_patterns": ["*.json"]})]  # a real download, not local_files_only


def test_offline_env_uses_the_cache_only(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.offline_reason() == "downloads are off (offline mode: HF_HUB_OFFLINE is set)"
    with pytest.raises(hub.HubUnavailable) as err:
        hub.hub_snapshot("nobody-here/not-cached-xyz")
    assert err.value.repo_id == "nobody-here/not-cached-xyz" and "HF_HUB_OFFLINE" in err.value.reason


def _cli(args: list[str], endpoint: str, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    """Run a command as a user with no offline variables set, the hub at `endpoint`; (result, seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), HF_HOME=str(cwd / "hf-home"))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    return proc, time.monotonic() - start


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.mark.slow
def test_synthesize_with_an_unreachable_hub_fails_fast(hanging_endpoint, tmp_path):
    proc, took = _cli(["rumik_app.synthesize", "--model", "rumik-ai/rumik-oss-1", "--text", "hi",
                       "--out", str(tmp_path / "x.wav")], hanging_endpoint, tmp_path)
    line = _one_error_line(proc)
    assert took < CLI_LIMIT_S, took
    assert f"{hanging_endpoint} cannot be reached" in line
    assert "--model /path/to/rumik-oss-1" in line and "hf download rumik-ai/rumik-oss-1" in line
    assert "--model tiny" in line


@pytest.mark.slow
def test_runner_checks_model_then_judge_before_any_synthesis(hanging_endpoint, closed_endpoint, tmp_path):
    prompts = ROOT / "evaluation" / "prompts" / "intelligibility_en.jsonl"
    # espeak needs no download: the Hugging Face judge fails, fast, in the runner's own flags
    proc, took = _cli(["evaluation.run", "--system", "espeak", "--prompts", str(prompts), "--limit", "2",
                       "--asr", "hf:openai/whisper-small", "--out", str(tmp_path / "a")], hanging_endpoint, tmp_path)
    line = _one_error_line(proc)
    assert took < CLI_LIMIT_S, took
    assert "ASR model 'openai/whisper-small' is not in the local Hugging Face cache" in line
    assert "--asr hf:/path/to/model" in line and "--asr pocketsphinx" in line
    assert not (tmp_path / "a" / "run1").exists()  # nothing was synthesised first
    # rumik + Whisper, both from the hub: the model's error comes first, in --system terms
    proc, took = _cli(["evaluation.run", "--system", "rumik", "--prompts", str(prompts), "--limit", "2",
                       "--asr", "hf:openai/whisper-large-v3", "--out", str(tmp_path / "b")], closed_endpoint, tmp_path)
    line = _one_error_line(proc)
    assert took < CLI_LIMIT_S, took
    assert line.startswith("error: Could not get 'rumik-ai/rumik-oss-1'") and "whisper" not in line
    assert "--system rumik:/path/to/rumik-oss-1" in line and "--system tiny" in line
