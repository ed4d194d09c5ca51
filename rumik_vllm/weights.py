"""Pushing a trainer's weights into a running vLLM engine: what to send, how it travels, the report.

    report = engine.load_weights(dict(model.named_parameters()), names=changed)   # VLLMEngine
    report.tensors, report.megabytes, report.seconds

`VLLMEngine.load_weights` (rumik_app.engine.vllm) calls `push_weights` here on its engine loop;
this module holds what does not need vLLM imported (so it is importable and testable
anywhere): the expansion of changed names to whole vLLM layers, the byte packing, the
chunked RPC sequence, and `main_module_hidden`, which lets the engine start from any script.
The worker side is `rumik_vllm.sync.WeightSyncExtension` (see its docstring for why tensors
travel as bytes and why loading goes through vLLM's layerwise reload).

Whole layers. vLLM fuses some checkpoint tensors into one parameter (q_proj, k_proj and
v_proj into qkv_proj; gate_proj and up_proj into gate_up_proj: the model's
`packed_modules_mapping`), and its reload processes a layer once all of its parameters
have arrived; a layer given only some would be rebuilt with the rest uninitialised. So a
changed name brings every tensor of its module and of the modules fused with it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch

# Bytes per weight-update RPC: bounds the extra memory of a push (the packed copy, vLLM's
# message buffers) at a few times this, whatever the model size.
CHUNK_BYTES = 256 * 2**20


@dataclass
class WeightPushReport:
    """One push: tensors and bytes sent (after expansion to whole layers), vLLM parameters
    loaded, wall seconds (packing, transport, loading, the prefix-cache reset)."""

    tensors: int = 0
    bytes: int = 0
    loaded: int = 0
    seconds: float = 0.0

    @property
    def megabytes(self) -> float:
        return self.bytes / 2**20


def module_of(name: str) -> str:
    """`model.layers.0.self_attn.q_proj.weight` -> `model.layers.0.self_attn.q_proj`."""
    return name.rsplit(".", 1)[0] if "." in name else ""


def expand_to_layers(names: Iterable[str], available: Iterable[str],
                     packed_modules: Mapping[str, Iterable[str]]) -> list[str]:
    """The names of `available` (checkpoint names, in its order) that must travel with `names`:
    every tensor of each named module and of the modules fused with it in vLLM.

    packed_modules: vLLM's fused name -> the checkpoint module names it holds, e.g.
    {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}. KeyError for a name not in `available`.
    """
    available = list(available)
    known = set(available)
    siblings = {part: list(parts) for parts in packed_modules.values() for part in parts}
    modules: set[str] = set()
    for name in names:
        if name not in known:
            raise KeyError(f"{name!r} is not among the weights offered for the update")
        module = module_of(name)
        parent, _, leaf = module.rpartition(".")
        modules |= {f"{parent}.{part}" if parent else part for part in siblings.get(leaf, [leaf])}
    return [name for name in available if module_of(name) in modules]


def pack_tensors(items: Iterable[tuple[str, torch.Tensor]]) -> list[list]:
    """[(name, tensor)] -> [[name, dtype name, shape, raw bytes]] (any device and dtype, bf16
    included), the form `rumik_vllm.sync.unpack_tensors` reads; plain msgpack types only."""
    out = []
    for name, tensor in items:
        t = tensor.detach().to("cpu").contiguous()
        out.append([name, str(t.dtype).removeprefix("torch."), list(t.shape),
                    t.reshape(-1).view(torch.uint8).numpy().tobytes()])
    return out


def chunked(names: list[str], weights: Mapping[str, torch.Tensor],
            limit: int = CHUNK_BYTES) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """(name, tensor) pairs in runs of at most `limit` bytes (a bigger tensor travels alone).
    Reads `weights[name]` lazily, so a mapping that computes values (LoRA merges) computes
    one chunk at a time."""
    run, size = [], 0
    for name in names:
        tensor = weights[name]
        nbytes = tensor.numel() * tensor.element_size()
        if run and size + nbytes > limit:
            yield run
            run, size = [], 0
        run.append((name, tensor))
        size += nbytes
    if run:
        yield run


async def push_weights(llm, names: list[str], weights: Mapping[str, torch.Tensor],
                       chunk_bytes: int = CHUNK_BYTES) -> WeightPushReport:
    """On the engine's loop: one weight update of `names` (already whole layers) into every
    worker of `llm` (vLLM's AsyncLLM), then a reset of its prefix cache, whose cached prompt
    states were computed with the old weights. No request may run meanwhile."""
    start = time.perf_counter()
    report = WeightPushReport()
    await llm.collective_rpc("rumik_begin_weight_update")
    try:
        for run in chunked(names, weights, chunk_bytes):
            packed = pack_tensors(run)
            report.tensors += len(packed)
            report.bytes += sum(len(p[3]) for p in packed)
            await llm.collective_rpc("rumik_load_weights", args=(packed,))
    finally:  # also after a failed chunk: the layers that did not get everything keep their weights
        loaded = await llm.collective_rpc("rumik_finish_weight_update")
    report.loaded = len(loaded[0]) if loaded else 0
    if not await llm.reset_prefix_cache():
        raise RuntimeError("vLLM did not reset its prefix cache after the weight update (requests were running); "
                           "update weights only between rollouts")
    report.seconds = time.perf_counter() - start
    return report


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def main_module_hidden():
    """Start vLLM's processes without them re-running the caller's `__main__`.

    vLLM starts its engine core with multiprocessing's "spawn" (always on CPU; on GPU once
    CUDA is initialised), and a spawned process first re-imports `__main__`: a script that
    calls `load_engine(..., backend="vllm")` outside `if __name__ == "__main__":` starts
    another engine inside the new process, which multiprocessing refuses, and `python - <<EOF`
    has no file to re-import; either way vLLM only says "Engine core initialization failed
    ... Failed core proc(s): {}". Nothing of `__main__` is needed there (everything vLLM's
    processes receive names vLLM or rumik_vllm), so while the engine starts, `__main__`
    looks like an interactive session's (no `__file__`, no `__spec__`), which multiprocessing
    does not re-import. Restored afterwards; serialised, so concurrent starts nest safely.
    """
    main = sys.modules.get("__main__")
    with _MAIN_LOCK:
        saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
        try:
            if main is not None:
                main.__dict__.pop("__file__", None)
                main.__spec__ = None
            yield
        finally:
            if main is not None:
                main.__dict__.update(saved)
                if "__spec__" not in saved:
                    main.__dict__.pop("__spec__", None)
