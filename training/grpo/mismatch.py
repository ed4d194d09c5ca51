"""The training-inference mismatch: measured (TRL's metrics) and corrected (truncated importance
sampling), docs/ARCHITECTURE.md §7. Pure tensor functions; training.grpo.trainer calls them::

    sampled, known = sampler_logps(rollouts, rows, n, f)         # [b, n + f] and where it is known
    w = truncated_is_weights(trainer_logp, sampled, known, cap=2.0)   # [b, n + f], 1 where unknown
    adv = adv * w                                                # the clipped term, weighted (see below)
    sums = mismatch_sums(trainer_logp, sampled, known, w)        # pooled over micro-batches and ranks
    metrics = mismatch_metrics(sums)                             # TRL's sampling/* names

The sampler (the in-process engine, or vLLM on other kernels with weights pushed after every
step) reports log pi_sampler(a) for every action it took: every token, and the stop decisions
it reports (vLLM: only a "stop"; its "continue" decisions are NaN, `known` is False there).
The trainer recomputes log pi_old(a) with its own weights. Per action, the weight is

    w = min(exp(log pi_old(a) - log pi_sampler(a)), C)       (C = rollout.importance_sampling_cap)

and 1 where the sampler's log-prob is unknown; it multiplies the clipped policy-gradient term
of that action (not the KL term), as TRL's `vllm_importance_sampling_correction` with
`token_truncate`. Since w > 0, w * min(rho A, clip(rho) A) = min(rho (wA), clip(rho) (wA)):
the trainer applies it by scaling the routed advantages, which leaves the routing and the
objective function (training.grpo.loss) as they are.
"""

from __future__ import annotations

import math

import torch

from rumik_app.decode.rollouts import Rollouts
from training.grpo.loss import concat_actions
from training.grpo.policy import pad_cols

SUM_KEYS = ("gap_sum", "gap_max", "known", "ratio_sum", "ratio_min", "ratio_max")


def sampler_logps(rollouts: Rollouts, rows: list[int], n: int, f: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler's log-probs of rows `rows` laid out as the trainer's actions [b, n + f]
    (tokens then stop slots, `concat_actions`), and a bool mask of where they are known (a
    generated token, or a stop decision with a finite reported log-prob)."""
    idx = torch.as_tensor(rows, dtype=torch.long)
    tokens = pad_cols(rollouts.log_probs[idx], n)
    token_known = pad_cols(rollouts.token_mask[idx], n)
    stops = pad_cols(rollouts.stop_log_probs[idx], f)
    stop_known = pad_cols(rollouts.stop_mask[idx], f) & torch.isfinite(stops)
    sampled = concat_actions(tokens, torch.nan_to_num(stops, nan=0.0))
    return sampled, concat_actions(token_known, stop_known).bool()


def truncated_is_weights(trainer_logp: torch.Tensor, sampled: torch.Tensor, known: torch.Tensor,
                         cap: float) -> torch.Tensor:
    """w = min(exp(trainer_logp - sampled), cap) where `known`, 1 elsewhere; no gradient.
    All [b, k]; trainer_logp: log pi_old of the actions (the trainer's recomputation)."""
    ratio = torch.exp(trainer_logp.detach().float() - sampled.to(trainer_logp.device).float()).clamp(max=cap)
    return torch.where(known.to(ratio.device), ratio, torch.ones_like(ratio))


def mismatch_sums(trainer_logp: torch.Tensor, sampled: torch.Tensor, known: torch.Tensor,
                  weights: torch.Tensor) -> dict[str, float]:
    """Sums over the known actions of one micro-batch: |gap| (sum, max), count, and the
    truncated ratio (sum, min, max); pool them with `merge_sums`."""
    k = known.to(trainer_logp.device)
    gap = (trainer_logp.detach().float() - sampled.to(trainer_logp.device).float()).abs()[k]
    w = weights[k]
    if not gap.numel():
        return empty_sums()
    return {"gap_sum": float(gap.sum()), "gap_max": float(gap.max()), "known": float(gap.numel()),
            "ratio_sum": float(w.sum()), "ratio_min": float(w.min()), "ratio_max": float(w.max())}


def empty_sums() -> dict[str, float]:
    return {"gap_sum": 0.0, "gap_max": 0.0, "known": 0.0, "ratio_sum": 0.0, "ratio_min": math.inf,
            "ratio_max": -math.inf}


def merge_sums(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """Pool two `mismatch_sums` (micro-batches, or processes after a reduction)."""
    return {"gap_sum": a["gap_sum"] + b["gap_sum"], "gap_max": max(a["gap_max"], b["gap_max"]),
            "known": a["known"] + b["known"], "ratio_sum": a["ratio_sum"] + b["ratio_sum"],
            "ratio_min": min(a["ratio_min"], b["ratio_min"]), "ratio_max": max(a["ratio_max"], b["ratio_max"])}


def reduce_sums(accelerator, sums: dict[str, float]) -> dict[str, float]:
    """`mismatch_sums` pooled over every process (sums added, extremes kept)."""
    dev = accelerator.device
    added = accelerator.reduce(torch.tensor([sums["gap_sum"], sums["known"], sums["ratio_sum"]],
                                            dtype=torch.float64, device=dev), "sum").cpu().tolist()
    # max for the maxima; the minimum as minus the max of the negated values
    top = accelerator.reduce(torch.tensor([sums["gap_max"], sums["ratio_max"], -sums["ratio_min"]],
                                          dtype=torch.float64, device=dev), "max").cpu().tolist()
    return {"gap_sum": added[0], "known": added[1], "ratio_sum": added[2], "gap_max": top[0], "ratio_max": top[1],
            "ratio_min": -top[2]}


def mismatch_metrics(sums: dict[str, float]) -> dict[str, float]:
    """TRL's metric names: the mean and max |log pi_old - log pi_sampler| and the min, mean and
    max truncated weight, over every known action of the step (NaN when there is none)."""
    count = sums["known"]
    if not count:
        return {key: math.nan for key in METRIC_NAMES}
    return {"sampling/sampling_logp_difference/mean": sums["gap_sum"] / count,
            "sampling/sampling_logp_difference/max": sums["gap_max"],
            "sampling/importance_sampling_ratio/min": sums["ratio_min"],
            "sampling/importance_sampling_ratio/mean": sums["ratio_sum"] / count,
            "sampling/importance_sampling_ratio/max": sums["ratio_max"]}


METRIC_NAMES = ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/mean",
                "sampling/importance_sampling_ratio/max")
