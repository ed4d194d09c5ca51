"""The continuous-batching scheduler behind the speech server, on the tiny checkpoint (no HTTP).

Run: .venv/bin/python -m pytest tests/rumik_app/test_scheduler.py -q
"""

from __future__ import annotations

import numpy as np
import pytest

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.engine.scheduler import BatchScheduler, JobCancelled
from rumik_app.engine.serving import EngineFailed, ServerBusy, ShuttingDown
from rumik_app.prompt import PromptError
from rumik_app.serve.encoding import to_s16
from tests.conftest import ALWAYS_STOP, NEVER_STOP, stop_head_bias
from tests.servers import wait_for

SMALL_PROMPTS = 256  # max_prompt_tokens: the smallest cache (3,584 positions) keeps CPU frames cheap


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


@pytest.fixture(scope="module")
def scheduler(engine):
    sched = BatchScheduler(engine, max_batch=4, max_queue=8, max_prompt_tokens=SMALL_PROMPTS)
    sched.start()
    yield sched
    sched.stop(timeout=5)


def audio_of(job) -> np.ndarray:
    pieces = list(job)
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def test_streamed_audio_equals_engine_stream(engine, scheduler):
    """The scheduler's pieces are TTSEngine.stream's: same tokens, same 2-then-5-frame pieces, same audio."""
    req = SynthesisRequest("streaming through the scheduler", seed=31, max_new_tokens=200)
    job = scheduler.submit(req)
    pieces = list(job)
    stats = {}
    expected = list(engine.stream(req, stats=stats))
    assert [len(p) for p in pieces] == [len(p) for p in expected] and len(pieces) > 2
    # Bit-identical: the same tokens (logits differ at most in rounding between the two cache
    # shapes, which moves no sample here) through the same streaming Mimi pieces.
    assert np.array_equal(np.concatenate(pieces), np.concatenate(expected))
    offline = engine.synthesize(req).samples  # the offline decode: equal within float rounding
    np.testing.assert_allclose(np.concatenate(pieces), offline, atol=1e-5)
    assert np.abs(to_s16(np.concatenate(pieces)).astype(int) - to_s16(offline)).max() <= 1  # 16-bit: <= 1 LSB
    assert job.stats["tokens"] == stats["tokens"] and job.stats["finish_reasons"] == stats["finish_reasons"]
    assert job.stats["seed"] == 31 and job.stats["first_audio_s"] > 0


def test_long_text_chunks_follow_each_other_with_the_engine_crossfade(engine, scheduler):
    text = "First sentence is here. " * 30 + "Second part follows now! " * 30
    req = SynthesisRequest(text, seed=5)
    assert len(engine.plan(req)) > 1
    with stop_head_bias(engine, ALWAYS_STOP):  # one frame per chunk: the test is about joining
        job = scheduler.submit(req)
        got = audio_of(job)
        want = np.concatenate(list(engine.stream(req)))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert job.stats["chunks"] == len(engine.plan(req)) and len(job.stats["finish_reasons"]) == job.stats["chunks"]


def test_requests_joining_a_running_batch_get_bit_identical_audio(scheduler):
    """Rows joining at frame boundaries while another decodes produce exactly their audio alone."""
    reqs = [SynthesisRequest(f"request number {i}", seed=100 + i, max_new_tokens=160) for i in range(3)]
    alone = [audio_of(scheduler.submit(r)) for r in reqs]
    first = scheduler.submit(reqs[0])
    pieces = iter(first)
    head = next(pieces)  # the first row is decoding ...
    later = [scheduler.submit(r) for r in reqs[1:]]  # ... when the others arrive
    together = [np.concatenate([head, *pieces])] + [audio_of(job) for job in later]
    assert len(together[0]) >= 10 * 1920  # it ran on for many frames after the first piece (2 frames)
    for a, b in zip(alone, together, strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(alone[0][: len(alone[1])], alone[1][: len(alone[0])])  # seeds really differ


def test_cancel_frees_the_row_at_the_next_frame(engine, scheduler):
    with stop_head_bias(engine, NEVER_STOP):
        job = scheduler.submit(SynthesisRequest("a request nobody waits for", seed=9, max_new_tokens=3000))
        next(iter(job))
        assert scheduler.stats().active == 1
        job.cancel()
        wait_for(lambda: scheduler.stats().active == 0, timeout=10, what="the cancelled row to be freed")
    assert job.stats["tokens"] < 3000
    with pytest.raises(JobCancelled):
        list(job)


def test_full_queue_raises_server_busy(engine):
    # not started: nothing leaves the queue
    sched = BatchScheduler(engine, max_batch=1, max_queue=2, max_prompt_tokens=SMALL_PROMPTS)
    for seed in range(2):
        sched.submit(SynthesisRequest("waiting", seed=seed))
    with pytest.raises(ServerBusy, match="busy") as info:
        sched.submit(SynthesisRequest("one too many"))
    assert info.value.retry_after > 0
    assert sched.stats().queue_depth == 2


def test_close_refuses_new_and_waiting_requests_and_finishes_running_ones(engine):
    sched = BatchScheduler(engine, max_batch=1, max_queue=4, max_prompt_tokens=SMALL_PROMPTS)
    sched.start()
    try:
        running = sched.submit(SynthesisRequest("still running", seed=1, max_new_tokens=120))
        pieces = iter(running)
        head = next(pieces)
        waiting = sched.submit(SynthesisRequest("never started", seed=2))
        sched.close()
        with pytest.raises(ShuttingDown):
            list(waiting)
        with pytest.raises(ShuttingDown):
            sched.submit(SynthesisRequest("too late"))
        rest = list(pieces)  # the running request ends normally
        assert running.stats["finish_reasons"] and len(head) + sum(map(len, rest)) > 0
        assert sched.stats().draining
    finally:
        sched.stop(timeout=5)
        assert not sched._alive()  # the decode thread ended


def test_a_prompt_that_cannot_fit_the_cache_is_a_prompt_error(engine):
    sched = BatchScheduler(engine, max_batch=1, max_prompt_tokens=1)  # 3,584 positions: 512 prompt + 3,072 new
    text = "a long sentence without any full stop " * 9
    req = SynthesisRequest(text, description="a " * 140, max_new_tokens=3072)
    with pytest.raises(PromptError, match="--max-prompt-tokens"):
        sched.prepare(req)
    assert sched.prepare(req.with_(max_new_tokens=800))  # a smaller budget fits


def test_stats_count_tokens_and_audio(scheduler):
    before = scheduler.stats()
    job = scheduler.submit(SynthesisRequest("counting", seed=4, max_new_tokens=80))
    audio = audio_of(job)
    after = scheduler.stats()
    assert after.tokens_total - before.tokens_total == job.stats["tokens"] > 0
    assert after.audio_seconds_total - before.audio_seconds_total == pytest.approx(len(audio) / 24_000)
    assert after.tokens_per_second > 0 and after.max_batch == 4 and after.healthy


def test_a_failing_decode_loop_fails_every_request_and_refuses_new_ones(engine, monkeypatch):
    sched = BatchScheduler(engine, max_batch=2, max_prompt_tokens=SMALL_PROMPTS)
    sched.start()

    def broken():
        raise RuntimeError("CUDA error: device-side assert (simulated)")

    monkeypatch.setattr(sched.decoder, "run_frame", broken)
    job = sched.submit(SynthesisRequest("doomed", seed=1))
    with pytest.raises(EngineFailed, match="simulated"):
        list(job)
    wait_for(lambda: not sched.stats().healthy, timeout=5, what="the scheduler to report the failure")
    with pytest.raises(EngineFailed):
        sched.submit(SynthesisRequest("after the failure"))
    sched.stop(timeout=1)


@pytest.mark.slow
def test_a_compiled_decode_step_runs_in_the_scheduler_thread(tiny_checkpoint, monkeypatch):
    """The step is traced (fullgraph) and warmed up on the scheduler's own thread, where it
    then runs; the audio is the eager step's. (Tracing only: inductor code generation is
    covered by test_fast_decode; CUDA graphs need a GPU.)"""
    import torch

    from rumik_app.decode import slots as fast_decode

    torch._dynamo.reset()
    monkeypatch.setattr(fast_decode, "COMPILE_BACKEND", "eager")
    eager_engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    compiled_engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", compile=True)
    req = SynthesisRequest("compiled in a thread", seed=12, max_new_tokens=64)
    results = []
    for eng in (eager_engine, compiled_engine):
        sched = BatchScheduler(eng, max_batch=2, max_prompt_tokens=SMALL_PROMPTS)
        sched.start()
        assert sched.decoder.compiled == eng.compile
        results.append(audio_of(sched.submit(req)))
        sched.stop(timeout=5)
    assert np.array_equal(*results)
