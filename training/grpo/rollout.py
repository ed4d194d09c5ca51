"""The sampling half of every trainer that learns from its own rollouts (GRPO, DPO): the policy,
where rollouts come from, and the rewards of a batch of prompts.

    class GRPOTrainer(RolloutTrainer): ...          # training.grpo.trainer; training.dpo.trainer the same
    scored = trainer.roll_out(picks)                # this process's shard of `picks`, sampled and scored
    scored.rewards                                  # [B, S] float64, NaN = abstained
    source = rollout_source("vllm", trainer)        # the RolloutSource of `rollout.backend`

`RolloutTrainer.__init__` builds what both wings share, in this order: the engine (the
checkpoint, on the run's device and dtype), LoRA adapters if `lora.enabled`, the wing's
reference (`make_reference`, GRPO's frozen copy), activation checkpointing, the optimiser and
schedule, the policy scorer (training.grpo.policy) wrapped by accelerate (FSDP2: a copy of the
weights, `self.policy`, sharded per decoder layer, while the engine keeps a full replica that
samples, refreshed from the shards after every optimiser step, `sync_rollout_weights`), the rollout source
of `rollout.backend`, the reward functions (training.grpo.rewards) and the prompt sampler
(training.grpo.prompts). It also owns the checkpoint state of the weights (full weights, or
LoRA adapters plus their merged published weights) and putting it back.

A rollout source is anything with `generate(requests, num_samples, stop_mode) -> Rollouts`
and `sync_weights(model, full=False) -> dict` (the sync's numbers, logged). `SOURCES` maps
`rollout.backend` to its class: "engine" is the in-process sampler on the live weights,
"vllm" a colocated vLLM engine synced after every optimiser step (training.grpo.vllm_rollouts).
Trainers call `sync_weights` after every optimiser step, and with `full=True` after a resume.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import torch

from rumik_app.decode.rollouts import Rollouts
from rumik_app.engine.local import TTSEngine
from rumik_app.errors import ConfigError
from rumik_app.request import SynthesisRequest
from training import fsdp
from training.common import build_optimizer, enable_activation_checkpointing
from training.grpo.config import ROLLOUT_BACKENDS, PolicyRunConfig
from training.grpo.policy import PolicyScorer, apply_lora, merged_state_dict
from training.grpo.prompts import PromptSampler, rollout_request
from training.grpo.rewards import build_reward, compute_rewards
from training.grpo.vllm_rollouts import VLLMRollouts
from training.trainer import Trainer

DECODE_BATCH = 16  # rows per codec decode call when a reward needs audio
RESERVED_COLUMNS = ("audio", "sample_rate", "frame_rate_hz")


class RolloutSource(Protocol):
    """Where rollouts come from (see training.grpo.trainer's docstring for a server implementation)."""

    def generate(self, requests: Sequence[SynthesisRequest], num_samples: int, stop_mode: str) -> Rollouts: ...

    def sync_weights(self, model: torch.nn.Module, full: bool = False) -> dict[str, Any]: ...


class EngineRollouts:
    """The in-process sampler: `TTSEngine.generate_batch` on the live training weights."""

    def __init__(self, engine: TTSEngine):
        self.engine = engine

    @classmethod
    def build(cls, trainer: "RolloutTrainer") -> "EngineRollouts":
        return cls(trainer.engine)

    def generate(self, requests: Sequence[SynthesisRequest], num_samples: int, stop_mode: str) -> Rollouts:
        return self.engine.generate_batch(requests, num_samples=num_samples, stop_mode=stop_mode)

    def sync_weights(self, model: torch.nn.Module, full: bool = False) -> dict[str, Any]:
        """Nothing to do: the engine reads the same parameters the optimiser updates."""
        return NO_SYNC


NO_SYNC = {"sync_seconds": 0.0, "sync_megabytes": 0.0, "sync_tensors": 0}
SOURCES = {"engine": EngineRollouts, "vllm": VLLMRollouts}  # rollout.backend -> its source (ROLLOUT_BACKENDS)


def rollout_source(backend: str, trainer: "RolloutTrainer") -> RolloutSource:
    """The RolloutSource of `rollout.backend` for `trainer` (ConfigError naming the key otherwise)."""
    if backend not in SOURCES:
        raise ConfigError(f"rollout.backend must be one of {ROLLOUT_BACKENDS}, got {backend!r}")
    return SOURCES[backend].build(trainer)


@dataclass
class ScoredRollouts:
    """A shard of prompts, sampled and scored. B rows (G per prompt, in the engine's row order).

    rollouts: the rows; requests: the request of each row; columns: per-row reward columns;
    groups: [B] long, the global index of each row's prompt in `picks`; rewards: [B, S]
    float64 (NaN = abstained), one column per reward stream of the config.
    """

    rollouts: Rollouts
    requests: list[SynthesisRequest]
    columns: dict[str, Any]
    groups: torch.Tensor
    rewards: torch.Tensor


def training_dtype(device: str | torch.device, dtype: str | None) -> str:
    """`dtype`, else bf16 on CUDA and float32 on any CPU: training keeps float32 on CPUs even
    where inference defaults to bf16 (native bf16 CPUs, `checkpoint.load.choose_dtype`), as
    the published trainers and their exact CPU oracles assume."""
    return dtype or ("bfloat16" if torch.device(device).type == "cuda" else "float32")


class RolloutTrainer(Trainer):
    """A Trainer whose data is its own policy's rollouts (module docstring). config_dir: where
    relative prompt-set paths are looked up first; source: a RolloutSource instead of the
    backend's, or a function of the trainer that builds one (tests, servers)."""

    def __init__(self, cfg: PolicyRunConfig, accelerator=None, config_dir: Path | None = None,
                 source: RolloutSource | Callable[["RolloutTrainer"], RolloutSource] | None = None):
        super().__init__(cfg, accelerator, config_dir)
        device = cfg.device or self.acc.device
        self.engine = TTSEngine.from_pretrained(cfg.model, device=device, dtype=training_dtype(device, cfg.dtype),
                                                restrict_phase=cfg.rollout.restrict_phase)
        self.layout, self.model = self.engine.layout, self.engine.model
        restrict = cfg.rollout.restrict_phase
        self.peft = None
        if cfg.lora.enabled:
            lo = cfg.lora
            self.peft = apply_lora(self.model, lo.r, lo.alpha, lo.dropout, lo.target_modules, lo.train_stop_head)
        self.reference = self.make_reference()
        if cfg.activation_checkpointing:
            enable_activation_checkpointing(self.model)
        self.policy = copy.deepcopy(self.model) if self.fsdp else self.model  # the weights the optimiser steps
        scorer = PolicyScorer(self.policy, self.layout, restrict)
        self.sharded = scorer  # one process resumes an FSDP2 run's DCP checkpoint through it
        if self.fsdp:  # shard first: the optimiser must see the sharded parameters
            scorer = self.shard_model(scorer, self.policy.model.layers, self.acc.mixed_precision)
        self.master = self.model if self.peft is None and not self.fsdp else None  # LoRA: the adapters instead
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        optimizer, self.scheduler = build_optimizer(self.policy, cfg.optim, cfg.total_steps)
        self.scorer, self.optimizer = (scorer, optimizer) if self.fsdp else self.acc.prepare(scorer, optimizer)
        self._replica_scorer = PolicyScorer(self.model, self.layout, restrict) if self.fsdp else None
        if source is None:
            source = rollout_source(cfg.rollout.backend, self)
        self.source = source(self) if callable(source) else source
        self.rewards = [build_reward(spec, model=cfg.model) for spec in cfg.rewards]
        self.sampler = PromptSampler(cfg.prompt_sets, cfg.language_weights, cfg.seed, base_dir=config_dir)

    def make_reference(self) -> PolicyScorer | None:
        """The wing's frozen reference scorer, built after LoRA and before training starts (None: none)."""
        return None

    # ------------------------------------------------------------------ rollouts and rewards
    def sync_rollout_weights(self, full: bool = False) -> dict[str, Any]:
        """After every optimiser step (and with `full` after a resume): the rollout source gets the
        new weights. FSDP2: the sharded weights are first gathered once into the engine's replica,
        which the engine samples with and vLLM is pushed from (every process calls it); the logged
        seconds include the gather, the megabytes are what vLLM took (the engine: what was gathered)."""
        if not self.fsdp:
            return self.source.sync_weights(self.model, full)
        start = time.perf_counter()
        gathered = fsdp.gather_into(self.scorer, self.model, prefix="model.") / 2**20
        pushed = self.source.sync_weights(self.model, full)  # vLLM: from the replica; the engine samples it
        return {**pushed, "sync_seconds": time.perf_counter() - start,
                "sync_megabytes": pushed.get("sync_megabytes") or gathered}

    def replica_scorer(self) -> PolicyScorer:
        """A scorer of the current weights that needs no collective: under FSDP2 the engine's full
        replica (equal to the shards after every sync), else the policy scorer itself."""
        return self._replica_scorer or self.acc.unwrap_model(self.scorer)

    def shard(self, count: int) -> list[int]:
        """This process's prompts among `count` (prompt k goes to process k mod world)."""
        return list(range(count))[self.acc.process_index :: self.acc.num_processes]

    def roll_out(self, picks: list[tuple[dict, int]], indices: list[int] | None = None) -> ScoredRollouts:
        """Sample G = `rollout.num_generations` rows for each pick in `indices` (default: this
        process's shard of `picks`) with the live weights, and score them with every reward."""
        cfg, G = self.cfg, self.cfg.rollout.num_generations
        local = self.shard(len(picks)) if indices is None else list(indices)
        requests = [rollout_request(picks[k][0], picks[k][1], cfg.rollout) for k in local]
        self.model.eval()
        with torch.no_grad():
            rollouts = self.source.generate(requests, G, cfg.rollout.stop_mode)
        owners = [local[i] for i in rollouts.request_index]
        row_requests = [requests[i] for i in rollouts.request_index]
        columns = self._columns([picks[k][0] for k in owners])
        if any(getattr(fn, "needs_audio", False) for fn in self.rewards):
            columns["audio"] = self._decode(rollouts)
            columns["sample_rate"] = self.engine.sample_rate
        columns["frame_rate_hz"] = self.layout.frame_rate_hz
        rewards = compute_rewards(self.rewards, row_requests, rollouts, columns)
        return ScoredRollouts(rollouts, row_requests, columns, torch.tensor(owners, dtype=torch.long), rewards)

    @staticmethod
    def _columns(items: list[dict]) -> dict[str, list]:
        keys = sorted({k for item in items for k in item} - set(RESERVED_COLUMNS))
        return {k: [item.get(k) for item in items] for k in keys}

    def _decode(self, rollouts: Rollouts) -> list:
        waves: list = []
        for lo in range(0, len(rollouts), DECODE_BATCH):
            frames = rollouts.num_frames[lo : lo + DECODE_BATCH]
            width = int(frames.max()) if len(frames) else 0
            if width == 0:
                waves += [torch.zeros(0).numpy() for _ in frames]
                continue
            codes = rollouts.codes[lo : lo + DECODE_BATCH, :, :width].to(self.engine.codec.device)
            waves += self.engine.decode(codes, frames)
        return waves

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> tuple[dict | None, dict]:
        extra: dict[str, Any] = {}
        state = None
        if self.peft is not None:  # adapters are replicated (DDP): the main process has them all
            from peft import get_peft_model_state_dict

            if self.acc.is_main_process:
                state = merged_state_dict(self.peft)
                extra["lora"] = {k: v.detach().cpu() for k, v in get_peft_model_state_dict(self.peft).items()}
        else:  # every process takes part (FSDP2/DeepSpeed gather here; the main process gets the weights)
            state = fsdp.full_state_dict(self.scorer) if self.fsdp else self.acc.get_state_dict(self.scorer)
            state = {k.removeprefix("model."): v for k, v in state.items()}
        return state, extra

    def restore(self, extra: dict) -> None:
        if self.peft is not None:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.peft, extra["lora"])
        self.sync_rollout_weights(full=True)  # vLLM or the FSDP2 replica: the checkpoint's weights, all of them
