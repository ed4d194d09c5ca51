"""No network, no minute of retries: the hub probe (rumik_app.checkpoint.hub) and the commands that use it.

The machine the tests run on may or may not reach huggingface.co, so each test points
HF_ENDPOINT at a local socket whose behaviour it controls: a port nobody listens on (refused
at once), a server that accepts connections and never answers (the worst case: a hanging
network), or a tiny HTTP server (a working hub). The command-line tests unset HF_HUB_OFFLINE
and TRANSFORMERS_OFFLINE (tests/conftest.py sets them), as a user's shell would.

No test reads a stopwatch (a busy machine must not turn them red): "fails fast" is shown by
its mechanism. The probe passes its timeout to the request, a hung hub gives the same reason
whichever deadline fired first (the request's or the wait for the probe thread), a hanging hub
sees exactly one connection from a whole command (one probe, no download attempted, no
retries), and a second probe is answered from memory without a connection.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rumik_app.checkpoint import hub

ROOT = Path(__file__).resolve().parents[2]
GAVE_UP = f"no answer within {hub.PROBE_TIMEOUT_S:g} s"  # a hung hub: the same words from either deadline


class HangingHub:
    """http://127.0.0.1:PORT that accepts connections, counts them and never answers."""

    def __init__(self):
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed
                return
            self.connections.append(conn)  # held open, never answered

    def close(self) -> None:
        self.server.close()
        for conn in self.connections:
            conn.close()


@pytest.fixture
def hanging_hub():
    hub_ = HangingHub()
    yield hub_
    hub_.close()


@pytest.fixture
def hanging_endpoint(hanging_hub):
    return hanging_hub.url


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


def test_probe_fails_at_once_on_a_refused_connection(closed_endpoint):
    reason = hub.probe(closed_endpoint)
    assert reason.startswith(f"{closed_endpoint} cannot be reached (") and "ConnectError" in reason


def test_probe_gives_up_on_a_hanging_hub_by_its_timeout_and_probes_once(hanging_hub, monkeypatch):
    import httpx

    timeouts, real_head = [], httpx.head
    monkeypatch.setattr(httpx, "head", lambda url, **kw: (timeouts.append(kw.get("timeout")), real_head(url, **kw))[1])
    reason = hub.probe(hanging_hub.url)
    # the hub hung: the one reason, whichever deadline ended the wait (the request's or the thread's)
    assert reason == f"{hanging_hub.url} cannot be reached ({GAVE_UP})"
    assert timeouts == [hub.PROBE_TIMEOUT_S] and len(hanging_hub.connections) == 1
    assert hub.probe(hanging_hub.url) == reason  # remembered: no second connection
    assert timeouts == [hub.PROBE_TIMEOUT_S] and len(hanging_hub.connections) == 1


@pytest.mark.parametrize("deadline", ["request", "thread"])
def test_a_hub_that_does_not_answer_in_time_reads_the_same_whichever_deadline_fired(deadline, monkeypatch):
    """The request's own timeout and the wait for the probe thread race on a busy machine: both
    give the one reason, so the words never depend on which came first."""
    import httpx

    released = threading.Event()

    def head(url, **kw):
        if deadline == "request":
            raise httpx.ConnectTimeout("timed out")  # httpx's own timeout fired first
        released.wait()  # e.g. a hanging DNS lookup: only the wait for the thread ends it

    monkeypatch.setattr(httpx, "head", head)
    try:
        reason = hub.probe("http://hub.invalid", timeout=0.01)
    finally:
        released.set()
    assert reason == "http://hub.invalid cannot be reached (no answer within 0.01 s)"


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


def _cli(args: list[str], endpoint: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run a command as a user with no offline variables set, the hub at `endpoint`."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), HF_HOME=str(cwd / "hf-home"))
    # The bound only keeps a hung command from hanging the suite: ~40x what the command takes.
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.mark.slow
def test_synthesize_with_an_unreachable_hub_probes_once_and_names_the_fixes(hanging_hub, tmp_path):
    proc = _cli(["rumik_app.synthesize", "--model", "rumik-ai/rumik-oss-1", "--text", "hi",
                 "--out", str(tmp_path / "x.wav")], hanging_hub.url, tmp_path)
    line = _one_error_line(proc)
    assert len(hanging_hub.connections) == 1  # the probe; no download was attempted, nothing retried
    assert f"{hanging_hub.url} cannot be reached ({GAVE_UP})" in line
    assert "--model /path/to/rumik-oss-1" in line and "hf download rumik-ai/rumik-oss-1" in line
    assert "--model tiny" in line


@pytest.mark.slow
def test_runner_checks_model_then_judge_before_any_synthesis(hanging_hub, closed_endpoint, tmp_path):
    prompts = ROOT / "evaluation" / "prompts" / "intelligibility_en.jsonl"
    # espeak needs no download: the Hugging Face judge fails, after one probe, in the runner's own flags
    proc = _cli(["evaluation.run", "--system", "espeak", "--prompts", str(prompts), "--limit", "2",
                 "--asr", "hf:openai/whisper-small", "--out", str(tmp_path / "a")], hanging_hub.url, tmp_path)
    line = _one_error_line(proc)
    assert len(hanging_hub.connections) == 1  # one probe, no download attempt
    assert "ASR model 'openai/whisper-small' is not in the local Hugging Face cache" in line
    assert "--asr hf:/path/to/model" in line and "--asr pocketsphinx" in line
    assert not (tmp_path / "a" / "run1").exists()  # nothing was synthesised first
    # rumik + Whisper, both from the hub: the model's error comes first, in --system terms
    proc = _cli(["evaluation.run", "--system", "rumik", "--prompts", str(prompts), "--limit", "2",
                 "--asr", "hf:openai/whisper-large-v3", "--out", str(tmp_path / "b")], closed_endpoint, tmp_path)
    line = _one_error_line(proc)
    assert line.startswith("error: Could not get 'rumik-ai/rumik-oss-1'") and "whisper" not in line
    assert "--system rumik:/path/to/rumik-oss-1" in line and "--system tiny" in line
