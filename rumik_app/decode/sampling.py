"""Sampling primitives shared by both decode paths: pre-drawn uniforms, inverse-CDF sampling.

Each row draws its uniforms up front from a CPU `torch.Generator` seeded with the row's
seed, so a (request, seed) pair samples the same tokens alone or in a batch, on any device,
and on the reference and the fast path alike (up to float rounding of the logits).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rumik_app.request import (
    DEFAULT_MAX_NEW_TOKENS, DEFAULT_MIN_NEW_TOKENS, DEFAULT_TEMPERATURE, DEFAULT_TOP_K, DEFAULT_TOP_P,
)


@dataclass(frozen=True)
class RowParams:
    """Sampling settings for one sequence of a batch (defaults: the request defaults)."""

    seed: int
    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_new_tokens: int = DEFAULT_MIN_NEW_TOKENS
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS


# The stop-head decisions of "sample" mode draw their uniforms from seed + this offset (every
# sampler: the reference, the fast path and the vLLM processors), so a seed reproduces them.
STOP_SEED_OFFSET = 1_000_003


def draw_uniforms(seed: int, count: int) -> torch.Tensor:
    """`count` uniforms in [0, 1) from a CPU generator seeded with `seed` (device-independent)."""
    return torch.rand(count, generator=torch.Generator().manual_seed(int(seed)), dtype=torch.float64).float()


def sample_tokens(
    logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, uniform: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one index per row by inverse CDF.

    logits: [B, V] float32 (-inf = not allowed); temperature, top_p, uniform: [B] float;
    top_k: [B] long (0 = off). Temperature 0 means greedy.
    Returns (index [B] long, log-prob [B] float32 of the index under softmax(logits / T)).
    """
    greedy = temperature <= 0
    temp = torch.where(greedy, torch.ones_like(temperature), temperature)
    scaled = logits / temp[:, None]
    log_probs = torch.log_softmax(scaled, dim=-1)
    # A full-width topk is a descending sort (values and order), ~3x faster than sort on CPU.
    sorted_logits, order = scaled.topk(scaled.shape[-1], dim=-1)
    rank = torch.arange(scaled.shape[-1], device=scaled.device)[None]
    keep = (rank < top_k[:, None]) | (top_k[:, None] <= 0)
    sorted_probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)
    keep = keep & ((sorted_probs.cumsum(-1) - sorted_probs) < top_p[:, None])
    keep = keep | (rank == 0)  # the most likely token always survives
    probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)
    cdf = probs.cumsum(-1)
    pos = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None]).clamp(max=scaled.shape[-1] - 1)
    index = order.gather(1, pos).squeeze(1)
    index = torch.where(greedy, scaled.argmax(-1), index)
    return index, log_probs.gather(1, index[:, None]).squeeze(1)
