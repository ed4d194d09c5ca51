"""`RumikOSSForCausalLM` for vLLM: vLLM's Cohere2 network, our stop head, audio-only logits.

The body is vLLM's `CohereForCausalLM` (vllm/model_executor/models/commandr.py, which also
serves Cohere2: interleaved sliding-window layers, parallel attention + MLP block, tied
embeddings scaled by `logit_scale`). On top of it:

- `stop_predictor`: the checkpoint's stop head, built by `rumik_app.model.lm.build_stop_predictor`
  (LayerNorm -> Linear -> GELU -> Linear), replicated on every tensor-parallel rank;
- `load_weights`: `stop_predictor.{0,1,3}.*` go to the stop head, the rest to vLLM's loader
  (at start-up, and for weight updates from a trainer: rumik_vllm.weights);
- `compute_logits(hidden_states)`: vLLM calls it with the final post-norm hidden states of
  the positions being sampled, the same states the engine feeds its audio head and stop
  head; it returns float32 logits with only the audio rows kept and the stop head's logit
  in the stop column (rumik_vllm.rules.audio_logits).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from vllm.config import VllmConfig
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.commandr import CohereForCausalLM

from rumik_app.model.lm import build_stop_predictor
from rumik_vllm.rules import AudioColumns, audio_logits

STOP_PREFIX = "stop_predictor."


class RumikOSSForCausalLM(CohereForCausalLM):
    """vLLM model class registered for the checkpoint's `architectures: [RumikOSSForCausalLM]`."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self.audio = AudioColumns.from_config(self.config)
        self.stop_predictor = build_stop_predictor(self.config.hidden_size)

    def stop_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """hidden_states: [R, h] final hidden states -> stop logits [R] (float32)."""
        return self.stop_predictor(hidden_states).squeeze(-1).float()

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        logits = super().compute_logits(hidden_states)
        if logits is None:  # a tensor-parallel rank that does not hold the gathered logits
            return None
        return audio_logits(logits, self.stop_logits(hidden_states), self.audio)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load (checkpoint name, tensor) pairs; returns the vLLM parameter names loaded.

        Also the path of weight updates (rumik_vllm.weights), which send only some tensors:
        completeness is vLLM's loader's check at start-up (every parameter must be loaded),
        not this method's. Each tensor goes through its parameter's `weight_loader`, as
        vLLM's layerwise reload needs (it wraps those loaders)."""
        stop_params = {name for name, _ in self.stop_predictor.named_parameters()}
        loaded: set[str] = set()

        def body_weights():
            for name, tensor in weights:
                if not name.startswith(STOP_PREFIX):
                    yield name, tensor
                    continue
                key = name[len(STOP_PREFIX):]
                if key not in stop_params:
                    raise ValueError(f"unexpected stop-head weight {name!r} (expected {sorted(stop_params)})")
                param = self.stop_predictor.get_parameter(key)  # now: a reload swaps the parameter objects
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
                loaded.add(name)

        loaded |= super().load_weights(body_weights())
        return loaded
