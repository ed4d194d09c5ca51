"""SFT / continued pre-training of rumik-oss-1 on prepared Mimi codes (DESIGN §6).

    python -m training.sft --config training/configs/sft_example.toml
    python -m training.sft --config C.toml --set optim.lr=3e-5 --set batch.micro_batch=2 --out runs/x
    accelerate launch --num_processes 8 -m training.sft --config C.toml     # DDP (FSDP/DeepSpeed:
                                                                            # accelerate config)
    python -m training.sft --smoke --out /tmp/smoke      # CPU, minutes: espeak-ng data, tiny model

Loss: cross-entropy on unit tokens and `</audio>` only (normalised by the number of such
targets in the global batch) + stop_lambda x BCE of the stop head at every frame boundary
(normalised by the number of boundaries); see training.sequences and training.objective.
Schedule: warmup-stable-decay over the sum of the stages' steps, AdamW, gradient
accumulation (global_batch = micro_batch x accumulation x processes), bf16 autocast on GPU.
Curriculum: `stages`, each a mixture of prepared data folders with weights and a step count
(replay = an earlier stage's folder with a small weight). Every `save_every` steps
OUT/checkpoints/step_N is written in the published format plus optimizer/scheduler/RNG/data
state; a rerun with the same OUT resumes from the latest one and continues the same data
order. At the end the final weights are also published at OUT itself, so
`TTSEngine.from_pretrained(OUT)` loads them. One line per step goes to stdout and
OUT/metrics.jsonl (a resume may repeat the steps after its checkpoint: the last line wins).

Multi-process: every process draws the same global batch and trains on its own slice;
checkpoints are written by the main process. The published weights are gathered with
`accelerator.get_state_dict`, so they are right under FSDP and DeepSpeed too. The saved
optimizer state is the main process's `optimizer.state_dict()`, which makes exact resume a
single-process/DDP feature (tested with two CPU processes); FSDP/DeepSpeed optimizer shards
are not saved yet. loss.head = "audio" reads the tied embedding outside the LM head's own
forward: use it with one process or DDP, not FSDP.

Reproducibility: a run is a function of its config and `seed`, not of paths. The batch order
is (seed, content of each prepared folder's index.jsonl; training.data), the weights start
from the checkpoint, and `set_seed` runs before anything draws. On CPU two runs with one
config and seed match bit for bit (same machine, torch build and thread count). On CUDA they
draw the same batches but some kernels are not bitwise repeatable, so losses drift apart by
float rounding; `deterministic = true` (--set deterministic=true) turns on torch's
deterministic algorithms (training.common.set_seed) for exact repeats on the same GPU model,
software and process count, and an op without a deterministic kernel then raises.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rumik_app.checkpoint import CheckpointError
from rumik_app.engine import TTSEngine
from training.common import (
    ConfigError, MetricsLogger, latest_checkpoint, load_config, load_training_state, publish_checkpoint,
    save_config, save_training_checkpoint, set_seed, wsd_lambda,
)
from training.data import DataError, DataSource, MixtureSampler, StagePlan, rank_micro_batches
from training.objective import CE_CHUNK_TOKENS, HEADS, SFTObjective
from training.prepare import codec_fingerprint
from training.sequences import TrainingExample, acoustic_targets, build_sequence, collate

MIXED_PRECISION = ("auto", "bf16", "no")
SAVE_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


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
class OptimConfig:
    """AdamW + warmup-stable-decay. decay_steps 0 = decay_fraction of all steps."""

    lr: float = 1e-4
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    warmup_steps: int = 500
    decay_steps: int = 0
    decay_fraction: float = 0.1
    min_lr_ratio: float = 0.0


@dataclass
class BatchConfig:
    """global_batch clips per optimizer step, micro_batch per forward on one process."""

    global_batch: int = 96
    micro_batch: int = 4


@dataclass
class LossConfig:
    """stop_lambda: weight of the stop BCE (DESIGN §6 lambda). head: "full" or "audio" (objective.py)."""

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
class SFTConfig:
    """Everything a run needs; saved as train_config.json in OUT and in every checkpoint."""

    model: str = "rumik-ai/rumik-oss-1-base"
    out_dir: str = "runs/sft"
    seed: int = 0
    stages: list[StageConfig] = field(default_factory=list)
    optim: OptimConfig = field(default_factory=OptimConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    save_every: int = 1000
    keep_last: int = 3
    save_dtype: str = "bfloat16"
    mixed_precision: str = "auto"
    activation_checkpointing: bool = False
    resume: bool = True
    deterministic: bool = False  # torch's deterministic kernels (CUDA; see the module docstring)

    def check(self, world: int) -> None:
        """Raise ConfigError for settings that cannot run."""
        if not self.stages:
            raise ConfigError("No [[stages]] in the config: add one with name, steps and a mixture of data folders.")
        if self.loss.head not in HEADS:
            raise ConfigError(f"loss.head must be one of {HEADS}, got {self.loss.head!r}.")
        if self.mixed_precision not in MIXED_PRECISION:
            raise ConfigError(f"mixed_precision must be one of {MIXED_PRECISION}.")
        if self.save_dtype not in SAVE_DTYPES:
            raise ConfigError(f"save_dtype must be one of {tuple(SAVE_DTYPES)}.")
        per_step = self.batch.micro_batch * world
        if self.batch.micro_batch < 1 or self.batch.global_batch % per_step:
            raise ConfigError(f"batch.global_batch ({self.batch.global_batch}) must be a multiple of "
                              f"batch.micro_batch x processes ({self.batch.micro_batch} x {world}); change one.")


class ExampleBuilder:
    """(source key, item) -> TrainingExample, with prompts from the engine's prompt function."""

    def __init__(self, engine: TTSEngine, sources: dict[str, DataSource]):
        self.engine, self.sources = engine, sources

    def __call__(self, key: str, item: int) -> TrainingExample:
        prompt = self.engine.prompt_ids(self.sources[key].request(item))  # ~50 us: not worth a cache
        return build_sequence(prompt, self.sources[key].codes(item), self.engine.layout)

    def targets(self, pairs) -> tuple[int, int]:
        """(acoustic targets, frame boundaries) of a list of (key, item)."""
        q = self.engine.layout.num_quantizers
        frames = [self.sources[k].frames(i) for k, i in pairs]
        return sum(acoustic_targets(f, q) for f in frames), sum(frames)


def optimizer_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only (not on norms, biases or the tied embedding)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (decay if param.ndim >= 2 and "embed_tokens" not in name else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_sources(cfg: SFTConfig, engine: TTSEngine) -> tuple[dict[str, DataSource], list[StagePlan], list]:
    """Open every data folder once; resolve stages to source keys; pick the held-out items."""
    fingerprint = codec_fingerprint(engine.checkpoint_dir)
    sources: dict[str, DataSource] = {}

    def open_source(path: str, fraction: float) -> DataSource:
        src = DataSource(path, engine.layout, fingerprint, heldout_fraction=fraction)
        if src.key in sources and sources[src.key].heldout_items != src.heldout_items:
            raise DataError(f"{path} is used both as training and as eval data; list it in one place only.")
        return sources.setdefault(src.key, src)

    fraction = 0.0 if cfg.eval.data else cfg.eval.fraction
    plans = []
    for stage in cfg.stages:
        mixture = tuple((open_source(s.data, fraction).key, float(s.weight)) for s in stage.mixture)
        plans.append(StagePlan(stage.name, int(stage.steps), mixture))
    heldout = [(s.key, i) for s in list(sources.values()) for i in s.heldout_items]
    for path in cfg.eval.data:
        src = DataSource(path, engine.layout, fingerprint, heldout_fraction=0.0)
        sources.setdefault(src.key, src)
        heldout += [(src.key, i) for i in range(len(src))]
    return sources, plans, heldout[: cfg.eval.max_items]


def add_new_speakers(engine: TTSEngine, sources: dict[str, DataSource]) -> list[str]:
    """Voices in the data that the checkpoint lacks (prepare --new-speakers) join its config."""
    new = sorted(set().union(*(s.speakers for s in sources.values())) - set(engine.config.speakers))
    engine.config.speakers = tuple(engine.config.speakers) + tuple(new)
    return new


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@torch.no_grad()
def evaluate(objective, builder: ExampleBuilder, items: list, accelerator, micro_batch: int,
             stop_lambda: float, pad_id: int) -> dict[str, float]:
    """Held-out loss on `items` (split across processes), normalised like the training loss."""
    objective.eval()
    rank, world = accelerator.process_index, accelerator.num_processes
    mine = items[rank::world]
    sums = torch.zeros(2, device=accelerator.device)
    for lo in range(0, len(mine), micro_batch):
        batch = to_device(collate([builder(k, i) for k, i in mine[lo : lo + micro_batch]], pad_id),
                          accelerator.device)
        out = objective(**batch)
        sums += torch.stack([out["acoustic_sum"].float(), out["stop_sum"].float()])
    sums = accelerator.reduce(sums, "sum")
    n_targets, n_bounds = builder.targets(items)
    objective.train()
    acoustic, stop = float(sums[0]) / n_targets, float(sums[1]) / n_bounds
    return {"heldout_loss": acoustic + stop_lambda * stop, "heldout_acoustic": acoustic, "heldout_stop": stop}


def train(cfg: SFTConfig) -> Path:
    """Run (or resume) training; returns OUT, which then holds the final published checkpoint."""
    from accelerate import Accelerator

    mp = cfg.mixed_precision
    if mp == "auto":
        mp = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    accelerator = Accelerator(mixed_precision=mp)
    world, rank = accelerator.num_processes, accelerator.process_index
    cfg.check(world)
    if accelerator.is_main_process:
        print(f"training.sft: {world} process(es), {accelerator.distributed_type.value}, {accelerator.device}"
              f"{', deterministic kernels' if cfg.deterministic else ''}", flush=True)
    out = Path(cfg.out_dir)
    set_seed(cfg.seed, deterministic=cfg.deterministic)
    engine = TTSEngine.from_pretrained(cfg.model, device="cpu", dtype=torch.float32)
    sources, plans, heldout = build_sources(cfg, engine)
    new_voices = add_new_speakers(engine, sources)
    sampler = MixtureSampler(plans, {k: s.train_items for k, s in sources.items()}, seed=cfg.seed,
                             order_keys={k: s.fingerprint for k, s in sources.items()})
    builder = ExampleBuilder(engine, sources)
    model = engine.model.train()
    if cfg.activation_checkpointing:
        model.activation_checkpointing_enable()
    objective = SFTObjective(model, engine.layout, cfg.loss.head, cfg.loss.ce_chunk_tokens)
    optimizer = torch.optim.AdamW(optimizer_groups(model, cfg.optim.weight_decay), lr=cfg.optim.lr,
                                  betas=tuple(cfg.optim.betas), eps=cfg.optim.eps)
    total = sampler.total_steps
    decay = cfg.optim.decay_steps or round(cfg.optim.decay_fraction * total)
    decay = min(decay, total)
    warmup = min(cfg.optim.warmup_steps, total - decay)
    # Not passed to accelerator.prepare: accelerate would step it once per process.
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, wsd_lambda(warmup, total - warmup - decay, decay, cfg.optim.min_lr_ratio))
    objective, optimizer = accelerator.prepare(objective, optimizer)
    unwrapped = accelerator.unwrap_model(objective).model
    logger = MetricsLogger(out, is_main=accelerator.is_main_process)
    start = 0
    ckpt = latest_checkpoint(out) if cfg.resume else None
    if ckpt is not None:
        extra = load_training_state(ckpt, optimizer, scheduler, model=unwrapped)
        sampler.load_state_dict(extra["data"])
        start = int(extra["step"])
        logger.log(start, {"event": f"resumed from {ckpt.name}"})
    if accelerator.is_main_process:
        save_config(cfg, out / "train_config.json")
        if new_voices and start == 0:
            print(f"new voices added to the config: {', '.join(new_voices)}")
    save_dtype = SAVE_DTYPES[cfg.save_dtype]

    def save(step: int) -> Path | None:
        state = accelerator.get_state_dict(objective)  # every rank: FSDP/DeepSpeed gather here
        path = None
        if accelerator.is_main_process:
            state = {k.removeprefix("model."): v for k, v in state.items()}
            path = save_training_checkpoint(out, step, unwrapped, engine.config, engine.checkpoint_dir, optimizer,
                                            scheduler, cfg, {"data": sampler.state_dict()},
                                            keep_last=cfg.keep_last, state_dict=state, dtype=save_dtype)
        accelerator.wait_for_everyone()
        return path

    lam = cfg.loss.stop_lambda
    last_path = ckpt
    for step in range(start, total):
        t0 = time.perf_counter()
        batch = sampler.global_batch(step, cfg.batch.global_batch)
        n_targets, n_bounds = builder.targets(batch)
        micro = rank_micro_batches(batch, sources, rank, world, cfg.batch.micro_batch)
        local = torch.zeros(3, device=accelerator.device)  # acoustic sum, stop sum, tokens
        for k, pairs in enumerate(micro):
            tensors = to_device(collate([builder(key, i) for key, i in pairs], engine.pad_id), accelerator.device)
            sync = contextlib.nullcontext() if k == len(micro) - 1 else accelerator.no_sync(objective)
            with sync:
                sums = objective(**tensors)
                loss = (sums["acoustic_sum"] / n_targets + lam * sums["stop_sum"] / n_bounds) * world
                accelerator.backward(loss)
            local += torch.stack([sums["acoustic_sum"].detach().float(), sums["stop_sum"].detach().float(),
                                  tensors["attention_mask"].sum().float()])
        grad_norm = accelerator.clip_grad_norm_(objective.parameters(), cfg.optim.grad_clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        totals = accelerator.reduce(local, "sum")
        elapsed = time.perf_counter() - t0
        acoustic, stop = float(totals[0]) / n_targets, float(totals[1]) / n_bounds
        metrics = {"loss": acoustic + lam * stop, "acoustic_loss": acoustic, "stop_loss": stop, "lr": lr,
                   "grad_norm": float(grad_norm), "tokens_per_s": float(totals[2]) / elapsed,
                   "stage": sampler.stage_at(step)[1].name}
        done = step + 1
        if heldout and ((cfg.eval.every and done % cfg.eval.every == 0) or done == total):
            metrics.update(evaluate(objective, builder, heldout, accelerator, cfg.batch.micro_batch, lam,
                                    engine.pad_id))
        logger.log(done, metrics)
        if done % cfg.save_every == 0 or done == total:
            last_path = save(done)
    if accelerator.is_main_process and last_path is not None:
        publish_checkpoint(last_path, out)
    accelerator.wait_for_everyone()
    logger.close()
    return out


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="JSON or TOML file for SFTConfig (see training/configs/)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set optim.lr=3e-5 (repeatable)")
    parser.add_argument("--out", help="output folder (overrides out_dir)")
    parser.add_argument("--no-resume", action="store_true", help="ignore checkpoints already in OUT")
    parser.add_argument("--smoke", action="store_true",
                        help="CPU end-to-end check: espeak-ng speech, tiny model, prepare, train (needs --out)")
    args = parser.parse_args(argv)
    if args.smoke:
        if not args.out:
            parser.error("--smoke needs --out DIR")
        from training.smoke import run_smoke

        return run_smoke(Path(args.out), overrides=args.set)
    if not args.config:
        parser.error("pass --config CONFIG (or --smoke --out DIR)")
    try:
        cfg = load_config(SFTConfig, args.config, args.set)
        if args.out:
            cfg.out_dir = args.out
        if args.no_resume:
            cfg.resume = False
        return train(cfg)
    except (ConfigError, DataError, CheckpointError) as exc:
        raise SystemExit(f"error: {exc}") from exc


if __name__ == "__main__":
    main()
