"""What a batch of generations produced (`Rollouts`, the GRPO interface), packed in one place.

    rollouts = pack_rollouts(token_ids, log_probs, stops, finish, prompts, rows, owners, layout,
                             restrict_phase=True, stop_mode="threshold")
    rollouts.codes          # [B, Q, T] parsed frames, rollouts.num_frames [B]

Both in-process decoders (`rumik_app.decode.slots.BatchDecoder`, `.reference.ReferenceDecoder`)
share `DecoderBase` (argument checks, per-row bookkeeping) and end in `pack_rollouts`; the vLLM
engine packs its rows with the same function, so every backend returns the same structure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import torch

from rumik_app.decode.sampling import RowParams, check_stop_mode
from rumik_app.model.tokens import TokenLayout


@dataclass
class Rollouts:
    """What a batch of generations produced (the GRPO interface). B rows, N = longest row.

    token_ids: [B, N] long, generated ids (`</audio>` included when emitted), -1 padding.
    token_mask: [B, N] bool, True at generated positions.
    log_probs: [B, N] float32, log pi(token) under the audio-only distribution at the
        sampling temperature (before top-k/top-p truncation; greedy rows use temperature 1).
    stop_mask: [B, F] bool, True where the stop head made a decision (F = N // Q + 1;
        slot j is the boundary after j frames, i.e. before generated position j * Q).
    stop_decisions: [B, F] bool, True where it decided to stop.
    stop_log_probs: [B, F] float32, log p(decision) under sigmoid(stop logit).
    codes: [B, Q, T] long, parsed frames (zero padding); num_frames: [B] long.
    lengths: [B] long, generated tokens per row. finish_reasons: per row.
    prompt_ids: the prompt ids per row; request_index: which request each row samples;
    seeds, params: per-row sampling settings; restrict_phase, stop_mode: how it was sampled.
    """

    token_ids: torch.Tensor
    token_mask: torch.Tensor
    log_probs: torch.Tensor
    stop_mask: torch.Tensor
    stop_decisions: torch.Tensor
    stop_log_probs: torch.Tensor
    codes: torch.Tensor
    num_frames: torch.Tensor
    lengths: torch.Tensor
    finish_reasons: list[str]
    prompt_ids: list[list[int]]
    request_index: list[int]
    seeds: list[int]
    params: list[RowParams]
    restrict_phase: bool
    stop_mode: str
    timings: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.finish_reasons)


class StopRecord(NamedTuple):
    """The stop head's decisions per row and frame boundary: mask, decisions, log-probs, [B, >= F]."""

    mask: torch.Tensor
    decisions: torch.Tensor
    log_probs: torch.Tensor

    @classmethod
    def empty(cls, batch: int, slots: int) -> "StopRecord":
        return cls(torch.zeros(batch, slots, dtype=torch.bool), torch.zeros(batch, slots, dtype=torch.bool),
                   torch.zeros(batch, slots))


def pack_rollouts(token_ids: torch.Tensor, log_probs: torch.Tensor, stops: StopRecord, finish_reasons: list[str],
                  prompt_ids: list[list[int]], rows: list[RowParams], request_index: list[int], layout: TokenLayout,
                  restrict_phase: bool, stop_mode: str, timings: dict | None = None) -> Rollouts:
    """`Rollouts` from what a decoder recorded.

    token_ids: [B, N] long, -1 after a row's end; log_probs: [B, N] float32 (0 there);
    stops: per frame boundary, at least N // Q + 1 slots (cut to that here).
    """
    batch = len(rows)
    num_quantizers = layout.num_quantizers
    mask = token_ids >= 0
    parsed = [torch.from_numpy(layout.parse(row[row >= 0].tolist())[0]) for row in token_ids]  # [Q, T] each
    num_frames = torch.tensor([row_codes.shape[-1] for row_codes in parsed], dtype=torch.long)
    codes = torch.zeros(batch, num_quantizers, int(num_frames.max()) if batch else 0, dtype=torch.long)
    for row, row_codes in enumerate(parsed):
        codes[row, :, : row_codes.shape[-1]] = row_codes
    slots = token_ids.shape[1] // num_quantizers + 1
    return Rollouts(
        token_ids=token_ids, token_mask=mask, log_probs=log_probs, stop_mask=stops.mask[:, :slots],
        stop_decisions=stops.decisions[:, :slots], stop_log_probs=stops.log_probs[:, :slots], codes=codes,
        num_frames=num_frames, lengths=mask.sum(1), finish_reasons=list(finish_reasons), prompt_ids=prompt_ids,
        request_index=list(request_index), seeds=[row.seed for row in rows], params=list(rows),
        restrict_phase=restrict_phase, stop_mode=stop_mode, timings=dict(timings or {}),
    )


@dataclass
class Step:
    """One decoding step: `tokens` [B] (-1 for rows already finished), `t` the position."""

    t: int
    tokens: torch.Tensor


class DecoderBase:
    """What both in-process decoders share: argument checks, per-row bookkeeping, `rollouts()`.

    model: a `RumikOSSForCausalLM`; head: its `AudioHead`; prompt_ids: one id list per row;
    rows: one `RowParams` per row; request_index: which request each row samples.
    """

    def __init__(self, model, head, prompt_ids: list[list[int]], rows: list[RowParams], pad_id: int = 0,
                 stop_mode: str = "threshold", request_index: list[int] | None = None):
        check_stop_mode(stop_mode)
        if len(prompt_ids) != len(rows) or not rows:
            raise ValueError("need one RowParams per prompt, and at least one prompt")
        self.model = model
        self.head = head
        self.layout = head.layout
        self.prompt_ids = prompt_ids
        self.rows = rows
        self.pad_id = pad_id
        self.stop_mode = stop_mode
        self.request_index = request_index or list(range(len(rows)))
        self.device = model.get_input_embeddings().weight.device
        self.max_steps = max(r.max_new_tokens for r in rows)
        self._tokens: list[torch.Tensor] = []
        self._log_probs: list[torch.Tensor] = []
        self.stop_slots = self.max_steps // self.layout.num_quantizers + 1
        self.stops = StopRecord.empty(len(rows), self.stop_slots)
        self.finish = [""] * len(rows)
        self.timings: dict = {}

    def steps(self) -> Iterator[Step]:
        raise NotImplementedError

    def rollouts(self) -> Rollouts:
        """Collect everything generated (call after `steps()` is exhausted)."""
        batch = len(self.rows)
        token_ids = torch.stack(self._tokens, 1) if self._tokens else torch.full((batch, 0), -1)
        log_probs = torch.stack(self._log_probs, 1) if self._log_probs else torch.zeros(batch, 0)
        return pack_rollouts(token_ids, log_probs, self.stops, self.finish, self.prompt_ids, self.rows,
                             self.request_index, self.layout, self.head.restrict_phase, self.stop_mode, self.timings)
