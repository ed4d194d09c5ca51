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
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.scheduler import BatchScheduler
from rumik_app.serve.encoding import to_s16
from tests.servers import ServerThread, fetch_speech

pytestmark = pytest.mark.slow

BATCH = 16
SPEEDUP_GOAL = 3.0  # 16 concurrent requests vs the same 16 one after another
ATTEMPTS = 2  # timings on a shared machine: best of this many of each, alternating


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
    for payload, result in zip(payloads, results):  # each equals the same request run alone, with its seed
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


def test_16_concurrent_requests_finish_at_least_3x_faster_than_one_after_another(server, capsys):
    payloads = [speech_body(100 + i, 0.48) for i in range(BATCH)]
    sequential, concurrent = [], []
    for _ in range(ATTEMPTS):  # alternate, keep the best of each: load only ever adds time
        seq_s, seq = _timed(_sequential, server.url, payloads)
        con_s, con = _timed(_concurrent, server.url, payloads)
        sequential.append(seq_s)
        concurrent.append(con_s)
        assert all(np.array_equal(a["pcm"], b["pcm"]) for a, b in zip(seq, con))  # the same work both ways
        if min(sequential) >= SPEEDUP_GOAL * min(concurrent):
            break
    speedup = min(sequential) / min(concurrent)
    with capsys.disabled():
        print(f"\n16 requests one after another {min(sequential):.2f} s, concurrently {min(concurrent):.2f} s: "
              f"{speedup:.1f}x (goal >= {SPEEDUP_GOAL:g}x)")
    assert speedup >= SPEEDUP_GOAL
