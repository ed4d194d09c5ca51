"""The one trainer design of every wing: a `Trainer` base class and the command line they share.

    trainer = SFTTrainer(load_config(SFTConfig, "training/configs/finetune_voice.toml"))
    out = trainer.train()              # runs, or continues, OUT's run (resume policy below)
    trainer.train(resume=True)         # continue OUT's run even though its settings changed
    python -m training.sft  --config C.toml [--set KEY=VALUE ...] [--out OUT] [--resume]
    python -m training.grpo --smoke --out /tmp/grpo-smoke
    python -m training.dpo --smoke --out /tmp/dpo-smoke

A wing (`training.sft.trainer.SFTTrainer`, `training.grpo.trainer.GRPOTrainer`,
`training.dpo.trainer.DPOTrainer`; the last two share `training.grpo.rollout.RolloutTrainer`)
builds its model, data and optimiser in `__init__` (after `Trainer.__init__` has validated the config,
set the threads and seeded every RNG) and implements four things:
  `total_steps`           optimiser steps of the run (GRPO: rollout batches x iterations)
  `step(n) -> metrics`     step n (1-based): one SFT optimiser step / one GRPO rollout batch /
                           one DPO optimiser step (a phase's first also rolls the phase out)
  `checkpoint_state()`     (gathered state dict or None, extra state) for a checkpoint
  `restore(extra)`         put the extra state back (data position, LoRA adapters, ...)
The base class owns the rest, identically for all: `train()` (the loop: a checkpoint
every `save_every` steps and at the end, then OUT itself made a published checkpoint),
`save(step)` and `resume(force)`, and what the run prints:
  - a header: processes and what the distribution is, device, precision, steps, OUT;
  - one compact line per step: `step 12/60 (20%) | <the wing's few numbers> | 0:03 elapsed,
    ETA 0:12` (SFT: loss, lr, grad norm, tokens/s, stage; GRPO: reward, KL, loss, lr,
    tokens/s), while every metric of the step goes to OUT/metrics.jsonl (TRL's names);
  - a line for every checkpoint written, and a closing summary: steps and time, the wing's
    headline (loss or reward, start -> end), where the checkpoints and the final weights are;
  - for `--smoke`, a verdict: `smoke: PASS|FAIL: <criteria with their thresholds>`
    (`smoke_verdict`), also saved in OUT/smoke_summary.json. A FAIL exits with status 1
    when the smoke ran with its own settings; with `--set` overrides the thresholds may not
    apply, so the verdict is printed and the status stays 0.

Resume policy (every trainer):
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

Command line (`python -m training.sft`, `training.grpo` and `training.dpo`): the flags are
parsed by training.cli (`--config FILE` or `--smoke`, `--set KEY=VALUE` (repeatable), `--out
OUT`, `--resume`), before torch is imported; `train_command` runs them. A user error (bad config
or override, missing data, a changed run without --resume, a missing checkpoint) prints one
`error: ...` line and exits with status 2. Under a launcher (torchrun, accelerate launch) the
main process alone prepares `--smoke`'s data and writes every shared file; the others wait at a
barrier (training.common, "processes"; docs/training.md, "Launchers").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar, Sequence

import torch

from rumik_app.checkpoint.load import ModelUnavailable
from rumik_app.errors import CheckpointError, ConfigError, user_errors
from rumik_app.files import atomic_write
from training import fsdp
from training.common import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    TRAIN_CONFIG,
    MetricsLogger,
    check_world,
    clip_gradients,
    cpu_processes,
    latest_checkpoint,
    list_checkpoints,
    load_training_state,
    process_state,
    publish_checkpoint,
    read_metrics,
    run_on_main_process,
    save_training_checkpoint,
    set_seed,
)
from training.config import MAX_LISTED_CHANGES, RunConfig, config_changes, config_dict, load_config, save_config

SMOKE_SUMMARY = "smoke_summary.json"
SMOKE_FAILED = 1  # exit status of a --smoke run whose check failed (2 stays "bad input")
# accelerate's DistributedType values, in words for the header line.
DISTRIBUTION = {"NO": "not distributed", "MULTI_CPU": "DDP over CPU processes", "MULTI_GPU": "DDP over GPUs",
                "MULTI_XPU": "DDP over XPUs", "MULTI_NPU": "DDP over NPUs", "FSDP": "FSDP", "DEEPSPEED": "DeepSpeed",
                "XLA": "XLA"}
MIB = 2**20


class Trainer:
    """Shared skeleton of a training run (module docstring). Subclasses set, in `__init__`:
    `engine` (the TTSEngine whose config and checkpoint folder a checkpoint copies), `model`
    (the unwrapped model), `master` (the module that receives the full-precision weights on
    resume, None when the checkpoint holds adapters instead), `optimizer` and `scheduler`.

    Distribution (`cfg.distributed`, training.fsdp): with several processes "ddp" (the default:
    `accelerator.prepare` wraps the model in DDP) or "fsdp2" (`self.fsdp` is True: the wing shards
    its root module with `self.shard_model` before building the optimiser and sets `self.sharded` to
    it; checkpoints then hold the model and AdamW state as DCP shards in CKPT/dcp/ next to the
    published weights, and resume reshards them to the world size at hand). A wing that sets
    `self.sharded` (also without FSDP2) can resume from such a checkpoint on one process."""

    name: ClassVar[str] = "training"  # `python -m <name>`; also the first word of the header line
    config_class: ClassVar[type[RunConfig]] = RunConfig

    def __init__(self, cfg: RunConfig, accelerator=None, config_dir: Path | None = None):
        from accelerate import Accelerator

        process_state()  # before the Accelerator: on CPU processes it must know they are CPU ones
        self.acc = accelerator or Accelerator(cpu=cpu_processes(), **self.accelerator_kwargs(cfg))
        check_world(self.acc.num_processes)
        cfg.validate(self.acc.num_processes)
        self.cfg, self.out, self.config_dir = cfg, Path(cfg.out_dir), config_dir
        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        set_seed(cfg.seed, deterministic=cfg.deterministic)
        self.resumed_from: Path | None = None
        self.engine = self.model = self.master = self.optimizer = self.scheduler = None
        self.fsdp = fsdp.uses_fsdp2(cfg.distributed, self.acc.num_processes)
        self.sharded: torch.nn.Module | None = None  # the root module of DCP checkpoints (FSDP2)

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
        """Summarise a finished smoke run (saved as OUT/smoke_summary.json)."""
        return {}

    @classmethod
    def smoke_verdict(cls, summary: dict) -> tuple[bool, str]:
        """(passed, the criteria with their measured values and thresholds) for `smoke_report`'s summary."""
        return True, "no criteria"

    def progress_fields(self, metrics: dict[str, Any]) -> list[str]:
        """The few numbers of a step's compact line (every metric goes to metrics.jsonl)."""
        return []

    # The closing summary's headline: this metric, first vs last steps (None: no headline).
    headline_metric: str | None = None
    headline_window = 10
    headline_digits = 4

    def headline(self, rows: list[dict]) -> str:
        """The closing summary's numbers from metrics.jsonl's step rows, e.g. "loss 7.8306 ->
        1.5825 (mean of the first and the last 10 steps)"."""
        name = self.headline_metric
        values = [r[name] for r in rows if name and r.get(name) is not None]
        if not values:
            return ""
        k, d = min(self.headline_window, len(values)), self.headline_digits
        first, last = sum(values[:k]) / k, sum(values[-k:]) / k
        return f"{name} {first:.{d}f} -> {last:.{d}f} (mean of the first and the last {k} steps)"

    # ------------------------------------------------------------------ shared
    def shard_model(self, root: torch.nn.Module, layers, mixed_precision: str) -> torch.nn.Module:
        """FSDP2: shard `root` per decoder layer (training.fsdp.shard) and make it `self.sharded`."""
        self.sharded = fsdp.shard(root, layers, mixed_precision)
        return root

    def no_sync(self, module: torch.nn.Module, enabled: bool = True):
        """Skip the gradient all-reduce / reduce-scatter of this backward (gradient accumulation)."""
        if not enabled:
            return contextlib.nullcontext()
        return fsdp.no_sync(module) if self.fsdp else self.acc.no_sync(module)

    def clip_gradients(self, params, max_grad_norm: float) -> float:
        """Clip to `max_grad_norm` (0: none); the total norm over all processes, before clipping."""
        if self.fsdp:
            return fsdp.clip_grad_norm(params, max_grad_norm)
        return clip_gradients(self.acc, params, max_grad_norm)

    def save(self, step: int) -> Path | None:
        """Write OUT/checkpoints/step_N; every process calls it, the main one writes (returns the folder).
        FSDP2: every process first writes its DCP shards of the model and optimiser into a staging
        folder that becomes CKPT/dcp/ when the checkpoint is committed."""
        main, staged = self.acc.is_main_process, None
        if self.fsdp:
            staged = self.out / CHECKPOINTS_DIR / f".step_{step}.{fsdp.DCP_DIR}.partial"
            if main:
                shutil.rmtree(staged, ignore_errors=True)
                staged.mkdir(parents=True)
            self.acc.wait_for_everyone()
            fsdp.save_sharded(staged, self.sharded, self.optimizer)
        state, extra = self.checkpoint_state()
        path = None
        if main:
            path = save_training_checkpoint(
                self.out, step, self.model, self.engine.config, self.engine.checkpoint_dir,
                None if self.fsdp else self.optimizer, self.scheduler, self.cfg, extra,
                keep_last=self.cfg.keep_last, state_dict=state,
                save_master_weights=self.master is not None and not self.fsdp,
                dtype=getattr(torch, self.cfg.save_dtype), extra_dirs={fsdp.DCP_DIR: staged} if staged else None)
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
        sharded = ckpt / fsdp.DCP_DIR
        if sharded.is_dir() and self.sharded is None:
            raise CheckpointError(f"{ckpt} holds FSDP2 (DCP) shards, which {self.name} cannot load yet; "
                                  f"resume it with distributed=fsdp2 on several processes, or start a fresh --out.")
        if self.fsdp and not sharded.is_dir():
            raise CheckpointError(f"{ckpt} was written without FSDP2 (no {fsdp.DCP_DIR}/ shards): resume it with "
                                  "distributed=ddp, or start FSDP2 from its weights in a fresh --out "
                                  f"(--set model={ckpt}).")
        extra = load_training_state(ckpt, None if sharded.is_dir() else self.optimizer, self.scheduler,
                                    model=self.master)
        if sharded.is_dir():  # FSDP2's model + optimiser shards, resharded to this world size
            fsdp.load_sharded(sharded, self.sharded, self.optimizer)
        self.restore(extra)
        self.resumed_from = ckpt
        return int(extra["step"])

    def header(self) -> str:
        """`training.sft: 1 process (not distributed), cpu, float32 weights, no mixed precision; 60 steps -> OUT`."""
        acc, n = self.acc, self.acc.num_processes
        kind = acc.distributed_type.value
        dist = DISTRIBUTION.get(kind, kind)
        if self.fsdp:
            dist = f"FSDP2 over {'CPU processes' if acc.device.type == 'cpu' else 'GPUs'}, sharded per decoder layer"
        held = fsdp.model_state_bytes(self.sharded or self.model) / MIB if self.model is not None else None
        mixed = "no mixed precision" if acc.mixed_precision == "no" else f"{acc.mixed_precision} mixed precision"
        weights = str(getattr(self.model, "dtype", "")).removeprefix("torch.")
        return (f"{self.name}: {n} process{'es' if n != 1 else ''} ({dist}), {acc.device}, "
                f"{weights + ' weights, ' if weights else ''}{mixed}"
                f"{', deterministic kernels' if self.cfg.deterministic else ''}"
                f"{f', {held:,.1f} MiB of weights, grads and AdamW state per process' if held is not None else ''}; "
                f"{self.total_steps} steps -> {self.out}")

    def progress_line(self, step: int, metrics: dict[str, Any], elapsed: float, steps_run: int) -> str:
        """`step 12/60 (20%) | loss 5.12 | lr 1.0e-04 | ... | 0:03 elapsed, ETA 0:12` (ETA: this
        session's mean step time times the steps left)."""
        total = self.total_steps
        eta = elapsed / max(steps_run, 1) * (total - step)
        width = len(str(total))
        return " | ".join([f"step {step:{width}d}/{total} ({100 * step // max(total, 1):3d}%)",
                           *self.progress_fields(metrics), f"{clock(elapsed)} elapsed, ETA {clock(eta)}"])

    def closing_summary(self, first: int, elapsed: float, published: Path | None) -> str:
        """What ran, the headline numbers, where the checkpoints and the final weights are."""
        total, ran = self.total_steps, self.total_steps - first + 1
        rows = [r for r in read_metrics(self.out) if "event" not in r]
        pace = f" ({elapsed / ran:.2f} s/step)" if ran > 0 else ""
        done = (f"{self.name}: finished step {total}/{total} in {clock(elapsed)}{pace}" if ran > 0
                else f"{self.name}: nothing to run, {self.out} already holds all {total} steps")
        headline = self.headline(rows)
        kept = list(reversed(list_checkpoints(self.out)))
        lines = [done + (f"; {headline}" if headline else "")]
        if kept:
            names = ", ".join(p.name for p in kept[1:])
            lines.append(f"  checkpoints: {kept[0]} (latest{'; also ' + names if names else ''}); "
                         "rerunning the command resumes from the latest")
        if published is not None:
            lines.append(f"  final weights: {self.out} (published format: TTSEngine.from_pretrained(\"{self.out}\"), "
                         f"--model {self.out})")
        lines.append(f"  metrics: {self.out / METRICS_FILE} (every metric of every step)")
        return "\n".join(lines)

    def train(self, resume: bool = False) -> Path:
        """Run the steps not done yet (resume policy in the module docstring); returns OUT,
        which then holds the final weights in the published format."""
        done = self.resume(force=resume)
        main = self.acc.is_main_process
        logger = MetricsLogger(self.out, is_main=main, echo=False)
        if main:
            print(self.header(), flush=True)
            save_config(self.cfg, self.out / TRAIN_CONFIG)
        if self.resumed_from is not None:
            logger.log(done, {"event": f"resumed from {self.resumed_from.name}"})
            if main:
                print(f"resumed from {self.resumed_from} (step {done})", flush=True)
        last, total = self.resumed_from, self.total_steps
        start = time.perf_counter()
        for step in range(done + 1, total + 1):
            metrics = self.step(step)
            logger.log(step, metrics)
            if main:
                print(self.progress_line(step, metrics, time.perf_counter() - start, step - done), flush=True)
            if step % self.cfg.save_every == 0 or step == total:
                last = self.save(step)
                if main and last is not None:
                    print(f"  saved {last}", flush=True)
        published = None
        if main and last is not None:
            published = publish_checkpoint(last, self.out)
        self.acc.wait_for_everyone()
        logger.close()
        if main:
            print(self.closing_summary(done + 1, time.perf_counter() - start, published), flush=True)
        return self.out


def check_same_settings(cfg: RunConfig) -> None:
    """The resume policy's check: ConfigError naming the changed keys when OUT's latest
    checkpoint was written with other settings than `cfg` (nothing to check without one)."""
    ckpt = latest_checkpoint(cfg.out_dir)
    if ckpt is None:
        return
    path = ckpt / TRAIN_CONFIG
    saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    if saved:
        saved.setdefault("distributed", "ddp")  # written before the key existed: those runs were DDP
    changes = config_changes(saved, config_dict(cfg))
    if changes:
        more = f" and {len(changes) - MAX_LISTED_CHANGES} more" if len(changes) > MAX_LISTED_CHANGES else ""
        raise ConfigError(
            f"{cfg.out_dir} holds a run with other settings ({'; '.join(changes[:MAX_LISTED_CHANGES])}{more}). "
            f"Pass --resume to continue that run with these settings, or a fresh --out to start a new run.")


def train_command(trainer_class: type[Trainer], args: argparse.Namespace) -> Path:
    """`python -m training.<wing>` once training.cli has parsed its flags: load the config, train,
    judge a smoke run; returns OUT (module docstring)."""
    with user_errors():
        start = time.perf_counter()
        if args.smoke:  # the main process prepares the smoke's data and config; the others wait for it
            path = run_on_main_process(lambda: trainer_class.smoke_config(Path(args.out) if args.out else None))
        else:
            path = Path(args.config)
        cfg = load_config(trainer_class.config_class, path, args.overrides)
        if args.out:
            cfg.out_dir = args.out
        if not args.resume:
            check_same_settings(cfg)  # before the model loads: a refusal comes at once
        prepared = time.perf_counter()
        try:
            trainer = trainer_class(cfg, config_dir=path.parent)
        except ModelUnavailable as exc:  # the fixes in a trainer's terms: the `model` key
            raise CheckpointError(exc.with_flags(flag="--set model=", tiny="--set model=tiny")) from exc
        out = trainer.train(resume=args.resume)
        if args.smoke and trainer.acc.is_main_process:
            seconds = {"train_s": time.perf_counter() - prepared, "total_s": time.perf_counter() - start}
            status = smoke_outcome(trainer_class, out, seconds, args.overrides)
            if status:
                raise SystemExit(status)
    return out


def smoke_outcome(trainer_class: type[Trainer], out: Path, seconds: dict[str, float],
                  overrides: Sequence[str] = ()) -> int:
    """Judge a finished smoke run: print `smoke: PASS|FAIL: <criteria>`, save the summary with
    its verdict to OUT/smoke_summary.json, return the exit status (SMOKE_FAILED for a FAIL of
    the smoke's own settings, else 0: with `--set` overrides the thresholds may not apply)."""
    summary = trainer_class.smoke_report(out, seconds)
    passed, criteria = trainer_class.smoke_verdict(summary)
    summary.update(verdict="PASS" if passed else "FAIL", criteria=criteria, overrides=list(overrides))
    atomic_write(out / SMOKE_SUMMARY, json.dumps(summary, indent=2) + "\n")
    note = ("" if not overrides else " (settings changed with --set: the thresholds are for the smoke's own "
            "settings, so this verdict does not set the exit status)")
    print(f"smoke: {summary['verdict']}: {criteria}{note}; details in {out / SMOKE_SUMMARY}", flush=True)
    return SMOKE_FAILED if not passed and not overrides else 0


def clock(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour."""
    minutes, secs = divmod(int(round(max(seconds, 0.0))), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
