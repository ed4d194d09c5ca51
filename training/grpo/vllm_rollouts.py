"""`rollout.backend = "vllm"`: rollouts on a vLLM engine colocated with each training process,
its weights synced after every optimiser step (docs/ARCHITECTURE.md §7, §12; TRL's colocate mode).

    source = VLLMRollouts.build(trainer)                   # what RolloutTrainer does for "vllm"
    rollouts = source.generate(requests, 8, "sample")      # the same Rollouts as the engine's
    report = source.sync_weights(trainer.model)            # after optimizer.step(): what changed
    report.seconds, report.megabytes                       # logged as sync_seconds, sync_megabytes
    rumik train grpo --config C.toml --set rollout.backend=vllm --out runs/v

Colocate. Every training process (DDP rank) starts its own `VLLMEngine` on its own GPU and
samples its shard of the groups there, as the in-process engine does; nothing is shared
between ranks, so each rank pushes its (identical, DDP-averaged) weights into its own engine.
Rollouts carry vLLM's per-token log-probs (`processed_logits`: the engine's definition) and
its stop decisions; the trainer rescores every action with its own weights (the loss needs
gradients) and corrects the gap by truncated importance sampling (training.grpo.trainer).

Weight sync. After each optimiser step `sync_weights` pushes, through the engine API
(`VLLMEngine.load_weights`; training never imports vLLM), only the published tensors whose
source parameters changed since the last push: tracked by torch's in-place version counter
of every trainable parameter (the optimiser's update bumps it; frozen ones never move). Full
weights are pushed as they are; with LoRA each adapted layer's merged weight W + BA (and the
trained stop head), computed one chunk at a time, never the whole model (training.grpo.policy.
MergedWeights). Under FSDP2 (`distributed = "fsdp2"`) the trainer first gathers the shards into
its engine's full replica once per step (training.grpo.rollout.RolloutTrainer.sync_rollout_weights)
and this pushes from the replica, tested on 2 CPU processes (tests/vllm/test_grpo.py). Under
accelerate's FSDP or ZeRO-3 every rank gathers the full parameters once per step (`gathered`),
pushes all trainable ones and frees them (code path; not run here: no GPUs). A resumed run
pushes every weight of the checkpoint before its first rollout, which is vLLM started from the
checkpoint's weights, without a second start.

Memory. On CUDA, vLLM's sleep mode (level 1: weights to CPU memory, KV cache dropped) frees
its GPU memory while the trainer updates: sleep after rollouts, wake the weights before a
sync, the KV cache before the next rollouts (code path; vLLM has no sleep mode on CPU).

`sync` is a switch for tests only: False skips the pushes (vLLM keeps its start weights),
which the mismatch metrics then show (`sampling/sampling_logp_difference/*`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rumik_app.decode.rollouts import Rollouts
from rumik_app.engine.loading import load_engine
from rumik_app.environment import environment
from rumik_app.errors import ConfigError
from rumik_app.request import SynthesisRequest
from training.grpo.policy import MergedWeights

SLEEP_LEVEL = 1  # weights kept (in CPU memory): a partial push (LoRA) needs the rest of them


class TrainerWeights:
    """The policy's weights under their published names, and which changed since `mark()`.

    model: the unwrapped model (with LoRA: the base model with adapters injected); peft: the
    PeftModel or None; sharded: FSDP / ZeRO-3 (versions are not tracked there: every
    trainable weight counts as changed, gathered by `gathered`)."""

    def __init__(self, model: torch.nn.Module, peft=None, accelerator=None):
        self.model, self.peft, self.acc = model, peft, accelerator
        kind = getattr(getattr(accelerator, "distributed_type", None), "value", "NO")
        self.sharded = kind in ("FSDP", "DEEPSPEED")
        self.trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
        self.versions: dict[str, int] = {}

    def mapping(self) -> Mapping[str, torch.Tensor]:
        """Published name -> tensor, every weight of the model (LoRA: merged on access)."""
        if self.peft is not None:
            return MergedWeights(self.peft)
        return {unwrapped_name(name): p.detach() for name, p in self.model.named_parameters()}

    def published(self, name: str) -> str:
        return MergedWeights.published(name) if self.peft is not None else unwrapped_name(name)

    def changed(self) -> list[str]:
        """Published names whose trainable source parameters moved since the last `mark()`
        (all of them under FSDP / ZeRO-3, or before the first `mark()`)."""
        moved = [n for n, p in self.trainable.items() if self.sharded or self.versions.get(n) != p._version]
        return list(dict.fromkeys(self.published(n) for n in moved))

    def mark(self) -> None:
        """Remember the current versions: what `changed()` compares with next."""
        self.versions = {n: p._version for n, p in self.trainable.items()}

    @contextlib.contextmanager
    def gathered(self):
        """The full parameters on every rank for the duration of a push (FSDP: summon_full_params;
        ZeRO-3: GatheredParameters); nothing to do for one process or DDP."""
        if not self.sharded:
            yield
            return
        kind = self.acc.distributed_type.value
        if kind == "FSDP":
            from torch.distributed.fsdp import FullyShardedDataParallel

            wrapped = next((m for m in self.acc._models if isinstance(m, FullyShardedDataParallel)), None)
            if wrapped is None:  # FSDP2 (fully_shard): DTensor parameters, gathered one by one
                with _full_tensors(self.model):
                    yield
                return
            with FullyShardedDataParallel.summon_full_params(wrapped, writeback=False, rank0_only=False):
                yield
            return
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(self.model.parameters()), modifier_rank=None):
            yield


def unwrapped_name(name: str) -> str:
    """A parameter name without the wrappers' path parts (FSDP1's `_fsdp_wrapped_module.`)."""
    return name.replace(FSDP_WRAPPED, "")


FSDP_WRAPPED = "_fsdp_wrapped_module."


@contextlib.contextmanager
def _full_tensors(model: torch.nn.Module):
    """FSDP2: swap every DTensor parameter for its full tensor (a collective, same order on
    every rank) while the block runs, then put the shards back."""
    saved = {}
    for module_name, module in model.named_modules():
        for name, p in list(module.named_parameters(recurse=False)):
            if hasattr(p, "full_tensor"):
                saved[(module_name, name)] = (module, p)
                module._parameters[name] = torch.nn.Parameter(p.full_tensor(), requires_grad=False)
    try:
        yield
    finally:
        for (_, name), (module, p) in saved.items():
            module._parameters[name] = p


# torchrun's / accelerate's process-group variables: a rank's own vLLM engine is a world of its own
LAUNCHER_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
                "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@contextlib.contextmanager
def engine_environment(device: torch.device):
    """While vLLM starts: its processes see only `device`'s GPU (a DDP rank's own; a one-GPU
    vLLM engine uses the first visible one) and none of the launcher's process-group
    variables (they describe the training job, not vLLM's own world of one)."""
    values: dict[str, str | None] = dict.fromkeys(LAUNCHER_ENV)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        values["CUDA_VISIBLE_DEVICES"] = (visible.split(",") if visible else
                                          [str(i) for i in range(torch.cuda.device_count())])[index]
    with environment(values):
        yield


def vllm_options(rollout, sleep: bool) -> dict:
    """vLLM's keywords that the rollout config sets only when asked: sleep mode and the KV cache's size."""
    options = {"enable_sleep_mode": True} if sleep else {}
    if rollout.vllm_kv_cache_memory_bytes is not None:
        options["kv_cache_memory_bytes"] = rollout.vllm_kv_cache_memory_bytes
    return options


class VLLMRollouts:
    """A `RolloutSource` on a `VLLMEngine` (module docstring). engine: the VLLMEngine (its
    weights must be the trainer's, or `sync_weights(full=True)` first); weights: the trainer's
    `TrainerWeights`; sleep: use vLLM's sleep mode between rollouts; sync: tests only."""

    def __init__(self, engine, weights: TrainerWeights, sleep: bool = False, sync: bool = True):
        self.engine, self.weights, self.sleep, self.sync = engine, weights, sleep, sync
        self.asleep: set[str] = set()  # vLLM's parts now asleep: "weights", "kv_cache"

    @classmethod
    def build(cls, trainer, engine=None) -> "VLLMRollouts":
        """The source of a RolloutTrainer: a vLLM engine on `trainer.cfg.model` started on the
        trainer's device (or `engine`, an already running one, which then gets every weight)."""
        cfg, acc = trainer.cfg, trainer.acc
        device = acc.device
        sleep = cfg.rollout.vllm_enable_sleep_mode
        if sleep and device.type != "cuda":
            raise ConfigError("rollout.vllm_enable_sleep_mode = true needs CUDA: vLLM has no sleep mode on "
                              f"{device.type}; leave the key unset (it defaults to on with CUDA)")
        sleep = device.type == "cuda" if sleep is None else bool(sleep)
        weights = TrainerWeights(trainer.model, trainer.peft, acc)
        if engine is None:
            dtype = str(next(trainer.model.parameters()).dtype).removeprefix("torch.")
            with engine_environment(device):
                # Mimi decodes nowhere here (rewards decode with the trainer's codec): keep it off the GPU.
                engine = load_engine(cfg.model, backend="vllm", device="cpu", dtype=dtype, seed=cfg.seed,
                                     gpu_memory_utilization=cfg.rollout.vllm_gpu_memory_utilization,
                                     **vllm_options(cfg.rollout, sleep))
            source = cls(engine, weights, sleep=sleep)
            weights.mark()  # vLLM loaded the checkpoint the trainer starts from
        else:
            source = cls(engine, weights, sleep=sleep)
            source.sync_weights(trainer.model, full=True)
        return source

    def generate(self, requests: Sequence[SynthesisRequest], num_samples: int, stop_mode: str) -> Rollouts:
        if self.asleep:
            self.engine.wake_up(sorted(self.asleep))
            self.asleep.clear()
        rollouts = self.engine.generate_batch(requests, num_samples=num_samples, stop_mode=stop_mode)
        if self.sleep:  # the trainer's update runs next: give it the GPU memory
            self.engine.sleep(SLEEP_LEVEL)
            self.asleep = {"weights", "kv_cache"}
        return rollouts

    def sync_weights(self, model: torch.nn.Module, full: bool = False) -> dict[str, Any]:
        """Push what changed since the last push (everything with `full`); returns
        {"sync_seconds", "sync_megabytes", "sync_tensors"} (zeros when nothing was pushed)."""
        names = list(self.weights.mapping()) if full else self.weights.changed()
        if not self.sync or not names:
            return {"sync_seconds": 0.0, "sync_megabytes": 0.0, "sync_tensors": 0}
        if "weights" in self.asleep:  # the KV cache stays asleep until the next rollouts
            self.engine.wake_up(["weights"])
            self.asleep.discard("weights")
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the optimiser's last kernels are done before the weights are read
        with self.weights.gathered():
            report = self.engine.load_weights(self.weights.mapping(), names)
        self.weights.mark()
        return {"sync_seconds": report.seconds, "sync_megabytes": report.megabytes, "sync_tensors": report.tensors}
