"""A phase's pairs and what a DPO step needs of them, the same on every process, and its
checkpoint state.

Library module, no command line; `training.dpo.trainer` builds one per phase::

    pool = PhasePool(phase, rows, ref_token, ref_stop, chosen, rejected, stream, stats)
    ids = pool.step_pairs(k, pairs_per_step, seed)   # pair indices of the phase's step k (0-based)
    state = pool.state()                             # tensors and numbers only
    pool = PhasePool.from_state(state)               # after torch.load(..., weights_only=True)
    rows = gather_batch(accelerator, local_rows, pad_id)   # every process's rows, on every process

The pool holds every sample some pair of the phase uses (`rows`, a ScoringBatch ordered by
(prompt, sample)), the reference log-probs of their actions (the policy at the start of the
phase, computed once then: the reference is fixed for the phase, so a copy of the model
would only recompute these numbers), and the pairs as row indices. Every process holds the
whole pool, so a step's pairs are split evenly whatever process sampled them, and the main
process's checkpoint resumes every process mid-phase.

Step order: the pairs of a phase are visited in epochs; epoch e is a permutation drawn from
(seed, phase, e), and step k takes the next min(pairs_per_step, pairs) of that sequence, so
no pair repeats within a step and a resumed phase takes the same pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from training.grpo.policy import ScoringBatch

BATCH_DTYPES = {"input_ids": torch.long, "token_index": torch.long, "tokens": torch.long, "token_mask": torch.bool,
                "stop_index": torch.long, "stop_decisions": torch.bool, "stop_mask": torch.bool,
                "temperature": torch.float32, "min_new_tokens": torch.long}


@dataclass
class PhasePool:
    """R rows, n pairs. rows: the samples pairs use; ref_token: [R, N] and ref_stop: [R, F]
    float32, reference log-probs of their tokens and stop decisions (0 at padding); chosen,
    rejected: [n] long row indices; stream: [n] long, the stream that formed each pair
    (training.dpo.pairs.TOTAL for the total reward); stats: the phase's metrics (numbers)."""

    phase: int
    rows: ScoringBatch
    ref_token: torch.Tensor
    ref_stop: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor
    stream: torch.Tensor
    stats: dict

    def __len__(self) -> int:
        return int(self.chosen.numel())

    def step_pairs(self, k: int, pairs_per_step: int, seed: int) -> list[int]:
        """The pair indices of the phase's step k (module docstring); [] when there are none."""
        total = len(self)
        if total == 0:
            return []
        m = min(pairs_per_step, total)
        start = k * m
        epochs = range(start // total, (start + m - 1) // total + 1)
        order = np.concatenate([np.random.default_rng([seed, self.phase, e]).permutation(total) for e in epochs])
        offset = start - epochs[0] * total
        return [int(i) for i in order[offset : offset + m]]

    def state(self) -> dict:
        """Plain tensors, ints and floats: what torch.load(weights_only=True) reads back."""
        return {"phase": self.phase, "rows": {f.name: getattr(self.rows, f.name) for f in fields(ScoringBatch)},
                "ref_token": self.ref_token, "ref_stop": self.ref_stop, "chosen": self.chosen,
                "rejected": self.rejected, "stream": self.stream, "stats": dict(self.stats)}

    @classmethod
    def from_state(cls, state: dict) -> PhasePool:
        return cls(phase=int(state["phase"]), rows=ScoringBatch(**state["rows"]), ref_token=state["ref_token"],
                   ref_stop=state["ref_stop"], chosen=state["chosen"], rejected=state["rejected"],
                   stream=state["stream"], stats=dict(state["stats"]))


def empty_batch() -> ScoringBatch:
    """A ScoringBatch of no rows (a process whose groups gave no pair)."""
    return ScoringBatch(**{name: torch.zeros((0,) if name in ("temperature", "min_new_tokens") else (0, 1),
                                             dtype=dtype) for name, dtype in BATCH_DTYPES.items()})


def gather_rows(accelerator, x: torch.Tensor, fill: float = 0) -> torch.Tensor:
    """Every process's rows of `x` ([b_k, ...], b_k and the other sizes may differ by process),
    concatenated in process order on every process, padded with `fill` to the largest sizes."""
    if accelerator.num_processes == 1:
        return x
    world, dev = accelerator.num_processes, accelerator.device
    shapes = accelerator.gather(torch.tensor([list(x.shape)], device=dev)).cpu()  # [world, ndim]
    top = shapes.max(0).values.tolist()
    padded = torch.full(top, fill, dtype=x.dtype)
    padded[tuple(slice(0, s) for s in x.shape)] = x.cpu()
    wire = padded.to(torch.uint8) if x.dtype == torch.bool else padded  # gloo has no bool all-gather
    every = accelerator.gather(wire.to(dev)).cpu().reshape(world, *top).to(x.dtype)
    return torch.cat([every[k, : int(shapes[k, 0])] for k in range(world)])


def gather_batch(accelerator, batch: ScoringBatch, pad_id: int) -> ScoringBatch:
    """`gather_rows` of every field of a ScoringBatch (padding as ScoringBatch.fills)."""
    fills = ScoringBatch.fills(pad_id)
    return ScoringBatch(**{name: gather_rows(accelerator, getattr(batch, name), fill) for name, fill in fills.items()})
