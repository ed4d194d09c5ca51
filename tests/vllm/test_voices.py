"""Library voices on vLLM's multi-LoRA, against the engine's per-row LoRA and against merged weights.

A batch of 4 library voices and 2 built-in voices (fp32, the calibrated checkpoint):
  - greedy: vLLM's tokens equal the engine backend's, row for row, and log-probs agree;
  - seeded: each vLLM row equals that request alone on vLLM with its adapter merged into the
    served weights (pushed with `load_weights`, no LoRA), tokens and log-probs;
and a voice deleted from the library is refused by the next request.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from rumik_app import SynthesisRequest
from rumik_app.decode.sampling import RowParams
from rumik_app.errors import PromptError
from rumik_app.voices.library import VoiceLibrary
from rumik_app.voices.lora import merged_copy
from rumik_app.voices.package import VoiceError, base_fingerprint
from rumik_app.voices.tiny import build_random_voice
from rumik_vllm.rollouts import build_rollouts

pytestmark = pytest.mark.slow
NAMES = ("Arjun", "Kabir", "Dev", "Rohan")
ATOL = 1e-4


@pytest.fixture(scope="module")
def voices(calibrated, engine64, vllm_engine, tmp_path_factory):
    """(engine backend, vLLM backend, voices folder): the session's two engines (tests/vllm/conftest.py;
    vLLM was started with LoRA support), both serving the same 4 random voices until the module ends."""
    checkpoint = calibrated[0]
    folder = tmp_path_factory.mktemp("vllm-voices")
    for seed, name in enumerate(NAMES):
        build_random_voice(folder, engine64.model, name, checkpoint, rank=4 if seed % 2 else 8, seed=seed)
    for engine in (engine64, vllm_engine):
        engine.use_voices(VoiceLibrary(folder, base_fingerprint(checkpoint)))
    yield engine64, vllm_engine, folder
    for engine in (engine64, vllm_engine):
        engine.use_voices(None)  # the other modules' engines serve the checkpoint's voices only


def mixed(temperature: float) -> list[SynthesisRequest]:
    voices = ["Arjun", "Ira", "Kabir", "Dev", "Zoya", "Rohan"]
    return [SynthesisRequest(f"Sentence {i} for the voice test.", voice=voice, seed=40 + i, temperature=temperature,
                             max_new_tokens=40) for i, voice in enumerate(voices)]


def assert_rows_equal(got, row: int, expected, expected_row: int) -> None:
    n = int(expected.lengths[expected_row])
    assert int(got.lengths[row]) == n
    assert torch.equal(got.token_ids[row, :n], expected.token_ids[expected_row, :n])
    torch.testing.assert_close(got.log_probs[row, :n], expected.log_probs[expected_row, :n], atol=ATOL, rtol=0)


def test_greedy_vllm_tokens_equal_the_engines_row_for_row(voices):
    engine, vllm, _ = voices
    reqs = mixed(0.0)
    ours, theirs = engine.generate_batch(reqs), vllm.generate_batch(reqs)
    for row in range(len(reqs)):
        assert_rows_equal(theirs, row, ours, row)
    plain = engine.generate_batch([r.with_(voice="Siya") for r in reqs[:1]])
    assert not torch.equal(ours.token_ids[0], plain.token_ids[0])  # the adapter is applied


def merged_weights(model, folder) -> dict[str, torch.Tensor]:
    """The checkpoint names -> tensors of `model` with the package in `folder` merged in."""
    merged = merged_copy(model, folder)
    return {name: tensor for name, tensor in merged.state_dict().items() if ".layers." in name}


def without_adapter(vllm, req: SynthesisRequest):
    """`req` alone on vLLM with its voice's prompt but no LoRA request (the weights hold it)."""
    prompts, rows = [vllm.prompt_ids(req)], [RowParams.of(req, req.seed)]
    results = vllm.engine_loop.call(vllm._generate_rows(prompts, rows, "threshold"))
    return build_rollouts(results, prompts, rows, [0], "threshold", vllm.layout, {})


def test_seeded_rows_equal_each_request_alone_with_its_adapter_merged(voices):
    engine, vllm, folder = voices
    reqs = mixed(0.9)
    batch = vllm.generate_batch(reqs)
    base = {name: t.clone() for name, t in engine.model.state_dict().items() if ".layers." in name}
    try:
        for row, req in enumerate(reqs):
            adapter = engine.adapter_for(req.voice)
            if adapter is None:
                alone = vllm.generate_batch([req])
            else:
                vllm.load_weights(merged_weights(engine.model, folder / adapter))
                alone = without_adapter(vllm, req)
                vllm.load_weights(base)
            assert_rows_equal(batch, row, alone, 0)
    finally:
        vllm.load_weights(base)


def test_a_deleted_voice_is_refused_by_the_next_request(voices, tmp_path):
    engine, vllm, folder = voices
    shutil.copytree(folder / "Dev", tmp_path / "Dev")
    try:
        shutil.rmtree(folder / "Dev")
        with pytest.raises(PromptError, match="Unknown voice 'Dev'"):  # the request's check
            vllm.generate_batch([SynthesisRequest("Hello.", voice="Dev", seed=1, max_new_tokens=16)])
        with pytest.raises(VoiceError, match="No library voice 'Dev'"):  # the row's LoRA, had it passed that
            vllm.lora_request("Dev")
    finally:
        shutil.copytree(tmp_path / "Dev", folder / "Dev")


def test_a_voice_of_a_higher_rank_than_vllm_takes_is_refused_by_name(voices):
    engine, vllm, folder = voices
    build_random_voice(folder, engine.model, "Wide", engine.checkpoint_dir, rank=16, seed=9)
    try:
        with pytest.raises(VoiceError, match="rank 16; this server's vLLM takes rank 8 at most"):
            vllm.lora_request("Wide")
    finally:
        shutil.rmtree(folder / "Wide")


def test_a_voice_added_while_vllm_serves_is_served_without_a_restart(voices):
    """What a finished adaptation relies on (POST /v1/voices/adaptations writes the package into the library
    folder): the next request names it and gets its rows, the engine's tokens, with no restart."""
    engine, vllm, folder = voices
    build_random_voice(folder, engine.model, "Meera", engine.checkpoint_dir, rank=8, seed=11)
    try:
        request = SynthesisRequest("A new voice speaks.", voice="Meera", seed=3, max_new_tokens=24, temperature=0.0)
        assert "Meera" in vllm.voices and "Meera" in engine.voices
        assert_rows_equal(vllm.generate_batch([request]), 0, engine.generate_batch([request]), 0)
    finally:
        shutil.rmtree(folder / "Meera")
