"""The speech server over HTTP with the official openai client and httpx, on the tiny checkpoint.

The server runs in this process (uvicorn in a thread, the real app and scheduler) so tests
can bias the stop head; SIGTERM is tested on a subprocess in test_serve_process.py.
Run: .venv/bin/python -m pytest tests/rumik_app/test_serve.py -q
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import threading
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.request import build_request
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.encoding import AAC_FRAME, AAC_PRIMING, to_s16
from rumik_app.serve.openai.schema import SpeechRequest, parse_voice_map, request_fields
from tests.conftest import NEVER_STOP, stop_head_bias
from tests.rumik_app.test_encoding_rates import FFMPEG_G711, MULAW_MAX, ffmpeg_decode, g711_half_step
from tests.servers import (
    BAD_INPUTS,
    ServerThread,
    assert_openai_error,
    pcm_samples,
    stream_openai,
    wait_for,
)

KEY = "test-key"
SR = 24_000
SMALL_PROMPTS = 256  # max_prompt_tokens: the smallest cache keeps CPU frames cheap


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


def make_backend(engine, max_batch: int, max_queue: int) -> SchedulerAdapter:
    return SchedulerAdapter(BatchScheduler(engine, max_batch=max_batch, max_queue=max_queue,
                                        max_prompt_tokens=SMALL_PROMPTS))


@pytest.fixture(scope="module")
def server(engine):
    with ServerThread(make_backend(engine, max_batch=4, max_queue=64), api_key=KEY,
                      voice_map={"alloy": "Aisha"}) as srv:
        yield srv


@pytest.fixture(scope="module")
def one_slot_server(engine):
    """One batch row and one queue place: the queue fills with two requests."""
    with ServerThread(make_backend(engine, max_batch=1, max_queue=1), api_key=KEY) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def post(url: str, body: dict, key: str | None = KEY, timeout: float = 60) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + "/v1/audio/speech", json=body, headers=headers, timeout=timeout)


def body(text: str = "Hello there.", **extra) -> dict:
    return {"model": "tiny", "input": text, "voice": "Ira", **extra}


# ---------------------------------------------------------------- the openai client


def test_openai_client_create_returns_a_24khz_wav(client):
    resp = client.audio.speech.create(model="tiny", voice="Ira", input="नमस्ते! <laugh> How are you?",
                                      response_format="wav", extra_body={"seed": 3, "max_seconds": 0.5})
    audio, rate = sf.read(io.BytesIO(resp.content), dtype="int16")
    assert rate == SR and audio.ndim == 1 and 0 < len(audio) <= SR // 2
    assert resp.response.headers["x-rumik-seed"] == "3"


def test_openai_streaming_yields_pcm_in_several_chunks_while_it_is_generated(client, server, engine):
    args = dict(model="tts-1", voice="ira", input="Streaming, piece by piece.", response_format="pcm",
                extra_body={"seed": 11, "max_seconds": 1.2})
    generated, data = stream_openai(client, server.health, **args)
    assert len(generated) >= 4, generated  # three chunks or more, then the total
    assert generated[0] < generated[-1], generated  # the first audio left before the last token was made
    streamed = pcm_samples(data)
    # The same request with the same seed, non-streamed WAV: the same samples.
    wav = client.audio.speech.create(**{**args, "response_format": "wav"}).content
    assert np.array_equal(sf.read(io.BytesIO(wav), dtype="int16")[0], streamed)
    # And what the engine makes of it in this process: 16-bit samples at most 1 LSB apart.
    req = SynthesisRequest("Streaming, piece by piece.", seed=11, max_new_tokens=engine.max_new_tokens_for(1.2))
    offline = to_s16(engine.synthesize(req).samples)
    assert len(offline) == len(streamed) and np.abs(offline.astype(int) - streamed).max() <= 1


@pytest.mark.parametrize("fmt", ["mp3", "opus", "flac"])
def test_compressed_formats_decode_to_24khz(client, fmt):
    extra = {"seed": 2, "max_seconds": 0.5}
    pcm = pcm_samples(client.audio.speech.create(model="tiny", voice="Ira", input="Formats.", response_format="pcm",
                                                 extra_body=extra).content)
    data = client.audio.speech.create(model="tiny", voice="Ira", input="Formats.", response_format=fmt,
                                      extra_body=extra).content
    audio, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == SR
    if fmt == "flac":  # lossless
        assert np.array_equal(audio, pcm)
    else:  # lossy; mp3 adds the encoder's delay and padding (< 0.1 s)
        assert abs(len(audio) - len(pcm)) < SR // 10


def test_sse_stream_format_carries_the_same_audio(server):
    extra = {"seed": 4, "max_seconds": 0.5, "response_format": "pcm"}
    plain = post(server.url, body(**extra)).content
    resp = post(server.url, body(stream_format="sse", **extra))
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[len("data: "):]) for line in resp.text.splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events[:-1]] == ["speech.audio.delta"] * (len(events) - 1)
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"]["output_tokens"] > 0
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == plain


def test_voice_map_lets_openai_voice_names_select_a_voice(server):
    aisha = post(server.url, body(voice={"id": "Aisha"}, seed=6, max_seconds=0.3, response_format="pcm"))
    alloy = post(server.url, body(voice="alloy", seed=6, max_seconds=0.3, response_format="pcm"))
    assert aisha.status_code == alloy.status_code == 200 and aisha.content == alloy.content


def test_speed_maps_to_the_three_trained_paces():
    def pace(**fields):
        req = SpeechRequest(model="tiny", input="Hi.", voice="Ira", **fields)
        return build_request(request_fields(req), voices=("Ira",)).pace

    assert [pace(speed=s) for s in (0.25, 0.9, 0.95, 1.0, 1.05, 1.1, 4.0)] == \
        ["slow", "slow", None, None, None, "fast", "fast"]
    assert pace(speed=1.0, pace="steady") == "steady" and pace(speed=0.5, pace="Slow") == "slow"


def test_normalize_field_reads_numbers_as_words_unless_turned_off(engine):
    def prompt(**fields):
        req = SpeechRequest(model="tiny", input="Call me at 10:30 am.", voice="Ira", **fields)
        return engine.prompt_text(build_request(request_fields(req), voices=engine.voices))

    assert "ten thirty" in prompt() and "10:30" not in prompt()
    assert "10:30" in prompt(normalize=False)


def test_voice_map_flag_is_checked_against_the_voices():
    assert parse_voice_map("alloy=ira, Nova=Zoya", ("Ira", "Zoya")) == {"alloy": "Ira", "nova": "Zoya"}
    with pytest.raises(ValueError, match="Unknown voice 'Bob'"):
        parse_voice_map("alloy=Bob", ("Ira",))
    with pytest.raises(ValueError, match="NAME=VOICE"):
        parse_voice_map("alloy", ("Ira",))


# ---------------------------------------------------------------- errors and limits


@pytest.mark.parametrize("what, changes, status, param, message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_gets_an_openai_error_with_the_projects_message(server, what, changes, status, param, message):
    request = {k: v for k, v in {**body(), **changes}.items() if v is not None}
    assert_openai_error(post(server.url, request), status, param, message)


def test_openai_client_raises_bad_request_with_the_message(client):
    with pytest.raises(openai.BadRequestError, match="Allowed inline tags: <laugh>, <chuckle>, <sigh>"):
        client.audio.speech.create(model="tiny", voice="Ira", input="<cough> sorry")


def test_api_key_is_required_on_v1_routes(server):
    assert post(server.url, body(), key=None).json()["error"]["code"] == "missing_api_key"
    wrong = post(server.url, body(), key="nope")
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0).models.list()
    assert httpx.get(server.url + "/v1/models").status_code == 401
    assert httpx.get(server.url + "/health").status_code == 200  # open for load balancers


def test_models_voices_and_health(server, client):
    assert [m.id for m in client.models.list()] == ["tiny"]
    voices = httpx.get(server.url + "/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert voices["voices"] == ["Ira", "Aisha", "Siya", "Zoya"] and "<laugh>" in voices["tags"]
    assert voices["aliases"] == {"alloy": "Aisha"}
    health = server.health()
    assert health["status"] == "ok" and health["max_batch"] == 4 and health["backend"] == "engine"


def test_metrics_are_prometheus_text_with_requests_errors_queue_tokens_and_first_audio(server):
    post(server.url, body(seed=1, max_seconds=0.5))
    post(server.url, body(voice="nobody"))
    text = httpx.get(server.url + "/metrics").text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    names = {name for name, _ in samples}
    for status in ("200", "400"):
        assert sum(v for (n, labels), v in samples.items()
                   if n == "rumik_requests_total" and ("status", status) in labels) >= 1, status
    assert sum(v for (n, _), v in samples.items() if n == "rumik_request_errors_total") >= 1
    assert samples[("rumik_time_to_first_audio_seconds_count", ())] >= 1
    assert samples[("rumik_generated_tokens_total", ())] > 0 and samples[("rumik_batch_slots", ())] == 4
    assert {"rumik_queue_depth", "rumik_active_requests", "rumik_tokens_per_second", "rumik_audio_seconds_total",
            "rumik_request_duration_seconds_bucket", "rumik_backend_healthy"} <= names


def _stream_in_background(url: str, request: dict, first: threading.Event, out: dict) -> threading.Thread:
    def run() -> None:
        with httpx.stream("POST", url + "/v1/audio/speech", json=request, timeout=120,
                          headers={"Authorization": f"Bearer {KEY}"}) as resp:
            out["status"], out["headers"], data = resp.status_code, resp.headers, b""
            for chunk in resp.iter_bytes():
                data += chunk
                first.set()
            out["data"] = data
        first.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_full_queue_gets_503_with_retry_after(one_slot_server, engine):
    url = one_slot_server.url
    with stop_head_bias(engine, NEVER_STOP):
        with httpx.stream("POST", url + "/v1/audio/speech", timeout=60, headers={"Authorization": f"Bearer {KEY}"},
                          json=body(seed=1, max_seconds=30.0, response_format="pcm")) as running:
            chunks = running.iter_raw()
            next(chunks)  # the only row is taken
            queued: dict = {}
            waiter = _stream_in_background(url, body(seed=2, max_seconds=0.5, response_format="pcm"),
                                           threading.Event(), queued)
            wait_for(lambda: one_slot_server.health()["queue_depth"] == 1, what="the second request to queue")
            resp = post(url, body(seed=3))
            assert resp.status_code == 503 and int(resp.headers["retry-after"]) > 0
            error = resp.json()["error"]
            assert error["code"] == "server_busy" and error["type"] == "server_error" and "retry" in error["message"]
        waiter.join(60)  # the row is free again: the queued request is served
    assert queued["status"] == 200 and len(queued["data"]) > 0


def test_disconnect_mid_stream_frees_the_batch_row(server, engine):
    wait_for(lambda: server.health()["active"] == server.health()["queue_depth"] == 0, timeout=60,
             what="the server to be idle")  # tokens_total counts every request: only ours from here on
    tokens_before = server.health()["tokens_total"]
    budget = engine.max_new_tokens_for(30.0)  # what the request generates when it runs to its end
    with stop_head_bias(engine, NEVER_STOP):  # without the client, this would run for 30 s of audio
        with httpx.stream("POST", server.url + "/v1/audio/speech", timeout=60,
                          json=body(seed=8, max_seconds=30.0, response_format="pcm"),
                          headers={"Authorization": f"Bearer {KEY}"}) as resp:
            chunks = resp.iter_raw()  # (a discarded iterator would close the response at once)
            next(chunks)
            assert resp.status_code == 200 and server.health()["active"] == 1
            time.sleep(0.5)
            assert server.health()["active"] == 1  # still decoding while the client is connected
        # The bound only keeps a broken cancel from hanging the suite; the tokens below show the mechanism.
        wait_for(lambda: server.health()["active"] == 0, timeout=120, what="the row to be freed")
    health = server.health()
    generated = health["tokens_total"] - tokens_before
    # Freed by the hang-up, not by running out: a request run to its end generates exactly its budget.
    assert 0 < generated < budget, (generated, budget)
    assert health["status"] == "ok" and health["queue_depth"] == 0


def test_client_leaving_while_queued_never_takes_a_row(one_slot_server, engine):
    url = one_slot_server.url
    with stop_head_bias(engine, NEVER_STOP):
        with httpx.stream("POST", url + "/v1/audio/speech", timeout=60, headers={"Authorization": f"Bearer {KEY}"},
                          json=body(seed=5, max_seconds=30.0, response_format="pcm")) as running:
            chunks = running.iter_raw()
            next(chunks)  # the only row is taken
            with pytest.raises(httpx.ReadTimeout):  # waits in the queue, then gives up
                post(url, body(seed=6, max_seconds=30.0), timeout=1.0)
            # the abandoned request leaves the queue while the row is still busy
            wait_for(lambda: one_slot_server.health()["queue_depth"] == 0, timeout=5, what="the queue to empty")
            assert one_slot_server.health()["active"] == 1
        wait_for(lambda: one_slot_server.health()["active"] == 0, timeout=10, what="the row to be freed")
        tokens = one_slot_server.adapter.stats().tokens_total
        time.sleep(0.5)
        assert one_slot_server.health()["active"] == 0  # the abandoned request never started
        assert one_slot_server.adapter.stats().tokens_total == tokens


# ---------------------------------------------------------------- formats and output rates


def _rate_body(fmt: str, rate: int | None, **extra) -> dict:
    return body("Formats and rates, piece by piece.", seed=21, max_seconds=1.2, response_format=fmt,
                **({"sample_rate": rate} if rate else {}), **extra)


def _sse_bytes(resp: httpx.Response) -> bytes:
    events = [json.loads(line[len("data: "):]) for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    return b"".join(base64.b64decode(e["audio"]) for e in events[:-1])


@pytest.mark.parametrize("fmt, rate", [("ulaw", None), ("alaw", None), ("ulaw", 16_000), ("pcm", 16_000),
                                       ("pcm", 22_050), ("pcm", 44_100), ("pcm", 48_000)])
def test_streamed_and_sse_audio_equal_the_whole_file_at_every_rate(server, fmt, rate):
    request = _rate_body(fmt, rate)
    with httpx.stream("POST", server.url + "/v1/audio/speech", json=request, timeout=120,
                      headers={"Authorization": f"Bearer {KEY}"}) as resp:
        chunks = [chunk for chunk in resp.iter_bytes() if chunk]
        headers = resp.headers
    out_rate = rate or 8_000
    assert headers["x-rumik-sample-rate"] == str(out_rate)
    assert headers["content-type"] == ("audio/pcm" if fmt == "pcm" else f"audio/PCM{fmt[0].upper()};rate={out_rate}")
    assert len(chunks) >= 3  # streamed as it was generated, in pieces
    streamed = b"".join(chunks)
    events = post(server.url, {**request, "stream_format": "sse"})
    whole = post(server.url, {**request, "spans": True}).json()  # encoded once, from the gathered samples
    assert streamed == _sse_bytes(events) == base64.b64decode(whole["audio"]) and whole["sample_rate"] == out_rate
    model_rate = len(post(server.url, _rate_body("pcm", None)).content) // 2
    width = 2 if fmt == "pcm" else 1
    assert abs(len(streamed) // width - model_rate * out_rate / SR) <= 1


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed (setup.sh installs it)")
@pytest.mark.parametrize("fmt", ["ulaw", "alaw"])
def test_g711_from_the_server_decodes_with_ffmpeg_to_its_8khz_pcm(server, fmt):
    pcm = pcm_samples(post(server.url, _rate_body("pcm", 8_000)).content).astype(np.int64)
    coded = post(server.url, _rate_body(fmt, None))
    assert coded.status_code == 200 and len(coded.content) == pcm.size  # 8 kHz by default, one byte a sample
    decoded = np.frombuffer(ffmpeg_decode(coded.content, "-f", FFMPEG_G711[fmt], "-ar", "8000"), "<i2")
    edge = MULAW_MAX if fmt == "ulaw" else 32_768
    error = np.abs(decoded.astype(np.int64) - np.clip(pcm, -edge, edge))
    assert decoded.size == pcm.size and (error <= g711_half_step(fmt, pcm)).all()


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed (setup.sh installs it)")
@pytest.mark.parametrize("rate", [None, 44_100])
def test_aac_streams_and_decodes_with_ffmpeg_to_the_right_rate_and_length(server, rate):
    model_samples = len(post(server.url, _rate_body("pcm", None)).content) // 2
    resp = post(server.url, _rate_body("aac", rate))
    assert resp.status_code == 200 and resp.headers["content-type"] == "audio/aac"
    assert _sse_bytes(post(server.url, _rate_body("aac", rate, stream_format="sse"))) == resp.content
    out_rate = rate or SR
    decoded = np.frombuffer(ffmpeg_decode(resp.content, "-f", "aac"), "<i2")
    expected = round(model_samples * out_rate / SR)
    assert 0 <= decoded.size - AAC_PRIMING - expected < AAC_FRAME, (decoded.size, expected)


def test_openai_client_sends_sample_rate_in_extra_body(client):
    resp = client.audio.speech.create(model="tiny", voice="Ira", input="Phone line.", response_format="wav",
                                      extra_body={"seed": 3, "max_seconds": 0.5, "sample_rate": 16_000})
    audio, rate = sf.read(io.BytesIO(resp.content), dtype="int16")
    assert rate == 16_000 and resp.response.headers["x-rumik-sample-rate"] == "16000" and audio.size > 0


def _ffmpeg_children() -> list[int]:
    """Process ids of ffmpeg processes this test process started (the in-process server's AAC encoders)."""
    import os
    from pathlib import Path

    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, rest = stat.read_text().split(" (", 1)
        except OSError:
            continue
        name, fields = rest.rsplit(") ", 1)
        if name == "ffmpeg" and int(fields.split()[1]) == os.getpid() and fields.split()[0] != "Z":
            found.append(int(pid))
    return found


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg is not installed (setup.sh installs it)")
def test_a_hang_up_mid_aac_stream_stops_its_ffmpeg_and_frees_the_row(server, engine):
    wait_for(lambda: server.health()["active"] == 0 and not _ffmpeg_children(), timeout=60, what="an idle server")
    with stop_head_bias(engine, NEVER_STOP):
        with httpx.stream("POST", server.url + "/v1/audio/speech", timeout=60,
                          json=body(seed=8, max_seconds=30.0, response_format="aac"),
                          headers={"Authorization": f"Bearer {KEY}"}) as resp:
            chunks = resp.iter_raw()
            assert next(chunks)[:2] in (b"\xff\xf1", b"\xff\xf9")  # ADTS frames as they are encoded
            assert len(_ffmpeg_children()) == 1
        wait_for(lambda: server.health()["active"] == 0, timeout=120, what="the row to be freed")
        wait_for(lambda: not _ffmpeg_children(), timeout=30, what="ffmpeg to be stopped and reaped")
