"""Text streamed in over `WS /v1/audio/speech/stream` (vLLM-Omni's protocol), speech out per sentence.

Run: .venv/bin/python -m pytest tests/rumik_app/test_text_in.py -q
"""

from __future__ import annotations

import asyncio
import io
import json
import time
import wave

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from tests.servers import ServerThread, wait_for
from tests.sockets import active, recv

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXT = "Hello there, friend. This is the second sentence! And here is a third one."
SENTENCES = ["Hello there, friend.", "This is the second sentence!", "And here is a third one."]
CONFIG = {"type": "session.config", "voice": "Aisha", "response_format": "pcm", "stream_audio": True, "seed": 40,
          "max_seconds": 0.4}


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=4, max_queue=32, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY, max_seconds=0.5) as srv:
        yield srv


def socket(server, headers=AUTH):
    return connect(server.url.replace("http", "ws") + "/v1/audio/speech/stream", additional_headers=headers)


def send(ws, frame: dict):
    return ws.send(json.dumps(frame))


async def read_utterance(ws) -> tuple[list[dict], dict[int, bytes], dict[str, float]]:
    """Frames up to session.done: the control frames, each sentence's audio, and when
    (perf_counter) the first audio byte arrived."""
    frames, audio, when = [], {}, {}
    current = None
    while True:
        message = await recv(ws)
        if isinstance(message, bytes):
            when.setdefault("first_audio", time.perf_counter())
            audio[current] = audio.get(current, b"") + message
            continue
        frames.append(message)
        if message["type"] == "audio.start":
            current = message["sentence_index"]
        if message["type"] == "session.done":
            return frames, audio, when


def alone(server, sentence: str, seed: int) -> bytes:
    """The same sentence through POST /v1/audio/speech."""
    resp = httpx.post(server.url + "/v1/audio/speech", headers=AUTH, timeout=120, json={
        "model": "tiny", "input": sentence, "voice": "Aisha", "response_format": "pcm", "seed": seed,
        "max_seconds": 0.4})
    assert resp.status_code == 200, resp.text
    return resp.content


def test_words_with_delays_speak_before_input_done_and_equal_each_sentence_alone(server):
    async def go():
        async with socket(server) as ws:
            await send(ws, CONFIG)
            reader = asyncio.create_task(read_utterance(ws))
            for word in TEXT.split(" "):
                await send(ws, {"type": "input.text", "text": word + " "})
                await asyncio.sleep(0.15)
            done_sent = time.perf_counter()
            await send(ws, {"type": "input.done"})
            frames, audio, when = await reader
            return frames, audio, when, done_sent
    frames, audio, when, done_sent = asyncio.run(go())
    assert when["first_audio"] < done_sent  # the first sentence played while text was still arriving
    starts = [f for f in frames if f["type"] == "audio.start"]
    assert [f["sentence_text"] for f in starts] == SENTENCES
    assert all(f["format"] == "pcm" and f["sample_rate"] == 24000 and f["channels"] == 1 for f in starts)
    dones = [f for f in frames if f["type"] == "audio.done"]
    assert [(f["sentence_index"], f["error"], f["total_bytes"]) for f in dones] == \
        [(i, False, len(audio[i])) for i in range(3)]
    assert frames[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 3}
    for i, sentence in enumerate(SENTENCES):  # sentence k: seed base + k, exactly the HTTP route's audio
        assert audio[i] == alone(server, sentence, CONFIG["seed"] + i)


def test_text_sent_at_once_gives_the_same_audio_as_word_by_word(server):
    async def session(deltas: list[str]):
        async with socket(server) as ws:
            await send(ws, CONFIG)
            for delta in deltas:
                await send(ws, {"type": "input.text", "text": delta})
            await send(ws, {"type": "input.done"})
            return (await read_utterance(ws))[1]
    at_once = asyncio.run(session([TEXT]))
    in_bits = asyncio.run(session([TEXT[i:i + 3] for i in range(0, len(TEXT), 3)]))
    assert at_once == in_bits and len(at_once) == 3


def test_utterances_continue_the_seed_sequence_and_whole_files_per_sentence(server):
    config = {**CONFIG, "response_format": "wav", "stream_audio": False}

    async def go():
        async with socket(server) as ws:
            await send(ws, config)
            await send(ws, {"type": "input.text", "text": "One two three."})
            await send(ws, {"type": "input.done"})
            first = await read_utterance(ws)
            await send(ws, {"type": "input.text", "text": "Four five six."})
            await send(ws, {"type": "input.done"})
            return first, await read_utterance(ws)
    (f1, a1, _), (f2, a2, _) = asyncio.run(go())
    assert f2[-1] == {"type": "session.done", "utterance_index": 1, "total_sentences": 1}
    with wave.open(io.BytesIO(a2[0])) as w:  # one complete WAV in one binary frame
        assert w.getframerate() == 24000 and w.getnframes() * 2 == len(a2[0]) - 44
        samples = w.readframes(w.getnframes())
    assert samples == alone(server, "Four five six.", CONFIG["seed"] + 1)


def test_bad_frames_get_errors_and_the_session_stays_usable(server):
    async def go():
        async with socket(server) as ws:
            async def error_for(frame) -> dict:
                await ws.send(frame if isinstance(frame, (str, bytes)) else json.dumps(frame))
                reply = await recv(ws)
                assert reply["type"] == "error", reply
                return reply
            assert "session.config first" in (await error_for({"type": "input.text", "text": "hi"}))["message"]
            assert (await error_for("{oops"))["code"] == "invalid_json"
            assert (await error_for(b"\x00"))["code"] == "invalid_frame"
            assert "Unknown voice 'Bob'" in (await error_for({**CONFIG, "voice": "Bob"}))["message"]
            assert "stream_audio needs response_format" in \
                (await error_for({**CONFIG, "response_format": "wav"}))["message"]
            assert (await error_for({**CONFIG, "ref_audio": "x.wav"}))["code"] == "unknown_parameter"
            await send(ws, CONFIG)
            assert (await error_for({"type": "input.text", "text": 7}))["code"] == "invalid_text"
            assert (await error_for({"type": "dance"}))["code"] == "invalid_frame"
            await send(ws, {"type": "input.text", "text": "Open utterance."})
            assert (await error_for(CONFIG))["code"] == "utterance_open"
            assert (await error_for({"type": "input.text", "text": "x" * 5000}))["code"] == "text_backlog"
            await send(ws, {"type": "input.done"})
            frames, audio, _ = await read_utterance(ws)
            assert frames[-1]["total_sentences"] == 1 and audio[0]
    asyncio.run(go())


def test_a_bad_sentence_is_reported_and_the_next_one_plays(server):
    async def go():
        async with socket(server) as ws:
            await send(ws, CONFIG)
            await send(ws, {"type": "input.text", "text": "Bad <giggle> tag here. Good sentence now."})
            await send(ws, {"type": "input.done"})
            return await read_utterance(ws)
    frames, audio, _ = asyncio.run(go())
    kinds = [(f["type"], f.get("sentence_index")) for f in frames]
    assert kinds == [("audio.start", 0), ("error", 0), ("audio.done", 0), ("audio.start", 1), ("audio.done", 1),
                     ("session.done", None)]
    assert "Unknown tag <giggle>" in frames[1]["message"] and frames[2]["error"] is True
    assert 1 in audio and 0 not in audio


def test_session_close_speaks_what_is_queued_then_closes(server):
    async def go():
        async with socket(server) as ws:
            await send(ws, CONFIG)
            await send(ws, {"type": "input.text", "text": "Last words"})
            await send(ws, {"type": "session.close"})
            frames, audio, _ = await read_utterance(ws)
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            return frames, audio, ws.close_code
    frames, audio, code = asyncio.run(go())
    assert frames[0]["sentence_text"] == "Last words" and audio[0] and code == 1000


def test_a_hang_up_mid_sentence_frees_the_row(server):
    async def go():
        async with socket(server) as ws:
            await send(ws, {**CONFIG, "max_seconds": 30})
            await send(ws, {"type": "input.text", "text": "A sentence that tiny never stops. "})
            while not isinstance(await recv(ws), bytes):
                pass
            assert active(server.url) == 1
    asyncio.run(go())
    wait_for(lambda: active(server.url) == 0, what="the row of the closed session to be freed")


def test_the_socket_needs_the_api_key(server):
    async def go():
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(InvalidStatus) as info:
                async with socket(server, headers):
                    pass
            assert info.value.response.status_code == 401
            assert json.loads(info.value.response.body)["error"]["code"] in ("missing_api_key", "invalid_api_key")
    asyncio.run(go())


def _alone_as(server, sentence: str, seed: int, fmt: str, rate: int | None) -> bytes:
    """A sentence through POST /v1/audio/speech in `fmt` at `rate`."""
    resp = httpx.post(server.url + "/v1/audio/speech", headers=AUTH, timeout=120, json={
        "model": "tiny", "input": sentence, "voice": "Aisha", "response_format": fmt, "seed": seed,
        "max_seconds": 0.4, **({"sample_rate": rate} if rate else {})})
    assert resp.status_code == 200, resp.text
    return resp.content


@pytest.mark.parametrize("fmt, rate, stream_audio", [("ulaw", None, True), ("pcm", 16_000, True),
                                                     ("alaw", 48_000, False), ("wav", 22_050, False)])
def test_formats_and_rates_per_sentence_equal_the_http_route(server, fmt, rate, stream_audio):
    config = {**CONFIG, "response_format": fmt, "stream_audio": stream_audio, **({"sample_rate": rate} if rate else {})}

    async def go():
        async with socket(server) as ws:
            await send(ws, config)
            await send(ws, {"type": "input.text", "text": TEXT})
            await send(ws, {"type": "input.done"})
            return await read_utterance(ws)
    frames, audio, _ = asyncio.run(go())
    starts = [f for f in frames if f["type"] == "audio.start"]
    assert [(f["format"], f["sample_rate"]) for f in starts] == [(fmt, rate or 8_000)] * 3
    for i, sentence in enumerate(SENTENCES):
        expected = _alone_as(server, sentence, CONFIG["seed"] + i, fmt, rate)
        if fmt == "wav":  # one complete file: its sizes filled in (the HTTP stream's say "to the end")
            with wave.open(io.BytesIO(audio[i])) as w:
                assert w.getframerate() == rate and w.readframes(w.getnframes()) == expected[44:]
        else:
            assert audio[i] == expected


def test_a_rate_or_format_the_session_cannot_send_is_refused_naming_the_choices(server):
    async def go():
        async with socket(server) as ws:
            replies = []
            for change in ({"sample_rate": 11025}, {"response_format": "aac"}, {"response_format": "flac"}):
                await send(ws, {**CONFIG, **change})
                replies.append(await recv(ws))
            await send(ws, {**CONFIG, "response_format": "aac", "stream_audio": False})  # whole files: fine
            await send(ws, {"type": "input.text", "text": "Fine."})
            await send(ws, {"type": "input.done"})
            return replies, await read_utterance(ws)
    replies, (frames, audio, _) = asyncio.run(go())
    assert all(r["type"] == "error" for r in replies)
    assert replies[0]["param"] == "sample_rate" and replies[0]["message"] == \
        "Unsupported sample_rate 11025. Choose one of: 8000, 16000, 22050, 24000, 44100, 48000 (Hz)."
    for reply, fmt in zip(replies[1:], ("aac", "flac"), strict=True):
        assert reply["code"] == "unsupported_format" and reply["message"].startswith(
            f"stream_audio needs response_format pcm, ulaw or alaw (raw audio as it is generated); with '{fmt}'")
    assert frames[0]["format"] == "aac" and audio[0][:2] in (b"\xff\xf1", b"\xff\xf9")  # an ADTS frame's sync word
