"""Phased DPO: GRPO's rollouts and rewards, DPO updates against the policy at the start of each
phase (online iterative DPO; docs/ARCHITECTURE.md §14).

    python -m training.dpo --config training/configs/dpo_phased.toml --out runs/dpo1
    python -m training.dpo --config ... --out runs/dpo1 --resume      # continue runs/dpo1 with changed settings
    python -m training.dpo --config ... --set loss.loss_type=ipo --set loss.routing=flat
    python -m training.dpo --smoke --out /tmp/dpo-smoke               # tiny model on CPU, under a minute
    accelerate launch --num_processes 8 -m training.dpo --config ... --out runs/dpo1
    torchrun --standalone --nproc_per_node 2 -m training.dpo --smoke --out /tmp/ddp   # CPU: two gloo ranks

A run is `phases` phases of `dpo_steps_per_phase` optimiser steps; a trainer step is one
optimiser step. The first step of a phase also:
1. draws `prompts_per_phase` prompts (seeded by (seed, phase)) and samples G =
   `rollout.num_generations` rows of each with the live weights, each process its shard,
   through the rollout path and rewards GRPO uses (training.grpo.rollout.RolloutTrainer:
   `rollout.backend`, `stop_mode = "sample"`, training.grpo.rewards);
2. gathers the rewards [prompts, G, streams] and builds the pairs (training.dpo.pairs): by
   reward stream with routed loss, by the total reward with flat;
3. scores the actions of every paired sample with the policy as it is now (training.grpo.
   policy): these are the phase's reference log-probs, and the pool (training.dpo.pool) with
   the rows, the reference and the pairs is gathered on every process.
Every step then takes `pairs_per_step` pairs of the pool, splits them over the processes,
scores them with gradients, and applies TRL's DPO loss (training.dpo.loss) over the actions
each pair's routing row names, averaged over the step's pairs; AdamW, clipping and the
schedule are training.common's. A phase whose groups gave no pair takes no update (the
schedule still advances).

Logged every step (OUT/metrics.jsonl; TRL's DPO names): `loss`, `rewards/chosen`,
`rewards/rejected`, `rewards/margins`, `rewards/accuracies`, `logps/chosen`,
`logps/rejected`, `learning_rate`, `grad_norm`, `num_pairs`; and the phase's `phase`,
`reward` (mean total rollout reward), `rewards/<stream>/mean`, `pairs`, `pairs/<stream>`,
`dropped_groups` (group and key units with no pair), `completions/mean_length`, and
`sync_seconds` (the weight push into vLLM after the step, with `rollout.backend = "vllm"`).

Checkpoints, resume policy, command line and the published output are training.trainer's.
A checkpoint holds the phase's pool (tensors only), so a run killed mid-phase continues that
phase with the same pairs and reference. Scale: DDP as GRPO (each process samples its groups;
the pool is shared, so a step's pairs are split evenly and the loss of every process is
scaled to give the mean over all of them). Reproducibility: prompts, seeds and pair order are
functions of (seed, phase, step), so on CPU a rerun repeats bit for bit and a resume continues
exactly.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch

from training.common import read_metrics
from training.dpo.config import SMOKE_CONFIG, DPOConfig
from training.dpo.loss import action_weights, pair_objective, pair_routing_matrix, routed_logps
from training.dpo.pairs import PairSet, build_pairs
from training.dpo.pool import PhasePool, empty_batch, gather_batch, gather_rows
from training.grpo.loss import action_columns, nan_stats
from training.grpo.policy import ScoringBatch, cat_rows, pad_cols
from training.grpo.rollout import RolloutSource, RolloutTrainer, ScoredRollouts

# The smoke passes when the mean rollout reward of its last phase is at least this much above
# its first phase's (its synthetic reward rises from ~0.5 on CPU).
SMOKE_MIN_REWARD_RISE = 0.1
SUM_KEYS = ("count", "loss_sum", "chosen_reward_sum", "rejected_reward_sum", "accuracy_sum", "chosen_logp_sum",
            "rejected_logp_sum")


class DPOTrainer(RolloutTrainer):
    """The engine, policy, optimiser, rewards and the current phase's pool of one run;
    `train()` runs it (training.trainer)."""

    name = "training.dpo"
    config_class = DPOConfig

    def __init__(self, cfg: DPOConfig, accelerator=None, config_dir: Path | None = None,
                 source: RolloutSource | None = None):
        super().__init__(cfg, accelerator, config_dir, source)
        kinds, overrides, weights = cfg.reward_routing()
        self.W = pair_routing_matrix(kinds, overrides, self.layout.num_quantizers, weights)
        self.flat = cfg.loss.routing == "flat"
        self.pool: PhasePool | None = None

    @property
    def total_steps(self) -> int:
        return self.cfg.total_steps

    def step(self, step: int) -> dict[str, Any]:
        """Optimiser step `step` (1-based); the first step of a phase rolls it out first."""
        phase, k = divmod(step - 1, self.cfg.dpo_steps_per_phase)
        timings = {}
        if self.pool is None or self.pool.phase != phase + 1:
            t0 = time.perf_counter()
            self.pool = self.start_phase(phase + 1)
            timings["rollout_s"] = round(time.perf_counter() - t0, 3)
        t1 = time.perf_counter()
        stats = self.update(self.pool.step_pairs(k, self.cfg.pairs_per_step, self.cfg.seed))
        timings["update_s"] = round(time.perf_counter() - t1, 3)
        return self.metrics(stats, timings)

    # ------------------------------------------------------------------ a phase: rollouts, pairs, reference
    def start_phase(self, phase: int) -> PhasePool:
        """Sample and score the phase's groups, build its pairs and their reference log-probs."""
        cfg, G = self.cfg, self.cfg.rollout.num_generations
        picks = self.sampler.sample(phase, cfg.prompts_per_phase, G)
        local, per = self.shard(len(picks)), cfg.rollout.prompts_per_batch
        parts = [self.roll_out(picks, local[i : i + per]) for i in range(0, len(local), per)]
        where = {(int(p.groups[r]), p.rollouts.seeds[r] - p.requests[r].seed): (n, r)
                 for n, p in enumerate(parts) for r in range(len(p.rollouts))}  # sample j has seed base + j
        rewards = self._global_rewards(parts, where, local, len(picks))
        pairs = build_pairs(rewards, by_stream=not self.flat, min_margin=cfg.pairs.min_margin, cap=cfg.pairs_cap)
        keys = sorted({(int(g), int(j)) for g, c, r in zip(pairs.group, pairs.chosen, pairs.rejected, strict=True)
                       for j in (c, r)})
        rows, ref_token, ref_stop = self._shared_rows(parts, where, keys)
        index = {key: i for i, key in enumerate(keys)}
        chosen, rejected = ([index[(int(g), int(j))] for g, j in zip(pairs.group, side, strict=True)]
                            for side in (pairs.chosen, pairs.rejected))
        return PhasePool(phase, rows, ref_token, ref_stop, torch.tensor(chosen, dtype=torch.long),
                         torch.tensor(rejected, dtype=torch.long), pairs.stream,
                         self._phase_stats(phase, rewards, pairs, parts))

    def _shared_rows(self, parts: list[ScoredRollouts], where: dict,
                     keys: list[tuple[int, int]]) -> tuple[ScoringBatch, torch.Tensor, torch.Tensor]:
        """The rows `keys` ((prompt, sample), sorted) and their reference log-probs, each scored
        by the process that sampled it, then gathered in `keys` order on every process."""
        mine = [key for key in keys if key in where]
        rows, ref_token, ref_stop = self._reference(parts, [where[key] for key in mine])
        order = self._global_order(mine, keys)
        rows = gather_batch(self.acc, rows, self.engine.pad_id)
        rows = rows.select(order.tolist(), self.layout.num_quantizers) if keys else rows
        ref_token = pad_cols(gather_rows(self.acc, ref_token)[order], rows.tokens.shape[1])
        ref_stop = pad_cols(gather_rows(self.acc, ref_stop)[order], rows.stop_mask.shape[1])
        return rows, ref_token, ref_stop

    def _global_rewards(self, parts: list[ScoredRollouts], where: dict, local: list[int], prompts: int) -> torch.Tensor:
        """Every process's rewards as [prompts, G, S] float64 (NaN = abstained), on every process."""
        G, S = self.cfg.rollout.num_generations, len(self.cfg.rewards)
        mine = torch.full((len(local), G, S), math.nan, dtype=torch.float64)
        slot = {g: i for i, g in enumerate(local)}
        for (g, j), (n, r) in where.items():
            mine[slot[g], j] = parts[n].rewards[r]
        dev = self.acc.device
        every = self.acc.gather(mine.to(dev)).cpu()
        groups = self.acc.gather(torch.tensor(local, dtype=torch.long, device=dev)).cpu()
        out = torch.full((prompts, G, S), math.nan, dtype=torch.float64)
        out[groups] = every
        return out

    def _reference(self, parts: list[ScoredRollouts], places: list[tuple[int, int]]):
        """This process's paired rows as one ScoringBatch and their log-probs under the current
        policy (the phase's reference): (rows, token logps [R, N], stop logps [R, F])."""
        if not places:
            return empty_batch(), torch.zeros(0, 1), torch.zeros(0, 1)
        q, pad = self.layout.num_quantizers, self.engine.pad_id
        # `places` follow (prompt, sample) order and each part holds consecutive prompts, so
        # taking the parts in turn keeps that order
        batches = [ScoringBatch.from_rollouts(parts[n].rollouts, q, [r for m, r in places if m == n], pad)
                   for n in sorted({n for n, _ in places})]
        rows = ScoringBatch.cat(batches, pad)
        scorer = self.replica_scorer()  # FSDP2: the full replica, so processes need not score in step
        tok, stop = [], []
        self.model.eval()
        with torch.no_grad():
            for lo in range(0, len(places), self.cfg.micro_batch_size):
                ids = list(range(lo, min(lo + self.cfg.micro_batch_size, len(places))))
                t, s = scorer(rows.select(ids, q).to(self.acc.device))
                tok.append(t.cpu())
                stop.append(s.cpu())
        return rows, cat_rows(tok), cat_rows(stop)

    def _global_order(self, mine: list[tuple[int, int]], keys: list[tuple[int, int]]) -> torch.Tensor:
        """Where each of `keys` (sorted) sits among the rows gathered in process order."""
        G = self.cfg.rollout.num_generations
        flat = torch.tensor([g * G + j for g, j in mine], dtype=torch.long)
        gathered = gather_rows(self.acc, flat).tolist()
        at = {code: i for i, code in enumerate(gathered)}
        return torch.tensor([at[g * G + j] for g, j in keys], dtype=torch.long)

    def _phase_stats(self, phase: int, rewards: torch.Tensor, pairs: PairSet, parts: list[ScoredRollouts]) -> dict:
        """The phase's metrics, logged with every step of it."""
        lengths = torch.cat([p.rollouts.lengths for p in parts]).double()
        lengths = self.acc.gather(lengths.to(self.acc.device)).cpu()
        out: dict[str, Any] = {"phase": phase, "reward": float(torch.nansum(rewards, dim=2).mean()),
                               "pairs": len(pairs), "dropped_groups": pairs.dropped,
                               "completions/mean_length": float(lengths.mean())}
        for s, spec in enumerate(self.cfg.rewards):
            out[f"rewards/{spec.name}/mean"] = nan_stats(rewards[:, :, s].flatten())[0]
            if not self.flat:
                out[f"pairs/{spec.name}"] = int((pairs.stream == s).sum())
        out["pairs/margin_mean"] = float(pairs.margin.mean()) if len(pairs) else math.nan
        return out

    # ------------------------------------------------------------------ a DPO step
    def update(self, ids: list[int]) -> dict[str, float]:
        """One optimiser step on the pool's pairs `ids` (every process gets the same list)."""
        cfg, acc = self.cfg, self.acc
        stats = dict.fromkeys(SUM_KEYS, 0.0)
        stats["learning_rate"], stats["grad_norm"] = self.scheduler.get_last_lr()[0], 0.0
        if ids:
            local = ids[acc.process_index :: acc.num_processes]
            idle = not local  # fewer pairs than processes: run one at weight 0, so DDP's all-reduce happens
            local = local or ids[:1]
            per = max(1, cfg.micro_batch_size // 2)  # two rows per pair
            micro = [local[lo : lo + per] for lo in range(0, len(local), per)]
            counted = len(micro) if not idle else 0
            if self.fsdp:  # FSDP2 all-gathers in every forward: each process runs the busiest one's count
                busiest = math.ceil(math.ceil(len(ids) / acc.num_processes) / per)
                micro += [ids[:1]] * (busiest - len(micro))  # at weight 0
            if cfg.activation_checkpointing:
                self.policy.train()
            for k, chunk in enumerate(micro):
                with self.no_sync(self.scorer, enabled=k < len(micro) - 1):
                    out = self.pair_loss(chunk, len(ids))
                    acc.backward(out.loss * (acc.num_processes if k < counted else 0.0))
                if k < counted:
                    for key in SUM_KEYS:
                        stats[key] += getattr(out, key)
            stats["grad_norm"] = self.clip_gradients(self.params, cfg.optim.max_grad_norm)
        self.optimizer.step()  # without gradients (no pairs) AdamW leaves every weight alone
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.policy.eval()
        stats.update(self.sync_rollout_weights())  # vLLM: push what the step changed
        return stats

    def pair_loss(self, chunk: list[int], normaliser: int):
        """The DPO objective of pool pairs `chunk`, with gradients (training.dpo.loss.pair_objective)."""
        pool, q, dev = self.pool, self.layout.num_quantizers, self.acc.device
        sides = torch.cat([pool.chosen[chunk], pool.rejected[chunk]])
        rows, at = torch.unique(sides, sorted=True, return_inverse=True)
        batch = pool.rows.select(rows.tolist(), q)
        cols = action_columns(batch.tokens, batch.token_mask, self.layout, self.cfg.rollout.restrict_phase)
        streams = pool.stream[chunk].repeat(2)
        tok_w, stop_w = action_weights(streams, self.W, cols[at], batch.stop_mask[at], flat=self.flat)
        n, f = batch.tokens.shape[1], batch.stop_mask.shape[1]
        ref_tok, ref_stop = pad_cols(pool.ref_token[rows], n)[at], pad_cols(pool.ref_stop[rows], f)[at]
        average = self.cfg.loss.loss_type == "ipo"
        tok, stop = self.scorer(batch.to(dev))
        logp = routed_logps(tok[at.to(dev)], stop[at.to(dev)], tok_w.to(dev), stop_w.to(dev), average)
        ref = routed_logps(ref_tok, ref_stop, tok_w, stop_w, average).to(dev)
        m = len(chunk)
        return pair_objective(logp[:m], logp[m:], ref[:m], ref[m:], self.cfg.loss.beta, self.cfg.loss.loss_type,
                              float(normaliser))

    # ------------------------------------------------------------------ logging
    def metrics(self, stats: dict[str, float], timings: dict[str, float]) -> dict[str, Any]:
        """One log line: the step's DPO numbers (TRL's names, pooled over processes) and the phase's."""
        sums = torch.tensor([stats[k] for k in SUM_KEYS], dtype=torch.float64, device=self.acc.device)
        count, loss, chosen, rejected, accuracy, logp_c, logp_r = self.acc.reduce(sums, "sum").cpu().tolist()
        per = (lambda v: v / count) if count else (lambda v: math.nan)
        out: dict[str, Any] = {**self.pool.stats, "loss": per(loss), "rewards/chosen": per(chosen),
                               "rewards/rejected": per(rejected), "rewards/margins": per(chosen - rejected),
                               "rewards/accuracies": per(accuracy), "logps/chosen": per(logp_c),
                               "logps/rejected": per(logp_r), "learning_rate": stats["learning_rate"],
                               "grad_norm": stats["grad_norm"], "num_pairs": count,
                               "sync_seconds": float(self.acc.reduce(torch.tensor(
                                   [stats.get("sync_seconds", 0.0)], dtype=torch.float64, device=self.acc.device),
                                   "max").item()),
                               **{f"time/{k}": v for k, v in timings.items()}}
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}

    def progress_fields(self, metrics: dict[str, Any]) -> list[str]:
        def num(key: str, spec: str) -> str:
            value = metrics.get(key)
            return "-" if value is None else format(value, spec)

        return [f"phase {metrics['phase']}/{self.cfg.phases}", f"reward {num('reward', '.3f')}",
                f"pairs {metrics['pairs']} ({metrics['dropped_groups']} dropped)", f"loss {num('loss', '.4f')}",
                f"margin {num('rewards/margins', '+.3f')}", f"acc {num('rewards/accuracies', '.2f')}",
                f"lr {metrics['learning_rate']:.2e}"]

    def headline(self, rows: list[dict]) -> str:
        """`reward 0.512 -> 0.731 (rollout mean of phase 1 and phase 5)`."""
        rewards = phase_rewards(rows)
        if not rewards:
            return ""
        (p0, r0), (p1, r1) = rewards[0], rewards[-1]
        return f"reward {r0:.3f} -> {r1:.3f} (rollout mean of phase {p0} and phase {p1})"

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> tuple[dict | None, dict]:
        state, extra = super().checkpoint_state()
        if self.pool is not None:
            extra["phase_pool"] = self.pool.state()
        return state, extra

    def restore(self, extra: dict) -> None:
        super().restore(extra)
        if "phase_pool" in extra:
            self.pool = PhasePool.from_state(extra["phase_pool"])

    # ------------------------------------------------------------------ smoke run
    @classmethod
    def smoke_config(cls, out: Path | None) -> Path:
        return SMOKE_CONFIG

    @classmethod
    def smoke_report(cls, out: Path, seconds: dict[str, float]) -> dict:
        """The per-phase reward table and its first and last phases."""
        rows = [r for r in read_metrics(out) if "event" not in r]
        table = {int(r["phase"]): {"phase": int(r["phase"]), "reward": round(r["reward"], 4), "pairs": r["pairs"],
                                   "dropped_groups": r["dropped_groups"]} for r in rows}
        phases = [table[p] for p in sorted(table)]
        return {"phases": phases, "first_phase_reward": phases[0]["reward"], "last_phase_reward": phases[-1]["reward"],
                "steps": len(rows), **{k: round(v, 1) for k, v in seconds.items()}}

    @classmethod
    def smoke_verdict(cls, summary: dict) -> tuple[bool, str]:
        first, last = summary["first_phase_reward"], summary["last_phase_reward"]
        return last - first >= SMOKE_MIN_REWARD_RISE, (
            f"rollout reward went {first:.3f} -> {last:.3f} (first vs last phase: {last - first:+.3f}; "
            f"needs a rise of at least {SMOKE_MIN_REWARD_RISE})")


def phase_rewards(rows: list[dict]) -> list[tuple[int, float]]:
    """(phase, mean rollout reward) per phase from metrics.jsonl's step rows, in phase order."""
    found = {int(r["phase"]): float(r["reward"]) for r in rows
             if r.get("phase") is not None and r.get("reward") is not None}
    return sorted(found.items())

