"""The vLLM backend against the engine backend, on one calibrated tiny float32 checkpoint.

Greedy tokens equal the engine's (rows ending by the stop head, by `</audio>`, at
max_new_tokens); every token obeys the phase rule; stop decisions follow the engine's rule
(threshold and Bernoulli); seeds reproduce; sampled log-probs equal a teacher-forced
recomputation with the engine's audio head; streaming (sync and asyncio) equals synthesis,
and an abandoned stream frees its vLLM request.
"""

from __future__ import annotations

import asyncio
import os
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rumik_app import SynthesisRequest
from rumik_app.decode.sampling import draw_uniforms
from rumik_vllm.rules import STOP_SEED_OFFSET
from tests.vllm.calibrated import END_BOUNDARY, MAX_NEW_TOKENS, greedy_requests

pytestmark = pytest.mark.slow
ATOL = 1e-4
LONG_TEXT = " ".join(["The quick brown fox jumps over the lazy dog near the river bank."] * 30)


def _requests_with_variants(roles: dict[str, int]) -> list[SynthesisRequest]:
    """The three calibrated greedy rows, plus: a budget that ends mid-frame, and a minimum
    length that holds the stop head past its boundary."""
    reqs = greedy_requests()
    return reqs + [reqs[roles["max_tokens"]].with_(max_new_tokens=MAX_NEW_TOKENS - 3),
                   reqs[roles["stop_head"]].with_(min_new_tokens=MAX_NEW_TOKENS - 4)]


@torch.no_grad()
def _teacher_forced_hidden(engine, rollouts, row: int) -> torch.Tensor:
    """Final hidden states [1, n, h] that predicted generated positions 0..n-1 of a row."""
    n = int(rollouts.lengths[row])
    prompt = rollouts.prompt_ids[row]
    ids = torch.tensor([prompt + rollouts.token_ids[row, :n].tolist()])
    hidden = engine.model.body(input_ids=ids, use_cache=False).last_hidden_state
    return hidden[:, len(prompt) - 1 : len(prompt) - 1 + n]


@pytest.fixture(scope="module")
def sampled(vllm_engine):
    """4 samples each of two requests at temperature 0.8 / top-k 30 and 1.0 / no top-k."""
    reqs = [SynthesisRequest("Good morning, everyone.", seed=100, max_new_tokens=MAX_NEW_TOKENS),
            SynthesisRequest("कल मिलते हैं।", voice="Zoya", seed=200, temperature=1.0, top_k=0,
                             max_new_tokens=MAX_NEW_TOKENS)]
    return vllm_engine.generate_batch(reqs, num_samples=4)


def test_calibrated_checkpoint_ends_rows_three_ways_on_the_engine(engine64, calibrated):
    _, roles = calibrated
    r = engine64.generate_batch(greedy_requests())
    assert {role: r.finish_reasons[i] for role, i in roles.items()} == {
        "stop_head": "stop_head", "end_token": "end_token", "max_tokens": "max_tokens"}
    assert int(r.lengths[roles["end_token"]]) == END_BOUNDARY + 1  # `</audio>` at position 32, kept


def test_greedy_tokens_equal_the_engine(engine64, vllm_engine, calibrated):
    reqs = _requests_with_variants(calibrated[1])
    ours, theirs = vllm_engine.generate_batch(reqs), engine64.generate_batch(reqs)
    assert ours.finish_reasons == theirs.finish_reasons
    assert set(ours.finish_reasons) == {"stop_head", "end_token", "max_tokens"}
    assert torch.equal(ours.token_ids, theirs.token_ids)
    assert torch.equal(ours.lengths, theirs.lengths) and torch.equal(ours.codes, theirs.codes)
    torch.testing.assert_close(ours.log_probs, theirs.log_probs, atol=ATOL, rtol=0)
    # The stop head decided at the same boundaries, the same way.
    assert torch.equal(ours.stop_mask, theirs.stop_mask)
    assert torch.equal(ours.stop_decisions, theirs.stop_decisions)
    decided = ours.stop_decisions
    torch.testing.assert_close(ours.stop_log_probs[decided], theirs.stop_log_probs[decided], atol=ATOL, rtol=0)
    assert torch.isnan(ours.stop_log_probs[ours.stop_mask & ~decided]).all()  # not reported by vLLM


def test_every_token_obeys_the_phase_rule(vllm_engine, sampled):
    lay, q = vllm_engine.layout, vllm_engine.layout.num_quantizers
    for i in range(len(sampled)):
        floor = max(sampled.params[i].min_new_tokens, q)
        for t, token in enumerate(sampled.token_ids[i, : sampled.lengths[i]].tolist()):
            if token == lay.audio_end_token_id:
                assert t % q == 0 and t >= floor, (i, t)
            else:
                assert lay.is_unit(token) and lay.split(token)[1] == t % q, (i, t, token)


def test_samples_are_distinct_and_log_probs_match_teacher_forcing(engine64, sampled):
    assert sampled.seeds == [100, 101, 102, 103, 200, 201, 202, 203]
    rows = [tuple(sampled.token_ids[i, : sampled.lengths[i]].tolist()) for i in range(len(sampled))]
    assert len(set(rows[:4])) == 4 and len(set(rows[4:])) == 4
    for i in range(len(sampled)):
        n, params = int(sampled.lengths[i]), sampled.params[i]
        expected = engine64.head.sequence_log_probs(
            _teacher_forced_hidden(engine64, sampled, i), sampled.token_ids[i : i + 1, :n],
            temperature=params.temperature, min_new_tokens=params.min_new_tokens)[0]
        torch.testing.assert_close(sampled.log_probs[i, :n], expected, atol=ATOL, rtol=0)


def test_sampled_stop_decisions_follow_the_bernoulli_rule(engine64, vllm_engine):
    reqs = [SynthesisRequest("Thank you so much!", seed=7, max_new_tokens=MAX_NEW_TOKENS)]
    r = vllm_engine.generate_batch(reqs, num_samples=4, stop_mode="sample")
    assert "stop_head" in r.finish_reasons
    q = engine64.layout.num_quantizers
    for i in range(len(r)):
        hidden = _teacher_forced_hidden(engine64, r, i)[0]
        n = int(r.lengths[i])
        uniforms = draw_uniforms(r.seeds[i] + STOP_SEED_OFFSET, n // q + 1)
        for k in torch.nonzero(r.stop_mask[i]).flatten().tolist():
            t = k * q
            # The state that predicts position t; a row that stopped at t has no token there.
            state = hidden[t] if t < n else _stop_state(engine64, r, i)
            logit = engine64.model.stop_logits(state)
            assert bool(r.stop_decisions[i, k]) == bool(uniforms[k] < torch.sigmoid(logit)), (i, k)
            if r.stop_decisions[i, k]:
                assert t == n and r.finish_reasons[i] == "stop_head"
                torch.testing.assert_close(r.stop_log_probs[i, k], F.logsigmoid(logit), atol=ATOL, rtol=0)


@torch.no_grad()
def _stop_state(engine, rollouts, row: int) -> torch.Tensor:
    """Final hidden state after the whole row: where a stop-head stop was decided."""
    ids = torch.tensor([rollouts.prompt_ids[row] + rollouts.token_ids[row, : rollouts.lengths[row]].tolist()])
    return engine.model.body(input_ids=ids, use_cache=False).last_hidden_state[0, -1]


def test_same_seed_same_audio(vllm_engine):
    req = SynthesisRequest("Same seed, same voice.", seed=11, max_new_tokens=MAX_NEW_TOKENS)
    first, second = vllm_engine.synthesize(req), vllm_engine.synthesize(req)
    assert first.seed == 11 and len(first.samples) > 0
    np.testing.assert_array_equal(first.samples, second.samples)
    other = vllm_engine.synthesize(req.with_(seed=12))
    assert not np.array_equal(first.samples, other.samples)


def test_stream_pieces_concatenate_to_synthesize(vllm_engine):
    req = SynthesisRequest("Streaming keeps the listener close.", seed=21, max_new_tokens=MAX_NEW_TOKENS)
    stats: dict = {}
    pieces = list(vllm_engine.stream(req, stats=stats))
    whole = vllm_engine.synthesize(req)
    assert len(pieces) > 1 and stats["seed"] == 21
    np.testing.assert_allclose(np.concatenate(pieces), whole.samples, atol=1e-5)


def test_astream_and_asynthesize_from_another_event_loop_run_concurrently(vllm_engine):
    reqs = [SynthesisRequest("First listener.", seed=31, min_new_tokens=40, max_new_tokens=MAX_NEW_TOKENS),
            SynthesisRequest("Second listener, a different voice.", voice="Siya", seed=32, min_new_tokens=40,
                             max_new_tokens=MAX_NEW_TOKENS),
            SynthesisRequest(LONG_TEXT, seed=33, max_new_tokens=24)]  # several chunks, crossfaded

    async def listen(req):
        pieces, stats, first_at = [], {}, None
        async for piece in vllm_engine.astream(req, stats=stats):
            first_at = first_at if first_at is not None else stats["tokens"]
            pieces.append(piece)
        return np.concatenate(pieces), first_at, stats

    async def main():
        return await asyncio.gather(vllm_engine.asynthesize(reqs[2]), *(listen(r) for r in reqs))

    whole, *results = asyncio.run(main())  # a loop of its own, as a web server would have
    for req, (audio, _, _) in zip(reqs, results, strict=True):
        np.testing.assert_allclose(audio, vllm_engine.synthesize(req).samples, atol=1e-5)
    np.testing.assert_allclose(whole.samples, results[2][0], atol=1e-5)
    for _, first_at, stats in results[:2]:  # rows of >= 40 tokens: audio left after the first 2 frames
        assert first_at < stats["tokens"]
    assert results[2][2]["chunks"] > 1


def test_abandoned_astream_aborts_its_vllm_request(vllm_engine):
    req = SynthesisRequest("This listener hangs up early.", seed=41, max_new_tokens=1600)
    stats: dict = {}

    async def hang_up():
        stream = vllm_engine.astream(req, stats=stats)
        await stream.__anext__()  # first audio arrives
        await stream.aclose()  # the client disconnects

    asyncio.run(hang_up())
    deadline = time.monotonic() + 30
    while vllm_engine.num_unfinished_requests() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert vllm_engine.num_unfinished_requests() == 0
    assert stats["tokens"] < 1600 and stats["finish_reasons"] == []


def test_the_kv_cache_size_asked_for_wins_over_vllms_cpu_variable(vllm_engine):
    """The session's engine asked for KV_CACHE_BYTES while VLLM_CPU_KVCACHE_SPACE=1 was set (conftest);
    vLLM alone would have taken the variable's whole GiB. The variable is back once the engine started."""
    from tests.vllm.conftest import KV_CACHE_BYTES

    assert vllm_engine.engine_loop.llm.vllm_config.cache_config.kv_cache_memory_bytes == KV_CACHE_BYTES
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "1"
