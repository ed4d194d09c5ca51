"""The speech server on the vLLM backend: the openai-client tests of the speech-server issue.

The app runs in this process (uvicorn in a thread) over the session's vLLM engine
(`AsyncEngineAdapter`, what `python -m rumik_app.serve --backend vllm` builds), so no extra
engine starts; `test_serve_process.py` runs the real command once. The calibrated tiny
checkpoint (head size 64) serves; its greedy rows of LONG never stop before max_seconds,
which keeps a request running while a test looks at the server.
Run: .venv/bin/python -m pytest tests/vllm/test_serve.py -q -s   (-s shows the latency line)
"""

from __future__ import annotations

import asyncio
import io
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from prometheus_client.parser import text_string_to_metric_families

from rumik_app import SynthesisRequest
from rumik_app.engine.serving import ShuttingDown
from rumik_app.prompt import PromptError
from rumik_app.serve.adapters import AsyncEngineAdapter, EngineDied
from rumik_app.serve.encoding import to_s16
from tests.servers import (
    BAD_INPUTS,
    ServerThread,
    assert_openai_error,
    fetch_speech,
    pcm_samples,
    stream_openai,
    wait_for,
)

pytestmark = pytest.mark.slow

KEY = "test-key"
SR = 24_000
MAX_BATCH = 16
CONCURRENT = 16
# Greedy, this text and voice: a row that runs to max_seconds on the calibrated checkpoint.
LONG = {"input": "Finishing what was started.", "voice": "Ira", "temperature": 0, "response_format": "pcm"}


@pytest.fixture(scope="module")
def server(vllm_engine):
    backend = AsyncEngineAdapter(vllm_engine, max_batch=MAX_BATCH, max_queue=64)
    with ServerThread(backend, api_key=KEY, voice_map={"alloy": "Aisha"}) as srv:
        yield srv
    assert vllm_engine.is_healthy()  # the server's shutdown left the shared engine running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def body(text: str = "Hello there.", **extra) -> dict:
    return {"model": "tiny", "input": text, "voice": "Ira", **extra}


def post(url: str, request: dict, key: str | None = KEY, timeout: float = 120) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(url + "/v1/audio/speech", json=request, headers=headers, timeout=timeout)


def assert_same_as_engine(pcm: np.ndarray, engine, text: str, seed: int, max_seconds: float, **options) -> None:
    """pcm is what the vLLM engine makes of the request in this process: the same tokens, so
    16-bit samples at most 1 LSB apart (streamed vs whole Mimi decoding rounds differently)."""
    req = SynthesisRequest(text, seed=seed, max_new_tokens=engine.max_new_tokens_for(max_seconds), **options)
    offline = to_s16(engine.synthesize(req).samples)
    assert len(offline) == len(pcm) and np.abs(offline.astype(int) - pcm).max() <= 1


# ---------------------------------------------------------------- the openai client


def test_openai_client_create_returns_a_24khz_wav(client, vllm_engine):
    resp = client.audio.speech.create(model="tiny", voice="Ira", input="नमस्ते! <laugh> How are you?",
                                      response_format="wav", extra_body={"seed": 3, "max_seconds": 0.5})
    audio, rate = sf.read(io.BytesIO(resp.content), dtype="int16")
    assert rate == SR and audio.ndim == 1 and 0 < len(audio) <= SR // 2
    assert resp.response.headers["x-rumik-seed"] == "3"
    assert_same_as_engine(audio, vllm_engine, "नमस्ते! <laugh> How are you?", 3, 0.5)


def test_openai_streaming_yields_pcm_in_several_chunks_while_it_is_generated(client, server, vllm_engine):
    args = dict(model="tts-1", voice="ira", input=LONG["input"], response_format="pcm",
                extra_body={"seed": 11, "max_seconds": 3.0, "temperature": 0})
    generated, data = stream_openai(client, server.health, **args)
    assert len(generated) >= 4, generated  # three chunks or more, then the total
    assert generated[0] < generated[-1], generated  # the first audio left before the last token was made
    streamed = pcm_samples(data)
    frames = vllm_engine.max_new_tokens_for(3.0) // vllm_engine.layout.num_quantizers
    assert len(streamed) == frames * SR // vllm_engine.layout.frame_rate_hz  # greedy LONG runs to max_seconds
    wav = client.audio.speech.create(**{**args, "response_format": "wav"}).content
    assert np.array_equal(sf.read(io.BytesIO(wav), dtype="int16")[0], streamed)
    assert_same_as_engine(streamed, vllm_engine, LONG["input"], 11, 3.0, temperature=0.0)


def test_models_voices_and_health(server, client):
    assert [m.id for m in client.models.list()] == ["tiny"]
    voices = httpx.get(server.url + "/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert voices["voices"] == ["Ira", "Aisha", "Siya", "Zoya"] and voices["aliases"] == {"alloy": "Aisha"}
    health = server.health()
    assert health["status"] == "ok" and health["backend"] == "vllm" and health["max_batch"] == MAX_BATCH


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("what, changes, status, param, message", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_gets_an_openai_error_with_the_projects_message(server, what, changes, status, param, message):
    request = {k: v for k, v in {**body(), **changes}.items() if v is not None}
    assert_openai_error(post(server.url, request), status, param, message)


def test_openai_client_raises_bad_request_and_auth_errors(server, client):
    with pytest.raises(openai.BadRequestError, match="Allowed inline tags: <laugh>, <chuckle>, <sigh>"):
        client.audio.speech.create(model="tiny", voice="Ira", input="<cough> sorry")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0).models.list()
    assert post(server.url, body(), key=None).json()["error"]["code"] == "missing_api_key"


def test_a_chunk_longer_than_vllms_context_is_a_prompt_error(vllm_engine):
    with pytest.raises(PromptError, match="max_model_len"):
        vllm_engine.check_length([0] * vllm_engine.max_model_len, 8)


# ---------------------------------------------------------------- concurrency, limits, disconnects


async def _all(url: str, payloads: list[dict], concurrent: bool) -> list[dict]:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(base_url=url, timeout=300, headers=headers,
                                 limits=httpx.Limits(max_connections=len(payloads))) as client:
        if concurrent:
            return await asyncio.gather(*(fetch_speech(client, p) for p in payloads))
        return [await fetch_speech(client, p) for p in payloads]


def _timed(url: str, payloads: list[dict], concurrent: bool) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    results = asyncio.run(_all(url, payloads, concurrent))
    return time.perf_counter() - start, results


def test_concurrent_requests_all_answered_none_mixed_up_and_batched(vllm_engine, capsys):
    payloads = [body(f"Request number {i} speaks now.", seed=700 + i, max_seconds=0.64, response_format="pcm")
                for i in range(CONCURRENT)]
    with ServerThread(AsyncEngineAdapter(vllm_engine, max_batch=MAX_BATCH, max_queue=64), api_key=KEY) as server:
        wall, together = _timed(server.url, payloads, concurrent=True)
        peak = server.adapter.stats().peak_active  # this server's requests only
        sequential, alone = _timed(server.url, payloads, concurrent=False)
    assert [r["status"] for r in together] == [200] * CONCURRENT
    assert [r["seed"] for r in together] == [str(p["seed"]) for p in payloads]
    for payload, mixed, solo in zip(payloads, together, alone, strict=True):  # each equals the same request alone
        assert len(mixed["pcm"]) > 0 and np.array_equal(mixed["pcm"], solo["pcm"]), payload["seed"]
    assert len({r["pcm"][:1920].tobytes() for r in together}) == CONCURRENT  # all different audio
    latency, first = [r["latency_s"] for r in together], [r["first_audio_s"] for r in together]
    with capsys.disabled():
        print(f"\nvLLM backend: {CONCURRENT} requests (0.64 s of audio max) one after another {sequential:.2f} s, "
              f"concurrently {wall:.2f} s ({sequential / wall:.1f}x): latency p50 {np.percentile(latency, 50):.2f} s, "
              f"p95 {np.percentile(latency, 95):.2f} s; time to first audio p50 {np.percentile(first, 50):.2f} s, "
              f"p95 {np.percentile(first, 95):.2f} s")
    # Batched, by its mechanism: the requests were inside vLLM at the same time (max_num_seqs
    # = MAX_BATCH, so its scheduler decodes them in the same steps). Speed: benchmarks/.
    assert peak >= CONCURRENT // 2


def _open_stream(url: str, request: dict):
    """A streaming request whose first audio has arrived: (context manager, chunk iterator).
    Keep the iterator: a discarded one closes the response, which hangs up."""
    ctx = httpx.stream("POST", url + "/v1/audio/speech", json=request, timeout=120,
                       headers={"Authorization": f"Bearer {KEY}"})
    resp = ctx.__enter__()
    chunks = resp.iter_raw()
    next(chunks)
    assert resp.status_code == 200
    return ctx, chunks


def test_disconnect_mid_stream_aborts_the_vllm_request(server, vllm_engine):
    ctx, chunks = _open_stream(server.url, body(seed=8, max_seconds=30.0, **LONG))  # 3,000 tokens if left alone
    try:
        assert vllm_engine.num_unfinished_requests() == 1 and server.health()["active"] == 1
        time.sleep(0.3)
        assert vllm_engine.num_unfinished_requests() == 1  # still decoding while the client is connected
    finally:
        ctx.__exit__(None, None, None)  # the client hangs up
    wait_for(lambda: vllm_engine.num_unfinished_requests() == 0, timeout=30, what="vLLM to drop the request")
    assert server.health()["active"] == 0
    tokens = server.adapter.stats().tokens_total
    assert 0 < tokens
    time.sleep(0.3)
    assert server.adapter.stats().tokens_total == tokens  # nothing decodes for the gone client


def test_too_many_unfinished_vllm_requests_get_503_with_retry_after(vllm_engine):
    backend = AsyncEngineAdapter(vllm_engine, max_batch=1, max_queue=1)
    with ServerThread(backend, api_key=KEY) as one_slot:
        first, first_chunks = _open_stream(one_slot.url, body(seed=1, max_seconds=30.0, **LONG))
        second, second_chunks = _open_stream(one_slot.url, body(seed=2, max_seconds=30.0, **LONG))
        try:
            health = one_slot.health()
            assert (health["active"], health["queue_depth"]) == (1, 1)
            resp = post(one_slot.url, body(seed=3, max_seconds=0.5))
            assert resp.status_code == 503 and int(resp.headers["retry-after"]) > 0
            error = resp.json()["error"]
            assert error["code"] == "server_busy" and error["type"] == "server_error" and "retry" in error["message"]
        finally:
            first.__exit__(None, None, None)
            second.__exit__(None, None, None)
        wait_for(lambda: vllm_engine.num_unfinished_requests() == 0, timeout=10, what="both requests to end")
        served = post(one_slot.url, body(seed=3, max_seconds=0.5, response_format="pcm"))  # room again
        assert served.status_code == 200 and len(served.content) > 0


def test_metrics_count_requests_errors_tokens_and_first_audio(server):
    assert post(server.url, body(seed=1, max_seconds=0.5)).status_code == 200
    post(server.url, body(voice="nobody"))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(httpx.get(server.url + "/metrics").text)
               for s in family.samples}
    assert samples[("rumik_requests_total", (("format", "mp3"), ("status", "200")))] >= 1
    assert samples[("rumik_requests_total", (("format", "none"), ("status", "400")))] >= 1
    assert samples[("rumik_time_to_first_audio_seconds_count", ())] >= 1
    assert samples[("rumik_generated_tokens_total", ())] > 0 and samples[("rumik_audio_seconds_total", ())] > 0
    assert samples[("rumik_batch_slots", ())] == MAX_BATCH and samples[("rumik_backend_healthy", ())] == 1
    assert samples[("rumik_tokens_per_second", ())] > 0


def test_drain_refuses_requests_without_audio_and_finishes_streaming_ones(vllm_engine):
    """What SIGTERM starts (`begin_shutdown`), on the backend; the signal itself is tested on
    the command in test_serve_process.py."""
    backend = AsyncEngineAdapter(vllm_engine, max_batch=4, max_queue=4)
    streaming_req = SynthesisRequest(LONG["input"], seed=4, temperature=0.0, max_new_tokens=300)
    waiting_req = streaming_req.with_(seed=5, max_new_tokens=3000)

    async def main():
        await backend.start()
        streaming = backend.stream(streaming_req)
        pieces = [await anext(streaming)]  # this one is streaming
        waiting = backend.stream(waiting_req)
        no_audio_yet = asyncio.ensure_future(anext(waiting))
        while vllm_engine.num_unfinished_requests() < 2:  # submitted to vLLM, first audio frames away
            await asyncio.sleep(0.001)
        backend.begin_shutdown()
        with pytest.raises(ShuttingDown, match="not started"):
            await no_audio_yet
        with pytest.raises(ShuttingDown, match="takes no new requests"):
            await anext(backend.stream(waiting_req))
        pieces += [piece async for piece in streaming]
        await backend.stop(timeout=10)
        return np.concatenate(pieces)

    streamed = asyncio.run(main())
    np.testing.assert_allclose(streamed, vllm_engine.synthesize(streaming_req).samples, atol=1e-5)  # every sample
    assert backend.stats().draining and vllm_engine.num_unfinished_requests() == 0
    assert vllm_engine.is_healthy()  # stop() leaves an engine it did not load running


def test_a_request_waiting_for_audio_when_the_engine_dies_is_told_the_server_restarts(vllm_engine):
    """The engine watcher can see a dead engine core before the waiting request does: its drain then
    ends the wait, and the answer must still say "restarting" (503, retry), not "shutting down"."""
    backend = AsyncEngineAdapter(vllm_engine, max_batch=4, max_queue=4)
    waiting_req = SynthesisRequest(LONG["input"], seed=5, temperature=0.0, max_new_tokens=3000)

    async def main():
        await backend.start()
        no_audio_yet = asyncio.ensure_future(anext(backend.stream(waiting_req)))
        while vllm_engine.num_unfinished_requests() < 1:  # submitted to vLLM, first audio frames away
            await asyncio.sleep(0.001)
        backend._engine_dead("the watcher saw the engine core die")  # as _watch_engine does
        with pytest.raises(EngineDied, match="restarting"):
            await no_audio_yet
        await backend.stop(timeout=10)

    asyncio.run(main())
    assert vllm_engine.num_unfinished_requests() == 0 and vllm_engine.is_healthy()  # the request was aborted
