"""GRPO run configuration (dataclasses; no command line).

    cfg = load_config(GRPOConfig, "training/configs/grpo_example.toml", ["loss.routing=flat"])
    cfg.validate(num_processes=8)      # ConfigError naming the key and the fix

`python -m training.grpo --config FILE` reads a JSON or TOML file into `GRPOConfig` with
`training.config.load_config` (`--set a.b=value` overrides). Examples:
training/configs/grpo_example.toml, training/configs/grpo_smoke.json. The keys every run has
(model, out_dir, seed, optim, save_every, keep_last, save_dtype, activation_checkpointing,
torch_threads, deterministic) come from `training.config.RunConfig`; `[optim]` starts from `grpo_optim()`.

Prompt sets. Each `[[prompt_sets]]` entry is a domain: a JSONL file (`path`, one object
per line) and/or inline `items`; how they are drawn is in training.grpo.prompts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rumik_app.decode.sampling import STOP_MODES
from rumik_app.errors import ConfigError, PromptError
from rumik_app.request import (
    DEFAULT_MIN_NEW_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P, check_new_tokens, check_temperature,
    check_top_k, check_top_p,
)
from training.config import OptimConfig, RunConfig
from training.grpo.rewards import RewardSpec

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
SMOKE_CONFIG = CONFIG_DIR / "grpo_smoke.json"
ROUTINGS = ("routed", "flat")
ROLLOUT_MAX_NEW_TOKENS = 1024  # ~10 s: GRPO prompts are sentences, and long rollouts cost memory


@dataclass
class PromptSet:
    """One domain of prompts: a JSONL file and/or inline items, drawn with weight `weight`."""

    domain: str = "default"
    path: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    weight: float = 1.0


@dataclass
class RolloutConfig:
    """How rollouts are sampled (through `TTSEngine.generate_batch`); sampling defaults are the
    request defaults (rumik_app.request), so rollouts sample like the app unless configured.

    stop_mode "sample" draws each stop-head decision from Bernoulli(sigmoid(logit)), so the
    decisions are actions of the policy with a usable log-prob gradient; "threshold" (the
    inference rule) makes them deterministic, and the duration stream would then push on
    decisions the policy never sampled. prompts_per_step counts prompts over all processes.
    """

    num_generations: int = 8
    prompts_per_step: int = 8
    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_new_tokens: int = DEFAULT_MIN_NEW_TOKENS
    max_new_tokens: int = ROLLOUT_MAX_NEW_TOKENS
    stop_mode: str = "sample"
    restrict_phase: bool = True


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
class GRPOConfig(RunConfig):
    """A GRPO run. device/dtype: None = auto (CUDA bf16, else CPU float32); steps: rollout
    batches; micro_batch_size: rows per forward/backward; prompt_sets and language_weights:
    what is sampled (training.grpo.prompts); rollout, rewards, loss, lora: as above."""

    out_dir: str = "runs/grpo"
    optim: OptimConfig = field(default_factory=grpo_optim)
    save_every: int = 100
    device: str | None = None
    dtype: str | None = None
    steps: int = 500
    prompt_sets: list[PromptSet] = field(default_factory=list)
    language_weights: dict[str, float] = field(default_factory=dict)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    rewards: list[RewardSpec] = field(default_factory=default_rewards)
    loss: LossConfig = field(default_factory=LossConfig)
    lora: LoraSettings = field(default_factory=LoraSettings)
    micro_batch_size: int = 8

    def validate(self, num_processes: int = 1) -> None:
        """Raise ConfigError naming the key when the config cannot run on `num_processes` processes."""
        super().validate(num_processes)
        r = self.rollout
        if self.steps < 1:
            raise ConfigError("steps must be >= 1 (rollout batches)")
        if r.num_generations < 2:
            raise ConfigError("rollout.num_generations must be >= 2 (advantages compare samples of a group)")
        if r.prompts_per_step < 1 or r.prompts_per_step % num_processes:
            raise ConfigError(f"rollout.prompts_per_step ({r.prompts_per_step}) must be a positive multiple of "
                              f"the number of processes ({num_processes})")
        try:  # the bounds and messages every front end uses (rumik_app.request)
            check_temperature(r.temperature), check_top_k(r.top_k), check_top_p(r.top_p)
            check_new_tokens(r.min_new_tokens, r.max_new_tokens)
        except PromptError as exc:
            raise ConfigError(f"rollout.{exc.field}: {exc}") from None
        if r.temperature <= 0:
            raise ConfigError("rollout.temperature must be > 0: greedy rollouts have no policy gradient")
        if r.stop_mode not in STOP_MODES:
            raise ConfigError(f"rollout.stop_mode must be one of {STOP_MODES}")
        if not 1 <= r.min_new_tokens <= r.max_new_tokens:
            raise ConfigError("rollout: need 1 <= min_new_tokens <= max_new_tokens")
        if self.loss.routing not in ROUTINGS:
            raise ConfigError(f"loss.routing must be one of {ROUTINGS}")
        if self.loss.num_iterations < 1 or self.micro_batch_size < 1:
            raise ConfigError("loss.num_iterations and micro_batch_size must be >= 1")
        if not self.rewards:
            raise ConfigError("rewards: at least one reward stream is needed")
        if len({spec.name for spec in self.rewards}) != len(self.rewards):
            raise ConfigError("rewards: stream names must be unique")
        for spec in self.rewards:
            spec.check()
        if not self.prompt_sets:
            raise ConfigError("prompt_sets: at least one prompt set is needed")

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the run (the schedule's length): rollout batches x iterations."""
        return self.steps * self.loss.num_iterations
