"""A new user's install: a fresh virtual environment, `pip install -e .[app]`, then the `rumik` command.

The app must serve its page and the server must answer the official `openai` client (this test's
own environment has it; the fresh one has only what the `app` extra declares), each started from
a folder outside the repository. pip reuses its wheel cache, so after ./setup.sh nothing is
downloaded. pip installs with `--no-compile` and the commands write their bytecode when they first
import a module: byte-compiling every file of torch, transformers and gradio took longer than the
rest of the install (145 s of CPU against 65 s without), and the two commands import a small part.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 900
START_TIMEOUT_S = 240

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fresh_rumik(tmp_path_factory) -> Path:
    """The `rumik` command of a new venv with `pip install -e .[app]` (and nothing else) in it."""
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-e",
                           f"{ROOT}[app]"],
                          capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    return venv / "bin" / "rumik"


def _start(command: list[str], cwd: Path, url: str) -> subprocess.Popen:
    """Start a long-running command and wait until `url` answers 200; its log is cwd/log.txt."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "RUMIK_CACHE": str(cwd / "cache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # the first command compiles what it imports, the second reuses it
    log = open(cwd / "log.txt", "w")
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"{' '.join(command)} did not answer {url}:\n{(cwd / 'log.txt').read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_rumik_app_serves_the_page(fresh_rumik, tmp_path):
    port = free_port()
    proc = _start([str(fresh_rumik), "app", "--model", "tiny", "--port", str(port), "--data-dir",
                   str(tmp_path / "data")], tmp_path, f"http://127.0.0.1:{port}/")
    try:
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text
        assert "rumik-oss-1" in page and "gradio" in page.lower()
    finally:
        _stop(proc)


def test_rumik_serve_answers_the_openai_client(fresh_rumik, tmp_path):
    port = free_port()
    proc = _start([str(fresh_rumik), "serve", "--model", "tiny", "--port", str(port), "--max-seconds", "1"],
                  tmp_path, f"http://127.0.0.1:{port}/health")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        audio = client.audio.speech.create(model="tiny", voice="Ira", input="Namaste!", response_format="wav")
        assert audio.content[:4] == b"RIFF" and len(audio.content) > 44
    finally:
        _stop(proc)
