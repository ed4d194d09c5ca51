"""Load on the speech server (127.0.0.1, tiny checkpoint): nothing lost or mixed up, and batching.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_load.py -q -s    (-s shows the latency lines)
"""

from __future__ import annotations

import asyncio
import time

import httpx
import numpy as np
import pytest

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.encoding import to_s16
from tests.servers import ServerThread, fetch_speech

pytestmark = pytest.mark.slow

BATCH = 16


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


@pytest.fixture(scope="module")
def server(engine):
    backend = SchedulerAdapter(BatchScheduler(engine, max_batch=BATCH, max_queue=64, max_prompt_tokens=256))
    with ServerThread(backend) as srv:
        yield srv


def speech_body(i: int, max_seconds: float) -> dict:
    return {"model": "tiny", "input": f"Request number {i} speaks now.", "voice": "Ira", "response_format": "pcm",
            "seed": 500 + i, "max_seconds": max_seconds}


async def _concurrent(url: str, payloads: list[dict]) -> list[dict]:
    limits = httpx.Limits(max_connections=len(payloads))
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        return await asyncio.gather(*(fetch_speech(client, p) for p in payloads))


async def _sequential(url: str, payloads: list[dict]) -> list[dict]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        return [await fetch_speech(client, p) for p in payloads]


def _timed(fn, url: str, payloads: list[dict]) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    results = asyncio.run(fn(url, payloads))
    return time.perf_counter() - start, results


def test_32_concurrent_requests_all_answered_none_lost_or_mixed_up(server, engine, capsys):
    max_seconds = 0.64
    payloads = [speech_body(i, max_seconds) for i in range(32)]
    wall, results = _timed(_concurrent, server.url, payloads)
    assert [r["status"] for r in results] == [200] * 32
    assert [r["seed"] for r in results] == [str(p["seed"]) for p in payloads]
    for payload, result in zip(payloads, results, strict=True):  # each equals the same request run alone, with its seed
        req = SynthesisRequest(payload["input"], voice="Ira", seed=payload["seed"],
                               max_new_tokens=engine.max_new_tokens_for(max_seconds))
        alone = to_s16(np.concatenate(list(engine.stream(req))))
        assert np.array_equal(result["pcm"], alone), f"request {payload['seed']} differs from its solo run"
    heads = {r["pcm"][:1920].tobytes() for r in results}
    assert len(heads) == 32  # 32 different audios: a mix-up could not pass the check above by chance
    latency = [r["latency_s"] for r in results]
    first = [r["first_audio_s"] for r in results]
    with capsys.disabled():
        print(f"\n32 concurrent requests ({max_seconds} s of audio each, {BATCH} batch rows) in {wall:.2f} s: "
              f"latency p50 {np.percentile(latency, 50):.2f} s, p95 {np.percentile(latency, 95):.2f} s; "
              f"time to first audio p50 {np.percentile(first, 50):.2f} s, p95 {np.percentile(first, 95):.2f} s")


def test_16_concurrent_requests_are_decoded_together(engine, capsys):
    """Batching, by its mechanism: the 16 requests share decode steps (the scheduler's peak rows
    per step), and give the same audio as when run one after another. The speed-up is printed
    for information; speed goals are measured in benchmarks/serve_load.py, not asserted here."""
    payloads = [speech_body(100 + i, 0.48) for i in range(BATCH)]
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=BATCH, max_queue=64, max_prompt_tokens=256))
    with ServerThread(adapter) as server:
        seq_s, seq = _timed(_sequential, server.url, payloads)
        assert adapter.stats().peak_active == 1  # one after another: one row per step
        con_s, con = _timed(_concurrent, server.url, payloads)
        peak = adapter.stats().peak_active
    assert all(np.array_equal(a["pcm"], b["pcm"]) for a, b in zip(seq, con, strict=True))  # the same work both ways
    with capsys.disabled():
        print(f"\n16 requests one after another {seq_s:.2f} s, concurrently {con_s:.2f} s ({seq_s / con_s:.1f}x); "
              f"{peak} rows decoded in one step at most")
    assert peak >= BATCH // 2  # 16 clients at once: most of them in the same steps
