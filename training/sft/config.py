"""SFT / continued pre-training run configuration (dataclasses; no command line, no torch).

    cfg = load_config(SFTConfig, "training/configs/pretrain_curriculum.toml", ["optim.lr=5e-5"])
    cfg.validate(num_processes=8)      # ConfigError naming the key and the fix

`python -m training.sft --config FILE` reads a JSON or TOML file into `SFTConfig` (see
training/configs/pretrain_curriculum.toml and finetune_voice.toml). The keys every run has
(model, out_dir, seed, optim, save_every, keep_last, save_dtype, activation_checkpointing,
torch_threads, deterministic, distributed) come from `training.config.RunConfig`; the optimiser's from
`training.config.OptimConfig` (its defaults are the published pre-training run's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rumik_app.errors import ConfigError
from training.config import RunConfig

HEADS = ("full", "audio")  # training.sft.objective.SFTObjective's output heads
CE_CHUNK_TOKENS = 4096  # full-vocabulary CE is computed (and recomputed in backward) this many targets at a time
MIXED_PRECISION = ("auto", "bf16", "no")


@dataclass
class SourceConfig:
    """A prepared data folder (training.prepare --out) and its weight in the stage's mixture."""

    data: str
    weight: float = 1.0


@dataclass
class StageConfig:
    """A curriculum stage: `steps` optimizer steps drawing from `mixture` by weight."""

    name: str
    steps: int
    mixture: list[SourceConfig] = field(default_factory=list)


@dataclass
class BatchConfig:
    """global_batch clips per optimizer step, micro_batch per forward on one process."""

    global_batch: int = 96
    micro_batch: int = 4


@dataclass
class LossConfig:
    """stop_lambda: weight of the stop BCE (lambda in docs/ARCHITECTURE.md §6). head: "full" or
    "audio" (training.sft.objective). ce_chunk_tokens: targets per chunk of the full-vocabulary CE."""

    stop_lambda: float = 1.0
    head: str = "full"
    ce_chunk_tokens: int = CE_CHUNK_TOKENS


@dataclass
class EvalConfig:
    """Held-out loss every `every` steps (0 = only at the end) on up to max_items clips:
    the `data` folders if given, else a stable-hash `fraction` of every training folder."""

    every: int = 500
    fraction: float = 0.01
    max_items: int = 256
    data: list[str] = field(default_factory=list)


@dataclass
class SFTConfig(RunConfig):
    """Everything an SFT run needs; saved as train_config.json in OUT and in every checkpoint.

    stages: the curriculum; batch, loss, eval: as above; mixed_precision: "auto" (bf16
    autocast on GPUs that support it, else fp32), "bf16" or "no".
    """

    out_dir: str = "runs/sft"
    stages: list[StageConfig] = field(default_factory=list)
    batch: BatchConfig = field(default_factory=BatchConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    mixed_precision: str = "auto"

    def validate(self, num_processes: int = 1) -> None:
        """Raise ConfigError for settings that cannot run on `num_processes` processes."""
        super().validate(num_processes)
        if not self.stages:
            raise ConfigError("No [[stages]] in the config: add one with name, steps and a mixture of data folders.")
        if self.loss.head not in HEADS:
            raise ConfigError(f"loss.head must be one of {HEADS}, got {self.loss.head!r}.")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ConfigError(f"mixed_precision must be one of {MIXED_PRECISION}.")
        per_step = self.batch.micro_batch * num_processes
        if self.batch.micro_batch < 1 or self.batch.global_batch % per_step:
            raise ConfigError(f"batch.global_batch ({self.batch.global_batch}) must be a multiple of "
                              f"batch.micro_batch x processes ({self.batch.micro_batch} x {num_processes}); "
                              f"change one.")
