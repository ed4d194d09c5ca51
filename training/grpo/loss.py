"""GRPO math (docs/ARCHITECTURE.md §7): group advantages, per-codebook reward routing, k3 KL, clipped loss.

Pure tensor functions with no model or I/O; `training.grpo.trainer` (the loop) and
`training.grpo.policy` (log-probs) call them. Library module, no command line::

    adv = group_advantages(rewards, groups)                 # [B, S] per stream
    W = routing_matrix(["content", "duration", "speaker"], {}, Q)  # [S, Q + 1], last column = stop slot
    cols = action_columns(token_ids, token_mask, layout, restrict_phase=True)
    tok_adv, stop_adv = route_advantages(adv, W, cols, stop_mask)             # routed
    tok_adv, stop_adv = route_advantages(adv, W, cols, stop_mask, flat=True)  # flat broadcast
    out = clipped_objective(logp, old_logp, ref_logp, adv_k, mask_k, normaliser, 0.2, 0.2, beta)

Actions. A rollout row has two kinds of sampled decisions, and both are "tokens" of the
loss: the generated audio tokens (units and `</audio>`, `token_mask`) and the stop-head
decisions made at frame boundaries (`stop_mask`). `concat_actions` lays them side by side
as [B, N + F]; the loss normaliser is the batch's total number of unmasked actions.

Abstentions. A reward function may return None for a rollout (e.g. the ASR judge does not
cover its language); it is stored as NaN. For each stream, a group's mean and std use only
the members that did not abstain; abstainers get advantage 0 in that stream (no signal
either way), and a group with fewer than two scoring members, or whose scoring members all
got the same reward, gives 0 to everyone. The std is the unbiased sample std (as TRL).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rumik_app.errors import ConfigError
from rumik_app.model.tokens import TokenLayout

DEFAULT_ADV_EPS = 1e-4
DEFAULT_CLIP_EPS = 0.2
PAD_COLUMN = -1  # action_columns value at padded positions
# Routing targets (docs/ARCHITECTURE.md §7): which action columns a stream's advantage reaches.
# codebook0: the content codebook; acoustic: codebooks 1..Q-1 (timbre, speaker, quality: the
# acoustic residual); stop: the stop slot (stop-head decisions and the `</audio>` token); all.
ROUTING_TARGETS = ("codebook0", "acoustic", "stop", "all")
# Default target by reward kind; kinds not listed broadcast ("all").
CONTENT_KINDS = ("content", "codebook0_low")
DURATION_KINDS = ("duration",)
ACOUSTIC_KINDS = ("speaker", "quality")
DEFAULT_TARGETS = {**dict.fromkeys(CONTENT_KINDS, "codebook0"), **dict.fromkeys(DURATION_KINDS, "stop"),
                   **dict.fromkeys(ACOUSTIC_KINDS, "acoustic")}


def group_advantages(
    rewards: torch.Tensor, groups: torch.Tensor, eps: float = DEFAULT_ADV_EPS, scale: bool = True
) -> torch.Tensor:
    """Per-stream group-normalised advantages A = (r - mean_group) / (std_group + eps).

    rewards: [B, S] float, NaN = abstained; groups: [B] long, rows with the same value were
    sampled from the same prompt. scale=False skips the division (Dr. GRPO style).
    Returns [B, S] float32: zero mean over the scoring members of each group, 0 for
    abstainers and for groups whose scoring members all scored the same (see module doc).
    """
    rewards = rewards.to(torch.float64)
    out = torch.zeros_like(rewards)
    for g in torch.unique(groups):
        rows = groups == g
        for s in range(rewards.shape[1]):
            r = rewards[rows, s]
            valid = ~torch.isnan(r)
            if int(valid.sum()) < 2:
                continue
            rv = r[valid]
            if float(rv.max() - rv.min()) == 0.0:
                continue
            centred = rv - rv.mean()
            adv = centred / (rv.std() + eps) if scale else centred
            col = torch.zeros_like(r)
            col[valid] = adv
            out[rows, s] = col
    return out.float()


def target_row(target: str, num_quantizers: int) -> list[float]:
    """W row of a routing target (ROUTING_TARGETS): Q codebook weights, then the stop slot."""
    q = num_quantizers
    rows = {"codebook0": [1.0] + [0.0] * q, "acoustic": [0.0] + [1.0] * (q - 1) + [0.0],
            "stop": [0.0] * q + [1.0], "all": [1.0] * (q + 1)}
    if target not in rows:
        raise ConfigError(f"unknown routing target {target!r}; use one of {ROUTING_TARGETS} or a list of "
                          f"{q + 1} weights")
    return rows[target]


def default_routing_row(kind: str, num_quantizers: int) -> list[float]:
    """W row for a reward kind: Q codebook weights followed by the stop-slot weight."""
    return target_row(DEFAULT_TARGETS.get(kind, "all"), num_quantizers)


def routing_matrix(kinds: list[str], overrides: dict[int, list[float] | str], num_quantizers: int,
                   weights: list[float] | None = None) -> torch.Tensor:
    """W [S, Q + 1]: row s routes stream s to codebooks 0..Q-1 and (last column) the stop slot.

    kinds: the reward kind of each stream (picks the default row); overrides: stream index
    -> a routing target name or an explicit row of Q + 1 weights (from config); weights: a
    factor per stream that scales its row (default 1).
    """
    rows = []
    for s, kind in enumerate(kinds):
        row = overrides.get(s) or default_routing_row(kind, num_quantizers)
        if isinstance(row, str):
            row = target_row(row, num_quantizers)
        if len(row) != num_quantizers + 1:
            raise ConfigError(
                f"routing row for stream {s} has {len(row)} weights; it needs {num_quantizers + 1} "
                f"({num_quantizers} codebooks, then the stop slot)"
            )
        scale = 1.0 if weights is None else float(weights[s])
        rows.append([float(w) * scale for w in row])
    return torch.tensor(rows, dtype=torch.float32).reshape(len(kinds), num_quantizers + 1)


def action_columns(
    token_ids: torch.Tensor, token_mask: torch.Tensor, layout: TokenLayout, restrict_phase: bool
) -> torch.Tensor:
    """Routing column of every generated token: [B, N] long.

    q in 0..Q-1 for a unit of codebook q (restricted phase: q = t mod Q; otherwise read from
    the id), Q (the stop slot) for `</audio>`, PAD_COLUMN at padding.
    """
    q = layout.num_quantizers
    if restrict_phase:
        col = (torch.arange(token_ids.shape[1]) % q).expand_as(token_ids).clone()
    else:
        col = (token_ids - layout.first_unit_id).remainder(q)
    col = torch.where(token_ids == layout.audio_end_token_id, torch.full_like(col, q), col)
    return torch.where(token_mask, col, torch.full_like(col, PAD_COLUMN))


def route_advantages(
    stream_adv: torch.Tensor,
    weights: torch.Tensor,
    columns: torch.Tensor,
    stop_mask: torch.Tensor,
    flat: bool = False,
    stream_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-action advantages A_{i,k} = sum_s W[s, col(k)] * A_i^s.

    stream_adv: [B, S]; weights: W [S, Q + 1]; columns: [B, N] from `action_columns`;
    stop_mask: [B, F]. flat=True: every token and stop decision gets sum_s w_s A_i^s (W
    ignored; w = stream_weights [S], default 1). Returns (token_adv [B, N], stop_adv [B, F]),
    0 at masked positions.
    """
    if flat:
        w = torch.ones(stream_adv.shape[1]) if stream_weights is None else stream_weights
        total = (stream_adv.float() * w.to(stream_adv.device).float()).sum(1)
        token_adv = total[:, None].expand(columns.shape) * (columns != PAD_COLUMN)
        stop_adv = total[:, None].expand(stop_mask.shape) * stop_mask
        return token_adv.float(), stop_adv.float()
    per_column = stream_adv.float() @ weights  # [B, Q + 1]
    token_adv = per_column.gather(1, columns.clamp(min=0)) * (columns != PAD_COLUMN)
    stop_adv = per_column[:, -1:].expand(stop_mask.shape) * stop_mask
    return token_adv, stop_adv


def concat_actions(token_part: torch.Tensor, stop_part: torch.Tensor) -> torch.Tensor:
    """Lay token actions [B, N] and stop decisions [B, F] side by side: [B, N + F]."""
    return torch.cat([token_part, stop_part.to(token_part.dtype)], dim=1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || pi_ref) per action: exp(lr - lt) - (lr - lt) - 1 >= 0.

    logp, ref_logp: [...] log-probs of the sampled actions under the policy and reference.
    """
    diff = ref_logp - logp
    return torch.exp(diff) - diff - 1.0


@dataclass
class ObjectiveOut:
    """`clipped_objective` result: the loss to backpropagate and sums for logging.

    loss: scalar, already divided by `normaliser`. The *_sum fields are sums over unmasked
    actions (so micro-batches and processes can be pooled before dividing by the count).
    """

    loss: torch.Tensor
    count: float
    kl_sum: float
    low_clip_sum: float
    high_clip_sum: float
    region_clip_sum: float
    ratio_sum: float


def clipped_objective(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    normaliser: float,
    eps_low: float = DEFAULT_CLIP_EPS,
    eps_high: float = DEFAULT_CLIP_EPS,
    beta: float = 0.0,
) -> ObjectiveOut:
    """L = -(1 / normaliser) * sum m * [min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) - beta KL].

    logp: [B, K] with grad (policy); old_logp: [B, K] (sampling policy, no grad);
    ref_logp: [B, K] or None (frozen reference; None: KL not computed, beta must be 0);
    advantages: [B, K]; mask: [B, K] bool; normaliser: the batch's total unmasked actions
    (over all micro-batches and processes). rho = exp(logp - old_logp).
    """
    if ref_logp is None and beta != 0.0:
        raise ValueError("beta > 0 needs reference log-probs")
    if normaliser <= 0:
        raise ValueError("normaliser must be positive (no actions in the batch?)")
    m = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).detach()
    ratio = torch.exp(logp - old_logp.detach())
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_action = torch.min(ratio * adv, clipped * adv)
    kl = k3_kl(logp, ref_logp.detach()) if ref_logp is not None else torch.zeros_like(logp)
    if beta != 0.0:
        per_action = per_action - beta * kl
    loss = -(per_action * m).sum() / normaliser
    with torch.no_grad():
        low = (ratio < 1.0 - eps_low) & (adv < 0) & mask
        high = (ratio > 1.0 + eps_high) & (adv > 0) & mask
        return ObjectiveOut(
            loss=loss,
            count=float(m.sum()),
            kl_sum=float((kl * m).sum()),
            low_clip_sum=float(low.sum()),
            high_clip_sum=float(high.sum()),
            region_clip_sum=float((low | high).sum()),
            ratio_sum=float((ratio * m).sum()),
        )


def nan_stats(values: torch.Tensor) -> tuple[float, float]:
    """(mean, unbiased std) over the non-NaN entries of a 1-D tensor; NaN when there are none."""
    v = values[~torch.isnan(values)].double()
    if v.numel() == 0:
        return math.nan, math.nan
    return float(v.mean()), float(v.std()) if v.numel() > 1 else 0.0
