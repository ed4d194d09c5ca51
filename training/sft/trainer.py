"""SFT / continued pre-training of rumik-oss-1 on prepared Mimi codes (docs/ARCHITECTURE.md §6).

    python -m training.sft --config training/configs/pretrain_curriculum.toml
    python -m training.sft --config C.toml --set optim.lr=3e-5 --set batch.micro_batch=2 --out runs/x
    python -m training.sft --config C.toml --out runs/x --resume   # continue runs/x with changed settings
    accelerate launch --num_processes 8 -m training.sft --config C.toml     # DDP
    accelerate launch --num_processes 8 -m training.sft --config C.toml --set distributed=fsdp2  # FSDP2
    python -m training.sft --smoke --out /tmp/smoke      # CPU, a minute: espeak-ng data, tiny model

Loss: cross-entropy on unit tokens and `</audio>` only (normalised by the number of such
targets in the global batch) + stop_lambda x BCE of the stop head at every frame boundary
(normalised by the number of boundaries); see training.sft.sequences and training.sft.objective.
Schedule: warmup-stable-decay over the sum of the stages' steps, AdamW, gradient
accumulation (global_batch = micro_batch x accumulation x processes), bf16 autocast on GPU.
Curriculum: `stages`, each a mixture of prepared data folders with weights and a step count
(replay = an earlier stage's folder with a small weight). Every `save_every` steps
OUT/checkpoints/step_N is written in the published format plus optimizer/scheduler/RNG/data
state; a rerun continues the same data order (resume policy: training.trainer). At the end
the final weights are also published at OUT itself, so `TTSEngine.from_pretrained(OUT)`
loads them. One line per step goes to stdout and OUT/metrics.jsonl.

Multi-process: every process draws the same global batch and trains on its own slice;
checkpoints are written by the main process. `distributed = "ddp"` (default): the objective
is wrapped in DDP by `accelerator.prepare` and the saved optimizer state is the main process's.
`distributed = "fsdp2"` (training.fsdp): the objective is sharded per decoder layer with
`fully_shard` (bf16 params / fp32 reduce when mixed precision is bf16), the published weights
are gathered to the main process, and the model and AdamW state are saved as DCP shards
(CKPT/dcp/) that resume on the same or another number of processes. Both are tested against
one process with two CPU processes. accelerate's own FSDP/DeepSpeed settings are not used.

Reproducibility: a run is a function of its config and `seed`, not of paths. The batch order
is (seed, content of each prepared folder's index.jsonl; training.sft.data), the weights
start from the checkpoint, and `set_seed` runs before anything draws. On CPU two runs with
one config and seed match bit for bit (same machine, torch build and thread count). On CUDA
they draw the same batches but some kernels are not bitwise repeatable, so losses drift
apart by float rounding; `deterministic = true` (--set deterministic=true) turns on torch's
deterministic algorithms (training.common.set_seed) for exact repeats on the same GPU model,
software and process count, and an op without a deterministic kernel then raises.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rumik_app.engine.local import TTSEngine
from rumik_app.request import SynthesisRequest
from training import fsdp
from training.common import build_optimizer, enable_activation_checkpointing, read_metrics
from training.prepare import codec_fingerprint
from training.sft import smoke
from training.sft.config import SFTConfig
from training.sft.data import DataError, DataSource, MixtureSampler, StagePlan, rank_micro_batches
from training.sft.objective import SFTObjective
from training.sft.sequences import TrainingExample, acoustic_targets, build_sequence, collate
from training.trainer import Trainer

SUMMARY_WINDOW = 10  # smoke summary: mean loss of the first and of the last this many steps
SMOKE_SYNTH_TOKENS = 400
# The smoke passes when the mean loss of its last SUMMARY_WINDOW steps is below this share of
# the first ones' (it memorises a tiny set: ~0.2 on CPU) and OUT speaks in the new voice.
SMOKE_MAX_LOSS_RATIO = 0.8


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


class SFTTrainer(Trainer):
    """One SFT run: engine, data, objective, optimiser; `train()` runs it (training.trainer)."""

    name = "training.sft"
    config_class = SFTConfig

    def __init__(self, cfg: SFTConfig, accelerator=None, config_dir: Path | None = None):
        super().__init__(cfg, accelerator, config_dir)
        acc = self.acc
        self.engine = TTSEngine.from_pretrained(cfg.model, device="cpu", dtype=torch.float32)
        self.sources, plans, self.heldout = build_sources(cfg, self.engine)
        new_voices = add_new_speakers(self.engine, self.sources)
        if new_voices and acc.is_main_process:
            print(f"new voices added to the config: {', '.join(new_voices)}", flush=True)
        self.sampler = MixtureSampler(plans, {k: s.train_items for k, s in self.sources.items()}, seed=cfg.seed,
                                      order_keys={k: s.fingerprint for k, s in self.sources.items()})
        self.builder = ExampleBuilder(self.engine, self.sources)
        model = self.engine.model.train()
        if cfg.activation_checkpointing:
            enable_activation_checkpointing(model)
        objective = SFTObjective(model, self.engine.layout, cfg.loss.head, cfg.loss.ce_chunk_tokens)
        self.sharded = objective  # one process resumes an FSDP2 run's DCP checkpoint through it
        if self.fsdp:  # shard first: the optimiser must see the sharded parameters
            self.objective = self.shard_model(objective.to(acc.device), model.model.layers, acc.mixed_precision)
            self.optimizer, self.scheduler = build_optimizer(model, cfg.optim, self.total_steps)
            self.model, self.master = model, None  # the full weights are gathered at save time
            return
        optimizer, self.scheduler = build_optimizer(model, cfg.optim, self.total_steps)
        self.objective, self.optimizer = acc.prepare(objective, optimizer)
        self.model = self.master = acc.unwrap_model(self.objective).model

    @staticmethod
    def accelerator_kwargs(cfg: SFTConfig) -> dict[str, Any]:
        mp = cfg.mixed_precision
        if mp == "auto":
            mp = "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
        return {"mixed_precision": mp}

    @property
    def total_steps(self) -> int:
        return self.sampler.total_steps

    def step(self, step: int) -> dict[str, Any]:
        """Optimizer step `step` (1-based) over one global batch; returns its metrics line."""
        acc, cfg, lam = self.acc, self.cfg, self.cfg.loss.stop_lambda
        world = acc.num_processes
        t0 = time.perf_counter()
        batch = self.sampler.global_batch(step - 1, cfg.batch.global_batch)
        n_targets, n_bounds = self.builder.targets(batch)
        micro = rank_micro_batches(batch, self.sources, acc.process_index, world, cfg.batch.micro_batch)
        local = torch.zeros(3, device=acc.device)  # acoustic sum, stop sum, tokens
        for k, pairs in enumerate(micro):
            tensors = to_device(collate([self.builder(key, i) for key, i in pairs], self.engine.pad_id), acc.device)
            with self.no_sync(self.objective, enabled=k < len(micro) - 1):
                sums = self.objective(**tensors)
                loss = (sums["acoustic_sum"] / n_targets + lam * sums["stop_sum"] / n_bounds) * world
                acc.backward(loss)
            local += torch.stack([sums["acoustic_sum"].detach().float(), sums["stop_sum"].detach().float(),
                                  tensors["attention_mask"].sum().float()])
        grad_norm = self.clip_gradients(self.objective.parameters(), cfg.optim.max_grad_norm)
        learning_rate = self.scheduler.get_last_lr()[0]
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        totals = acc.reduce(local, "sum")
        elapsed = time.perf_counter() - t0
        acoustic, stop = float(totals[0]) / n_targets, float(totals[1]) / n_bounds
        metrics = {"loss": acoustic + lam * stop, "acoustic_loss": acoustic, "stop_loss": stop,
                   "learning_rate": learning_rate, "grad_norm": grad_norm,
                   "tokens_per_s": float(totals[2]) / elapsed, "stage": self.sampler.stage_at(step - 1)[1].name}
        if self.heldout and ((cfg.eval.every and step % cfg.eval.every == 0) or step == self.total_steps):
            metrics.update(self.evaluate())
        return metrics

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out loss (split across processes), normalised like the training loss."""
        acc, items, micro_batch = self.acc, self.heldout, self.cfg.batch.micro_batch
        self.objective.eval()
        mine = items[acc.process_index :: acc.num_processes]
        sums = torch.zeros(2, device=acc.device)
        # FSDP2 all-gathers in every forward: every rank runs as many as the busiest one (a rank
        # with fewer items repeats a batch of the first item and drops its sums).
        busiest = (len(items) + acc.num_processes - 1) // acc.num_processes if self.fsdp else len(mine)
        for lo in range(0, busiest, micro_batch):
            part = mine[lo : lo + micro_batch]
            batch = to_device(collate([self.builder(k, i) for k, i in part or items[:1]], self.engine.pad_id),
                              acc.device)
            out = self.objective(**batch)
            if part:
                sums += torch.stack([out["acoustic_sum"].float(), out["stop_sum"].float()])
        sums = acc.reduce(sums, "sum")
        n_targets, n_bounds = self.builder.targets(items)
        self.objective.train()
        acoustic, stop = float(sums[0]) / n_targets, float(sums[1]) / n_bounds
        return {"heldout_loss": acoustic + self.cfg.loss.stop_lambda * stop, "heldout_acoustic": acoustic,
                "heldout_stop": stop}

    def checkpoint_state(self) -> tuple[dict | None, dict]:
        if self.fsdp:  # every rank: the full weights gathered to the main process
            state = fsdp.full_state_dict(self.objective)
        else:
            state = self.acc.get_state_dict(self.objective)  # every rank: DeepSpeed gathers here
        if self.acc.is_main_process:
            state = {k.removeprefix("model."): v for k, v in state.items()}
        return state, {"data": self.sampler.state_dict()}

    def restore(self, extra: dict) -> None:
        self.sampler.load_state_dict(extra["data"])

    # ------------------------------------------------------------------ smoke run (training.sft.smoke)
    @classmethod
    def smoke_config(cls, out: Path | None) -> Path:
        return smoke.prepare_smoke_run(out or smoke.DEFAULT_OUT)

    @classmethod
    def smoke_report(cls, out: Path, seconds: dict[str, float]) -> dict:
        """Loss fall and a sentence in the new voice from OUT (the published checkpoint)."""
        rows = [r for r in read_metrics(out) if "loss" in r]
        first = np.mean([r["loss"] for r in rows[:SUMMARY_WINDOW]])
        last = np.mean([r["loss"] for r in rows[-SUMMARY_WINDOW:]])
        engine = TTSEngine.from_pretrained(str(out), device="cpu")
        audio = engine.synthesize(SynthesisRequest(smoke.SYNTH_TEXT, voice=smoke.NEW_VOICE, seed=0,
                                                   max_new_tokens=SMOKE_SYNTH_TOKENS))
        return {"first10_loss": round(float(first), 4), "last10_loss": round(float(last), 4),
                "ratio": round(float(last / first), 4),
                "tokens_per_s": round(float(np.median([r["tokens_per_s"] for r in rows])), 1),
                "steps": len(rows), **{k: round(v, 1) for k, v in seconds.items()},
                "synth_seconds": round(audio.duration, 2), "synth_finish": audio.info.get("finish_reasons")}


    @classmethod
    def smoke_verdict(cls, summary: dict) -> tuple[bool, str]:
        ratio, seconds = summary["ratio"], summary["synth_seconds"]
        passed = ratio < SMOKE_MAX_LOSS_RATIO and seconds > 0
        return passed, (f"loss fell to {ratio:.2f}x its start (mean of the last vs the first {SUMMARY_WINDOW} steps; "
                        f"needs < {SMOKE_MAX_LOSS_RATIO}) and OUT synthesised {seconds:.2f} s in the new voice "
                        f"{smoke.NEW_VOICE} (needs > 0)")

    # ------------------------------------------------------------------ what the run prints (training.trainer)
    def progress_fields(self, metrics: dict[str, Any]) -> list[str]:
        fields = [f"loss {metrics['loss']:.4f}"]
        if "heldout_loss" in metrics:
            fields.append(f"held-out {metrics['heldout_loss']:.4f}")
        return fields + [f"lr {metrics['learning_rate']:.2e}", f"grad {metrics['grad_norm']:.3g}",
                         f"{metrics['tokens_per_s']:,.0f} tok/s", str(metrics["stage"])]

    headline_metric, headline_window, headline_digits = "loss", SUMMARY_WINDOW, 4

