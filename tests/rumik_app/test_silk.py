"""Rumik's hosted-API protocol on the speech server: /v1/tts, ws-connect and the session socket.

Run: .venv/bin/python -m pytest tests/rumik_app/test_silk.py -q

Against the real app on the tiny checkpoint (uvicorn in a thread), over HTTP and real
WebSockets (the `websockets` client, which `rumik-ai` itself uses). The official clients
run against a spawned server in tests/agents (their own environment).
"""

from __future__ import annotations

import asyncio
import io
import json
import wave

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.silk import session as silk_session
from tests.servers import ServerThread, wait_for
from tests.sockets import active, first_audio, gauge, mint, recv, silk_socket, until_terminal, utterance

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SHORT = 48  # tokens: 6 frames, ~0.5 s of audio
LONG = 3000  # tiny's random weights rarely stop: ~30 s of audio, time to cancel it


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=4, max_queue=32, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY, max_seconds=0.5, max_sessions=24) as srv:
        yield srv


def tts(server, body: dict, headers=AUTH) -> httpx.Response:
    return httpx.post(server.url + "/v1/tts", json=body, headers=headers, timeout=120)


def wav_frames(data: bytes) -> bytes:
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getcomptype()) == (24000, 1, 2, "NONE")
        return w.readframes(w.getnframes())


def run(coro):
    return asyncio.run(coro)


def test_tts_is_a_complete_wav_of_the_same_audio_as_the_openai_route(server):
    resp = tts(server, {"text": "Namaste, dost.", "model": "mulberry", "speaker": "siya", "seed": 11,
                        "max_new_tokens": SHORT})
    assert resp.status_code == 200 and resp.headers["content-type"] == "audio/wav"
    assert resp.headers["x-request-id"].startswith("req_") and resp.headers["x-rumik-seed"] == "11"
    pcm = wav_frames(resp.content)
    assert len(pcm) > 0
    openai = httpx.post(server.url + "/v1/audio/speech", headers=AUTH, timeout=120, json={
        "model": "tiny", "input": "Namaste, dost.", "voice": "Siya", "response_format": "pcm", "seed": 11,
        "max_seconds": SHORT / 100})
    assert openai.content == pcm  # one core: the same rows, the same samples


def test_muga_tone_tags_and_legacy_speakers_map_to_this_models_controls(server):
    tagged = tts(server, {"text": "[happy] Namaste!", "model": "muga", "seed": 5, "max_new_tokens": SHORT})
    toned = httpx.post(server.url + "/v1/audio/speech", headers=AUTH, timeout=120, json={
        "model": "tiny", "input": "Namaste!", "voice": "Ira", "tone": "happy", "response_format": "pcm", "seed": 5,
        "max_seconds": SHORT / 100})
    assert wav_frames(tagged.content) == toned.content
    neutral = tts(server, {"text": "[neutral] Namaste!", "seed": 5, "max_new_tokens": SHORT})
    plain = tts(server, {"text": "Namaste!", "seed": 5, "max_new_tokens": SHORT})
    assert wav_frames(neutral.content) == wav_frames(plain.content) != wav_frames(tagged.content)
    legacy = tts(server, {"text": "Hi.", "model": "mulberry", "speaker": "speaker_3", "seed": 2,
                          "max_new_tokens": SHORT})
    named = tts(server, {"text": "Hi.", "model": "mulberry", "speaker": "AISHA", "seed": 2, "max_new_tokens": SHORT})
    assert legacy.content == named.content


ERRORS = [  # (body change, status, code, fragment of the message)
    ({"text": "[whisper] psst"}, 400, "unsupported_tone", "The tone [whisper] has no equivalent in rumik-oss-1"),
    ({"text": "[sleepy] hi"}, 400, "unsupported_tone", "Unknown tone tag [sleepy]"),
    ({"speaker": "emma"}, 422, "unknown_speaker", "Unknown speaker 'emma'. This server's voices are Ira, Aisha"),
    ({"f0_up_key": 2}, 400, "unsupported_parameter", "feature of Rumik's hosted voices"),
    ({"model": "whisper-1"}, 404, "model_not_found", "The model 'whisper-1' does not exist"),
    ({"pitch": 3}, 422, "unknown_field", "pitch: unknown field. This server accepts: text, model"),
    ({"temperature": 5}, 422, "invalid_request", "Temperature 5 is out of range: use 0 (greedy) to 2."),
    ({"repetition_penalty": 0}, 422, "invalid_request", "Repetition penalty 0 is out of range"),
    ({"text": "x" * 5000}, 422, "invalid_request", "Text is 5,000 characters; the limit is 4,096."),
    ({"text": "  "}, 422, "invalid_request", "Text is empty. Type something for the voice to say."),
    ({"top_k": "many"}, 422, "invalid_request", "top_k: Input should be a valid integer"),
    ({"text": "[happy] hi", "description": "calm"}, 400, "invalid_request", "not both"),
    ({"sample_rate": 11025}, 400, "unsupported_sample_rate",
     "Unsupported sample_rate 11025. Choose one of: 8000, 16000, 22050, 24000, 44100, 48000 (Hz)."),
    ({"response_format": "wma"}, 400, "unsupported_format",
     "Unsupported response_format 'wma'. Choose one of: wav, pcm, mp3, opus, flac, ulaw, alaw, aac."),
]


@pytest.mark.parametrize("change, status, code, message", ERRORS, ids=[e[2] + str(i) for i, e in enumerate(ERRORS)])
def test_bad_requests_get_the_hosted_apis_error_body_and_never_a_5xx(server, change, status, code, message):
    resp = tts(server, {"text": "Namaste!", "model": "mulberry", **change})
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["code"] == code and message in body["error"] and body["message"] == body["error"], body
    assert resp.headers["x-request-id"].startswith("req_")


def test_the_key_and_body_size_are_checked_first_in_the_same_shape(server):
    for headers, code in (({}, "missing_api_key"), ({"Authorization": "Bearer nope"}, "invalid_api_key")):
        for path in ("/v1/tts", "/v1/tts/ws-connect"):
            resp = httpx.post(server.url + path, json={"text": "hi"}, headers=headers, timeout=10)
            assert resp.status_code == 401 and resp.json()["code"] == code and isinstance(resp.json()["error"], str)
    big = httpx.post(server.url + "/v1/tts", content=b"{" + b" " * 70_000 + b"}", headers=AUTH, timeout=10)
    assert big.status_code == 413 and big.json()["code"] == "request_too_large"
    bad = httpx.post(server.url + "/v1/tts", content=b"{not json", headers=AUTH, timeout=10)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_json"


def test_ws_connect_mints_an_absolute_url_and_a_single_use_token(server):
    ws_url, token = mint(server.url, KEY)
    assert ws_url == server.url.replace("http://", "ws://") + "/v1/tts/ws"
    assert token.replace("-", "").replace("_", "").isalnum() and len(token) >= 24
    behind_tls, _ = mint(server.url, KEY, **{"X-Forwarded-Proto": "https", "Host": "tts.example.com"})
    assert behind_tls == "wss://tts.example.com/v1/tts/ws"

    async def go():
        async with connect(f"{ws_url}?token={token}") as ws:
            _, frames = await utterance(ws, {"text": "Hi.", "seed": 1})
            assert frames[-1]["type"] == "done"
        for uri in (f"{ws_url}?token={token}", f"{ws_url}?token=forged", ws_url):  # used, unknown, none
            with pytest.raises(InvalidStatus) as info:
                async with connect(uri):
                    pass
            assert info.value.response.status_code == 401
            assert json.loads(info.value.response.body)["code"] == "invalid_token"
    run(go())


def test_an_expired_token_is_refused(server, monkeypatch):
    tokens = server.server.config.app.state.silk_tokens
    monkeypatch.setattr(tokens, "ttl", -1.0)
    ws_url, token = mint(server.url, KEY)

    async def go():
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"{ws_url}?token={token}"):
                pass
        assert info.value.response.status_code == 401
    run(go())


def test_the_first_frames_voice_holds_and_a_later_frame_can_change_it(server):
    def alone(speaker: str, seed: int) -> bytes:
        return wav_frames(tts(server, {"text": "Second line.", "speaker": speaker, "seed": seed,
                                       "max_new_tokens": SHORT}).content)

    async def go():
        async with silk_socket(server.url, KEY) as ws:
            _, frames = await utterance(ws, {"text": "First.", "speaker": "zoya", "max_new_tokens": SHORT, "seed": 1})
            assert [f["type"] for f in frames] == ["queued", "done"]
            done = frames[-1]
            assert done["request_id"].startswith("req_") and done["audio_duration"] > 0 and done["rtf"] > 0
            assert "error" not in done and "credits_used" in done
            kept, _ = await utterance(ws, {"text": "Second line.", "seed": 4})
            changed, _ = await utterance(ws, {"text": "Second line.", "speaker": "ira", "seed": 4})
            return kept, changed
    kept, changed = run(go())
    assert kept == alone("zoya", 4) and changed == alone("ira", 4) and kept != changed


def test_cancel_stops_at_once_frees_the_row_and_the_session_goes_on(server):
    async def go():
        async with silk_socket(server.url, KEY) as ws:
            await ws.send(json.dumps({"text": "A long one.", "max_new_tokens": LONG, "seed": 3}))
            await first_audio(ws)
            assert active(server.url) == 1
            await ws.send(json.dumps({"type": "cancel"}))
            audio, frames = await until_terminal(ws)
            assert frames[-1] == {"type": "cancelled", "reason": "cancel", "request_id": frames[-1]["request_id"]}
            wait_for(lambda: active(server.url) == 0, what="the cancelled row to be freed")
            await ws.send(json.dumps({"type": "cancel"}))  # idle: no reply (livekit's keepalive)
            _, frames = await utterance(ws, {"text": "Next.", "seed": 5})
            assert [f["type"] for f in frames] == ["queued", "done"]
    run(go())


def test_new_text_interrupts_the_utterance_playing(server):
    async def go():
        async with silk_socket(server.url, KEY) as ws:
            await ws.send(json.dumps({"text": "A long one.", "max_new_tokens": LONG, "seed": 3}))
            await first_audio(ws)
            _, frames = await utterance(ws, {"text": "Barge in.", "seed": 6})  # up to the first terminal frame
            assert [(f["type"], f.get("reason")) for f in frames] == [("cancelled", "interrupt")]
            audio, frames = await until_terminal(ws)
            assert [f["type"] for f in frames] == ["queued", "done"] and audio
    run(go())


def test_malformed_frames_get_errors_and_the_session_stays_usable(server):
    async def go():
        async with silk_socket(server.url, KEY) as ws:
            for frame, code in (("not json", "invalid_json"), (b"\x00\x01", "invalid_frame"),
                                (json.dumps({"type": "dance"}), "invalid_frame"),
                                (json.dumps([1, 2]), "invalid_request"),
                                (json.dumps({"text": 5}), "invalid_request"),
                                (json.dumps({"text": "hi", "speaker": "lucas"}), "unknown_speaker")):
                await ws.send(frame)
                error = await recv(ws)
                assert error["type"] == "error" and error["code"] == code and error["status"] in (400, 422), error
                assert isinstance(error["error"], str) and error["message"] == error["error"]
            audio, frames = await utterance(ws, {"text": "Still here.", "seed": 2})
            assert frames[-1]["type"] == "done" and audio
    run(go())


def test_close_and_hang_up_abort_the_utterance_and_free_its_row(server):
    async def go(how: str):
        ws = await silk_socket(server.url, KEY)
        await ws.send(json.dumps({"text": "A long one.", "max_new_tokens": LONG, "seed": 8}))
        await first_audio(ws)
        if how == "close":
            await ws.send(json.dumps({"type": "close"}))
            with pytest.raises(ConnectionClosed):
                while True:
                    await ws.recv()
            assert ws.close_code == 1000
        else:
            await ws.close()
    for how in ("close", "hang-up"):
        run(go(how))
        wait_for(lambda: active(server.url) == 0 and gauge(server.url, "rumik_websocket_sessions") == 0,
                 what=f"{how}: the row and the session to be freed")


def test_sixteen_sessions_at_once_each_get_their_own_audio(server):
    frames = [{"text": f"Session {i} speaks.", "speaker": ("ira", "siya", "aisha", "zoya")[i % 4], "seed": 100 + i,
               "max_new_tokens": SHORT} for i in range(16)]
    alone = [wav_frames(tts(server, frame).content) for frame in frames]

    async def one(frame):
        async with silk_socket(server.url, KEY) as ws:
            audio, got = await utterance(ws, frame)
            assert got[-1]["type"] == "done"
            return audio

    async def go():
        return await asyncio.gather(*(one(frame) for frame in frames))
    together = run(go())
    assert together == alone and len(set(together)) == 16


def test_an_idle_session_times_out(server, monkeypatch):
    monkeypatch.setattr(silk_session, "IDLE_TIMEOUT_S", 0.5)

    async def go():
        async with silk_socket(server.url, KEY) as ws:
            frame = await recv(ws, timeout=10)
            assert frame["type"] == "timeout" and "No frame from the client" in frame["message"]
            with pytest.raises(ConnectionClosed):
                await ws.recv()
    run(go())


def test_sessions_beyond_the_limit_get_503(server, monkeypatch):
    monkeypatch.setattr(server.server.config.app.state.ctx.sessions, "max_sessions", 0)

    async def go():
        with pytest.raises(InvalidStatus) as info:
            async with silk_socket(server.url, KEY):
                pass
        assert info.value.response.status_code == 503
        assert int(info.value.response.headers["retry-after"]) > 0
    run(go())


def test_tts_and_the_socket_send_g711_and_other_rates_when_asked(server):
    base = {"text": "Phone line.", "speaker": "ira", "seed": 9, "max_new_tokens": SHORT}
    ulaw = tts(server, {**base, "response_format": "ulaw"})
    assert ulaw.status_code == 200 and ulaw.headers["content-type"] == "audio/PCMU;rate=8000"
    assert ulaw.headers["x-rumik-sample-rate"] == "8000"
    openai = httpx.post(server.url + "/v1/audio/speech", headers=AUTH, timeout=120, json={
        "model": "tiny", "input": "Phone line.", "voice": "Ira", "response_format": "ulaw", "seed": 9,
        "max_seconds": SHORT / 100})
    assert ulaw.content == openai.content  # the same samples, the same encoder
    wide = tts(server, {**base, "sample_rate": 16_000})
    with wave.open(io.BytesIO(wide.content)) as w:
        assert w.getframerate() == 16_000 and abs(w.getnframes() - 2 * len(ulaw.content)) <= 1  # vs 8 kHz

    async def go():
        async with silk_socket(server.url, KEY) as ws:
            streamed, frames = await utterance(ws, {**base, "response_format": "ulaw"}, width=1)
            assert frames[-1]["type"] == "done"
            kept, _ = await utterance(ws, {"text": "Phone line.", "seed": 9, "max_new_tokens": SHORT}, width=1)
            pcm, _ = await utterance(ws, {**base, "response_format": "pcm", "sample_rate": 24_000})
            refused = await utterance(ws, {**base, "response_format": "aac"})
            return streamed, kept, pcm, refused
    streamed, kept, pcm, (_, refused) = run(go())
    assert streamed == kept == ulaw.content  # the socket's pieces are the whole file; the format is held
    assert pcm == wav_frames(tts(server, base).content)
    assert refused[-1]["type"] == "error" and refused[-1]["code"] == "unsupported_format"
    assert refused[-1]["message"] == "response_format 'aac' cannot be used here. Choose one of: pcm, ulaw, alaw."
