"""The sampling rules every decoder shares (docs/ARCHITECTURE.md §5): row settings, stop modes,
finish codes, pre-drawn uniforms and inverse-CDF sampling.

    row = RowParams(seed=7, temperature=0.8, top_k=30)            # or RowParams.of(request, seed)
    index, log_prob = sample_tokens(logits, temperature, top_k, top_p, uniform)   # [B] each

Each row draws its uniforms up front from a CPU `torch.Generator` seeded with the row's
seed, so a (request, seed) pair samples the same tokens alone or in a batch, on any device,
and on the reference, the fast path and vLLM alike (up to float rounding of the logits).

Torch only, no transformers: the vLLM plugin's logits processors (`rumik_vllm.rules`) read
the same rules from here.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import torch

from rumik_app.errors import PromptError
from rumik_app.request import MAX_NEW_TOKENS_CAP, SamplingSettings
from rumik_app.settings import derive

# How the stop head decides at a frame boundary: "threshold" stops when sigmoid(logit) >
# STOP_THRESHOLD (inference); "sample" stops with probability sigmoid(logit) (GRPO rollouts:
# the decision is then a policy action).
STOP_MODES = ("threshold", "sample")
STOP_THRESHOLD = 0.5
# Why a row ended: its own `</audio>`, the stop head, or its max_new_tokens. The fast path
# keeps them as codes on the device (0 while running); FINISH_NAMES maps codes to names.
FINISH_END_TOKEN = "end_token"
FINISH_STOP_HEAD = "stop_head"
FINISH_MAX_TOKENS = "max_tokens"
RUNNING = 0
END_TOKEN = 1
STOP_HEAD = 2
MAX_TOKENS = 3
FINISH_NAMES = {END_TOKEN: FINISH_END_TOKEN, STOP_HEAD: FINISH_STOP_HEAD, MAX_TOKENS: FINISH_MAX_TOKENS}
# The stop-head decisions of "sample" mode draw their uniforms from seed + this offset (every
# sampler: the reference, the fast path and the vLLM processors), so a seed reproduces them.
STOP_SEED_OFFSET = 1_000_003


def check_stop_mode(stop_mode: str) -> str:
    """`stop_mode`, or ValueError naming the choices."""
    if stop_mode not in STOP_MODES:
        raise ValueError(f"stop_mode must be one of {STOP_MODES}, not {stop_mode!r}")
    return stop_mode


def max_stop_slots(num_quantizers: int) -> int:
    """Frame boundaries a row of at most MAX_NEW_TOKENS_CAP tokens can reach, plus one: the
    size of every per-row buffer of stop-head uniforms and decisions."""
    return MAX_NEW_TOKENS_CAP // num_quantizers + 1


def stop_floor(min_new_tokens: int, num_quantizers: int) -> int:
    """The first generated position where a row may end (stop head or `</audio>`): its
    min_new_tokens, and never before one whole frame."""
    return max(int(min_new_tokens), num_quantizers)


def is_greedy(temperature):
    """Temperature 0 (or below) means greedy: the most likely token, no draw. Floats or tensors."""
    return temperature <= 0


def scoring_temperature(temperature):
    """What a row's logits are divided by for its log-probs: its temperature, or 1 when greedy.
    Floats or tensors (every sampler and GRPO's rescoring use this one rule)."""
    if isinstance(temperature, torch.Tensor):
        return torch.where(is_greedy(temperature), torch.ones_like(temperature), temperature)
    return 1.0 if is_greedy(temperature) else float(temperature)


# A row's seed is a request's (at most MAX_SEED) plus its sample index; the stop decisions add
# STOP_SEED_OFFSET, and the sum must stay an int64 for torch.Generator.
MAX_ROW_SEED = 2**62


def check_row_seed(value) -> int:
    """A row's seed: a whole number 0 to MAX_ROW_SEED."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= MAX_ROW_SEED:
        raise PromptError(f"A row's seed must be a whole number 0 to {MAX_ROW_SEED}, not {repr(value)[:40]}.",
                          field="seed")
    return int(value)


def check_adapter(value) -> str | None:
    """A row's adapter: None or a library voice's name (the engine resolves it)."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise PromptError(f"A row's adapter must be a library voice's name or None, not {repr(value)[:40]}.",
                          field="voice")
    return value


@dataclass(frozen=True)
class RowParams(SamplingSettings):
    """One sequence of a batch: its sampling settings (`SamplingSettings`, declared and checked
    there; the request defaults), its seed, and the library voice whose LoRA adapter it runs
    with (`adapter`; None: the checkpoint's own weights, as for every built-in voice). Every
    decoder sizes its per-row buffers by MAX_NEW_TOKENS_CAP, which the settings' check guarantees."""

    seed: int = field(metadata={"check": check_row_seed})
    adapter: str | None = field(default=None, metadata={"check": check_adapter})

    @classmethod
    def of(cls, settings: SamplingSettings, seed: int) -> "RowParams":
        """The row of a checked request (or row): its settings as they are, with `seed`."""
        return derive(settings, cls, seed=int(seed))


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """CTRL's repetition penalty, as transformers and vLLM apply it, before the temperature:
    where `seen`, a positive logit is divided by the row's penalty and a negative one
    multiplied (-inf stays -inf). logits: [B, V] float32; seen: [B, V] bool; penalty: [B]
    float. A penalty of 1 returns the logits unchanged bit for bit (x / 1 == x * 1 == x).
    Dividing by the temperature afterwards commutes with this (the sign is kept), so vLLM's
    order (penalties on temperature-scaled logits) gives the same distribution."""
    p = penalty[:, None]
    return torch.where(seen, torch.where(logits > 0, logits / p, logits * p), logits)


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
    greedy = is_greedy(temperature)
    scaled = logits / scoring_temperature(temperature)[:, None]
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
