"""`WeightSyncExtension`: the vLLM worker side of pushing a trainer's weights into the served model.

vLLM mixes this class into its worker (`worker_extension_cls`, set by `rumik_app.engine.vllm`
on every engine it starts), so the methods below are callable by name through
`AsyncLLM.collective_rpc`; each runs on every worker (every tensor-parallel rank):

    await llm.collective_rpc("rumik_begin_weight_update")
    await llm.collective_rpc("rumik_load_weights", args=(packed_chunk,))    # as many chunks as needed
    await llm.collective_rpc("rumik_finish_weight_update")                 # -> loaded names
    await llm.reset_prefix_cache()                # cached prompt KV was computed with the old weights

Use it through the engine (`VLLMEngine.load_weights`), not directly. Why this shape:

- vLLM's engine core runs in another process and decodes `collective_rpc` arguments without
  a schema, so a tensor would arrive as a bare [dtype, shape, buffer index] list with its
  buffer gone. The trainer therefore sends each tensor as plain bytes plus dtype and shape
  (`rumik_app.engine.vllm_sync.pack_tensors`; no pickle on our side), and this module
  rebuilds it.
- Loading goes through vLLM's layerwise reload (`initialize_layerwise_reload` ... the
  model's `load_weights` ... `finalize_layerwise_reload`, as vLLM's own weight-transfer
  engines do), not a bare `load_weights`: on CPU, vLLM repacks every linear layer's weight
  for oneDNN after loading and drops the original (`dispatch_cpu_unquantized_gemm`), and on
  GPU CUDA graphs hold the tensors' addresses; the reload re-runs that processing and copies
  the result into the original storage. A layer that receives no tensor keeps its weights.
  A vLLM layer must receive all of its parts in one update (q, k and v feed `qkv_proj`;
  gate and up feed `gate_up_proj`): the sender expands what it sends to whole layers.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

import torch

# vLLM's reload logs a warning for every layer (and every parameter) an update leaves alone;
# a partial update (LoRA: the adapted layers and the stop head) is the normal case here.
QUIET_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise",
                 "vllm.model_executor.model_loader.reload.inplace")


def unpack_tensors(packed: list) -> list[tuple[str, torch.Tensor]]:
    """[[name, dtype name, shape, bytes], ...] (see rumik_app.engine.vllm_sync.pack_tensors)
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
        for lg, level in zip(loggers, levels):
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
