"""GRPO post-training with per-codebook reward routing (docs/ARCHITECTURE.md §7).

    python -m training.grpo --config training/configs/grpo_example.toml --out runs/grpo1
    python -m training.grpo --config ... --out runs/grpo1 --resume     # continue runs/grpo1 with changed settings
    python -m training.grpo --config ... --set loss.routing=flat --set optim.lr=5e-7
    python -m training.grpo --smoke --out /tmp/grpo-smoke             # tiny model on CPU, about a minute
    accelerate launch --num_processes 8 -m training.grpo --config ... --out runs/grpo1
    .venv/bin/accelerate launch --num_processes 8 -m training.grpo --config ... --set rollout.backend=vllm
    torchrun --standalone --nproc_per_node 2 -m training.grpo --smoke --out /tmp/ddp   # CPU: two gloo ranks

One step (a "rollout batch"):
1. Draw `prompts_per_step` prompts (domain and language weights, seeded by (seed, step));
   each process takes its shard (prompt k goes to process k mod world).
2. Rollouts: G = `num_generations` samples per prompt through the `rollout.backend` source
   (`TTSEngine.generate_batch`, or a colocated vLLM engine; sample j of a prompt uses seed + j),
   with `stop_mode="sample"` by default: the stop head then draws Bernoulli decisions, so they
   are policy actions with a log-prob gradient; the inference rule ("threshold") is
   deterministic and gives the duration stream nothing to push on.
3. Rewards: every stream's function (training.grpo.rewards) on the rows; None = abstain.
4. Advantages per stream and group, routed to actions by W (training.grpo.loss): by
   default content -> codebook-0 tokens, duration -> stop-head decisions and `</audio>`,
   speaker and quality -> codebooks 1..Q-1 (`acoustic`); each stream's `weight` scales its row.
5. Update: teacher-forced log-probs over the audio-only head (training.grpo.policy), the
   clipped objective with truncated importance weights (training.grpo.mismatch) normalised by
   the batch's total actions (tokens + stop decisions, over all processes), `num_iterations`
   optimiser steps (1 by default), then `sync_weights` (vLLM: the changed weights pushed).
6. Log one line (stdout + OUT/metrics.jsonl, TRL names where they exist) and checkpoint
   every `save_every` steps to OUT/checkpoints/step_XXXXXXXX (published format + state);
   the loop, checkpoints, resume policy and command line are training.trainer's, as in SFT.
Steps 1-3, the policy, LoRA and the weights' checkpoint state are training.grpo.rollout's
`RolloutTrainer`, which training.dpo's trainer shares.

Scale. Under `accelerate launch` (DDP) each process samples and scores its own shard;
groups never straddle processes, so advantages are local; the action count is summed over
processes and every local loss is scaled by the world size, so DDP's gradient average gives
exactly the global objective (the two-process CPU run above reproduces the one-process
numbers; tests/training/grpo/test_trainer.py checks it). Rewards and lengths are gathered for
logging, so metrics.jsonl describes the whole batch. With `rollout.backend = "engine"` the
engine samples with the live weights of its process; under FSDP2 (`distributed = "fsdp2"`)
those are sharded, so a copy trains sharded while the engine's full replica samples, gathered
from the shards once after every optimiser step (training.grpo.rollout). With
`rollout.backend = "vllm"` (training.grpo.vllm_rollouts, TRL's colocate mode) each process owns
a vLLM engine that samples its shard, and after every optimiser step `sync_weights` pushes the
changed (LoRA: merged) weights into it, logged as `sync_seconds` and `sync_megabytes`.

Mismatch. The sampler's log-probs do not enter the loss as log pi: the trainer rescores every
action with its own weights (log pi_old, for the gradient) and weights each action's clipped
term by min(pi_old / pi_sampler, `rollout.importance_sampling_cap`) (training.grpo.mismatch;
docs/ARCHITECTURE.md §7). Every step logs TRL's `sampling/sampling_logp_difference/{mean,max}`
and `sampling/importance_sampling_ratio/{min,mean,max}` over the actions whose sampler
log-prob is known, so numerics that drift apart, or a sync that did not happen, show. Another
server (SGLang, TensorRT-LLM) plugs in the same way behind `RolloutSource`: it must return
per-row `params`, the stop decisions (the stop head at frame boundaries with the audio-only
head of rumik_app.model.lm.AudioHead; without it, an all-False stop_mask) and codes parsed
with `TokenLayout.parse`, and take the weights in `sync_weights`.

Reproducibility: prompts and sampling seeds are functions of (seed, step), so two runs with
one config match bit for bit on CPU with the engine backend; on CUDA set `deterministic = true` for torch's
deterministic kernels (see training.sft.trainer's docstring for what that does and does not cover).
With vLLM rollouts, see docs/ARCHITECTURE.md §7 for what repeats.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rumik_app.decode.rollouts import Rollouts
from rumik_app.decode.sampling import FINISH_END_TOKEN, FINISH_MAX_TOKENS, FINISH_STOP_HEAD
from rumik_app.request import SynthesisRequest
from training.common import read_metrics
from training.grpo.config import SMOKE_CONFIG, GRPOConfig
from training.grpo.loss import (
    action_columns,
    clipped_objective,
    concat_actions,
    group_advantages,
    nan_stats,
    route_advantages,
    routing_matrix,
)
from training.grpo.mismatch import (
    empty_sums,
    merge_sums,
    mismatch_metrics,
    mismatch_sums,
    reduce_sums,
    sampler_logps,
    truncated_is_weights,
)
from training.grpo.policy import PolicyScorer, ScoringBatch
from training.grpo.rollout import RolloutSource, RolloutTrainer

SUMMARY_WINDOW = 5  # smoke summary: mean reward of the first and of the last this many steps
# The smoke passes when the mean reward of its last SUMMARY_WINDOW steps is at least this much
# above the first ones' (its synthetic reward rises from ~0.6 to ~1.0 on CPU).
SMOKE_MIN_REWARD_RISE = 0.1


@dataclass
class RolloutBatch:
    """One step's local rollouts with rewards and routed advantages.

    rollouts: B rows; requests: the request of each row; columns: per-row reward columns;
    groups: [B] global prompt index; rewards: [B, S] (NaN = abstained); advantages: [B, S];
    token_adv: [B, N]; stop_adv: [B, F].
    """

    rollouts: Rollouts
    requests: list[SynthesisRequest]
    columns: dict[str, Any]
    groups: torch.Tensor
    rewards: torch.Tensor
    advantages: torch.Tensor
    token_adv: torch.Tensor
    stop_adv: torch.Tensor


class GRPOTrainer(RolloutTrainer):
    """Holds the engine, policy, reference, optimiser and rewards of one run; `train()` runs it
    (training.trainer). config_dir: where relative prompt-set paths are looked up first."""

    name = "training.grpo"
    config_class = GRPOConfig

    def __init__(self, cfg: GRPOConfig, accelerator=None, config_dir: Path | None = None,
                 source: RolloutSource | None = None):
        super().__init__(cfg, accelerator, config_dir, source)
        kinds, overrides, weights = cfg.reward_routing()
        self.W = routing_matrix(kinds, overrides, self.layout.num_quantizers, weights)
        self.stream_weights = torch.tensor(weights, dtype=torch.float32)

    def make_reference(self) -> PolicyScorer | None:
        """A frozen copy of the starting weights when the KL is used or logged (LoRA: none, the
        adapter-disabled model is the reference)."""
        if self.peft is None and (self.cfg.loss.beta > 0 or self.cfg.loss.kl_monitor):
            frozen = copy.deepcopy(self.model).requires_grad_(False).eval()
            return PolicyScorer(frozen, self.layout, self.cfg.rollout.restrict_phase)
        return None

    @property
    def total_steps(self) -> int:
        return self.cfg.steps

    def step(self, step: int) -> dict[str, Any]:
        """Rollout batch `step` (1-based): sample, score, `num_iterations` updates; its log line."""
        t0 = time.perf_counter()
        rb = self.make_batch(step)
        t1 = time.perf_counter()
        stats = self.update(rb)
        t2 = time.perf_counter()
        return self.metrics(rb, stats, {"rollout_s": round(t1 - t0, 3), "update_s": round(t2 - t1, 3)})

    # ------------------------------------------------------------------ rollouts and rewards
    def make_batch(self, step: int) -> RolloutBatch:
        """Sample this process's shard of prompts, score the rollouts, route the advantages."""
        cfg = self.cfg
        scored = self.roll_out(self.sampler.sample(step, cfg.rollout.prompts_per_step, cfg.rollout.num_generations))
        r = scored.rollouts
        adv = group_advantages(scored.rewards, scored.groups, cfg.loss.adv_eps, cfg.loss.scale_rewards)
        cols = action_columns(r.token_ids, r.token_mask, self.layout, r.restrict_phase)
        token_adv, stop_adv = route_advantages(adv, self.W, cols, r.stop_mask, flat=cfg.loss.routing == "flat",
                                               stream_weights=self.stream_weights)
        return RolloutBatch(r, scored.requests, scored.columns, scored.groups, scored.rewards, adv, token_adv,
                            stop_adv)

    # ------------------------------------------------------------------ update
    def _reference_logps(self, batch: ScoringBatch) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.peft is not None:
            if not (self.cfg.loss.beta > 0 or self.cfg.loss.kl_monitor):
                return None
            with self.peft.disable_adapter():
                return self.acc.unwrap_model(self.scorer)(batch)
        return self.reference(batch) if self.reference is not None else None

    def _importance_weights(self, old: torch.Tensor, r: Rollouts, rows: list[int], b: ScoringBatch,
                            stats: dict) -> torch.Tensor:
        """Truncated importance weights [b, n + f] of one micro-batch's actions (training.grpo.mismatch),
        pooling the step's mismatch sums into `stats["mismatch"]`."""
        sampled, known = sampler_logps(r, rows, b.tokens.shape[1], b.stop_mask.shape[1])
        sampled, known = sampled.to(old.device), known.to(old.device)
        w = truncated_is_weights(old, sampled, known, self.cfg.rollout.importance_sampling_cap)
        stats["mismatch"] = merge_sums(stats["mismatch"], mismatch_sums(old, sampled, known, w))
        return w

    def update(self, rb: RolloutBatch) -> dict[str, Any]:
        """`num_iterations` optimiser steps on one rollout batch, then the weight sync (vLLM reads
        them at the next rollouts); returns summed statistics, `mismatch` sums and the sync's numbers."""
        cfg, acc, r = self.cfg, self.acc, rb.rollouts
        dev = acc.device
        q = self.layout.num_quantizers
        local_actions = float(r.token_mask.sum() + r.stop_mask.sum())
        total = float(acc.reduce(torch.tensor([local_actions], device=dev), "sum").item())
        micro = [list(range(lo, min(lo + cfg.micro_batch_size, len(r))))
                 for lo in range(0, len(r), cfg.micro_batch_size)]
        batches = [ScoringBatch.from_rollouts(r, q, rows, self.engine.pad_id).to(dev) for rows in micro]
        advs = [concat_actions(rb.token_adv[rows, : b.tokens.shape[1]], rb.stop_adv[rows, : b.stop_mask.shape[1]])
                .to(dev) for rows, b in zip(micro, batches, strict=True)]
        unwrapped = acc.unwrap_model(self.scorer)
        with torch.no_grad():
            refs = [self._reference_logps(b) for b in batches]
            olds = [unwrapped(b) for b in batches] if cfg.loss.num_iterations > 1 else None
        eps_high = cfg.loss.epsilon_high if cfg.loss.epsilon_high is not None else cfg.loss.epsilon
        keys = ("loss", "count", "kl_sum", "low_clip_sum", "high_clip_sum", "region_clip_sum", "grad_norm")
        stats: dict[str, Any] = dict.fromkeys(keys, 0.0)
        stats["learning_rate"], stats["mismatch"] = self.scheduler.get_last_lr()[0], empty_sums()
        weights: list[torch.Tensor | None] = [None] * len(batches)  # per micro-batch, from the old policy
        for _ in range(cfg.loss.num_iterations):
            if cfg.activation_checkpointing:
                self.policy.train()
            for k, b in enumerate(batches):
                with self.no_sync(self.scorer, enabled=k < len(batches) - 1):
                    tok, stop = self.scorer(b)
                    logp = concat_actions(tok, stop)
                    old = concat_actions(*olds[k]) if olds is not None else logp.detach()
                    if weights[k] is None:
                        weights[k] = self._importance_weights(old, r, micro[k], b, stats)
                    ref = concat_actions(*refs[k]) if refs[k] is not None else None
                    mask = concat_actions(b.token_mask, b.stop_mask).bool()
                    # w * min(rho A, clip(rho) A) = min(rho wA, clip(rho) wA) for w > 0 (training.grpo.mismatch)
                    out = clipped_objective(logp, old, ref, advs[k] * weights[k], mask, total, cfg.loss.epsilon,
                                            eps_high, cfg.loss.beta)
                    acc.backward(out.loss * acc.num_processes)
                stats["loss"] += float(out.loss.detach()) / cfg.loss.num_iterations
                for key in ("count", "kl_sum", "low_clip_sum", "high_clip_sum", "region_clip_sum"):
                    stats[key] += getattr(out, key)
            stats["grad_norm"] += self.clip_gradients(self.params, cfg.optim.max_grad_norm) / cfg.loss.num_iterations
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.policy.eval()
        stats.update(self.sync_rollout_weights())  # vLLM or the FSDP2 replica: what the steps changed
        return stats

    # ------------------------------------------------------------------ logging
    def metrics(self, rb: RolloutBatch, stats: dict[str, Any], timings: dict[str, float]) -> dict[str, Any]:
        """One log line: gathered over processes, TRL's metric names where they exist."""
        acc, r, dev = self.acc, rb.rollouts, self.acc.device
        rewards = acc.gather(rb.rewards.to(dev)).cpu()
        groups = acc.gather(rb.groups.to(dev)).cpu()
        lengths = acc.gather(r.lengths.to(dev)).cpu().double()
        seconds = acc.gather(r.num_frames.to(dev)).cpu().double() / self.layout.frame_rate_hz
        finish = torch.tensor([[f == FINISH_MAX_TOKENS, f == FINISH_STOP_HEAD, f == FINISH_END_TOKEN]
                               for f in r.finish_reasons], dtype=torch.float64)
        finish = acc.gather(finish.to(dev)).cpu()
        sums = torch.tensor([stats[k] for k in ("loss", "count", "kl_sum", "low_clip_sum", "high_clip_sum",
                                                "region_clip_sum")], dtype=torch.float64, device=dev)
        loss, count, kl, low, high, region = acc.reduce(sums, "sum").cpu().tolist()
        mismatch = reduce_sums(acc, stats["mismatch"])
        sync_seconds, sync_mb = acc.reduce(torch.tensor([stats.get("sync_seconds", 0.0), stats.get(
            "sync_megabytes", 0.0)], dtype=torch.float64, device=dev), "max").cpu().tolist()
        local_clip = torch.tensor([[stats["low_clip_sum"], stats["high_clip_sum"]]], dtype=torch.float64,
                                  device=dev) / max(stats["count"], 1.0)
        local_clip = acc.gather(local_clip).cpu()
        total = torch.nansum(rewards, dim=1)
        group_std = [float(total[groups == g].std()) if int((groups == g).sum()) > 1 else 0.0
                     for g in torch.unique(groups)]
        out: dict[str, Any] = {"reward": float(total.mean()), "reward_std": sum(group_std) / len(group_std),
                               "frac_reward_zero_std": sum(s == 0.0 for s in group_std) / len(group_std)}
        for s, spec in enumerate(self.cfg.rewards):
            mean, std = nan_stats(rewards[:, s])
            out[f"rewards/{spec.name}/mean"], out[f"rewards/{spec.name}/std"] = mean, std
            out[f"rewards/{spec.name}/abstained"] = float(torch.isnan(rewards[:, s]).double().mean())
        out.update({
            "kl": kl / max(count, 1.0),
            "clip_ratio/low_mean": low / max(count, 1.0), "clip_ratio/low_min": float(local_clip[:, 0].min()),
            "clip_ratio/high_mean": high / max(count, 1.0), "clip_ratio/high_max": float(local_clip[:, 1].max()),
            "clip_ratio/region_mean": region / max(count, 1.0),
            "completions/mean_length": float(lengths.mean()), "completions/min_length": float(lengths.min()),
            "completions/max_length": float(lengths.max()), "completions/clipped_ratio": float(finish[:, 0].mean()),
            "completions/mean_seconds": float(seconds.mean()),
            "completions/stop_head_ratio": float(finish[:, 1].mean()),
            "completions/end_token_ratio": float(finish[:, 2].mean()),
            **mismatch_metrics(mismatch), "sync_seconds": sync_seconds, "sync_megabytes": sync_mb,
            "loss": loss, "learning_rate": stats["learning_rate"], "grad_norm": stats["grad_norm"],
            "num_actions": count, **{f"time/{k}": v for k, v in timings.items()},
        })
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}

    # ------------------------------------------------------------------ smoke run
    @classmethod
    def smoke_config(cls, out: Path | None) -> Path:
        return SMOKE_CONFIG

    @classmethod
    def smoke_report(cls, out: Path, seconds: dict[str, float]) -> dict:
        """Reward at the start and at the end of the smoke run (it rises on the synthetic reward)."""
        rewards = [r["reward"] for r in read_metrics(out) if "reward" in r]
        return {"first5_reward": round(sum(rewards[:SUMMARY_WINDOW]) / len(rewards[:SUMMARY_WINDOW]), 4),
                "last5_reward": round(sum(rewards[-SUMMARY_WINDOW:]) / len(rewards[-SUMMARY_WINDOW:]), 4),
                "steps": len(rewards), **{k: round(v, 1) for k, v in seconds.items()}}


    @classmethod
    def smoke_verdict(cls, summary: dict) -> tuple[bool, str]:
        first, last = summary["first5_reward"], summary["last5_reward"]
        return last - first >= SMOKE_MIN_REWARD_RISE, (
            f"reward went {first:.3f} -> {last:.3f} (mean of the first vs the last {SUMMARY_WINDOW} steps: "
            f"{last - first:+.3f}; needs a rise of at least {SMOKE_MIN_REWARD_RISE})")

    # ------------------------------------------------------------------ what the run prints (training.trainer)
    def progress_fields(self, metrics: dict[str, Any]) -> list[str]:
        seconds = sum(v for k, v in metrics.items() if k.startswith("time/"))
        rows = self.cfg.rollout.prompts_per_step * self.cfg.rollout.num_generations
        tokens = metrics["completions/mean_length"] * rows
        return [f"reward {metrics['reward']:.3f} ±{metrics['reward_std']:.3f}", f"kl {metrics['kl']:.2e}",
                f"loss {metrics['loss']:.3g}", f"lr {metrics['learning_rate']:.2e}",
                f"len {metrics['completions/mean_seconds']:.2f} s", f"{tokens / max(seconds, 1e-9):,.0f} tok/s"]

    headline_metric, headline_window, headline_digits = "reward", SUMMARY_WINDOW, 3

