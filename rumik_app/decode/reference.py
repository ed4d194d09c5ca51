"""The one sampler (docs/ARCHITECTURE.md §5): batched decoding over the audio-only head.

    decoder = BatchDecoder(model, head, prompt_ids, [RowParams(seed=1), RowParams(seed=2)])
    for step in decoder.steps():        # step.tokens: [B] ids, -1 where a row has finished
        ...
    rollouts = decoder.rollouts()       # token ids, log-probs, stop decisions, codes, lengths

Two implementations of the same rules:
  BatchDecoder       the fast path (`rumik_app.decode.slots`): a static KV cache, a fixed-shape
                     step with sampling and stopping on the device, compiled on request;
                     tokens reach the host once per frame (Q tokens).
  ReferenceDecoder   the eager reference it is tested against: transformers' Cohere2 forward
                     with a dynamic cache, finished rows dropped from the batch, host-side
                     bookkeeping every token.

Each row has its own seed: its uniforms are drawn up front from a CPU `torch.Generator`, so
a (request, seed) pair gives the same tokens alone or in a batch, on any device, on either
path, up to float rounding of the logits (a token can differ only where two candidates'
logits, or a uniform and a CDF step, are within rounding of each other: ~1e-6 relative in
float32, ~1e-2 in bf16). Sampling is inverse-CDF over the temperature/top-k/top-p filtered
distribution. Rows stop on `</audio>`, on the stop head (> 0.5 at a frame boundary, after
`min_new_tokens`), or at their own `max_new_tokens`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicCache

from rumik_app.decode.slots import FINISH_NAMES, SlotDecoder, batch_bucket, cache_length
from rumik_app.model.lm import STOP_THRESHOLD, AudioHead, RumikOSSForCausalLM
from rumik_app.request import MAX_NEW_TOKENS_CAP
from rumik_app.decode.sampling import STOP_SEED_OFFSET, RowParams, draw_uniforms, sample_tokens

__all__ = ["BatchDecoder", "ReferenceDecoder", "Rollouts", "RowParams", "Step", "draw_uniforms", "sample_tokens"]

STOP_MODES = ("threshold", "sample")
FINISH_END_TOKEN, FINISH_STOP_HEAD, FINISH_MAX_TOKENS = "end_token", "stop_head", "max_tokens"


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


@dataclass
class Step:
    """One decoding step: `tokens` [B] (-1 for rows already finished), `t` the position."""

    t: int
    tokens: torch.Tensor


class _Decoder:
    """What both decoders share: argument checks, per-row bookkeeping and `rollouts()`."""

    def __init__(
        self,
        model: RumikOSSForCausalLM,
        head: AudioHead,
        prompt_ids: list[list[int]],
        rows: list[RowParams],
        pad_id: int = 0,
        stop_mode: str = "threshold",
        request_index: list[int] | None = None,
    ):
        if stop_mode not in STOP_MODES:
            raise ValueError(f"stop_mode must be one of {STOP_MODES}")
        if len(prompt_ids) != len(rows) or not rows:
            raise ValueError("need one RowParams per prompt, and at least one prompt")
        self.model, self.head, self.layout = model, head, head.layout
        self.prompt_ids, self.rows, self.pad_id, self.stop_mode = prompt_ids, rows, pad_id, stop_mode
        self.request_index = request_index or list(range(len(rows)))
        self.device = model.get_input_embeddings().weight.device
        self.max_steps = max(min(r.max_new_tokens, MAX_NEW_TOKENS_CAP) for r in rows)
        self._tokens: list[torch.Tensor] = []
        self._log_probs: list[torch.Tensor] = []
        q = self.layout.num_quantizers
        self.stop_slots = self.max_steps // q + 1
        batch = len(rows)
        self.stop_mask = torch.zeros(batch, self.stop_slots, dtype=torch.bool)
        self.stop_decisions = torch.zeros(batch, self.stop_slots, dtype=torch.bool)
        self.stop_log_probs = torch.zeros(batch, self.stop_slots)
        self.finish = [""] * batch
        self.timings: dict = {}

    def steps(self) -> Iterator[Step]:
        raise NotImplementedError

    def rollouts(self) -> Rollouts:
        """Collect everything generated (call after `steps()` is exhausted)."""
        batch, q = len(self.rows), self.layout.num_quantizers
        token_ids = torch.stack(self._tokens, 1) if self._tokens else torch.full((batch, 0), -1)
        log_probs = torch.stack(self._log_probs, 1) if self._log_probs else torch.zeros(batch, 0)
        mask = token_ids >= 0
        parsed = [torch.from_numpy(self.layout.parse(row[row >= 0].tolist())[0]) for row in token_ids]
        num_frames = torch.tensor([c.shape[-1] for c in parsed], dtype=torch.long)
        codes = torch.zeros(batch, q, int(num_frames.max()) if batch else 0, dtype=torch.long)
        for i, c in enumerate(parsed):
            codes[i, :, : c.shape[-1]] = c
        slots = token_ids.shape[1] // q + 1
        return Rollouts(
            token_ids=token_ids, token_mask=mask, log_probs=log_probs,
            stop_mask=self.stop_mask[:, :slots], stop_decisions=self.stop_decisions[:, :slots],
            stop_log_probs=self.stop_log_probs[:, :slots], codes=codes, num_frames=num_frames,
            lengths=mask.sum(1), finish_reasons=list(self.finish), prompt_ids=self.prompt_ids,
            request_index=list(self.request_index), seeds=[r.seed for r in self.rows], params=list(self.rows),
            restrict_phase=self.head.restrict_phase, stop_mode=self.stop_mode, timings=dict(self.timings),
        )


class ReferenceDecoder(_Decoder):
    """The eager reference sampler (see the module docstring); same interface as BatchDecoder."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._tensor_params()

    def _tensor_params(self) -> None:
        dev, rows = self.device, self.rows
        self.temperature = torch.tensor([r.temperature for r in rows], device=dev, dtype=torch.float32)
        self.top_k = torch.tensor([r.top_k for r in rows], device=dev, dtype=torch.long)
        self.top_p = torch.tensor([r.top_p for r in rows], device=dev, dtype=torch.float32)
        self.max_new = torch.tensor([min(r.max_new_tokens, MAX_NEW_TOKENS_CAP) for r in rows], device=dev)
        # No stop (head or </audio>) before min_new_tokens, and never before one whole frame.
        self.stop_floor = torch.tensor(
            [max(r.min_new_tokens, self.layout.num_quantizers) for r in rows], device=dev
        )
        q = self.layout.num_quantizers
        self.u_token = torch.stack([draw_uniforms(r.seed, MAX_NEW_TOKENS_CAP) for r in rows]).to(dev)
        self.u_stop = torch.stack(
            [draw_uniforms(r.seed + STOP_SEED_OFFSET, MAX_NEW_TOKENS_CAP // q + 1) for r in rows]
        ).to(dev)

    def _prefill(self) -> torch.Tensor:
        lengths = [len(p) for p in self.prompt_ids]
        width = max(lengths)
        ids = torch.full((len(lengths), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros(len(lengths), width, dtype=torch.long)
        for i, p in enumerate(self.prompt_ids):  # left padding: every row ends at the same column
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        self.padded = min(lengths) != width
        self.attention_mask = mask if self.padded else None
        self.position = (mask.sum(-1) - 1).long()
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.cache = DynamicCache(config=self.model.config)
        out = self.model.body(input_ids=ids, attention_mask=self.attention_mask, position_ids=positions,
                              cache=self.cache, use_cache=True)
        return out.last_hidden_state[:, -1]

    def _advance(self, tokens: torch.Tensor) -> torch.Tensor:
        self.position = self.position + 1
        if self.attention_mask is not None:
            ones = torch.ones_like(self.attention_mask[:, :1])
            self.attention_mask = torch.cat([self.attention_mask, ones], dim=-1)
        out = self.model.body(input_ids=tokens[:, None], attention_mask=self.attention_mask,
                              position_ids=self.position[:, None], cache=self.cache, use_cache=True)
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
        logp = torch.where(stop, F.logsigmoid(logit), F.logsigmoid(-logit))
        rows = alive.cpu()
        self.stop_mask[rows, slot] = eligible.cpu()
        self.stop_decisions[rows, slot] = stop.cpu()
        self.stop_log_probs[rows, slot] = torch.where(eligible, logp, torch.zeros_like(logp)).cpu()
        return stop

    def _drop(self, done: torch.Tensor, reason: str, hidden: torch.Tensor) -> torch.Tensor:
        """Finish the live rows flagged in `done` [b] and compact the batch (cache, masks)."""
        if not bool(done.any()):
            return hidden
        for i in self.alive[done].tolist():
            self.finish[i] = reason
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
        q = self.layout.num_quantizers
        self.alive = torch.arange(len(self.rows), device=self.device)
        for t in range(self.max_steps):
            hidden = self._drop(t >= self.max_new[self.alive], FINISH_MAX_TOKENS, hidden)
            if t % q == 0 and t > 0 and len(self.alive):
                hidden = self._drop(self._stop_check(hidden, t), FINISH_STOP_HEAD, hidden)
            if not len(self.alive):
                break
            alive = self.alive
            allow_end = (t >= self.stop_floor[alive]) & (t % q == 0 or not self.head.restrict_phase)
            logits = self.head.logits(hidden, t % q, allow_end)
            index, logp = sample_tokens(logits, self.temperature[alive], self.top_k[alive], self.top_p[alive],
                                        self.u_token[alive, t])
            tokens = self.head.index_to_token(index, t % q)
            full = torch.full((len(self.rows),), -1, dtype=torch.long)
            full[alive.cpu()] = tokens.cpu()
            full_logp = torch.zeros(len(self.rows))
            full_logp[alive.cpu()] = logp.float().cpu()
            self._tokens.append(full)
            self._log_probs.append(full_logp)
            yield Step(t=t, tokens=full)
            ended = tokens == self.layout.audio_end_token_id
            hidden = self._drop(ended, FINISH_END_TOKEN, hidden)
            if not len(self.alive):
                break
            hidden = self._advance(tokens[~ended])
        for i in self.alive.tolist():
            self.finish[i] = self.finish[i] or FINISH_MAX_TOKENS
        self.timings["total_s"] = time.perf_counter() - start


class BatchDecoder(_Decoder):
    """The fast sampler: the rows run in the slots of a `SlotDecoder` (static cache, fixed
    shapes, compiled on request), a frame at a time; see the module docstring.

    slots: a SlotDecoder to reuse (the engine keeps one per shape, so a compiled step is
    reused); None builds one sized for these rows (batch bucket, cache length bucket).
    compile: when building one, compile its step.
    """

    def __init__(self, model: RumikOSSForCausalLM, head: AudioHead, prompt_ids: list[list[int]],
                 rows: list[RowParams], pad_id: int = 0, stop_mode: str = "threshold",
                 request_index: list[int] | None = None, slots: SlotDecoder | None = None, compile: bool = False):
        super().__init__(model, head, prompt_ids, rows, pad_id, stop_mode, request_index)
        longest = max(len(p) for p in prompt_ids)
        if slots is None:
            slots = SlotDecoder(model, head, batch_bucket(len(rows)), cache_length(longest, self.max_steps),
                                stop_mode=stop_mode, pad_id=pad_id, compile=compile)
        if slots.batch < len(rows) or slots.stop_mode != stop_mode or slots.head is not head:
            raise ValueError("the SlotDecoder given does not fit these rows (batch, stop mode or head)")
        self.slots = slots

    @torch.no_grad()
    def steps(self) -> Iterator[Step]:
        """Run the decode loop, yielding each step's tokens (full batch order, -1 = finished).

        Tokens arrive a frame (Q steps) at a time: the device runs a whole frame before the
        host sees it.
        """
        start = time.perf_counter()
        dec, q = self.slots, self.layout.num_quantizers
        if dec.in_use:  # taken by another caller since we were built: use a private one
            dec = self.slots = SlotDecoder(self.model, self.head, dec.batch, dec.max_len, stop_mode=self.stop_mode,
                                           pad_id=self.pad_id, compile=dec.compiled)
        dec.reset()
        dec.in_use = True
        try:
            ids = dec.add(self.prompt_ids, self.rows)
            self.timings["prefill_s"] = time.perf_counter() - start
            t = 0
            for frame_index in range(self.stop_slots):
                frame = dec.run_frame()
                self._record_stops(frame, ids, frame_index)
                for k in range(q):
                    tokens = frame.tokens[ids, k]
                    if bool((tokens >= 0).any()):
                        self._tokens.append(tokens)
                        self._log_probs.append(frame.log_probs[ids, k])
                        yield Step(t=t, tokens=tokens)
                        t += 1
                if not bool(frame.alive[ids].any()):
                    break
            reasons = frame.reason[ids].tolist()
            self.finish = [FINISH_NAMES.get(code, FINISH_MAX_TOKENS) for code in reasons]
        finally:
            dec.reset()
            dec.in_use = False
        self.timings["total_s"] = time.perf_counter() - start

    def _record_stops(self, frame, ids: list[int], frame_index: int) -> None:
        """The stop head's decision at this frame's start (slot = frames generated so far)."""
        self.stop_mask[:, frame_index] = frame.stop_eligible[ids]
        self.stop_decisions[:, frame_index] = frame.stop_decision[ids]
        self.stop_log_probs[:, frame_index] = frame.stop_log_prob[ids]
