"""Fixtures for the app tests: one in-process app on the tiny checkpoint, shared by the
gradio_client and browser tests, plus helpers to start `python app.py` as its own process.

Run: .venv/bin/python -m pytest tests/app -q
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.warm_process import WarmProcess, start_module

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "app"
SERVER_START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen | WarmProcess | None = None,
                  timeout: float = SERVER_START_TIMEOUT_S) -> None:
    """Poll the app's config route until it answers; fail with the server output if it dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"app exited with code {proc.returncode} before serving:\n{out[-4000:]}")
        try:
            with urllib.request.urlopen(url + "config", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"app at {url} did not come up within {timeout:.0f} s")


def start_app_process(model: str, data_dir: Path, port: int, log_path: Path) -> WarmProcess:
    """`python app.py` as a user runs it (one torch thread, hub offline), forked from a warm process
    (tests/warm_process.py); output to `log_path`."""
    from webapp.access import ADMIN_PASSWORD_ENV, AUTH_ENV

    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           ADMIN_PASSWORD_ENV: None, AUTH_ENV: None}  # an open app, whatever the developer's shell holds
    return start_module("app.py", ["--model", model, "--port", str(port), "--data-dir", str(data_dir)], cwd=ROOT,
                        log=log_path, env=env)


@pytest.fixture(scope="session")
def app_server(tiny_checkpoint, tmp_path_factory):
    """(demo, url) of an in-process app whose rumik-oss-1 is the tiny checkpoint."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import app
    from webapp.access import AdminGate

    data_dir = tmp_path_factory.mktemp("app-data")
    demo = app.build_demo(model=str(tiny_checkpoint), engine_options={"device": "cpu"}, data_dir=data_dir,
                          admin=AdminGate())  # open
    port = free_port()
    _, url, _ = app.launch(demo, "127.0.0.1", port, prevent_thread_lock=True)
    wait_until_up(url)
    yield demo, url
    demo.close()


@pytest.fixture(scope="session")
def client(app_server):
    from gradio_client import Client

    return Client(app_server[1], verbose=False)
