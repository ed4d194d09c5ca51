"""The one trainer design of both wings: a `Trainer` base class and the command line they share.

    trainer = SFTTrainer(load_config(SFTConfig, "training/configs/finetune_voice.toml"))
    out = trainer.train()              # runs, or continues, OUT's run (resume policy below)
    trainer.train(resume=True)         # continue OUT's run even though its settings changed
    python -m training.sft  --config C.toml [--set KEY=VALUE ...] [--out OUT] [--resume]
    python -m training.grpo --smoke --out /tmp/grpo-smoke

A wing (`training.sft.trainer.SFTTrainer`, `training.grpo.trainer.GRPOTrainer`) builds its
model, data and optimiser in `__init__` (after `Trainer.__init__` has validated the config,
set the threads and seeded every RNG) and implements four things:
  `total_steps`           optimiser steps of the run (GRPO: rollout batches x iterations)
  `step(n) -> metrics`     step n (1-based): one SFT optimiser step / one GRPO rollout batch
  `checkpoint_state()`     (gathered state dict or None, extra state) for a checkpoint
  `restore(extra)`         put the extra state back (data position, LoRA adapters, ...)
The base class owns the rest, identically for both: `train()` (the loop: one metrics line
per step to stdout and OUT/metrics.jsonl, a checkpoint every `save_every` steps and at the
end, then OUT itself made a published checkpoint), `save(step)` and `resume(force)`.

Resume policy (both trainers):
  - OUT holds no checkpoint: a fresh run.
  - OUT's latest checkpoint was written with the same settings (its train_config.json equals
    this run's config in every key but out_dir): the run continues from it, automatically.
    Re-running the same command after a crash or a preemption resumes, losing at most one
    save interval, with the same numbers as an uninterrupted run.
  - The settings differ: the run stops with one message naming the changed keys. Pass
    `--resume` (`train(resume=True)`) to continue that run with the new settings (more
    steps, another learning rate, ...), or a fresh `--out` to start a new run.
A resume is recorded in metrics.jsonl as `{"step": N, "event": "resumed from step_N"}`; the
steps after the checkpoint are logged again, and for a step the last line wins.

Command line (`run_cli`, used by both `python -m training.sft` and `python -m training.grpo`):
`--config FILE` or `--smoke`, `--set KEY=VALUE` (repeatable), `--out OUT`, `--resume`. A user
error (bad config or override, missing data, a changed run without --resume, a missing
checkpoint) prints one `error: ...` line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from rumik_app.errors import ConfigError, user_errors
from rumik_app.files import atomic_write
from training.common import (
    TRAIN_CONFIG, MetricsLogger, latest_checkpoint, load_training_state, publish_checkpoint, save_training_checkpoint,
    set_seed,
)
from training.config import MAX_LISTED_CHANGES, RunConfig, config_changes, config_dict, load_config, save_config

SMOKE_SUMMARY = "smoke_summary.json"


class Trainer:
    """Shared skeleton of a training run (module docstring). Subclasses set, in `__init__`:
    `engine` (the TTSEngine whose config and checkpoint folder a checkpoint copies), `model`
    (the unwrapped model), `master` (the module that receives the full-precision weights on
    resume, None when the checkpoint holds adapters instead), `optimizer` and `scheduler`."""

    name: ClassVar[str] = "training"  # `python -m <name>`; also the first word of the header line
    config_class: ClassVar[type[RunConfig]] = RunConfig
    smoke_help: ClassVar[str] = ""

    def __init__(self, cfg: RunConfig, accelerator=None, config_dir: Path | None = None):
        from accelerate import Accelerator

        self.acc = accelerator or Accelerator(**self.accelerator_kwargs(cfg))
        cfg.validate(self.acc.num_processes)
        self.cfg, self.out, self.config_dir = cfg, Path(cfg.out_dir), config_dir
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        set_seed(cfg.seed, deterministic=cfg.deterministic)
        self.resumed_from: Path | None = None
        self.engine = self.model = self.master = self.optimizer = self.scheduler = None

    # ------------------------------------------------------------------ what a wing implements
    @staticmethod
    def accelerator_kwargs(cfg: RunConfig) -> dict[str, Any]:
        return {}

    @property
    def total_steps(self) -> int:
        raise NotImplementedError

    def step(self, step: int) -> dict[str, Any]:
        raise NotImplementedError

    def checkpoint_state(self) -> tuple[dict | None, dict]:
        """(state dict to publish, or None for the model's own; extra state). Every process calls it."""
        raise NotImplementedError

    def restore(self, extra: dict) -> None:
        """Put back what `checkpoint_state` added to the extra state."""

    @classmethod
    def smoke_config(cls, out: Path | None) -> Path:
        """The smoke run's config file (preparing whatever it needs under `out`)."""
        raise NotImplementedError

    @classmethod
    def smoke_report(cls, out: Path, seconds: dict[str, float]) -> dict:
        """Summarise a finished smoke run (printed as one `smoke: {...}` line)."""
        return {}

    # ------------------------------------------------------------------ shared
    def save(self, step: int) -> Path | None:
        """Write OUT/checkpoints/step_N; every process calls it, the main one writes (returns the folder)."""
        state, extra = self.checkpoint_state()
        path = None
        if self.acc.is_main_process:
            path = save_training_checkpoint(
                self.out, step, self.model, self.engine.config, self.engine.checkpoint_dir, self.optimizer,
                self.scheduler, self.cfg, extra, keep_last=self.cfg.keep_last, state_dict=state,
                save_master_weights=self.master is not None, dtype=getattr(torch, self.cfg.save_dtype))
        self.acc.wait_for_everyone()
        return path

    def resume(self, force: bool = False) -> int:
        """Continue from OUT's latest checkpoint under the resume policy; returns the steps
        already done (0: a fresh run). Raises ConfigError when the settings changed and not `force`."""
        ckpt = latest_checkpoint(self.out)
        if ckpt is None:
            return 0
        if not force:
            check_same_settings(self.cfg)
        extra = load_training_state(ckpt, self.optimizer, self.scheduler, model=self.master)
        self.restore(extra)
        self.resumed_from = ckpt
        return int(extra["step"])

    def header(self) -> str:
        acc = self.acc
        return (f"{self.name}: {acc.num_processes} process(es), {acc.distributed_type.value}, {acc.device}"
                f"{', deterministic kernels' if self.cfg.deterministic else ''}")

    def train(self, resume: bool = False) -> Path:
        """Run the steps not done yet (resume policy in the module docstring); returns OUT,
        which then holds the final weights in the published format."""
        done = self.resume(force=resume)
        logger = MetricsLogger(self.out, is_main=self.acc.is_main_process)
        if self.acc.is_main_process:
            print(self.header(), flush=True)
            save_config(self.cfg, self.out / TRAIN_CONFIG)
        if self.resumed_from is not None:
            logger.log(done, {"event": f"resumed from {self.resumed_from.name}"})
        last, total = self.resumed_from, self.total_steps
        for step in range(done + 1, total + 1):
            logger.log(step, self.step(step))
            if step % self.cfg.save_every == 0 or step == total:
                last = self.save(step)
        if self.acc.is_main_process and last is not None:
            publish_checkpoint(last, self.out)
        self.acc.wait_for_everyone()
        logger.close()
        return self.out


def check_same_settings(cfg: RunConfig) -> None:
    """The resume policy's check: ConfigError naming the changed keys when OUT's latest
    checkpoint was written with other settings than `cfg` (nothing to check without one)."""
    ckpt = latest_checkpoint(cfg.out_dir)
    if ckpt is None:
        return
    path = ckpt / TRAIN_CONFIG
    saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    changes = config_changes(saved, config_dict(cfg))
    if changes:
        more = f" and {len(changes) - MAX_LISTED_CHANGES} more" if len(changes) > MAX_LISTED_CHANGES else ""
        raise ConfigError(
            f"{cfg.out_dir} holds a run with other settings ({'; '.join(changes[:MAX_LISTED_CHANGES])}{more}). "
            f"Pass --resume to continue that run with these settings, or a fresh --out to start a new run.")


def run_cli(trainer_class: type[Trainer], argv: Sequence[str] | None, description: str) -> Path:
    """`python -m training.<wing>`: parse, load the config, train; returns OUT (module docstring)."""
    parser = argparse.ArgumentParser(prog=f"python -m {trainer_class.name}", description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON or TOML config (see training/configs/)")
    parser.add_argument("--smoke", action="store_true", help=trainer_class.smoke_help)
    parser.add_argument("--out", help="output folder OUT (overrides out_dir)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set optim.lr=3e-5 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue OUT's run even though its settings differ from this config "
                             "(a rerun with the same settings resumes without it)")
    args = parser.parse_args(argv)
    if bool(args.config) == bool(args.smoke):
        parser.error("pass --config CONFIG, or --smoke")
    with user_errors():
        start = time.perf_counter()
        path = trainer_class.smoke_config(Path(args.out) if args.out else None) if args.smoke else Path(args.config)
        cfg = load_config(trainer_class.config_class, path, args.overrides)
        if args.out:
            cfg.out_dir = args.out
        if not args.resume:
            check_same_settings(cfg)  # before the model loads: a refusal comes at once
        prepared = time.perf_counter()
        trainer = trainer_class(cfg, config_dir=path.parent)
        out = trainer.train(resume=args.resume)
        if args.smoke and trainer.acc.is_main_process:
            seconds = {"train_s": time.perf_counter() - prepared, "total_s": time.perf_counter() - start}
            summary = trainer_class.smoke_report(out, seconds)
            atomic_write(out / SMOKE_SUMMARY, json.dumps(summary, indent=2) + "\n")
            print("smoke:", json.dumps(summary), flush=True)
    return out
