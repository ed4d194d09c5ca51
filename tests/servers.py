"""Speech servers for tests: in this process (a uvicorn thread) or as a subprocess.

    with ServerThread(backend, api_key="k") as server:      # the real app, on a free port
        httpx.get(server.url + "/health")
    proc, url = start_server_process(checkpoint, "--max-batch", "1")   # `python -m rumik_app.serve`
    BAD_INPUTS                                             # bad requests and the error each must get
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from rumik_app.prompt import PromptError, validate_text
from rumik_app.serve.schema import SERVER_MAX_TEXT_CHARS

ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0
POLL_S = 0.05


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, timeout: float = START_TIMEOUT_S, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {Path(proc.log_path).read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(POLL_S * 4)
    raise TimeoutError(f"server at {url} not healthy after {timeout} s")


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(POLL_S)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


class ServerThread:
    """The speech app on a uvicorn server in a daemon thread (no signal handling)."""

    def __init__(self, backend, model_name: str = "tiny", shutdown_timeout: float = 10.0, **app_options):
        import uvicorn

        from rumik_app.serve.app import SpeechServer, create_app

        self.backend = backend
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = create_app(backend, model_name=model_name, shutdown_timeout=shutdown_timeout, **app_options)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=shutdown_timeout)
        self.server = SpeechServer(config, backend)
        self.thread = threading.Thread(target=self.server.run, name=f"speech-server-{self.port}", daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        wait_healthy(self.url)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=5).json()


def start_server_process(checkpoint, *args: str, timeout: float = START_TIMEOUT_S) -> tuple[subprocess.Popen, str]:
    """`python -m rumik_app.serve --model CHECKPOINT ARGS` on a free port; returns (process, url) once healthy
    (within `timeout` s)."""
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "rumik_app.serve", "--model", str(checkpoint), "--port", str(port),
           "--log-level", "warning", *args]
    log = tempfile.NamedTemporaryFile("w+", prefix="speech-server-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    proc.log_path = log.name  # read it to see what the server said
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout=timeout, proc=proc)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, url


# ---------------------------------------------------------------- bad requests (both backends)


def _prompt_message(fn) -> str:
    with pytest.raises(PromptError) as info:
        fn()
    return str(info.value)


BAD_INPUTS = [
    # (what, body changes, status, param, expected message or a fragment of it)
    ("unknown tag", dict(input="Hello <giggle> there"), 400, "input",
     _prompt_message(lambda: validate_text("Hello <giggle> there"))),
    ("empty input", dict(input=""), 400, "input", _prompt_message(lambda: validate_text(""))),
    ("blank input", dict(input="   "), 400, "input", _prompt_message(lambda: validate_text(""))),
    ("unknown voice", dict(voice="nova"), 400, "voice", "Unknown voice 'nova'. Choose one of: Ira, Aisha, Siya, Zoya."),
    ("too long", dict(input="a" * (SERVER_MAX_TEXT_CHARS + 1)), 400, "input",
     _prompt_message(lambda: validate_text("a" * (SERVER_MAX_TEXT_CHARS + 1), max_chars=SERVER_MAX_TEXT_CHARS))),
    ("bad format", dict(response_format="aac"), 400, "response_format", "Unsupported response_format 'aac'"),
    ("unknown tone", dict(tone="sleepy"), 400, "tone", "Unknown tone 'sleepy'"),
    ("tone and instructions", dict(tone="happy", instructions="calm and warm"), 400, "instructions",
     "Give either tone/accent/pace or a free-form description, not both."),
    ("temperature", dict(temperature=5), 400, "temperature", "Temperature 5.0 is out of range: use 0 (greedy) to 2."),
    ("top_p", dict(top_p=0), 400, "top_p", "Top-p 0.0 is out of range"),
    ("top_k", dict(top_k=1000), 400, "top_k", "Top-k 1000 is out of range"),
    ("max_seconds", dict(max_seconds=90), 400, "max_seconds", "Max seconds 90.0 is out of range"),
    ("seed", dict(seed=-7), 400, "seed", "Seed -7 is not valid"),
    ("speed range", dict(speed=9), 400, "speed", "speed 9.0 is out of range: use 0.25 to 4.0"),
    ("speed vs pace", dict(speed=0.5, pace="fast"), 400, "speed", "speed 0.5 means pace 'slow', but pace 'fast'"),
    ("typo in extra_body", dict(temprature=0.5), 400, "temprature", "Unrecognized request argument supplied: temprature"),
    ("not a number", dict(temperature="hot"), 400, "temperature", "Invalid value for 'temperature'"),
    ("missing input", dict(input=None), 400, "input", "Missing required parameter: 'input'."),
    ("unknown language", dict(language="Klingon"), 400, "language", "Unknown language 'Klingon'"),
    ("unknown model", dict(model="whisper-1"), 404, "model", "The model 'whisper-1' does not exist"),
]


def assert_openai_error(resp: httpx.Response, status: int, param: str, message: str) -> None:
    """resp carries OpenAI's error body with this status, param and message (or a fragment of it)."""
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and message in error["message"], error
