"""The engine (docs/ARCHITECTURE.md §5) on the tiny checkpoint: head, cache, stopping, seeds, batch, stream."""

import io

import numpy as np
import pytest
import soundfile as sf
import torch

from rumik_app import SynthesisRequest
from rumik_app.audio import Audio
from rumik_app.decode.reference import ReferenceDecoder
from rumik_app.decode.sampling import FINISH_MAX_TOKENS, FINISH_STOP_HEAD, RowParams
from rumik_app.decode.slots import BatchDecoder
from rumik_app.engine.stream import FIRST_PIECE_FRAMES, PIECE_FRAMES, STREAM_ATOL
from rumik_app.model.lm import AudioHead
from tests.conftest import ALWAYS_STOP, NEVER_STOP, stop_head_bias


def _full_forward_argmax(engine, prompt_ids, generated, phase, allow_end):
    """Argmax over the allowed ids of the full-vocabulary LM head, no cache."""
    ids = torch.tensor([prompt_ids + generated])
    logits = engine.model(input_ids=ids).logits[0, -1]  # [vocab], transformers' own head
    lay = engine.layout
    allowed = [lay.unit_id(c, phase) for c in range(lay.codebook_size)]
    if allow_end:
        allowed.append(lay.audio_end_token_id)
    allowed = torch.tensor(allowed)
    return int(allowed[logits[allowed].argmax()])


def test_greedy_with_kv_cache_equals_argmax_of_full_forwards(tiny_engine):
    req = SynthesisRequest("greedy check, नमस्ते", temperature=0.0, max_new_tokens=20, min_new_tokens=8)
    with stop_head_bias(tiny_engine, NEVER_STOP):
        rollouts = tiny_engine.generate_batch([req])
    tokens = rollouts.token_ids[0][rollouts.token_mask[0]].tolist()
    prompt = tiny_engine.prompt_ids(req)
    head = tiny_engine.head
    for t, token in enumerate(tokens):
        expected = _full_forward_argmax(tiny_engine, prompt, tokens[:t], t % 8, head.allows_end(t, 8))
        assert token == expected, f"step {t}"


def test_audio_head_equals_slice_of_full_head(tiny_engine):
    hidden = torch.randn(3, tiny_engine.config.lm.hidden_size)
    full = tiny_engine.model.lm_head(hidden) * tiny_engine.config.lm.logit_scale
    lay = tiny_engine.layout
    for restrict in (True, False):
        head = AudioHead(tiny_engine.model, lay, restrict_phase=restrict)
        phase = 3
        logits = head.logits(hidden, phase, allow_end=True)
        index = torch.arange(logits.shape[-1]).expand(3, -1)
        ids = head.index_to_token(index, phase)
        torch.testing.assert_close(logits, full.gather(1, ids), rtol=1e-5, atol=1e-5)
        assert torch.equal(head.token_to_index(ids), index)


def test_no_stop_before_min_new_tokens(tiny_engine):
    with stop_head_bias(tiny_engine, ALWAYS_STOP):
        for min_new, expected in ((8, 8), (24, 24), (13, 16), (0, 8)):
            req = SynthesisRequest("stop test", seed=1, min_new_tokens=min_new, max_new_tokens=200)
            r = tiny_engine.generate_batch([req])
            assert r.lengths.tolist() == [expected] and r.finish_reasons == [FINISH_STOP_HEAD]
            assert r.num_frames.tolist() == [expected // 8]


def test_stops_at_max_new_tokens(tiny_engine):
    with stop_head_bias(tiny_engine, NEVER_STOP):
        r = tiny_engine.generate_batch([SynthesisRequest("cap", seed=2, max_new_tokens=44)])
    assert r.lengths.tolist() == [44] and r.finish_reasons == [FINISH_MAX_TOKENS]
    assert r.num_frames.tolist() == [5]  # the incomplete 6th frame is discarded


def test_stop_head_ends_at_the_frame_boundary_where_it_fires(tiny_engine, monkeypatch):
    calls = []
    model = tiny_engine.model
    real = model.stop_logits

    def scripted(hidden):
        calls.append(1)
        out = real(hidden)
        return torch.full_like(out, 5.0 if len(calls) == 3 else -5.0)

    monkeypatch.setattr(model, "stop_logits", scripted)
    # The reference decoder calls the stop head only where it may decide, so a script can
    # count boundaries; the fast path (which scores every step) is checked against it in
    # test_fast_decode.py.
    req = SynthesisRequest("boundary", seed=3, max_new_tokens=400)
    dec = ReferenceDecoder(model, tiny_engine.head, [tiny_engine.prompt_ids(req)], [tiny_engine.row_params(req, 3)],
                           pad_id=tiny_engine.pad_id)
    for _ in dec.steps():
        pass
    r = dec.rollouts()
    assert r.lengths.tolist() == [24] and r.finish_reasons == [FINISH_STOP_HEAD]
    assert r.stop_mask[0].tolist()[:4] == [False, True, True, True]
    assert r.stop_decisions[0].tolist()[:4] == [False, False, False, True]
    expected = torch.nn.functional.logsigmoid(torch.tensor([5.0, 5.0, 5.0]))
    torch.testing.assert_close(r.stop_log_probs[0, 1:4], expected)


def test_same_seed_same_audio_different_seed_different(tiny_engine):
    req = SynthesisRequest("seeded", seed=11, max_new_tokens=48)
    a, b = tiny_engine.synthesize(req), tiny_engine.synthesize(req)
    c = tiny_engine.synthesize(req.with_(seed=12))
    assert a.seed == 11 and np.array_equal(a.samples, b.samples)
    assert not np.array_equal(a.samples, c.samples)
    assert a.sample_rate == 24_000 and a.samples.dtype == np.float32 and a.samples.ndim == 1


def test_random_seed_is_reported_and_reproduces(tiny_engine):
    a = tiny_engine.synthesize(SynthesisRequest("random seed", max_new_tokens=32))
    assert isinstance(a.seed, int)
    b = tiny_engine.synthesize(SynthesisRequest("random seed", max_new_tokens=32, seed=a.seed))
    assert np.array_equal(a.samples, b.samples)


def test_batch_equals_single_runs_with_same_seeds(tiny_engine):
    reqs = [SynthesisRequest("short", seed=21, max_new_tokens=40),
            SynthesisRequest("a much longer prompt, with more tokens to pad against", seed=22, max_new_tokens=64,
                             tone="happy"),
            SynthesisRequest("तीसरा", seed=23, max_new_tokens=56, temperature=1.1, top_k=5)]
    batch = tiny_engine.generate_batch(reqs)
    for i, req in enumerate(reqs):
        single = tiny_engine.generate_batch([req])
        n = int(single.lengths[0])
        assert int(batch.lengths[i]) == n
        assert batch.token_ids[i, :n].tolist() == single.token_ids[0, :n].tolist()
        torch.testing.assert_close(batch.log_probs[i, :n], single.log_probs[0, :n], rtol=1e-4, atol=1e-4)


def test_num_samples_rows_and_seeds(tiny_engine):
    r = tiny_engine.generate_batch([SynthesisRequest("a", seed=5, max_new_tokens=16),
                                    SynthesisRequest("b", seed=9, max_new_tokens=16)], num_samples=3)
    assert len(r) == 6 and r.request_index == [0, 0, 0, 1, 1, 1] and r.seeds == [5, 6, 7, 9, 10, 11]
    assert r.codes.shape[:2] == (6, 8)


def test_rollout_log_probs_match_teacher_forced_recompute(tiny_engine):
    req = SynthesisRequest("policy", seed=4, max_new_tokens=40, temperature=0.7, min_new_tokens=16)
    with stop_head_bias(tiny_engine, NEVER_STOP):
        r = tiny_engine.generate_batch([req])
    n = int(r.lengths[0])
    ids = torch.tensor([r.prompt_ids[0] + r.token_ids[0, :n].tolist()])
    hidden = tiny_engine.model.body(input_ids=ids).last_hidden_state
    p = len(r.prompt_ids[0])
    recomputed = tiny_engine.head.sequence_log_probs(hidden[:, p - 1 : p - 1 + n], r.token_ids[:, :n],
                                                     temperature=0.7, min_new_tokens=16)
    torch.testing.assert_close(recomputed, r.log_probs[:, :n], rtol=1e-4, atol=1e-4)


def test_top_k_one_is_greedy(tiny_engine):
    a = tiny_engine.generate_batch([SynthesisRequest("k", seed=1, top_k=1, max_new_tokens=24)])
    b = tiny_engine.generate_batch([SynthesisRequest("k", seed=99, temperature=0.0, max_new_tokens=24)])
    assert torch.equal(a.token_ids, b.token_ids)


def test_unrestricted_phase_generates_parseable_audio(tiny_engine):

    head = AudioHead(tiny_engine.model, tiny_engine.layout, restrict_phase=False)
    dec = BatchDecoder(tiny_engine.model, head, [tiny_engine.prompt_ids(SynthesisRequest("free"))],
                       [RowParams(seed=3, max_new_tokens=64)])
    for _ in dec.steps():
        pass
    r = dec.rollouts()
    assert r.lengths.tolist()[0] <= 64
    assert all(tiny_engine.layout.is_unit(t) or t == tiny_engine.layout.audio_end_token_id
               for t in r.token_ids[0][r.token_mask[0]].tolist())


def _pcm16(samples: np.ndarray) -> np.ndarray:
    """The samples as a user gets them: written to a 16-bit WAV and read back as int16."""
    return sf.read(io.BytesIO(Audio(samples).to_wav_bytes()), dtype="int16")[0].astype(np.int32)


def test_stream_concatenates_to_offline_decode(tiny_engine):
    req = SynthesisRequest("streaming check", seed=31, max_new_tokens=200)
    stats = {}
    pieces = list(tiny_engine.stream(req, first_frames=2, frames_per_piece=3, stats=stats))
    offline = tiny_engine.synthesize(req)
    assert len(pieces) > 3 and pieces[0].shape[0] == 2 * 1920
    streamed = np.concatenate(pieces)
    np.testing.assert_allclose(streamed, offline.samples, rtol=0, atol=STREAM_ATOL)
    assert np.abs(_pcm16(streamed) - _pcm16(offline.samples)).max() <= 1
    assert stats["tokens"] == offline.info["tokens"] and stats["seed"] == 31
    assert stats["max_tokens"] == 200


def test_streamed_decode_of_20_seconds_is_within_one_16_bit_step(tiny_engine):
    """The stated tolerance on a long clip: 250 frames (20 s) decoded in the engine's streaming
    schedule vs at once; the difference is float rounding, never more than 1 LSB in 16-bit."""
    frames, q = 250, tiny_engine.layout.num_quantizers
    codes = torch.randint(0, tiny_engine.layout.codebook_size, (1, q, frames),
                          generator=torch.Generator().manual_seed(0))
    offline = tiny_engine.decode(codes, [frames])[0]
    stream, pieces, at, size = tiny_engine.codec.streaming_decoder(batch=1), [], 0, FIRST_PIECE_FRAMES
    while at < frames:
        pieces.append(stream.decode(codes[..., at:at + size])[0].numpy())
        at, size = at + size, PIECE_FRAMES
    streamed = np.concatenate(pieces)
    assert streamed.shape == offline.shape == (frames * 1920,)
    assert np.abs(streamed - offline).max() <= STREAM_ATOL
    steps = np.abs(_pcm16(streamed) - _pcm16(offline))
    assert steps.max() <= 1 and steps.mean() < 0.01  # a few samples in a thousand, one step apart


def test_progress_is_reported_once_per_frame_against_the_budget(tiny_engine):
    req = SynthesisRequest("progress", seed=5, max_new_tokens=80)
    seen = []
    with stop_head_bias(tiny_engine, NEVER_STOP):
        audio = tiny_engine.synthesize(req, progress=lambda done, budget: seen.append((done, budget)))
    assert [done for done, _ in seen] == [*range(8, 81, 8), 80]  # each frame, then "this batch is done"
    assert {budget for _, budget in seen} == {80} and audio.info["tokens"] == 80
    with stop_head_bias(tiny_engine, ALWAYS_STOP):  # stops after the first frame: jumps to the budget
        seen.clear()
        tiny_engine.synthesize(req, progress=lambda done, budget: seen.append((done, budget)))
    assert seen[-1] == (80, 80) and len(seen) <= 3


@pytest.mark.slow
def test_two_thousand_characters_synthesise_via_chunking(tiny_engine):
    sentence = "यह एक लंबा वाक्य है जो कई बार दोहराया गया है। This sentence mixes English too! "
    text = (sentence * 40)[:2000]
    req = SynthesisRequest(text, seed=8)
    chunks = tiny_engine.plan(req)
    assert len(chunks) > 3 and [c.seed for c in chunks] == list(range(8, 8 + len(chunks)))
    with stop_head_bias(tiny_engine, ALWAYS_STOP):
        audio = tiny_engine.synthesize(req)
        streamed = np.concatenate(list(tiny_engine.stream(req)))
    assert audio.info["chunks"] == len(chunks) == len(audio.info["chunk_seconds"])
    assert audio.info["chunk_seconds"][-1][1] == pytest.approx(audio.duration)
    fade = int(0.05 * 24_000)
    assert len(audio.samples) == len(chunks) * 1920 - (len(chunks) - 1) * fade
    np.testing.assert_allclose(streamed, audio.samples, rtol=0, atol=STREAM_ATOL)


def test_sampled_stop_decisions_are_bernoulli_with_logged_log_probs(tiny_engine):
    reqs = [SynthesisRequest("bernoulli", seed=s, max_new_tokens=400) for s in range(6)]
    with stop_head_bias(tiny_engine, 0.0):
        r = tiny_engine.generate_batch(reqs, stop_mode="sample")
        again = tiny_engine.generate_batch(reqs, stop_mode="sample")
    assert torch.equal(r.token_ids, again.token_ids)  # seeded, so reproducible
    assert len(set(r.lengths.tolist())) > 1  # p(stop) near 0.5: rows stop at different frames
    for i in range(len(reqs)):
        decided = r.stop_decisions[i][r.stop_mask[i]]
        assert decided[:-1].logical_not().all()  # every decision but the last said "continue"
        assert (r.stop_log_probs[i][r.stop_mask[i]] < 0).all()
        if r.finish_reasons[i] == "stop_head":
            assert bool(decided[-1]) and int(r.lengths[i]) % 8 == 0
