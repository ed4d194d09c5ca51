"""GRPO run configuration (dataclasses; no command line, no torch).

    cfg = load_config(GRPOConfig, "training/configs/grpo_example.toml", ["loss.routing=flat"])
    cfg.validate(num_processes=8)      # ConfigError naming the key and the fix

`python -m training.grpo --config FILE` reads a JSON or TOML file into `GRPOConfig` with
`training.config.load_config` (`--set a.b=value` overrides). Examples:
training/configs/grpo_example.toml, training/configs/grpo_smoke.json. The keys every run has
(model, out_dir, seed, optim, save_every, keep_last, save_dtype, activation_checkpointing,
torch_threads, deterministic) come from `training.config.RunConfig`; `[optim]` starts from `grpo_optim()`.
What every run that samples its own policy has (prompts, `[rollout]` sampling, rewards,
LoRA, device) is `PolicyRunConfig` and `SamplingConfig`, shared with training.dpo.config.

Prompt sets. Each `[[prompt_sets]]` entry is a domain: a JSONL file (`path`, one object
per line) and/or inline `items`; how they are drawn is in training.grpo.prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rumik_app.errors import ConfigError, PromptError
from rumik_app.request import SamplingSettings, sampling_defaults
from training.config import OptimConfig, RunConfig
from training.grpo.rewards import RewardSpec

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
SMOKE_CONFIG = CONFIG_DIR / "grpo_smoke.json"
ROUTINGS = ("routed", "flat")
ROLLOUT_MAX_NEW_TOKENS = 1024  # ~10 s: GRPO prompts are sentences, and long rollouts cost memory
SAMPLING_DEFAULTS = sampling_defaults()  # rumik_app.request's declarations


@dataclass
class PromptSet:
    """One domain of prompts: a JSONL file and/or inline items, drawn with weight `weight`."""

    domain: str = "default"
    path: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    weight: float = 1.0


ROLLOUT_BACKENDS = ("engine", "vllm")  # what `rollout.backend` may name (training.grpo.rollout.SOURCES)
DEFAULT_IS_CAP = 2.0  # TRL's vllm_importance_sampling_cap
VLLM_COLOCATE_MEMORY = 0.3  # share of the GPU a colocated vLLM engine may take (TRL's colocate default)


@dataclass
class SamplingConfig:
    """How rollouts are sampled, for every trainer that samples its policy (GRPO, DPO);
    sampling defaults are the request defaults (rumik_app.request), so rollouts sample like
    the app unless configured.

    num_generations: G samples per prompt (a group). stop_mode "sample" draws each stop-head
    decision from Bernoulli(sigmoid(logit)), so the decisions are actions of the policy with a
    usable log-prob gradient; "threshold" (the inference rule) makes them deterministic, and
    the duration stream would then push on decisions the policy never sampled. backend: where
    rollouts come from ("engine": `TTSEngine.generate_batch` on the live weights; "vllm": a
    vLLM engine in each training process, its weights synced after every optimiser step:
    training.grpo.vllm_rollouts). vllm_gpu_memory_utilization: the share of the GPU that
    engine may take (the trainer keeps the rest); vllm_kv_cache_memory_bytes: its KV cache's
    size in bytes instead (None: from that share, or on a CPU from VLLM_CPU_KVCACHE_SPACE).
    vllm_enable_sleep_mode: free vLLM's GPU memory while the trainer updates (None: on with
    CUDA; vLLM has no sleep mode on CPU).
    """

    num_generations: int = 8
    # The sampling settings rollouts take, defaults from the request's declarations. Not
    # repetition_penalty: the loss scores each token under the policy's own softmax(logits / T)
    # (training.grpo.policy), and a penalty would sample from another distribution, so rollouts
    # keep the request's default, off.
    temperature: float = SAMPLING_DEFAULTS["temperature"]
    top_k: int = SAMPLING_DEFAULTS["top_k"]
    top_p: float = SAMPLING_DEFAULTS["top_p"]
    min_new_tokens: int = SAMPLING_DEFAULTS["min_new_tokens"]
    max_new_tokens: int = ROLLOUT_MAX_NEW_TOKENS
    stop_mode: str = "sample"
    restrict_phase: bool = True
    backend: str = "engine"
    vllm_gpu_memory_utilization: float = VLLM_COLOCATE_MEMORY
    vllm_kv_cache_memory_bytes: int | None = None
    vllm_enable_sleep_mode: bool | None = None

    def validate(self) -> None:
        """ConfigError naming the `rollout.` key for settings that cannot sample a policy."""
        from rumik_app.decode.sampling import STOP_MODES  # imports torch: here, not when the module loads

        if self.num_generations < 2:
            raise ConfigError("rollout.num_generations must be >= 2 (advantages compare samples of a group)")
        try:  # the bounds and messages every front end uses (rumik_app.request)
            SamplingSettings(**{spec.name: getattr(self, spec.name) for spec in fields(SamplingSettings)
                                if hasattr(self, spec.name)})
        except PromptError as exc:
            raise ConfigError(f"rollout.{exc.field}: {exc}") from None
        if self.temperature <= 0:
            raise ConfigError("rollout.temperature must be > 0: greedy rollouts have no policy gradient")
        if self.stop_mode not in STOP_MODES:
            raise ConfigError(f"rollout.stop_mode must be one of {STOP_MODES}")
        if not 1 <= self.min_new_tokens <= self.max_new_tokens:
            raise ConfigError("rollout: need 1 <= min_new_tokens <= max_new_tokens")
        if self.backend not in ROLLOUT_BACKENDS:
            raise ConfigError(f"rollout.backend must be one of {ROLLOUT_BACKENDS}, got {self.backend!r}")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ConfigError("rollout.vllm_gpu_memory_utilization must be in (0, 1]")
        if self.vllm_kv_cache_memory_bytes is not None and self.vllm_kv_cache_memory_bytes <= 0:
            raise ConfigError("rollout.vllm_kv_cache_memory_bytes must be a number of bytes above zero, or unset")


@dataclass
class RolloutConfig(SamplingConfig):
    """GRPO's rollouts: `SamplingConfig` plus prompts_per_step, the prompts of one rollout
    batch counted over all processes, and importance_sampling_cap C: each action's clipped
    term is weighted by min(pi_trainer / pi_sampler, C) (truncated importance sampling,
    docs/ARCHITECTURE.md §7; TRL's vllm_importance_sampling_cap), which corrects for the
    sampler's numerics (vLLM's kernels, a missed sync) differing from the trainer's."""

    prompts_per_step: int = 8
    importance_sampling_cap: float = DEFAULT_IS_CAP

    def validate(self) -> None:
        super().validate()
        if not self.importance_sampling_cap >= 1:
            raise ConfigError("rollout.importance_sampling_cap must be >= 1 (a cap below 1 would down-weight "
                              "actions the sampler and the trainer agree on)")


@dataclass
class LossConfig:
    """The clipped GRPO objective (docs/ARCHITECTURE.md §7).

    epsilon / epsilon_high: clip range [1 - epsilon, 1 + epsilon_high] (None: = epsilon).
    beta: weight of the k3 KL to the frozen reference (0: not in the loss, still logged when
    kl_monitor). With full weights the reference is a frozen copy of the starting model (one
    more model in memory); beta = 0 with kl_monitor = false skips it. With LoRA it is the
    adapter-disabled model (no copy). routing: "routed" (W) or "flat" (every action gets the sum of the stream
    advantages). num_iterations: optimiser steps per rollout batch (1: rho = 1 in value).
    scale_rewards: divide by the group std. adv_eps: the eps in (r - mean) / (std + eps).
    """

    epsilon: float = 0.2
    epsilon_high: float | None = None
    beta: float = 0.0
    kl_monitor: bool = True
    routing: str = "routed"
    num_iterations: int = 1
    scale_rewards: bool = True
    adv_eps: float = 1e-4


def grpo_optim() -> OptimConfig:
    """GRPO's optimiser defaults: a small constant learning rate (no warmup or decay), no decay."""
    return OptimConfig(lr=1e-6, betas=[0.9, 0.99], weight_decay=0.0, warmup_steps=0, decay_fraction=0.0)


@dataclass
class LoraSettings:
    """LoRA (peft) instead of full weights; the reference is then the adapter-disabled model."""

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    train_stop_head: bool = True  # the stop head is fully trained (peft modules_to_save)


def default_rewards() -> list[RewardSpec]:
    return [RewardSpec(name="content", kind="content"), RewardSpec(name="duration", kind="duration")]


@dataclass
class PolicyRunConfig(RunConfig):
    """What every run that samples and scores its own policy has (GRPO, DPO).

    device/dtype: None = auto (CUDA bf16, else CPU float32 on any CPU); prompt_sets and
    language_weights: what is sampled (training.grpo.prompts); rollout: how; rewards: the
    reward streams (training.grpo.rewards); lora: adapters instead of full weights;
    micro_batch_size: rows per forward/backward.
    """

    device: str | None = None
    dtype: str | None = None
    prompt_sets: list[PromptSet] = field(default_factory=list)
    language_weights: dict[str, float] = field(default_factory=dict)
    rollout: SamplingConfig = field(default_factory=SamplingConfig)
    rewards: list[RewardSpec] = field(default_factory=default_rewards)
    lora: LoraSettings = field(default_factory=LoraSettings)
    micro_batch_size: int = 8

    def check_fsdp2(self) -> None:
        """ConfigError when this run cannot shard with FSDP2 over several processes: a sharded copy
        of the full weights trains while a gathered replica samples or feeds vLLM
        (training.grpo.rollout), so not with LoRA."""
        if self.lora.enabled:
            raise ConfigError("distributed = \"fsdp2\" shards the full weights; a LoRA run (lora.enabled) trains "
                              "only adapters and runs with distributed = \"ddp\".")

    def validate(self, num_processes: int = 1) -> None:
        """Raise ConfigError naming the key when the config cannot run on `num_processes` processes."""
        super().validate(num_processes)
        if self.distributed == "fsdp2" and num_processes > 1:
            self.check_fsdp2()
        self.rollout.validate()
        if self.micro_batch_size < 1:
            raise ConfigError("micro_batch_size must be >= 1")
        if not self.rewards:
            raise ConfigError("rewards: at least one reward stream is needed")
        if len({spec.name for spec in self.rewards}) != len(self.rewards):
            raise ConfigError("rewards: stream names must be unique")
        for spec in self.rewards:
            spec.check()
        if not self.prompt_sets:
            raise ConfigError("prompt_sets: at least one prompt set is needed")

    def reward_routing(self) -> tuple[list[str], dict[int, list[float] | str], list[float]]:
        """(the kind of every reward stream, stream index -> its configured W row or target,
        every stream's weight) for training.grpo.loss.routing_matrix."""
        return ([spec.kind for spec in self.rewards], {s: spec.routing for s, spec in enumerate(self.rewards)
                                                       if spec.routing}, [spec.weight for spec in self.rewards])

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the run (the schedule's length)."""
        raise NotImplementedError


@dataclass
class GRPOConfig(PolicyRunConfig):
    """A GRPO run. steps: rollout batches; rollout, loss: as above; the rest from `PolicyRunConfig`."""

    out_dir: str = "runs/grpo"
    optim: OptimConfig = field(default_factory=grpo_optim)
    save_every: int = 100
    steps: int = 500
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)

    def validate(self, num_processes: int = 1) -> None:
        """Raise ConfigError naming the key when the config cannot run on `num_processes` processes."""
        super().validate(num_processes)
        if self.steps < 1:
            raise ConfigError("steps must be >= 1 (rollout batches)")
        r = self.rollout
        if r.prompts_per_step < 1 or r.prompts_per_step % num_processes:
            raise ConfigError(f"rollout.prompts_per_step ({r.prompts_per_step}) must be a positive multiple of "
                              f"the number of processes ({num_processes})")
        if self.loss.routing not in ROUTINGS:
            raise ConfigError(f"loss.routing must be one of {ROUTINGS}")
        if self.loss.num_iterations < 1:
            raise ConfigError("loss.num_iterations must be >= 1")

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the run (the schedule's length): rollout batches x iterations."""
        return self.steps * self.loss.num_iterations
