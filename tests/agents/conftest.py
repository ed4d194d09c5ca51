"""The voice-agent client tests: a speech server on the tiny checkpoint, driven by real clients.

Run: .venv/bin/python -m pytest tests/agents   (the clients are in the dev extra: ./setup.sh --dev)

The server is the installed console command (`rumik serve --model tiny`, next to this
interpreter), exactly as a user starts it, in its own process, on a free port with an API key
and OpenAI voice names mapped (the OpenAI plugins only send OpenAI's voices). Nothing here
imports the project: these clients are all the test sees of it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import made_here

KEY = "agents-test-key"
MAX_SECONDS = 1.5  # every utterance: tiny's random weights rarely stop by themselves
START_TIMEOUT_S = 180.0
if "NLTK_DATA" not in os.environ:  # pipecat looks for punkt_tab at import; removed when the run ends
    os.environ["NLTK_DATA"] = made_here("nltk-")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rumik_command() -> str:
    command = Path(sys.executable).with_name("rumik")
    if not command.exists():
        pytest.exit(f"no `rumik` command at {command}: install the project (./setup.sh --dev, or pip install -e .)", 2)
    return str(command)


@pytest.fixture(scope="session")
def server():
    """(base URL, API key) of a running `rumik serve --model tiny`."""
    port = _free_port()
    cache = made_here("rumik-agents-")
    # RUMIK_CPU_DTYPE: fp32 on any CPU, as the main suite (tests/conftest.py), so audio compared
    # across requests does not depend on whether this machine's CPU has native bf16.
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", RUMIK_CACHE=cache,
               RUMIK_CPU_DTYPE="fp32")
    log = open(Path(cache) / "server.log", "w+")
    command = [_rumik_command(), "serve", "--model", "tiny", "--port", str(port), "--api-key", KEY,
               "--served-model-name", "rumik-oss-1", "--voice-map", "alloy=Ira,ash=Aisha",
               "--max-seconds", str(MAX_SECONDS), "--log-level", "warning"]
    proc = subprocess.Popen(command, cwd=cache, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"the server exited with {proc.returncode}:\n{log.read()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise TimeoutError(f"the server at {url} was not healthy after {START_TIMEOUT_S} s")
        time.sleep(0.2)
    yield url, KEY
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def active_rows(url: str) -> int:
    """Batch rows decoding now (the server's /metrics)."""
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("rumik_active_requests "):
            return int(float(line.split()[1]))
    raise AssertionError("rumik_active_requests missing from /metrics")


def wait_for(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


if sys.version_info < (3, 11):  # pragma: no cover - pipecat-rumik needs 3.11
    pytest.exit("the agent clients need Python 3.11+", 2)
