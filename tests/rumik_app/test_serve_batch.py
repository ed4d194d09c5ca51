"""POST /v1/audio/speech/batch on the tiny checkpoint, over HTTP (httpx for the batch, the openai
client for the same requests sent alone): each good item equals its request alone, a bad item
gets its own error, the items share decode steps, and over-limit batches are refused whole.

The server runs in this process (uvicorn in a thread, the real app and scheduler).
Run: .venv/bin/python -m pytest -n0 -q tests/rumik_app/test_serve_batch.py
"""

from __future__ import annotations

import base64
import io
import json

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf

from rumik_app import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.encoding import format_problem
from rumik_app.serve.openai import batch
from rumik_app.serve.openai.schema import SpeechRequest
from tests.conftest import NEVER_STOP, stop_head_bias
from tests.servers import ServerThread, assert_openai_error, wait_for

KEY = "test-key"
SMALL_PROMPTS = 256  # max_prompt_tokens: the smallest cache keeps CPU frames cheap
ROWS = 16
WAV_HEADER = 44
G711 = ("ulaw", "alaw")
OPENAI_ARGS = ("model", "input", "voice", "response_format", "instructions", "speed")


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


def batch_server(engine, max_batch: int = ROWS) -> ServerThread:
    """A server on a fresh scheduler, with the batch route (included here until the app registers it)."""
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=max_batch, max_queue=64,
                                              max_prompt_tokens=SMALL_PROMPTS))
    server = ServerThread(adapter, api_key=KEY)
    app = server.server.config.app
    if not any(getattr(route, "path", None) == batch.BATCH_PATH for route in app.routes):
        app.include_router(batch.router)
    return server


@pytest.fixture(scope="module")
def server(engine):
    with batch_server(engine) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def post_batch(url: str, body: dict, key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + batch.BATCH_PATH, json=body, headers=headers, timeout=300)


def item(i: int, **extra) -> dict:
    return {"model": "tiny", "input": f"Line number {i} of the lesson.", "voice": "Ira", "response_format": "pcm",
            "seed": 40 + i, "max_seconds": 0.48, **extra}


def alone(client: openai.OpenAI, body: dict) -> bytes:
    """The same request sent alone to POST /v1/audio/speech with the openai client."""
    extra = {k: v for k, v in body.items() if k not in OPENAI_ARGS}
    return client.audio.speech.create(**{k: v for k, v in body.items() if k in OPENAI_ARGS},
                                      extra_body=extra).content


def same_audio(fmt: str, got: bytes, want: bytes) -> bool:
    """Byte for byte, but: a WAV in a batch has its real sizes (the streamed one 0xFFFFFFFF), and
    Opus in Ogg is compared by its samples (each Ogg stream gets a random serial number)."""
    if fmt == "wav":
        return got[WAV_HEADER:] == want[WAV_HEADER:] and sf.info(io.BytesIO(got)).frames == (len(got) - WAV_HEADER) // 2
    if fmt == "opus":
        return np.array_equal(sf.read(io.BytesIO(got), dtype="int16")[0], sf.read(io.BytesIO(want), dtype="int16")[0])
    return got == want


# ---------------------------------------------------------------- results


def test_one_bad_item_among_ten_good_ones_and_each_good_one_equals_its_request_alone(server, client):
    formats = [f for f in ("pcm", "wav", "mp3", "flac", "opus", "ulaw", "alaw", "aac") if not format_problem(f)]
    good = [item(i, response_format=formats[i % len(formats)], voice=["Ira", "Aisha", "Siya", "Zoya"][i % 4])
            for i in range(10)]
    good[3] = {**good[3], "tone": "happy"}
    if "sample_rate" in SpeechRequest.model_fields:  # an output rate of its own
        good[9] = {**good[9], "sample_rate": 16_000}
    good[7] = {k: v for k, v in good[7].items() if k != "seed"}  # the server draws one and reports it
    bad = item(99, voice="nova")
    items = good[:4] + [bad] + good[4:]
    resp = post_batch(server.url, {"items": items})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert [r["index"] for r in results] == list(range(11))
    # The bad item gets exactly the error the single route gives it; the others are unaffected.
    single = httpx.post(server.url + "/v1/audio/speech", json=bad, headers={"Authorization": f"Bearer {KEY}"})
    assert single.status_code == 400 and results[4] == {"index": 4, "error": single.json()["error"]}
    assert "Unknown voice 'nova'" in results[4]["error"]["message"] and results[4]["error"]["param"] == "voice"
    for body, result in zip(good, results[:4] + results[5:], strict=True):
        assert set(result) == {"index", "audio", "format", "sample_rate", "seed", "usage"}, result
        assert result["format"] == body["response_format"]
        assert result["sample_rate"] == body.get("sample_rate", 8_000 if body["response_format"] in G711 else 24_000)
        assert result["seed"] == body.get("seed", result["seed"]) and isinstance(result["seed"], int)
        usage = result["usage"]
        assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        got = base64.b64decode(result["audio"])
        want = alone(client, {**body, "seed": result["seed"]})
        assert got and same_audio(body["response_format"], got, want), f"item {result['index']} differs alone"


def test_usage_is_the_single_routes_usage(server):
    body = item(3)
    result = post_batch(server.url, {"items": [body]}).json()["results"][0]
    with httpx.stream("POST", server.url + "/v1/audio/speech", json={**body, "stream_format": "sse"},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as resp:
        events = [json.loads(line[len("data: "):]) for line in resp.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done" and events[-1]["usage"] == result["usage"]


def test_items_decode_together_the_schedulers_rows_per_step(engine):
    """Sharing, by the scheduler's own count: the most rows one decode step ran (GET /health's
    peak_active) is 1 while requests come one at a time, and reaches most of the batch's items."""
    items = [item(200 + i, max_seconds=1.0) for i in range(10)]
    with stop_head_bias(engine, NEVER_STOP), batch_server(engine) as server:
        assert server.health()["peak_active"] == 0
        resp = post_batch(server.url, {"items": items[:1]})
        assert resp.status_code == 200 and server.health()["peak_active"] == 1
        resp = post_batch(server.url, {"items": items})
        peak = server.health()["peak_active"]
    assert resp.status_code == 200 and all("audio" in r for r in resp.json()["results"])
    assert peak >= len(items) - 2, f"only {peak} of {len(items)} items decoded in one step"


def test_a_client_that_hangs_up_frees_every_items_row(engine):
    items = [item(300 + i, max_seconds=20) for i in range(6)]
    with stop_head_bias(engine, NEVER_STOP), batch_server(engine, max_batch=4) as server:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(server.url + batch.BATCH_PATH, json={"items": items}, timeout=httpx.Timeout(60, read=1.0),
                       headers={"Authorization": f"Bearer {KEY}"})
        wait_for(lambda: (h := server.health())["active"] == 0 and h["queue_depth"] == 0, timeout=30,
                 what="the batch's rows to be freed")
        assert 0 < server.health()["tokens_total"] < len(items) * engine.max_new_tokens_for(20)


# ---------------------------------------------------------------- bad batches and bad items


def _refused_before_any_work(server: ServerThread, body: dict, message: str) -> None:
    before = server.health()["tokens_total"]
    resp = post_batch(server.url, body)
    assert_openai_error(resp, 400, "items", message)
    assert server.health()["tokens_total"] == before


def test_empty_and_malformed_batches_are_refused_whole(server):
    _refused_before_any_work(server, {"items": []}, "The batch has no items: send 1 to 64 speech requests")
    _refused_before_any_work(server, {}, "The batch body needs \"items\"")
    _refused_before_any_work(server, {"items": item(1)}, "a list of 1 to 64 speech requests")
    resp = post_batch(server.url, {"items": [item(1)], "seed": 3})
    assert_openai_error(resp, 400, "seed", "Unrecognized field 'seed' in the batch body")


def test_over_limit_batches_are_refused_whole_with_one_message(server, monkeypatch):
    _refused_before_any_work(server, {"items": [item(i) for i in range(65)]},
                             "The batch has 65 items; at most 64 per batch. Split it into several batches.")
    long_input = "Long lesson text. " * 182  # 3,276 characters: five of them pass 16,384
    _refused_before_any_work(server, {"items": [item(i, input=long_input + str(i)) for i in range(5)]},
                             "The batch's inputs hold 16,385 characters in all; at most 16,384 per batch.")
    monkeypatch.setattr(batch, "MAX_AUDIO_SECONDS", 1.0)
    _refused_before_any_work(server, {"items": [item(1, max_seconds=0.8), item(2, max_seconds=0.8)]},
                             "The batch's items could make up to 2 s of audio in all (each item's max_seconds "
                             "over its chunks); at most 1 s per batch.")
    resp = post_batch(server.url, {"items": [item(1, max_seconds=0.8), item(2, voice="nova", max_seconds=0.8)]})
    assert resp.status_code == 200  # a bad item makes no audio: it does not count


def test_a_batch_whose_answer_would_be_too_large_is_refused_whole(server):
    """31 items of 60 s of SSML breaks as 48 kHz WAV: an 8 KB request whose answer would be ~240 MB of JSON."""
    pauses = "<speak>Hi." + '<break time="10s"/>' * 6 + "</speak>"
    wav = [item(i, input=pauses, response_format="wav", sample_rate=48_000) for i in range(31)]
    _refused_before_any_work(server, {"items": wav}, "The batch's answer could be up to 229 MB (each item's most "
                                                     "audio in its format and sample rate, as base64); at most 64 MB")
    mp3 = [item(i, input=pauses, response_format="mp3", sample_rate=48_000) for i in range(2)]
    assert post_batch(server.url, {"items": mp3}).status_code == 200  # compressed, the same audio fits


def test_items_that_cannot_be_checked_get_their_own_errors(server):
    items = [item(1), "Hello", item(2, stream_format="sse"), item(3, colour="red"), item(4, model="whisper-1"),
             item(5, max_seconds=99)]
    results = post_batch(server.url, {"items": items}).json()["results"]
    assert "audio" in results[0] and all("error" in r for r in results[1:])
    errors = [r["error"] for r in results[1:]]
    assert "This item is not a speech request" in errors[0]["message"]
    assert errors[1]["param"] == "stream_format" and "does not apply in a batch" in errors[1]["message"]
    assert errors[2]["code"] == "unknown_parameter" and errors[2]["param"] == "colour"
    assert errors[3]["code"] == "model_not_found"
    assert errors[4]["param"] == "max_seconds" and "out of range" in errors[4]["message"]


def test_the_batch_route_needs_the_api_key(server):
    resp = post_batch(server.url, {"items": [item(1)]}, key=None)
    assert resp.status_code == 401 and resp.json()["error"]["code"] == "missing_api_key"
