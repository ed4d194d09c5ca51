"""Per-row LoRA on the fast path against its oracle: each request alone, its adapter merged into the weights.

Run: .venv/bin/python -m pytest -n0 tests/rumik_app/voices/test_lora.py -q

A batch of 4 library voices and 2 built-in voices must give, row for row, the tokens and
log-probs that the reference decoder (transformers' own forward) gives for that request alone
on a copy of the model with W + alpha/r * B @ A written into every adapted projection. Rows of
built-in voices must be untouched bit for bit.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from rumik_app import SynthesisRequest, TTSEngine
from rumik_app.decode.reference import ReferenceDecoder
from rumik_app.decode.sampling import RowParams
from rumik_app.decode.slots import SlotDecoder
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.errors import PromptError
from rumik_app.model.lm import AudioHead
from rumik_app.voices.library import VoiceLibrary
from rumik_app.voices.lora import AdapterBank, library_source, merged_copy
from rumik_app.voices.package import VoiceError
from rumik_app.voices.tiny import build_random_voice

NAMES = ("Arjun", "Kabir", "Dev", "Rohan")
RANKS = (4, 8, 2, 4)  # mixed ranks: the bank zero-pads to its own


@pytest.fixture(scope="module")
def voices(tiny_checkpoint, tmp_path_factory):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    folder = tmp_path_factory.mktemp("voices")
    for seed, (name, rank) in enumerate(zip(NAMES, RANKS, strict=True)):
        build_random_voice(folder, engine.model, name, Path(tiny_checkpoint), rank=rank, seed=seed)
    engine.use_voices(VoiceLibrary(folder), capacity=8, rank=8)
    return engine, folder


def requests(temperature: float) -> list[SynthesisRequest]:
    texts = ["Hello there.", "नमस्ते दोस्त", "A longer sentence to say.", "Short.", "कल मिलते हैं", "Good night."]
    voices = ["Arjun", "Ira", "Kabir", "Dev", "Zoya", "rohan"]  # case-insensitive, as for built-ins
    return [SynthesisRequest(text, voice=voice, seed=11 + i, temperature=temperature, max_new_tokens=48)
            for i, (text, voice) in enumerate(zip(texts, voices, strict=True))]


def alone_merged(engine: TTSEngine, folder: Path, req: SynthesisRequest):
    """The oracle: the reference decoder on a model with this request's adapter merged in."""
    adapter = engine.adapter_for(req.voice)
    model = merged_copy(engine.model, folder / adapter) if adapter else engine.model
    row = RowParams.of(req, req.seed)  # no adapter: the weights already hold it
    decoder = ReferenceDecoder(model, AudioHead(model, engine.layout), [engine.prompt_ids(req)], [row],
                               pad_id=engine.pad_id)
    for _ in decoder.steps():
        pass
    return decoder.rollouts()


@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "seeded"])
def test_a_mixed_batch_equals_each_request_alone_with_its_adapter_merged(voices, temperature):
    engine, folder = voices
    reqs = requests(temperature)
    batch = engine.generate_batch(reqs)
    assert [engine.row_params(r).adapter for r in reqs] == ["Arjun", None, "Kabir", "Dev", None, "Rohan"]
    for row, req in enumerate(reqs):
        oracle = alone_merged(engine, folder, req)
        n = int(oracle.lengths[0])
        assert int(batch.lengths[row]) == n, req.voice
        assert torch.equal(batch.token_ids[row, :n], oracle.token_ids[0, :n]), req.voice
        torch.testing.assert_close(batch.log_probs[row, :n], oracle.log_probs[0, :n], atol=2e-4, rtol=1e-4)


def test_adapters_change_what_a_voice_says(voices):
    engine, _ = voices
    base = requests(0.0)[0]
    with_adapter = engine.generate_batch([base]).token_ids[0]
    builtin = engine.generate_batch([SynthesisRequest(base.text, voice="Ira", seed=base.seed, temperature=0.0,
                                                      max_new_tokens=48)]).token_ids[0]
    assert not torch.equal(with_adapter, builtin)  # the adapter is applied (a test that can fail)


def test_built_in_voices_are_bitwise_unchanged_by_a_loaded_library(voices, tiny_checkpoint):
    """Same batch shape on both sides (fp32 CPU matmuls round by batch size, adapters or not)."""
    engine, _ = voices
    plain = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    reqs = requests(0.9)
    builtin = [r for r in reqs if engine.adapter_for(r.voice) is None]
    stand_ins = [r if r in builtin else dataclasses.replace(r, voice="Siya") for r in reqs]
    mixed = engine.generate_batch(reqs)  # built-ins beside library rows: the adapted step
    expected = plain.generate_batch(stand_ins)
    for row in (1, 4):
        assert torch.equal(mixed.token_ids[row], expected.token_ids[row])
        assert torch.equal(mixed.log_probs[row], expected.log_probs[row])  # an exact zero delta
    alone = engine.generate_batch(builtin)  # built-ins only: the plain step, no adapter arithmetic
    assert all(r.adapter is None for r in map(engine.row_params, builtin))
    assert torch.equal(alone.log_probs, plain.generate_batch(builtin).log_probs)


def test_the_adapted_step_traces_without_graph_breaks(voices):
    engine, _ = voices
    slots = SlotDecoder(engine.model, engine.head, 4, 512, pad_id=engine.pad_id, compile=True, backend="eager",
                        bank=engine.bank)
    reqs = requests(0.9)[:3]
    slots.add([engine.prompt_ids(r) for r in reqs], [engine.row_params(r) for r in reqs])
    slots.run_frame()
    assert slots.compiled  # fullgraph=True: a graph break would have fallen back to eager


def test_the_bank_evicts_the_least_recently_used_unpinned_adapter_and_refuses_when_all_are_pinned(voices):
    engine, folder = voices
    bank = AdapterBank(engine.model, library_source(VoiceLibrary(folder)), capacity=2, rank=8)
    first, second = bank.acquire("Arjun"), bank.acquire("Kabir")
    with pytest.raises(VoiceError, match="slots all serve running requests"):
        bank.acquire("Dev")
    bank.release(first)
    assert bank.acquire("Dev") == first and set(bank.loaded()) == {"Kabir", "Dev"}
    assert bank.acquire("Kabir") == second and bank.loaded()["Kabir"] == 2  # pinned twice, loaded once


def test_the_bank_is_bounded_by_bytes_and_by_rank(voices):
    engine, folder = voices
    source = library_source(VoiceLibrary(folder))
    one = AdapterBank(engine.model, source, capacity=64, rank=8).bytes / 65
    bounded = AdapterBank(engine.model, source, capacity=64, rank=8, max_bytes=int(3.5 * one))
    assert bounded.capacity == 2 and bounded.bytes <= 3.5 * one  # the zero slot counts too
    with pytest.raises(VoiceError, match="more than the bank's"):
        AdapterBank(engine.model, source, rank=8, max_bytes=int(1.5 * one))
    with pytest.raises(VoiceError, match="rank 4 at most"):
        AdapterBank(engine.model, source, rank=4).acquire("Kabir")  # rank 8 > the bank's 4


def test_a_voice_deleted_mid_request_finishes_that_request_and_refuses_the_next(voices, tmp_path, tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    build_random_voice(tmp_path, engine.model, "Veer", Path(tiny_checkpoint), rank=4, seed=9)
    engine.use_voices(VoiceLibrary(tmp_path))
    req = SynthesisRequest("Hello there, friend.", voice="Veer", seed=3, max_new_tokens=64)
    expected = np.concatenate(list(engine.stream(req)))
    stream = engine.stream(req)
    first = next(stream)
    os.rename(tmp_path / "Veer", tmp_path / ".Veer.trash")  # deleted from the library mid-stream
    assert np.array_equal(np.concatenate([first, *stream]), expected)  # finished, with its adapter to the end
    with pytest.raises(PromptError, match="Unknown voice"):
        engine.synthesize(req)
    with pytest.raises(PromptError, match="left the voice library"):  # deleted between the prompt and the row
        engine.row_params(req)


def test_the_servers_scheduler_takes_a_library_attached_after_it_started(tiny_checkpoint, tmp_path):
    """The scheduler's decoder exists before `--voices` attaches the library; its rows get the bank
    then, and a library voice streams what the engine streams for it (same tokens, same audio)."""
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    scheduler = BatchScheduler(engine, max_batch=4, max_queue=4, max_prompt_tokens=256)
    scheduler.start()
    try:
        build_random_voice(tmp_path, engine.model, "Veer", Path(tiny_checkpoint), rank=4, seed=5)
        engine.use_voices(VoiceLibrary(tmp_path))
        req = SynthesisRequest("Through the scheduler.", voice="Veer", seed=8, max_new_tokens=96)
        served = np.concatenate(list(scheduler.submit(req)))
        assert np.array_equal(served, np.concatenate(list(engine.stream(req))))
        assert not np.array_equal(served, np.concatenate(list(engine.stream(req.with_(voice="Ira")))))
    finally:
        scheduler.stop(timeout=5)
