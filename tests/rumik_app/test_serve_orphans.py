"""Sockets whose client is gone stop at once: text-in and Silk, with and without a close frame.

A hang-up (a closed TCP connection, no WebSocket close handshake) cancels the session's
queued and running utterances and frees their rows; a session's line is bounded in sentences
and in frames as well as in characters; per-address session shares; numbers out of range and
lone surrogates are 400s and error frames, never a 500.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_orphans.py -q
"""

from __future__ import annotations

import asyncio
import json
import re
import tracemalloc

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.text_in import MAX_QUEUED_ITEMS
from tests.servers import ServerThread, wait_for
from tests.sockets import active, recv, silk_socket

KEY = "orphan-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CONFIG = {"type": "session.config", "voice": "Aisha", "response_format": "pcm", "stream_audio": True, "seed": 3,
          "max_seconds": 30}
FREED_WITHIN_S = 10.0  # generous: a freed row shows in /metrics within a poll or two


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=4, max_queue=32, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY, max_seconds=30, max_sessions_per_client=3) as srv:
        yield srv


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=5).text
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


def text_in(server):
    return connect(server.url.replace("http", "ws") + "/v1/audio/speech/stream", additional_headers=AUTH)


def hang_up(ws) -> None:
    """Close the TCP connection without a WebSocket close frame (a crashed client, a lost network)."""
    ws.transport.abort()


def all_freed(url: str) -> bool:
    return active(url) == 0 and metric(url, "rumik_websocket_sessions") == 0


async def _fifty_sentences_then(server, close_first: bool) -> None:
    async with text_in(server) as ws:
        await ws.send(json.dumps(CONFIG))
        text = " ".join(f"Sentence number {i} goes here." for i in range(50))
        await ws.send(json.dumps({"type": "input.text", "text": text}))
        while not isinstance(await recv(ws), bytes):  # the first sentence is playing
            pass
        if close_first:
            await ws.send(json.dumps({"type": "session.close"}))
        hang_up(ws)


@pytest.mark.parametrize("close_first", [True, False], ids=["session.close then hang-up", "hang-up"])
def test_a_text_in_client_that_hangs_up_frees_its_row_and_session(server, close_first):
    asyncio.run(_fifty_sentences_then(server, close_first))
    wait_for(lambda: all_freed(server.url), timeout=FREED_WITHIN_S, what="the orphaned session's row and slot")
    tokens = metric(server.url, "rumik_generated_tokens_total")
    wait_for(lambda: metric(server.url, "rumik_generated_tokens_total") == tokens, timeout=FREED_WITHIN_S,
             what="no more tokens for nobody")


@pytest.mark.parametrize("close_first", [True, False], ids=["close then hang-up", "hang-up"])
def test_a_silk_client_that_hangs_up_frees_its_row_and_session(server, close_first):
    async def go():
        async with silk_socket(server.url, KEY) as ws:
            await ws.send(json.dumps({"text": "A sentence that tiny never stops.", "seed": 1,
                                      "max_new_tokens": 3000}))
            while not isinstance(await recv(ws), bytes):
                pass
            if close_first:
                await ws.send(json.dumps({"type": "close"}))
            hang_up(ws)
    asyncio.run(go())
    wait_for(lambda: all_freed(server.url), timeout=FREED_WITHIN_S, what="the Silk session's row and slot")


def test_a_session_line_is_bounded_in_sentences_and_utterance_ends(server):
    """One frame of more sentences than the line holds is refused whole; then input.done frames
    (each an utterance end in line) are refused once the line is full, and the server's memory
    (this process: the server runs on a thread here) stays flat over 2,000 of them."""
    def sentences(count: int) -> str:
        return " ".join(f"Sentence number {i} goes here." for i in range(count))

    async def go():
        errors = []
        async with text_in(server) as ws:
            await ws.send(json.dumps(CONFIG))  # 30 s per sentence: the line does not drain meanwhile
            await ws.send(json.dumps({"type": "input.text", "text": sentences(MAX_QUEUED_ITEMS + 10)}))
            errors.append(await _next_error(ws))
            await ws.send(json.dumps({"type": "input.text", "text": sentences(MAX_QUEUED_ITEMS // 2)}))
            tracemalloc.start()
            for _ in range(2_000):
                await ws.send(json.dumps({"type": "input.done"}))
            while len(errors) < 1_900:
                errors.append(await _next_error(ws))
            traced = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            hang_up(ws)
        return errors, traced
    errors, traced = asyncio.run(go())
    assert all(error["code"] == "text_backlog" for error in errors)
    assert f"More than {MAX_QUEUED_ITEMS} sentences" in errors[0]["message"]
    assert traced < 8 * 2**20, f"{traced / 2**20:.1f} MiB traced"
    wait_for(lambda: all_freed(server.url), timeout=FREED_WITHIN_S, what="the session's row and slot")


async def _next_error(ws) -> dict:
    while True:
        message = await recv(ws)
        if isinstance(message, dict) and message["type"] == "error":
            return message


def test_one_address_gets_its_share_of_sessions(server):
    async def go():
        sockets = [await text_in(server).__aenter__() for _ in range(3)]
        with pytest.raises(InvalidStatus) as info:
            async with text_in(server):
                pass
        for ws in sockets:
            await ws.close()
        return info.value.response
    response = asyncio.run(go())
    assert response.status_code == 429 and b"too_many_sessions" in response.body
    wait_for(lambda: all_freed(server.url), timeout=FREED_WITHIN_S, what="the sessions to close")


@pytest.mark.parametrize("raw, param", [
    ('{"model":"tiny","input":"Hello.","voice":"Ira","seed":1' + "0" * 400 + "}", "seed"),
    ('{"model":"tiny","input":"Hello.","voice":"Ira","top_k":1' + "0" * 400 + "}", "top_k"),
    ('{"model":"tiny","input":"Hello.","voice":"Ira","top_p":1e400}', "top_p"),
    ('{"model":"tiny","input":"Hello.","voice":"Ira","temperature":1e400}', "temperature"),
    ('{"model":"tiny","input":"Hel\\ud800lo.","voice":"Ira"}', "input"),
])
def test_out_of_range_numbers_and_lone_surrogates_are_the_fields_400(server, raw, param):
    resp = httpx.post(server.url + "/v1/audio/speech", content=raw, timeout=30,
                      headers={**AUTH, "Content-Type": "application/json"})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param and "Traceback" not in resp.text


@pytest.mark.parametrize("field, raw", [("seed", "1" + "0" * 400), ("top_p", "1e400"), ("text", '"Hel\\ud800lo."')])
def test_out_of_range_numbers_and_lone_surrogates_on_sockets_get_an_error_frame(server, field, raw):
    async def go():
        async with text_in(server) as ws:
            if field == "text":
                await ws.send(json.dumps({**CONFIG, "max_seconds": 0.2}))
                await ws.send('{"type": "input.text", "text": ' + raw + "}")
                await ws.send(json.dumps({"type": "input.done"}))
            else:
                await ws.send('{"type": "session.config", "voice": "Aisha", "' + field + '": ' + raw + "}")
            while True:
                message = await recv(ws)
                if isinstance(message, dict) and message["type"] == "error":
                    return message
    frame = asyncio.run(go())
    assert frame["code"] != "server_error" and ("surrogate" in frame["message"] or field.replace("_", "-").lower()
                                                in frame["message"].lower().replace(" ", "-"))


def test_an_interrupted_request_stops_preparing_at_its_next_chunk(tiny_checkpoint):
    """Text preparation (normalise, tokenise, plan) of a request whose client went away, or
    interrupted it with new text, stops at its next chunk instead of running to the end."""
    import threading

    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    scheduler = BatchScheduler(engine, max_batch=2, max_queue=4, max_prompt_tokens=256)
    adapter = SchedulerAdapter(scheduler)
    entered, release, finished, calls = threading.Event(), threading.Event(), threading.Event(), []
    prompt_ids, prepare = engine.prompt_ids, scheduler.prepare

    def slow_prompt_ids(chunk):
        calls.append(chunk)
        entered.set()
        release.wait(timeout=60)
        return prompt_ids(chunk)

    def watched_prepare(*args):
        try:
            return prepare(*args)
        finally:
            finished.set()

    engine.prompt_ids, scheduler.prepare = slow_prompt_ids, watched_prepare
    text = " ".join(f"This is sentence number {i} of a long text that is split into chunks." for i in range(40))

    async def go():
        task = asyncio.ensure_future(anext(adapter.stream(_request(text))))
        await asyncio.to_thread(entered.wait, 60)
        task.cancel()  # the client hung up, or sent new text
        await asyncio.gather(task, return_exceptions=True)
        release.set()
        await asyncio.to_thread(finished.wait, 60)
    asyncio.run(go())
    assert len(engine.plan(_request(text), adapter.limits)) > 5  # many chunks were left to prepare
    assert len(calls) == 1  # only the chunk in hand when it was abandoned


def _request(text: str):
    from rumik_app import SynthesisRequest

    return SynthesisRequest(text, seed=1, max_new_tokens=48)
