"""Phased-DPO run configuration (dataclasses; no command line, no torch).

    cfg = load_config(DPOConfig, "training/configs/dpo_phased.toml", ["loss.loss_type=ipo"])
    cfg.validate(num_processes=8)      # ConfigError naming the key and the fix

`python -m training.dpo --config FILE` reads a JSON or TOML file into `DPOConfig` with
`training.config.load_config` (`--set a.b=value` overrides). Examples:
training/configs/dpo_phased.toml (the real model), training/configs/dpo_smoke.json.
The keys every run has come from `training.config.RunConfig`; what every run that samples
its own policy has (prompt_sets, language_weights, `[rollout]` sampling, `[[rewards]]`,
`[lora]`, device, dtype, micro_batch_size) from `training.grpo.config.PolicyRunConfig`, so a
GRPO config's prompts, rollout settings and reward streams mean the same here.

A run is `phases` phases; each samples `prompts_per_phase` prompts x `rollout.num_generations`,
scores them, builds pairs (`[pairs]`) and takes `dpo_steps_per_phase` optimiser steps of
`pairs_per_step` pairs against the policy as it was at the start of the phase (`[loss]`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rumik_app.errors import ConfigError
from training.config import OptimConfig
from training.grpo.config import ROUTINGS, PolicyRunConfig, SamplingConfig

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
SMOKE_CONFIG = CONFIG_DIR / "dpo_smoke.json"
LOSS_TYPES = ("sigmoid", "ipo", "hinge")  # TRL's DPOTrainer loss_type names (training.dpo.loss)
PAIR_STRATEGIES = ("best_worst", "all")


@dataclass
class DPORolloutConfig(SamplingConfig):
    """The phase's rollouts: `SamplingConfig` (G = num_generations, temperature, stop_mode,
    backend, ...) plus prompts_per_batch, the prompts one `generate` call samples on a process
    (G rows each): a memory setting, the rows come out the same (each row has its own seed)."""

    prompts_per_batch: int = 8


@dataclass
class PairConfig:
    """How a scored group becomes chosen/rejected pairs (training.dpo.pairs).

    strategy "best_worst": one pair per group, its best and worst member; "all": every pair
    whose reward gap is at least min_margin, largest gaps first, at most max_per_group of them
    (0: no cap). min_margin: the smallest reward gap a pair may have, in reward units (> 0 is
    always required, so ties and flat groups give no pair).
    """

    strategy: str = "best_worst"
    min_margin: float = 0.0
    max_per_group: int = 4


@dataclass
class DPOLossConfig:
    """The DPO objective (docs/ARCHITECTURE.md §14).

    beta: TRL's beta (the implicit-reward scale; IPO's regulariser tau). loss_type: "sigmoid"
    (DPO), "ipo" or "hinge", as TRL's DPOTrainer. routing: "routed" (each reward stream forms
    its own pairs and compares them on the actions its routing row names) or "flat" (pairs by
    the total reward, compared over whole sequences).
    """

    beta: float = 0.1
    loss_type: str = "sigmoid"
    routing: str = "routed"


def dpo_optim() -> OptimConfig:
    """DPO's optimiser defaults: TRL's DPO learning rate (1e-6), constant, no weight decay."""
    return OptimConfig(lr=1e-6, betas=[0.9, 0.99], weight_decay=0.0, warmup_steps=0, decay_fraction=0.0)


@dataclass
class DPOConfig(PolicyRunConfig):
    """A phased-DPO run (module docstring). prompts_per_phase and pairs_per_step count over
    all processes."""

    out_dir: str = "runs/dpo"
    optim: OptimConfig = field(default_factory=dpo_optim)
    save_every: int = 50
    phases: int = 10
    prompts_per_phase: int = 64
    dpo_steps_per_phase: int = 8
    pairs_per_step: int = 32
    rollout: DPORolloutConfig = field(default_factory=DPORolloutConfig)
    pairs: PairConfig = field(default_factory=PairConfig)
    loss: DPOLossConfig = field(default_factory=DPOLossConfig)

    def validate(self, num_processes: int = 1) -> None:
        """Raise ConfigError naming the key when the config cannot run on `num_processes` processes."""
        super().validate(num_processes)
        if min(self.phases, self.dpo_steps_per_phase, self.pairs_per_step, self.rollout.prompts_per_batch) < 1:
            raise ConfigError("phases, dpo_steps_per_phase, pairs_per_step and rollout.prompts_per_batch must be >= 1")
        if self.prompts_per_phase < 1 or self.prompts_per_phase % num_processes:
            raise ConfigError(f"prompts_per_phase ({self.prompts_per_phase}) must be a positive multiple of the "
                              f"number of processes ({num_processes}): every process samples the same number of groups")
        if self.pairs.strategy not in PAIR_STRATEGIES:
            raise ConfigError(f"pairs.strategy must be one of {PAIR_STRATEGIES}, got {self.pairs.strategy!r}")
        if self.pairs.min_margin < 0 or self.pairs.max_per_group < 0:
            raise ConfigError("pairs.min_margin and pairs.max_per_group must be >= 0 (max_per_group 0: no cap)")
        if self.loss.beta <= 0:
            raise ConfigError(f"loss.beta must be > 0, got {self.loss.beta}")
        if self.loss.loss_type not in LOSS_TYPES:
            raise ConfigError(f"loss.loss_type must be one of {LOSS_TYPES}, got {self.loss.loss_type!r}")
        if self.loss.routing not in ROUTINGS:
            raise ConfigError(f"loss.routing must be one of {ROUTINGS}, got {self.loss.routing!r}")

    @property
    def pairs_cap(self) -> int:
        """Pairs kept per group and pair key: 1 for best_worst, max_per_group (0 = all) for "all"."""
        return 1 if self.pairs.strategy == "best_worst" else self.pairs.max_per_group

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the run (the schedule's length): phases x DPO steps per phase."""
        return self.phases * self.dpo_steps_per_phase
