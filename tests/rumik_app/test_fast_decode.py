"""The fast decode path against its oracles: transformers' forward and the reference sampler.

Run: .venv/bin/python -m pytest tests/rumik_app/test_fast_decode.py -q

A 4-layer tiny checkpoint with a 12-position sliding window (3 sliding layers + 1 full
layer, as in the published pattern) so that windows, RoPE-only-on-sliding-layers and global
layers are all exercised by sequences much longer than the window.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.checkpoint.tiny import TinySpec, build_tiny_checkpoint
from rumik_app.decode.reference import ReferenceDecoder
from rumik_app.decode.slots import BatchDecoder, SlotDecoder
from rumik_app.model.static_body import StaticBody

WINDOW = 12


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> TTSEngine:
    path = build_tiny_checkpoint(tmp_path_factory.mktemp("win") / "tiny-window",
                                 TinySpec(layers=4, sliding_window=WINDOW, seed=3))
    return TTSEngine.from_pretrained(str(path), device="cpu")


@contextlib.contextmanager
def likely_end_and_stop(engine: TTSEngine, stop_bias: float, end_scale: float = 5.0):
    """Make `</audio>` and the stop head fire now and then, so rows finish in every way."""
    emb = engine.model.get_input_embeddings().weight
    end = engine.layout.audio_end_token_id
    bias = engine.model.stop_predictor[3].bias
    old_end, old_bias = emb[end].detach().clone(), bias.detach().clone()
    with torch.no_grad():
        emb[end] *= end_scale
        bias.fill_(stop_bias)
    try:
        yield
    finally:
        with torch.no_grad():
            emb[end] = old_end
            bias.copy_(old_bias)


def _run(cls, engine, reqs, stop_mode="threshold", **kwargs):
    prompts = [engine.prompt_ids(r) for r in reqs]
    rows = [engine.row_params(r, r.seed) for r in reqs]
    dec = cls(engine.model, engine.head, prompts, rows, pad_id=engine.pad_id, stop_mode=stop_mode, **kwargs)
    for _ in dec.steps():
        pass
    return dec.rollouts()


def _assert_same(a, b):
    assert a.lengths.tolist() == b.lengths.tolist()
    assert a.finish_reasons == b.finish_reasons
    assert torch.equal(a.token_ids, b.token_ids)
    torch.testing.assert_close(a.log_probs, b.log_probs, rtol=1e-5, atol=1e-5)
    assert torch.equal(a.stop_mask, b.stop_mask) and torch.equal(a.stop_decisions, b.stop_decisions)
    torch.testing.assert_close(a.stop_log_probs, b.stop_log_probs, rtol=1e-5, atol=1e-5)
    assert torch.equal(a.codes, b.codes)


MIXED = [
    SynthesisRequest("short", seed=21, max_new_tokens=12),
    SynthesisRequest("a much longer prompt, with more tokens to pad against", seed=22, max_new_tokens=160,
                     tone="happy"),
    SynthesisRequest("तीसरा वाक्य", seed=23, max_new_tokens=200, temperature=1.1, top_k=5),
    SynthesisRequest("greedy row", seed=4, temperature=0.0, max_new_tokens=120),
    SynthesisRequest("nucleus", seed=25, top_p=0.7, max_new_tokens=200, min_new_tokens=24),
    SynthesisRequest("sixth", seed=26, max_new_tokens=200),
]


def test_static_body_equals_transformers_forward(engine):
    """Prefill and decode through the static cache give transformers' hidden states, far past the window."""
    model = engine.model
    prompts = [[5, *range(10, 30)], [5, 40, 41, 42]]
    body = StaticBody(model, batch=3, max_len=128)
    seqs = [list(p) for p in prompts]
    with torch.no_grad():
        hidden = body.prefill(prompts, [2, 0])
        for i, p in enumerate(prompts):
            ref = model.body(input_ids=torch.tensor([p])).last_hidden_state[0, -1]
            torch.testing.assert_close(hidden[i], ref, rtol=1e-5, atol=1e-5)
        positions = torch.tensor([len(prompts[1]), 0, len(prompts[0])])
        for step in range(3 * WINDOW):
            tokens = torch.tensor([100 + step, 0, 300 + step])
            out = body.decode(tokens, positions)
            seqs[0].append(300 + step)
            seqs[1].append(100 + step)
            for slot, seq in ((2, seqs[0]), (0, seqs[1])):
                ref = model.body(input_ids=torch.tensor([seq])).last_hidden_state[0, -1]
                torch.testing.assert_close(out[slot], ref, rtol=1e-5, atol=1e-5)
            positions += torch.tensor([1, 0, 1])


@pytest.mark.parametrize("stop_mode", ["threshold", "sample"])
def test_fast_path_gives_the_reference_tokens_in_a_mixed_batch(engine, stop_mode):
    """Same tokens, log-probs, stop decisions and codes as the reference, rows ending every way."""
    with likely_end_and_stop(engine, stop_bias=-3.5 if stop_mode == "sample" else -1e4):
        ref = _run(ReferenceDecoder, engine, MIXED, stop_mode)
        fast = _run(BatchDecoder, engine, MIXED, stop_mode)
    _assert_same(ref, fast)
    reasons = set(fast.finish_reasons)
    assert {"end_token", "max_tokens"} <= reasons
    if stop_mode == "sample":
        assert "stop_head" in reasons


def test_fast_path_alone_equals_in_a_batch(engine):
    """Same seed, same tokens, alone or in a batch (padded slots included)."""
    with likely_end_and_stop(engine, stop_bias=-1e4):
        batch = _run(BatchDecoder, engine, MIXED)
        for i, req in enumerate(MIXED):
            alone = _run(BatchDecoder, engine, [req])
            n = int(alone.lengths[0])
            assert int(batch.lengths[i]) == n
            assert batch.token_ids[i, :n].tolist() == alone.token_ids[0, :n].tolist()


def test_rows_joining_a_running_batch_get_their_own_tokens(engine):
    """Continuous batching: a row added at a frame boundary of a running batch samples what it would alone."""
    reqs = [MIXED[1], MIXED[2], MIXED[0]]
    prompts = [engine.prompt_ids(r) for r in reqs]
    rows = [engine.row_params(r, r.seed) for r in reqs]
    alone = [_run(BatchDecoder, engine, [r]) for r in reqs]
    dec = SlotDecoder(engine.model, engine.head, batch=4, max_len=512, pad_id=engine.pad_id)
    got: dict[int, list[int]] = {}
    slot_of = {0: dec.add(prompts[:1], rows[:1])[0]}
    got[0] = []
    with torch.no_grad():
        for frame_index in range(40):
            if frame_index in (2, 5):  # rows 1 and 2 join later
                i = 1 if frame_index == 2 else 2
                slot_of[i] = dec.add(prompts[i : i + 1], rows[i : i + 1])[0]
                got[i] = []
            frame = dec.run_frame()
            for i, slot in slot_of.items():
                got[i].extend(t for t in frame.tokens[slot].tolist() if t >= 0)
            if len(slot_of) == len(reqs) and not bool(frame.alive.any()):
                break
    assert frame_index > 5  # the first row was still running when the others joined
    for i, r in enumerate(alone):
        assert got[i] == r.token_ids[0, : int(r.lengths[0])].tolist()


class GraphCounter:
    """A torch.compile backend that counts the graphs dynamo hands it and runs them as traced."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def test_compiled_step_is_one_graph_for_a_whole_generation(engine):
    """fullgraph=True traces the step (no graph breaks) and rows finishing early never change its shape."""
    torch._dynamo.reset()
    counter = GraphCounter()
    slots = SlotDecoder(engine.model, engine.head, batch=8, max_len=512, stop_mode="sample", pad_id=engine.pad_id,
                        compile=True, backend=counter)
    with likely_end_and_stop(engine, stop_bias=-3.5):
        ref = _run(ReferenceDecoder, engine, MIXED, "sample")
        fast = _run(BatchDecoder, engine, MIXED, "sample", slots=slots)
        again = _run(BatchDecoder, engine, MIXED[:2], "sample", slots=slots)
    _assert_same(ref, fast)
    assert len(set(fast.lengths.tolist())) > 2  # rows really finished at different steps
    assert counter.graphs == 1, f"{counter.graphs} graphs: the step recompiled"
    assert again.token_ids.shape[0] == 2


@pytest.mark.slow
def test_inductor_compiled_step_gives_the_eager_tokens(tiny_engine):
    """The real compiler (inductor, C++ on CPU) gives the tokens of the eager fast path."""
    torch._dynamo.reset()
    slots = SlotDecoder(tiny_engine.model, tiny_engine.head, batch=2, max_len=512, pad_id=tiny_engine.pad_id,
                        compile=True)
    reqs = [MIXED[0], MIXED[3].with_(max_new_tokens=40)]
    eager = _run(BatchDecoder, tiny_engine, reqs)
    compiled = _run(BatchDecoder, tiny_engine, reqs, slots=slots)
    _assert_same(eager, compiled)


def test_from_pretrained_compiles_and_warms_up_at_load(tiny_checkpoint, monkeypatch, caplog):
    """compile=True builds, compiles and runs the batch-1 step at load, with one log line."""
    import logging

    from rumik_app.decode import slots as fast_decode

    monkeypatch.setattr(fast_decode, "COMPILE_BACKEND", "eager")  # trace only: no C++ code generation
    torch._dynamo.reset()
    with caplog.at_level(logging.INFO, logger="rumik_app"):
        compiled = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", compile=True)
    assert compiled.compile and any("decode step compiled" in r.getMessage() for r in caplog.records)
    assert [d.compiled for d in compiled._slot_decoders.values()] == [True]
    plain = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    assert not plain.compile and not plain._slot_decoders  # CPU default: off, nothing built at load
    req = SynthesisRequest("compiled at load", seed=5, max_new_tokens=40)
    assert torch.equal(compiled.generate_batch([req]).token_ids, plain.generate_batch([req]).token_ids)


def test_stop_rules_on_the_fast_path(engine):
    """min_new_tokens, stop head only at frame boundaries, </audio> only at boundaries, max_new_tokens."""
    with likely_end_and_stop(engine, stop_bias=1e4):  # the stop head always says "stop"
        r = _run(BatchDecoder, engine, [SynthesisRequest("x", seed=1, min_new_tokens=m, max_new_tokens=100)
                                        for m in (0, 8, 13, 24)])
    assert r.lengths.tolist() == [8, 8, 16, 24] and set(r.finish_reasons) == {"stop_head"}
    with likely_end_and_stop(engine, stop_bias=-1e4, end_scale=8.0):
        r = _run(BatchDecoder, engine, [SynthesisRequest("x", seed=s, max_new_tokens=203) for s in range(8)])
    for n, why, row in zip(r.lengths.tolist(), r.finish_reasons, r.token_ids, strict=True):
        if why == "end_token":
            assert (n - 1) % 8 == 0 and int(row[n - 1]) == engine.layout.audio_end_token_id
        else:
            assert why == "max_tokens" and n == 203
        phases = [(t - engine.layout.first_unit_id) % 8 for t in row[: n].tolist() if engine.layout.is_unit(t)]
        assert phases == [i % 8 for i in range(len(phases))]
    assert set(r.finish_reasons) == {"end_token", "max_tokens"}


def test_engine_uses_the_fast_path_and_reuses_its_decoders(engine):
    req = SynthesisRequest("pooled", seed=9, max_new_tokens=48)
    a = engine.generate_batch([req])
    pooled = dict(engine._slot_decoders)
    b = engine.generate_batch([req])
    assert torch.equal(a.token_ids, b.token_ids) and engine._slot_decoders == pooled
    reference = TTSEngine(engine.model, engine.tokenizer, engine.codec, engine.config, engine.checkpoint_dir,
                          decoder="reference")
    assert torch.equal(reference.generate_batch([req]).token_ids, a.token_ids)
    with pytest.raises(ValueError, match="decoder must be one of"):
        TTSEngine(engine.model, engine.tokenizer, engine.codec, engine.config, engine.checkpoint_dir,
                  decoder="turbo")


def test_a_compiler_failure_falls_back_to_eager_decoding(engine, caplog):
    """If compilation fails (an untraceable module, a missing compiler), decoding still works, eagerly."""
    import logging

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no C++ compiler on this machine")

    torch._dynamo.reset()
    slots = SlotDecoder(engine.model, engine.head, batch=1, max_len=512, pad_id=engine.pad_id, compile=True,
                        backend=broken_backend)
    req = [MIXED[0]]
    with caplog.at_level(logging.WARNING, logger="rumik_app"):
        fast = _run(BatchDecoder, engine, req, slots=slots)
    assert not slots.compiled and "decoding eagerly" in caplog.text
    _assert_same(_run(ReferenceDecoder, engine, req), fast)


class _Scaled(torch.nn.Module):
    """Wraps a module and scales its output: a stand-in for peft's LoRA wrappers. (Not a
    constant shift: Cohere's LayerNorms subtract the mean, which would hide it.)"""

    def __init__(self, inner: torch.nn.Module, scale: float):
        super().__init__()
        self.inner, self.scale = inner, scale

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs) * self.scale


def test_a_compiled_engine_follows_modules_swapped_after_load(tiny_checkpoint, monkeypatch):
    """GRPO wraps modules in LoRA layers after the engine has compiled its step at load: the
    next generation must run the new modules, not the graph traced before (whose guards a
    compiled decoder stops checking after its first frame)."""
    from rumik_app.decode import slots as fast_decode

    monkeypatch.setattr(fast_decode, "COMPILE_BACKEND", "eager")  # dynamo's guards and graphs, no codegen
    torch._dynamo.reset()
    compiled = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", compile=True)
    reference = TTSEngine(compiled.model, compiled.tokenizer, compiled.codec, compiled.config,
                          compiled.checkpoint_dir, decoder="reference")
    req = SynthesisRequest("swap me", seed=4, max_new_tokens=40, temperature=0.0)
    before = compiled.generate_batch([req]).token_ids
    warm = dict(compiled._slot_decoders)
    layer = compiled.model.model.layers[0]
    original = layer.mlp
    layer.mlp = _Scaled(original, -20.0)
    try:
        after = compiled.generate_batch([req]).token_ids
        assert not any(d is warm.get(k) for k, d in compiled._slot_decoders.items())  # rebuilt
        expected = reference.generate_batch([req]).token_ids
        assert torch.equal(after, expected) and not torch.equal(after, before)
    finally:
        layer.mlp = original
    assert torch.equal(compiled.generate_batch([req]).token_ids, before)
