"""The eager reference sampler (docs/ARCHITECTURE.md §5) the fast path is tested against.

    decoder = ReferenceDecoder(model, head, prompt_ids, [RowParams(seed=1), RowParams(seed=2)])
    for step in decoder.steps():        # step.tokens: [B] ids, -1 where a row has finished
        ...
    rollouts = decoder.rollouts()       # token ids, log-probs, stop decisions, codes, lengths

transformers' Cohere2 forward with a dynamic cache, finished rows dropped from the batch,
host-side bookkeeping every token: the rules of `rumik_app.decode.sampling`, written out
plainly. The fast path (`rumik_app.decode.slots.BatchDecoder`) gives the same tokens, up to
float rounding of the logits (a token can differ only where two candidates' logits, or a
uniform and a CDF step, are within rounding of each other: ~1e-6 relative in float32, ~1e-2
in bf16). Rows stop on `</audio>`, on the stop head (> 0.5 at a frame boundary, after
`min_new_tokens`), or at their own `max_new_tokens`.
"""

from __future__ import annotations

import time
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicCache

from rumik_app.decode.rollouts import DecoderBase, Step
from rumik_app.decode.sampling import (
    FINISH_END_TOKEN,
    FINISH_MAX_TOKENS,
    FINISH_STOP_HEAD,
    STOP_SEED_OFFSET,
    STOP_THRESHOLD,
    draw_uniforms,
    max_stop_slots,
    penalize_repeats,
    sample_tokens,
    stop_floor,
)
from rumik_app.request import MAX_NEW_TOKENS_CAP


class ReferenceDecoder(DecoderBase):
    """The eager reference sampler (see the module docstring); the interface of BatchDecoder."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tensor_params()

    def _tensor_params(self) -> None:
        device = self.device
        rows = self.rows
        num_quantizers = self.layout.num_quantizers
        self.temperature = torch.tensor([row.temperature for row in rows], device=device, dtype=torch.float32)
        self.top_k = torch.tensor([row.top_k for row in rows], device=device, dtype=torch.long)
        self.top_p = torch.tensor([row.top_p for row in rows], device=device, dtype=torch.float32)
        self.penalty = torch.tensor([row.repetition_penalty for row in rows], device=device, dtype=torch.float32)
        self.seen = torch.zeros(len(rows), self.layout.num_units, device=device, dtype=torch.bool)  # codes produced
        self.max_new = torch.tensor([row.max_new_tokens for row in rows], device=device)
        self.stop_floor = torch.tensor([stop_floor(row.min_new_tokens, num_quantizers) for row in rows], device=device)
        self.u_token = torch.stack([draw_uniforms(row.seed, MAX_NEW_TOKENS_CAP) for row in rows]).to(device)
        self.u_stop = torch.stack(
            [draw_uniforms(row.seed + STOP_SEED_OFFSET, max_stop_slots(num_quantizers)) for row in rows]
        ).to(device)

    def _prefill(self) -> torch.Tensor:
        lengths = [len(prompt) for prompt in self.prompt_ids]
        width = max(lengths)
        ids = torch.full((len(lengths), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(lengths), width, dtype=torch.long)
        for row, prompt in enumerate(self.prompt_ids):  # left padding: every row ends at the same column
            ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt):] = 1
        ids = ids.to(self.device)
        mask = mask.to(self.device)
        self.padded = min(lengths) != width
        self.attention_mask = mask if self.padded else None
        self.position = (mask.sum(-1) - 1).long()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.cache = DynamicCache(config=self.model.config)
        out = self.model.body(input_ids=ids, attention_mask=self.attention_mask, position_ids=positions,
                              past_key_values=self.cache, use_cache=True)
        return out.last_hidden_state[:, -1]

    def _advance(self, tokens: torch.Tensor) -> torch.Tensor:
        self.position = self.position + 1
        if self.attention_mask is not None:
            ones = torch.ones_like(self.attention_mask[:, :1])
            self.attention_mask = torch.cat([self.attention_mask, ones], dim=-1)
        out = self.model.body(input_ids=tokens[:, None], attention_mask=self.attention_mask,
                              position_ids=self.position[:, None], past_key_values=self.cache, use_cache=True)
        return out.last_hidden_state[:, -1]

    def _stop_check(self, hidden: torch.Tensor, t: int) -> torch.Tensor:
        """Stop-head decisions at the boundary before position t for the live rows.

        hidden: [b, h] for the b live rows; returns bool [b], True where the row stops.
        """
        alive = self.alive
        eligible = t >= self.stop_floor[alive]
        if not bool(eligible.any()):
            return torch.zeros_like(eligible)
        logit = self.model.stop_logits(hidden)
        slot = t // self.layout.num_quantizers
        if self.stop_mode == "threshold":
            stop = torch.sigmoid(logit) > STOP_THRESHOLD
        else:
            stop = self.u_stop[alive, slot] < torch.sigmoid(logit)
        stop &= eligible
        log_prob = torch.where(stop, F.logsigmoid(logit), F.logsigmoid(-logit))
        rows = alive.cpu()
        self.stops.mask[rows, slot] = eligible.cpu()
        self.stops.decisions[rows, slot] = stop.cpu()
        self.stops.log_probs[rows, slot] = torch.where(eligible, log_prob, torch.zeros_like(log_prob)).cpu()
        return stop

    def _drop(self, done: torch.Tensor, reason: str, hidden: torch.Tensor) -> torch.Tensor:
        """Finish the live rows flagged in `done` [b] and compact the batch (cache, masks)."""
        if not bool(done.any()):
            return hidden
        for row in self.alive[done].tolist():
            self.finish[row] = reason
        keep = (~done).nonzero().squeeze(1)
        self.alive = self.alive[keep]
        if len(keep):  # finished rows stop costing compute: drop them from the KV cache
            self.cache.batch_select_indices(keep)
            self.position = self.position[keep]
            if self.attention_mask is not None:
                self.attention_mask = self.attention_mask[keep]
        return hidden[keep]

    @torch.no_grad()
    def steps(self) -> Iterator[Step]:
        """Run the decode loop, yielding each step's tokens (full batch order, -1 = finished)."""
        start = time.perf_counter()
        hidden = self._prefill()
        self.timings["prefill_s"] = time.perf_counter() - start
        num_quantizers = self.layout.num_quantizers
        self.alive = torch.arange(len(self.rows), device=self.device)
        for t in range(self.max_steps):  # t: the generated position being sampled (§5's t)
            phase = t % num_quantizers
            hidden = self._drop(t >= self.max_new[self.alive], FINISH_MAX_TOKENS, hidden)
            if phase == 0 and t > 0 and len(self.alive):
                hidden = self._drop(self._stop_check(hidden, t), FINISH_STOP_HEAD, hidden)
            if not len(self.alive):
                break
            alive = self.alive
            allow_end = (t >= self.stop_floor[alive]) & (phase == 0 or not self.head.restrict_phase)
            logits = self.head.logits(hidden, phase, allow_end)
            logits = penalize_repeats(logits, self.head.seen_columns(self.seen[alive], phase), self.penalty[alive])
            index, log_prob = sample_tokens(logits, self.temperature[alive], self.top_k[alive], self.top_p[alive],
                                            self.u_token[alive, t])
            tokens = self.head.index_to_token(index, phase)
            full = torch.full((len(self.rows),), -1, dtype=torch.long)
            full[alive.cpu()] = tokens.cpu()
            full_log_prob = torch.zeros(len(self.rows))
            full_log_prob[alive.cpu()] = log_prob.float().cpu()
            self._tokens.append(full)
            self._log_probs.append(full_log_prob)
            yield Step(t=t, tokens=full)
            ended = tokens == self.layout.audio_end_token_id
            self.seen[alive[~ended], tokens[~ended] - self.layout.first_unit_id] = True
            hidden = self._drop(ended, FINISH_END_TOKEN, hidden)
            if not len(self.alive):
                break
            hidden = self._advance(tokens[~ended])
        for row in self.alive.tolist():
            self.finish[row] = self.finish[row] or FINISH_MAX_TOKENS
        self.timings["total_s"] = time.perf_counter() - start
