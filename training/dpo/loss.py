"""DPO math (docs/ARCHITECTURE.md §14): which actions a pair compares, routed sequence
log-probs, and TRL's sigmoid / IPO / hinge losses. Pure tensor functions, no model or I/O.

Library module, no command line; `training.dpo.trainer` calls it::

    W = pair_routing_matrix(["content", "duration"], {}, Q)                 # [S, Q + 1]
    cols = action_columns(tokens, token_mask, layout, restrict_phase=True)   # training.grpo.loss
    tok_w, stop_w = action_weights(streams, W, cols, stop_mask)              # [n, N], [n, F]
    logp = routed_logps(token_logp, stop_logp, tok_w, stop_w)                # [n]
    out = pair_objective(chosen, rejected, ref_chosen, ref_rejected, beta=0.1, loss_type="sigmoid",
                         normaliser=32)

Routing. A pair formed by reward stream s compares the two samples on the actions row s of
W weights: action k of a sample counts w_k = W[s, col(k)] times, where col(k) is the token's
codebook or the stop slot Q (`</audio>` and stop-head decisions), exactly GRPO's routing
(training.grpo.loss.route_advantages, here fed the one-hot of s instead of advantages). W is
GRPO's `routing_matrix` with one DPO change: a content row also weights the stop slot,
because a content pair compares two whole samples and where each stopped is part of what
its content reward heard (a sample cut short loses words); GRPO gives that slot to the
duration stream, which scores every rollout. A stream's `routing` row from the config is
used as written. Flat routing weights every action 1.

Losses, with logits h = (log pi(y_w) - log pi(y_l)) - (log ref(y_w) - log ref(y_l)) over the
routed actions (TRL's DPOTrainer): sigmoid -log sigmoid(beta h); hinge max(0, 1 - beta h);
IPO (h - 1 / (2 beta))^2 with each sequence's log-prob averaged over its routed actions (TRL
averages IPO's log-probs over the completion). The implicit rewards beta (log pi - log ref)
of each side are TRL's `rewards/chosen` and `rewards/rejected`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from training.dpo.config import LOSS_TYPES
from training.dpo.pairs import TOTAL
from training.grpo.loss import CONTENT_KINDS, route_advantages, routing_matrix


def pair_routing_matrix(kinds: list[str], overrides: dict[int, list[float] | str], num_quantizers: int,
                        weights: list[float] | None = None) -> torch.Tensor:
    """W [S, Q + 1] for DPO pairs: GRPO's routing matrix, with the stop slot added to content
    rows that the config does not override (module docstring); weights scale each row."""
    W = routing_matrix(kinds, overrides, num_quantizers, weights)
    for s, kind in enumerate(kinds):
        if kind in CONTENT_KINDS and s not in overrides:
            W[s, num_quantizers] = 1.0 if weights is None else float(weights[s])
    return W


def action_weights(streams: torch.Tensor, weights: torch.Tensor, columns: torch.Tensor, stop_mask: torch.Tensor,
                   flat: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight of every action of each pair side: (token [n, N], stop [n, F]), 0 at padding.

    streams: [n] long, the stream that formed each pair (TOTAL only with flat); weights: W;
    columns: [n, N] from training.grpo.loss.action_columns; stop_mask: [n, F] bool.
    """
    if not flat and bool((streams == TOTAL).any()):
        raise ValueError("a pair formed by the total reward has no routing row: use flat routing")
    onehot = F.one_hot(streams.clamp(min=0), weights.shape[0]).to(torch.float32)  # flat: sums to 1 either way
    return route_advantages(onehot, weights, columns, stop_mask, flat=flat)


def routed_logps(token_logp: torch.Tensor, stop_logp: torch.Tensor, token_w: torch.Tensor, stop_w: torch.Tensor,
                 average: bool = False) -> torch.Tensor:
    """sum_k w_k log p_k over tokens [n, N] and stop decisions [n, F] -> [n]; `average`
    divides by sum_k w_k (IPO). Padded actions carry w = 0."""
    total = (token_logp * token_w).sum(1) + (stop_logp * stop_w.to(stop_logp.dtype)).sum(1)
    if average:
        total = total / (token_w.sum(1) + stop_w.sum(1)).clamp(min=1.0)
    return total


def dpo_losses(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
               beta: float, loss_type: str = "sigmoid") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TRL's per-pair DPO loss and implicit rewards. All inputs [n] (policy log-probs with
    grad, reference ones without); returns (losses [n], chosen_rewards [n], rejected_rewards [n])."""
    logits = (chosen - rejected) - (ref_chosen - ref_rejected).detach()
    if loss_type == "sigmoid":
        losses = -F.logsigmoid(beta * logits)
    elif loss_type == "hinge":
        losses = torch.relu(1.0 - beta * logits)
    elif loss_type == "ipo":
        losses = (logits - 1.0 / (2.0 * beta)) ** 2
    else:
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    chosen_rewards = beta * (chosen - ref_chosen).detach()
    rejected_rewards = beta * (rejected - ref_rejected).detach()
    return losses, chosen_rewards, rejected_rewards


@dataclass
class PairOut:
    """`pair_objective` result: the loss to backpropagate and sums for logging (pooled over
    micro-batches and processes before dividing by `count`)."""

    loss: torch.Tensor
    count: float
    loss_sum: float
    chosen_reward_sum: float
    rejected_reward_sum: float
    accuracy_sum: float
    chosen_logp_sum: float
    rejected_logp_sum: float


def pair_objective(chosen: torch.Tensor, rejected: torch.Tensor, ref_chosen: torch.Tensor,
                   ref_rejected: torch.Tensor, beta: float, loss_type: str, normaliser: float) -> PairOut:
    """L = (1 / normaliser) sum over pairs of the DPO loss; normaliser: the step's pairs over
    all micro-batches and processes (so accumulation and DDP give the mean over the step)."""
    if normaliser <= 0:
        raise ValueError("normaliser must be positive (no pairs in the step?)")
    losses, rc, rr = dpo_losses(chosen, rejected, ref_chosen, ref_rejected, beta, loss_type)
    loss = losses.sum() / normaliser
    with torch.no_grad():
        return PairOut(loss=loss, count=float(losses.numel()), loss_sum=float(losses.sum()),
                       chosen_reward_sum=float(rc.sum()), rejected_reward_sum=float(rr.sum()),
                       accuracy_sum=float((rc > rr).sum()), chosen_logp_sum=float(chosen.sum()),
                       rejected_logp_sum=float(rejected.sum()))
