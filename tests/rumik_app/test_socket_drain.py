"""SIGTERM drains the server's sockets as it drains HTTP: what streams finishes, what waits gets 503.

Run: .venv/bin/python -m pytest tests/rumik_app/test_socket_drain.py -q

A real `python -m rumik_app.serve` process with one batch row: a Silk utterance streams, a
second Silk utterance and a text-in sentence wait for the row. On SIGTERM the waiting two get
an error with status 503 ("shutting_down"), the streaming one plays to its end, byte for
byte as alone, then every socket is closed with 1012 (service restart) and the process exits.
"""

from __future__ import annotations

import asyncio
import json
import signal

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.servers import EXIT_WITHIN_S, start_server_process, wait_for
from tests.sockets import first_audio, recv, silk_socket, until_terminal

KEY = "drain-key"
LONG = {"text": "This one streams through the shutdown.", "seed": 9, "max_new_tokens": 480}


async def _closed_code(ws) -> int:
    with pytest.raises(ConnectionClosed):
        while True:
            await asyncio.wait_for(ws.recv(), 60)
    return ws.close_code


@pytest.mark.slow
def test_sigterm_lets_the_streaming_utterance_finish_and_refuses_the_waiting_ones(tiny_checkpoint):
    proc, url = start_server_process(tiny_checkpoint, "--max-batch", "1", "--api-key", KEY, "--max-seconds", "1")
    try:
        alone = httpx.post(url + "/v1/tts", json=LONG, headers={"Authorization": f"Bearer {KEY}"},
                           timeout=120).content[44:]

        async def go():
            streaming = await silk_socket(url, KEY)
            await streaming.send(json.dumps(LONG))
            head, _ = await first_audio(streaming)
            waiting = await silk_socket(url, KEY)
            await waiting.send(json.dumps({"text": "I wait for the row.", "seed": 1}))
            text_in = await connect(url.replace("http", "ws") + "/v1/audio/speech/stream",
                                    additional_headers={"Authorization": f"Bearer {KEY}"})
            await text_in.send(json.dumps({"type": "session.config", "voice": "Ira", "response_format": "pcm",
                                           "stream_audio": True}))
            await text_in.send(json.dumps({"type": "input.text", "text": "Me too, please."}))
            await text_in.send(json.dumps({"type": "input.done"}))
            await asyncio.to_thread(wait_for, lambda: httpx.get(url + "/health").json()["queue_depth"] == 2, 30,
                                    "both to wait for the row")
            proc.send_signal(signal.SIGTERM)
            _, refused = await until_terminal(waiting)
            text_frames = [await recv(text_in) for _ in range(3)]  # audio.start, error, audio.done
            rest, frames = await until_terminal(streaming, bytearray(head))
            return refused[-1], text_frames, rest, frames[-1], [await _closed_code(ws)
                                                                 for ws in (streaming, waiting, text_in)]
        refused, text_frames, audio, done, codes = asyncio.run(go())
        assert refused["type"] == "error" and refused["status"] == 503 and refused["code"] == "shutting_down"
        assert [f["type"] for f in text_frames] == ["audio.start", "error", "audio.done"]
        assert text_frames[1]["code"] == "shutting_down" and text_frames[2]["error"] is True
        assert done["type"] == "done" and audio == alone  # finished, every byte
        assert codes == [1012, 1012, 1012]
        proc.wait(timeout=EXIT_WITHIN_S)
        assert proc.returncode in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
