"""Pushing a trainer's weights into a running vLLM engine: both ends of one weight update.

    report = engine.load_weights(dict(model.named_parameters()), names=changed)   # VLLMEngine
    report.tensors, report.megabytes, report.seconds

The sender (`push_weights`, on the engine's loop, called by `VLLMEngine.load_weights`) and what
it needs without vLLM imported (so it is importable and testable anywhere): the expansion of
changed names to whole vLLM layers, the byte packing and the chunked RPC sequence:

    await llm.collective_rpc("rumik_begin_weight_update")
    await llm.collective_rpc("rumik_load_weights", args=(packed_chunk,))    # as many chunks as needed
    await llm.collective_rpc("rumik_finish_weight_update")                 # -> loaded names
    await llm.reset_prefix_cache()                # cached prompt KV was computed with the old weights

The receiver, `WeightSyncExtension`: vLLM mixes it into its worker (`worker_extension_cls`,
set by `rumik_vllm.engine` on every engine it starts), so its methods are callable by name
through `AsyncLLM.collective_rpc`, each on every worker (every tensor-parallel rank). Why
this shape:

- vLLM's engine core runs in another process and decodes `collective_rpc` arguments without
  a schema, so a tensor would arrive as a bare [dtype, shape, buffer index] list with its
  buffer gone. The sender therefore packs each tensor as plain bytes plus dtype and shape
  (`pack_tensors`; no pickle), and the worker rebuilds it (`unpack_tensors`).
- Loading goes through vLLM's layerwise reload (`initialize_layerwise_reload` ... the
  model's `load_weights` ... `finalize_layerwise_reload`, as vLLM's own weight-transfer
  engines do), not a bare `load_weights`: on CPU, vLLM repacks every linear layer's weight
  for oneDNN after loading and drops the original (`dispatch_cpu_unquantized_gemm`), and on
  GPU CUDA graphs hold the tensors' addresses; the reload re-runs that processing and copies
  the result into the original storage. A layer that receives no tensor keeps its weights.
- Whole layers. vLLM fuses some checkpoint tensors into one parameter (q_proj, k_proj and
  v_proj into qkv_proj; gate_proj and up_proj into gate_up_proj: the model's
  `packed_modules_mapping`), and its reload processes a layer once all of its parameters
  have arrived; a layer given only some would be rebuilt with the rest uninitialised. So a
  changed name brings every tensor of its module and of the modules fused with it
  (`expand_to_layers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
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
    included), the form `unpack_tensors` reads; plain msgpack types only."""
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


# ---------------------------------------------------------------- the worker side

# vLLM's reload logs a warning for every layer (and every parameter) an update leaves alone;
# a partial update (LoRA: the adapted layers and the stop head) is the normal case here.
QUIET_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise",
                 "vllm.model_executor.model_loader.reload.inplace")


def unpack_tensors(packed: list) -> list[tuple[str, torch.Tensor]]:
    """[[name, dtype name, shape, bytes], ...] (see `pack_tensors`)
    -> [(name, tensor)] on the CPU, each tensor owning its memory."""
    out = []
    for name, dtype, shape, data in packed:
        flat = torch.frombuffer(bytearray(data), dtype=torch.uint8) if len(data) else torch.empty(0, dtype=torch.uint8)
        out.append((str(name), flat.view(getattr(torch, dtype)).reshape([int(d) for d in shape])))
    return out


@contextmanager
def _quiet(vllm_config):
    """vLLM's config current (layer processing reads it) and the reload's per-layer warnings off."""
    from vllm.config import set_current_vllm_config

    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with set_current_vllm_config(vllm_config):
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


class WeightSyncExtension:
    """Methods vLLM adds to its worker (`self` is the worker: `self.model_runner`, `self.vllm_config`)."""

    def rumik_begin_weight_update(self) -> None:
        """Start a weight update: vLLM's layers wait for all of their tensors before processing."""
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        self._rumik_loaded = set()
        with _quiet(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())

    def rumik_load_weights(self, packed: list) -> int:
        """Load one chunk of (checkpoint name, tensor) pairs; returns how many it held."""
        weights = unpack_tensors(packed)
        device = self.model_runner.device
        model = self.model_runner.get_model()
        with _quiet(self.vllm_config):
            self._rumik_loaded |= model.load_weights((name, t.to(device)) for name, t in weights)
        return len(weights)

    def rumik_finish_weight_update(self) -> list[str]:
        """Process the loaded layers (repacking on CPU) and keep the rest; returns the vLLM
        parameter names that were loaded."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        with _quiet(self.vllm_config):
            finalize_layerwise_reload(self.model_runner.get_model(), self.vllm_config.model_config)
        loaded, self._rumik_loaded = sorted(self._rumik_loaded), set()
        return loaded
