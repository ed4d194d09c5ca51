"""Logits processors that apply rumik-oss-1's sampling rules inside vLLM's sampler.

vLLM has two model runners with two processor interfaces; the backend passes the one the
engine will use (`processor_for(vllm_config)`) through the `logits_processors=` argument:

- `AudioRulesV1`: `vllm.v1.sample.logits_processor.LogitsProcessor` (the V1 runner; on
  CPU and with VLLM_USE_V2_MODEL_RUNNER=0). It tracks the persistent batch through
  `update_state` and reads each request's output length from its live token list.
- `AudioRulesV2`: `vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor` (the V2
  runner, the default on GPUs). It keeps per-slot settings and computes the output length
  of each logits row as `pos + 1 - prompt_len`.

Both only gather each row's settings and call `rumik_vllm.rules.apply_rules`, where the
rules themselves live.
"""

from __future__ import annotations

import numpy as np
import torch
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, LogitsProcRequestState
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor

from rumik_vllm.rules import AudioColumns, RequestRules, apply_rules, seen_units

V1_PROCESSOR = "rumik_vllm.logits:AudioRulesV1"
V2_PROCESSOR = "rumik_vllm.logits:AudioRulesV2"


def processor_for(use_v2_model_runner: bool) -> str:
    """The processor (as vLLM's `module:Class` string) for the runner the engine uses."""
    return V2_PROCESSOR if use_v2_model_runner else V1_PROCESSOR


class _RowState:
    """One V1 request: its rules, floor, temperature, stop uniforms, penalty, live output ids."""

    __slots__ = ("floor", "temperature", "uniforms", "penalty", "output_ids")

    def __init__(self, rules: RequestRules, cols: AudioColumns, output_ids: list[int]):
        self.floor = rules.floor(cols.num_quantizers)
        self.temperature = rules.effective_temperature()
        self.uniforms = rules.stop_uniforms(cols)
        self.penalty = rules.repetition_penalty
        self.output_ids = output_ids


class AudioRulesV1(V1LogitsProcessor):
    """V1 runner: phase restriction, `</audio>` and stop-head rules (rumik_vllm.rules)."""

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        RequestRules.from_sampling_params(sampling_params)

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        self.cols = AudioColumns.from_config(vllm_config.model_config.hf_config)
        self.device = device
        self.rows: dict[int, _RowState] = {}

    def is_argmax_invariant(self) -> bool:
        return False  # it decides which tokens may be emitted at all

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, params, _prompt_ids, output_ids in batch_update.added:
            self.rows[index] = _RowState(RequestRules.from_sampling_params(params), self.cols, output_ids)
        for a, b, direction in batch_update.moved:
            state_a, state_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if state_a is not None:
                self.rows[b] = state_a
            if direction == MoveDirectionality.SWAP and state_b is not None:
                self.rows[a] = state_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        indices = [i for i in self.rows if i < logits.shape[0]]
        if not indices:
            return logits
        states = [self.rows[i] for i in indices]
        q_count = self.cols.num_quantizers
        position = [len(s.output_ids) for s in states]
        uniform = [float(s.uniforms[min(n // q_count, self.cols.stop_slots - 1)])
                   for s, n in zip(states, position, strict=True)]
        dev = logits.device
        apply_rules(
            logits,
            rows=torch.tensor(indices, device=dev),
            position=torch.tensor(position, device=dev),
            floor=torch.tensor([s.floor for s in states], device=dev),
            temperature=torch.tensor([s.temperature for s in states], dtype=torch.float32, device=dev),
            stop_uniform=torch.tensor(uniform, dtype=torch.float32, device=dev),
            cols=self.cols,
            **self._penalties(states, dev),
        )
        return logits

    def _penalties(self, states: list[_RowState], dev) -> dict:
        """apply_rules' penalty and seen arguments (none when every penalty is 1)."""
        if all(s.penalty == 1.0 for s in states):
            return {}
        width = max(1, max(len(s.output_ids) for s in states))
        ids = torch.zeros(len(states), width, dtype=torch.long)
        valid = torch.zeros(len(states), width, dtype=torch.bool)
        for i, s in enumerate(states):
            ids[i, : len(s.output_ids)] = torch.tensor(s.output_ids, dtype=torch.long)
            valid[i, : len(s.output_ids)] = True
        return {"penalty": torch.tensor([s.penalty for s in states], dtype=torch.float32, device=dev),
                "seen": seen_units(ids.to(dev), valid.to(dev), self.cols)}


class AudioRulesV2(V2LogitsProcessor):
    """V2 runner: the same rules, with per-slot settings staged on the host and copied over."""

    @classmethod
    def validate_params(cls, sampling_params) -> None:
        RequestRules.from_sampling_params(sampling_params)

    def __init__(self, vllm_config, req_states: LogitsProcRequestState):
        self.cols = AudioColumns.from_config(vllm_config.model_config.hf_config)
        self.req_states = req_states
        slots, dev = req_states.max_num_reqs, req_states.device
        self.active = np.zeros(slots, dtype=bool)
        self.host_floor = torch.zeros(slots, dtype=torch.long)
        self.host_temperature = torch.ones(slots, dtype=torch.float32)
        self.host_uniforms = torch.full((slots, self.cols.stop_slots), float("nan"))
        self.host_penalty = torch.ones(slots, dtype=torch.float32)
        self.floor = self.host_floor.to(dev)
        self.temperature = self.host_temperature.to(dev)
        self.uniforms = self.host_uniforms.to(dev)
        self.penalty = self.host_penalty.to(dev)
        self.penalised = np.zeros(slots, dtype=bool)
        self.dirty = False

    def add_request(self, req_idx: int, sampling_params) -> bool:
        rules = RequestRules.from_sampling_params(sampling_params)
        self.active[req_idx] = True
        self.host_floor[req_idx] = rules.floor(self.cols.num_quantizers)
        self.host_temperature[req_idx] = rules.effective_temperature()
        self.host_uniforms[req_idx] = rules.stop_uniforms(self.cols)
        self.host_penalty[req_idx] = rules.repetition_penalty
        self.penalised[req_idx] = rules.repetition_penalty != 1.0
        self.dirty = True
        return True

    def apply_staged_writes(self) -> None:
        if self.dirty:
            self.floor.copy_(self.host_floor)
            self.temperature.copy_(self.host_temperature)
            self.uniforms.copy_(self.host_uniforms)
            self.penalty.copy_(self.host_penalty)
            self.dirty = False

    def apply(self, logits: torch.Tensor, ctx: LogitsContext) -> torch.Tensor:
        if not np.any(self.active[ctx.idx_mapping_np]):
            return logits
        slot = ctx.expanded_idx_mapping.long()
        prompt_len = self.req_states.prompt_len.gpu.to(logits.device).long()[slot]
        position = ctx.pos.long() + 1 - prompt_len
        # Rows still prefilling a chunk have position < 0; their samples are discarded.
        position = position.clamp(min=0)
        boundary = (position // self.cols.num_quantizers).clamp(max=self.cols.stop_slots - 1)
        apply_rules(
            logits,
            rows=torch.arange(logits.shape[0], device=logits.device),
            position=position,
            floor=self.floor[slot],
            temperature=self.temperature[slot],
            stop_uniform=self.uniforms[slot, boundary],
            cols=self.cols,
            **self._penalties(ctx, slot, prompt_len, position),
        )
        return logits

    def _penalties(self, ctx: LogitsContext, slot, prompt_len, position) -> dict:
        """apply_rules' penalty and seen arguments from the committed tokens (none when every
        penalty is 1). Not run on a GPU yet: the V2 runner is GPU-only, the tests run V1."""
        if not np.any(self.penalised[ctx.idx_mapping_np]):
            return {}
        tokens = self.req_states.all_token_ids.gpu.to(slot.device).long()[slot]  # [r, max_model_len]
        column = torch.arange(tokens.shape[1], device=slot.device)[None]
        valid = (column >= prompt_len[:, None]) & (column < (prompt_len + position)[:, None])
        return {"penalty": self.penalty[slot], "seen": seen_units(tokens, valid, self.cols)}
