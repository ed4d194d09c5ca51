"""Idle unload: the server frees the model's memory when idle and reloads it for the next request.

Run: .venv/bin/python -m pytest tests/rumik_app/test_idle_unload.py -q
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from tests.servers import ServerThread, wait_for

KEY = "api-key"
ADMIN_KEY = "admin-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
SPEECH = {"model": "tiny", "input": "Hello again.", "voice": "Ira", "response_format": "pcm", "seed": 4,
          "max_seconds": 0.4}


HOLD_TIMEOUT_S = 60


class DecodingHold:
    """Holds the decoding thread at its next decode step once `ask()` is called, until `release()`
    (HOLD_TIMEOUT_S at most): asked before a request is sent, that step is the request's first, so
    the request is busy (its row taken) while the test acts, however fast the model decodes and
    whatever it would sample. The server warms its decoder up before it answers, so no warm-up
    step is caught."""

    def __init__(self):
        self.asked, self.held, self.released = threading.Event(), threading.Event(), threading.Event()

    def ask(self) -> None:
        self.asked.set()

    def wait_held(self) -> None:
        assert self.held.wait(HOLD_TIMEOUT_S), "no decode step came after the hold was asked for"

    def release(self) -> None:
        self.released.set()

    def _step(self, *_) -> None:  # a forward hook on the stop head: it runs once per decode step
        if self.asked.is_set() and not self.held.is_set():
            self.held.set()
            self.released.wait(HOLD_TIMEOUT_S)


@contextlib.contextmanager
def decoding_held(engine):
    hold = DecodingHold()
    handle = engine.model.stop_predictor.register_forward_hook(hold._step)
    try:
        yield hold
    finally:
        hold.release()
        handle.remove()


def _server(tiny_checkpoint, idle_unload_s=None, **options):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=2, max_queue=8, max_prompt_tokens=256,
                                              idle_unload_s=idle_unload_s))
    return ServerThread(adapter, **options), engine


def test_an_idle_server_unloads_and_the_next_request_reloads_and_answers_the_same(tiny_checkpoint):
    server, engine = _server(tiny_checkpoint, idle_unload_s=0.5)
    with server:
        before = httpx.post(server.url + "/v1/audio/speech", json=SPEECH, timeout=60).content
        wait_for(lambda: server.health()["loaded"] is False, what="the idle model to be unloaded")
        assert not engine.loaded and engine.model is None  # the weights are gone, not just flagged
        after = httpx.post(server.url + "/v1/audio/speech", json=SPEECH, timeout=60)
        assert after.status_code == 200 and after.content == before  # reloaded, the same audio
        assert engine.loaded
        health = server.health()
        assert health["loaded"] is True or health["active"] == 0  # it may be idle again already


def test_admin_unload_needs_the_admin_key_and_refuses_while_busy(tiny_checkpoint):
    server, engine = _server(tiny_checkpoint, api_key=KEY, admin_key=ADMIN_KEY)
    with server:
        assert httpx.post(server.url + "/v1/admin/unload", timeout=10).status_code == 401
        by_api_key = httpx.post(server.url + "/v1/admin/unload", headers=AUTH, timeout=10)
        assert by_api_key.status_code == 401 and "--admin-key" in by_api_key.json()["error"]["message"]
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as client, ThreadPoolExecutor(1) as pool:
            with decoding_held(engine) as hold:
                hold.ask()
                speaking = pool.submit(httpx.post, server.url + "/v1/audio/speech", json=SPEECH, headers=AUTH,
                                       timeout=120)
                hold.wait_held()  # the request's first decode step: it is busy until released
                assert server.health()["active"] == 1
                refused = client.post("/v1/admin/unload", headers=ADMIN)
                assert refused.status_code == 409 and refused.json()["error"]["code"] == "busy"
                hold.release()
                assert speaking.result().status_code == 200
            wait_for(lambda: server.health()["active"] == 0, what="the finished request's row to be freed")
            done = client.post("/v1/admin/unload", headers=ADMIN)
            assert done.status_code == 200 and done.json() == {"loaded": False}
            assert server.health()["loaded"] is False and not engine.loaded
            again = client.post("/v1/audio/speech", json=SPEECH)
            assert again.status_code == 200 and len(again.content) > 0 and server.health()["loaded"] is True


@pytest.mark.parametrize("options", [{}, {"api_key": KEY}], ids=["open server", "api key only"])
def test_admin_routes_are_closed_without_an_admin_key(tiny_checkpoint, options):
    server, engine = _server(tiny_checkpoint, **options)
    with server:
        resp = httpx.post(server.url + "/v1/admin/unload", headers=AUTH, timeout=10)
        assert resp.status_code == 403 and "--admin-key" in resp.json()["error"]["message"]
        assert engine.loaded


@pytest.mark.parametrize("flags, message", [
    (["--idle-unload", "0"], "--idle-unload takes minutes > 0"),
    (["--backend", "vllm", "--idle-unload", "5"], "The vLLM backend does not unload its model"),
    (["--api-key", "same", "--admin-key", "same"], "must be non-empty and differ from the API key"),
    (["--admin-key", " "], "must be non-empty and differ from the API key"),
])
def test_the_flag_is_checked(flags, message, capsys):
    from rumik_app.serve.__main__ import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--model", "tiny", *flags])
    assert message in capsys.readouterr().err
