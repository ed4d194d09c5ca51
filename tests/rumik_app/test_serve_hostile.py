"""A caller with bad intent against the speech server, over HTTP.

The key and the body size are checked from the headers alone, before anything is read or
parsed; text that normalisation multiplies is refused by its spoken length and audio budget;
a full queue is refused before any CPU is spent on the request, which is prepared off the
event loop; an empty key refuses to start; /docs closes with a key; no exception text leaks.
"""

from __future__ import annotations

import http.client
import socket
import threading

import httpx
import pytest

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.errors import PromptError
from rumik_app.request import SERVER_LIMITS
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.errors import engine_error
from rumik_app.serve.gate import MAX_BODY_BYTES
from tests.servers import ServerThread

KEY = "hostile-test-key"


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


@pytest.fixture(scope="module")
def server(engine):
    with ServerThread(SchedulerAdapter(BatchScheduler(engine, max_batch=2, max_queue=8, max_prompt_tokens=256)),
                      api_key=KEY) as srv:
        yield srv


def _headers_only(url: str, headers: dict) -> tuple[int, bytes]:
    """POST /v1/audio/speech with these headers and no body sent: an answer that comes anyway
    shows the server never waited for (or read) the body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = "POST /v1/audio/speech HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode())
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, resp.read()


def test_a_caller_without_the_key_is_refused_before_the_body_is_read(server):
    status, body = _headers_only(server.url, {"Host": "x", "Content-Type": "application/json",
                                              "Content-Length": str(100 * 2**20)})
    assert status == 401 and b"missing_api_key" in body


def test_a_large_body_is_refused_before_it_is_read_even_with_the_key(server):
    status, body = _headers_only(server.url, {"Host": "x", "Content-Type": "application/json",
                                              "Authorization": f"Bearer {KEY}", "Content-Length": str(100 * 2**20)})
    assert status == 413 and b"request_too_large" in body
    big = httpx.post(server.url + "/v1/audio/speech", headers={"Authorization": f"Bearer {KEY}"},
                     content=b"{" + b" " * (MAX_BODY_BYTES + 10) + b"}")  # sent, with no length up front
    assert big.status_code == 413


def test_text_that_normalisation_multiplies_is_refused_and_plain_text_at_the_cap_passes(server, engine):
    dense = "₹99,99,999 " * 370  # 4,070 characters typed, ~30,000 spoken in Tamil-like reading
    r = httpx.post(server.url + "/v1/audio/speech", headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                   json={"model": "tiny", "input": dense, "voice": "Ira", "response_format": "pcm"})
    assert r.status_code == 400 and "once numbers, amounts and dates are spelled out" in r.json()["error"]["message"]
    plain = ("Plain words that read as they are written. " * 100)[: SERVER_LIMITS.max_chars]
    engine.plan(SynthesisRequest(plain, max_new_tokens=engine.max_new_tokens_for(30)), SERVER_LIMITS)  # passes
    with pytest.raises(PromptError, match="could make up to"):  # the audio budget, summed over chunks
        engine.plan(SynthesisRequest(plain * 2, max_new_tokens=engine.max_new_tokens_for(30)),
                    SERVER_LIMITS.__class__(10_000, 20_000, SERVER_LIMITS.max_audio_seconds))


def test_a_full_queue_is_refused_before_any_preparation_which_runs_off_the_event_loop(engine, monkeypatch):
    scheduler = BatchScheduler(engine, max_batch=1, max_queue=0, max_prompt_tokens=256)  # no room to wait
    prepared_on: list[str] = []
    real = scheduler.prepare
    monkeypatch.setattr(scheduler, "prepare", lambda *args: prepared_on.append(threading.current_thread().name)
                        or real(*args))
    with ServerThread(SchedulerAdapter(scheduler)) as srv:
        body = {"model": "tiny", "input": "Hello.", "voice": "Ira", "response_format": "pcm", "max_seconds": 0.16}
        assert httpx.post(srv.url + "/v1/audio/speech", json=body, timeout=60).status_code == 503
        assert prepared_on == []  # refused by the cheap check: nothing normalised, tokenised or planned
        scheduler.max_queue = 4
        assert httpx.post(srv.url + "/v1/audio/speech", json=body, timeout=60).status_code == 200
    assert prepared_on and prepared_on[0].startswith("rumik-prepare")  # a preparation thread, not the event loop


def test_an_empty_key_refuses_to_start_and_docs_close_with_a_key(monkeypatch, capsys, server, engine):
    from rumik_app.serve.__main__ import API_KEY_ENV, parse_args

    monkeypatch.setenv(API_KEY_ENV, "")
    with pytest.raises(SystemExit):
        parse_args(["--model", "tiny"])
    assert "the API key is empty" in capsys.readouterr().err
    assert httpx.get(server.url + "/docs").status_code == 404
    assert httpx.get(server.url + "/openapi.json").status_code == 404
    open_adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=1, max_queue=1, max_prompt_tokens=256))
    with ServerThread(open_adapter) as open_:
        assert httpx.get(open_.url + "/openapi.json").status_code == 200  # no key: a local server documents itself


def test_errors_carry_no_exception_text():
    error = engine_error(RuntimeError("/srv/models/secret.safetensors: CUDA error at 0xdeadbeef"))
    assert error.status == 500 and "secret" not in error.message and "0xdeadbeef" not in error.message
