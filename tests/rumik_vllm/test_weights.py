"""What a weight push into vLLM sends (rumik_vllm.weights), without vLLM: whole fused
layers, bytes that round-trip to the same tensors in the worker's decoder (`unpack_tensors`,
vLLM-free at import), bounded chunks, and spawned processes that do not re-run `__main__`
(rumik_vllm.loop).
The push itself runs against vLLM in tests/vllm/test_grpo.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from rumik_vllm.weights import chunked, expand_to_layers, pack_tensors, unpack_tensors
from tests.servers import ROOT

PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
NAMES = [f"model.layers.{i}.{m}.{p}" for i in range(2)
         for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                   "mlp.up_proj", "input_layernorm") for p in ("weight", "bias")] + ["stop_predictor.3.weight",
                                                                                     "stop_predictor.3.bias"]


def test_a_changed_tensor_brings_its_module_and_the_modules_fused_with_it():
    got = expand_to_layers(["model.layers.1.self_attn.k_proj.weight", "stop_predictor.3.bias"], NAMES, PACKED)
    assert got == [f"model.layers.1.self_attn.{m}.{p}" for m in ("q_proj", "k_proj", "v_proj")
                   for p in ("weight", "bias")] + ["stop_predictor.3.weight", "stop_predictor.3.bias"]
    assert expand_to_layers(["model.layers.0.mlp.up_proj.weight"], NAMES, PACKED) == [
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.gate_proj.bias",
        "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.bias"]
    assert expand_to_layers(["model.layers.0.self_attn.o_proj.weight"], NAMES, PACKED) == [
        "model.layers.0.self_attn.o_proj.weight", "model.layers.0.self_attn.o_proj.bias"]
    with pytest.raises(KeyError, match="lm_head.weight"):
        expand_to_layers(["lm_head.weight"], NAMES, PACKED)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_packed_tensors_come_back_bit_for_bit(dtype):
    items = [("a.weight", torch.randn(3, 5).to(dtype)), ("b.bias", torch.randn(7).to(dtype)[::2]),
             ("c.scalar", torch.tensor(2.5, dtype=dtype)), ("d.empty", torch.zeros(0, 4, dtype=dtype))]
    packed = pack_tensors(items)
    assert all(type(field) in (str, list, bytes) for row in packed for field in row)  # plain msgpack types
    for (name, want), (got_name, got) in zip(items, unpack_tensors(packed), strict=True):
        assert got_name == name and got.dtype == dtype and got.shape == want.shape
        assert torch.equal(got.reshape(-1).view(torch.uint8), want.contiguous().reshape(-1).view(torch.uint8))


def test_chunks_are_bounded_and_read_lazily():
    sizes = {f"t{i}": torch.zeros(n) for i, n in enumerate((10, 10, 30, 5, 5, 5))}
    read = []

    class Lazy(dict):
        def __getitem__(self, key):
            read.append(key)
            return super().__getitem__(key)

    runs = chunked(list(sizes), Lazy(sizes), limit=80)  # 20 float32 per chunk
    first = next(runs)
    assert [n for n, _ in first] == ["t0", "t1"] and read == ["t0", "t1", "t2"]
    assert [[n for n, _ in run] for run in runs] == [["t2"], ["t3", "t4", "t5"]]  # a big tensor travels alone


SPAWN_SCRIPT = textwrap.dedent("""
    import multiprocessing, os, sys
    from rumik_vllm.loop import main_module_hidden
    print("module level ran", flush=True)          # no main guard: a spawned child re-runs this
    hide = sys.argv[1] == "hide"
    context = main_module_hidden() if hide else open(os.devnull)
    with context:
        child = multiprocessing.get_context("spawn").Process(target=os.getpid)
        child.start()
    child.join()
    print("child exit", child.exitcode, flush=True)
""")


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_spawned_processes_do_not_rerun_a_script_without_a_main_guard(tmp_path, how):
    """What vLLM's engine start does (a spawn), from a script with no `if __name__ == "__main__":`
    and from `python -`: with `main_module_hidden` the child starts cleanly and the script's
    top level runs once; without it, the child re-runs it (file) or cannot find it (stdin)."""
    script = tmp_path / "no_guard.py"
    script.write_text(SPAWN_SCRIPT)

    def run(mode: str):
        args = [sys.executable, str(script), mode] if how == "file" else [sys.executable, "-", mode]
        return subprocess.run(args, input=None if how == "file" else SPAWN_SCRIPT, cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})

    hidden = run("hide")
    assert hidden.returncode == 0, hidden.stderr
    assert hidden.stdout.splitlines() == ["module level ran", "child exit 0"]
    plain = run("plain")  # what vLLM reported as "Engine core initialization failed ... Failed core proc(s): {}"
    assert plain.stdout.splitlines()[-1] == "child exit 1"
    if how == "file":  # the child re-ran the top level and refused to start another process from there
        assert plain.stdout.count("module level ran") == 2 and "bootstrapping phase" in plain.stderr
    else:  # the child looked for a file named <stdin>
        assert "No such file or directory" in plain.stderr and "<stdin>" in plain.stderr
