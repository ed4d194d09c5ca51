"""Rumik's socket and text-in on the vLLM backend: the same frames, cancel frees the vLLM request.

The protocol itself is tested on the engine backend (tests/rumik_app/test_silk.py,
test_text_in.py); here the session's vLLM engine serves it (`AsyncEngineAdapter`).
Run: .venv/bin/python -m pytest tests/vllm/test_sockets.py -q
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.asyncio.client import connect

from rumik_app.serve.adapters import AsyncEngineAdapter
from tests.servers import ServerThread, wait_for
from tests.sockets import active, first_audio, recv, silk_socket, until_terminal, utterance
from tests.vllm.calibrated import ROLE_TEXTS

pytestmark = pytest.mark.slow
KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def server(vllm_engine):
    with ServerThread(AsyncEngineAdapter(vllm_engine, max_batch=4, max_queue=16), api_key=KEY,
                      max_seconds=0.32) as srv:
        yield srv


def test_a_silk_session_speaks_cancels_and_matches_the_http_route(server, calibrated):
    frame = {"text": "Namaste.", "speaker": "aisha", "seed": 5, "max_new_tokens": 24}
    wav = httpx.post(server.url + "/v1/tts", json=frame, headers=AUTH, timeout=120)
    assert wav.status_code == 200 and wav.headers["content-type"] == "audio/wav"

    async def go():
        async with silk_socket(server.url, KEY) as ws:
            audio, frames = await utterance(ws, frame)
            assert frames[-1]["type"] == "done" and audio == wav.content[44:]  # the same vLLM request's audio
            # The calibrated row that never ends by itself: greedy, it runs to its 3,000 tokens (30 s),
            # so the cancel finds it playing (a row that ends after two frames races the cancel).
            text, voice = ROLE_TEXTS[calibrated[1]["max_tokens"]]
            await ws.send(json.dumps({"text": text, "speaker": voice, "temperature": 0, "max_new_tokens": 3000}))
            await first_audio(ws)
            await ws.send(json.dumps({"type": "cancel"}))
            _, frames = await until_terminal(ws)
            assert frames[-1]["type"] == "cancelled" and frames[-1]["reason"] == "cancel"
            await asyncio.to_thread(wait_for, lambda: active(server.url) == 0, 30, "the vLLM request to be aborted")
    asyncio.run(go())


def test_text_in_speaks_each_sentence_on_vllm(server):
    async def go():
        async with connect(server.url.replace("http", "ws") + "/v1/audio/speech/stream",
                           additional_headers=AUTH) as ws:
            await ws.send(json.dumps({"type": "session.config", "voice": "Ira", "response_format": "pcm",
                                      "stream_audio": True, "seed": 3}))
            for word in "One sentence here. And another one.".split(" "):
                await ws.send(json.dumps({"type": "input.text", "text": word + " "}))
            await ws.send(json.dumps({"type": "input.done"}))
            frames = []
            while not frames or frames[-1].get("type") != "session.done":
                message = await recv(ws)
                if not isinstance(message, bytes):
                    frames.append(message)
            return frames
    frames = asyncio.run(go())
    assert [f["sentence_text"] for f in frames if f["type"] == "audio.start"] == ["One sentence here.",
                                                                                 "And another one."]
    assert all(not f["error"] for f in frames if f["type"] == "audio.done")
