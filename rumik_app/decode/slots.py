"""The fast decode path: a fixed-shape step with everything on the device, compiled.

    decoder = BatchDecoder(model, head, prompt_ids, [RowParams(seed=1), RowParams(seed=2)])
    for step in decoder.steps():   # step.tokens: [B] ids, -1 where a row has finished
        ...
    rollouts = decoder.rollouts()  # the same Rollouts as the reference decoder

    slots = SlotDecoder(model, head, batch=8, max_len=2560, compile=True)   # the slots underneath
    taken = slots.add([prompt_ids], [RowParams(seed=7)])   # prefill into free slots (between frames)
    frame = slots.run_frame()      # Q steps, then one copy to the host: FrameResult
    slots.release(taken[0])        # e.g. a client went away
    slots = SlotDecoder(model, head, batch=8, max_len=2560, bank=AdapterBank(model, source))  # library voices:
    slots.add([prompt_ids], [RowParams(seed=7, adapter="Arjun")])   # this row gets Arjun's LoRA

One step (`decode_step`) takes every slot through the rules of `rumik_app.decode.sampling`
(written out plainly in `rumik_app.decode.reference.ReferenceDecoder`), in this order, as tensors on the device:
  1. a row at its `max_new_tokens` finishes ("max_tokens");
  2. at a frame boundary (t mod Q == 0) after `max(min_new_tokens, Q)` tokens the stop head
     decides on the final hidden state (> 0.5, or a Bernoulli draw with the row's own
     pre-drawn uniform in "sample" mode); "stop" finishes the row;
  3. the audio head scores the rows of codebook t mod Q (+ `</audio>` at boundaries after
     the floor) and the row samples by inverse CDF with its pre-drawn uniform for position t;
     `</audio>` finishes the row ("end_token");
  4. every slot runs the body for one token (finished and free slots too, masked), so the
     shapes never change.
Nothing leaves the device inside a frame: tokens, log-probs and stop decisions go into
small frame buffers that `run_frame` copies to the host once per frame (Q tokens), where
"all rows finished" is checked. The batch has a fixed number of slots; callers pad to a
bucket (`batch_bucket`) so one compiled graph serves many batch sizes.

Library voices: a row whose RowParams name an `adapter` holds a slot of the decoder's
`AdapterBank` (rumik_app.voices.lora) from `add` to `release`; while any slot holds one, the
step runs the body with per-row LoRA (a second compiled graph), otherwise exactly as without.

All rows share the phase t mod Q, because rows join only at frame boundaries: that is what
continuous batching (`rumik_app.engine.scheduler`) relies on.

Compilation: `torch.compile(decode_step, fullgraph=True)`, with `mode="reduce-overhead"`
(CUDA graphs) on CUDA and inductor's default on CPU. The eager `ReferenceDecoder` in
`rumik_app.decode.reference` is what this path is tested against (same tokens).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from rumik_app.decode.rollouts import DecoderBase, Step
from rumik_app.decode.sampling import (
    END_TOKEN,
    FINISH_MAX_TOKENS,
    FINISH_NAMES,
    MAX_TOKENS,
    RUNNING,
    STOP_HEAD,
    STOP_SEED_OFFSET,
    STOP_THRESHOLD,
    RowParams,
    draw_uniforms,
    max_stop_slots,
    penalize_repeats,
    sample_tokens,
    stop_floor,
)
from rumik_app.model.lm import AudioHead
from rumik_app.model.static_body import StaticBody
from rumik_app.request import MAX_NEW_TOKENS_CAP
from rumik_app.voices.lora import AdapterBank

log = logging.getLogger(__name__)
# Cache lengths are rounded up to a multiple of this, so a few compiled shapes serve all.
CACHE_LENGTH_QUANTUM = 512
# Each distinct (batch, cache length, mode) is one compiled graph; allow plenty of them.
RECOMPILE_LIMIT = 64
# torch.compile backend when none is given: None = inductor (CUDA graphs on CUDA). Tests set
# "eager" to check tracing (no graph breaks) without paying for code generation.
COMPILE_BACKEND: str | None = None


def batch_bucket(rows: int) -> int:
    """Slots for `rows` rows: the next power of two (1, 2, 4, 8, ...)."""
    return 1 << max(0, math.ceil(math.log2(max(rows, 1))))


def cache_length(prompt_len: int, max_new_tokens: int) -> int:
    """Cache positions for a prompt and its new tokens, rounded up to CACHE_LENGTH_QUANTUM."""
    need = prompt_len + max_new_tokens + 1
    return CACHE_LENGTH_QUANTUM * math.ceil(need / CACHE_LENGTH_QUANTUM)


class DecodeState:
    """Per-slot decoding state, all on the device, allocated once (static addresses).

    t: [B] tokens generated; pos: [B] cache column of the next fed token; alive: [B];
    reason: [B] finish code; hidden: [B, h] the final hidden state predicting position t;
    phase: [] t mod Q shared by every live row; per-row sampling settings and pre-drawn
    uniforms; seen: [B, num_units] bool, the audio codes each row has produced (the
    repetition penalty); adapter: [B] each row's slot in the AdapterBank (0 = none);
    frame_* and stop_*: what the current frame produced, read by the host.
    """

    def __init__(self, batch: int, hidden_size: int, num_quantizers: int, num_units: int, device, dtype):
        long = dict(device=device, dtype=torch.long)
        flt = dict(device=device, dtype=torch.float32)
        self.t = torch.zeros(batch, **long)
        self.pos = torch.zeros(batch, **long)
        self.alive = torch.zeros(batch, device=device, dtype=torch.bool)
        self.reason = torch.zeros(batch, **long)
        self.hidden = torch.zeros(batch, hidden_size, device=device, dtype=dtype)
        self.phase = torch.zeros((), **long)
        self.temperature = torch.ones(batch, **flt)
        self.top_k = torch.zeros(batch, **long)
        self.top_p = torch.ones(batch, **flt)
        self.penalty = torch.ones(batch, **flt)
        self.seen = torch.zeros(batch, num_units, device=device, dtype=torch.bool)
        self.adapter = torch.zeros(batch, **long)
        self.floor = torch.zeros(batch, **long)
        self.max_new = torch.zeros(batch, **long)
        self.u_token = torch.zeros(batch, MAX_NEW_TOKENS_CAP, **flt)
        self.u_stop = torch.zeros(batch, max_stop_slots(num_quantizers), **flt)
        self.frame_tokens = torch.full((batch, num_quantizers), -1, **long)
        self.frame_log_probs = torch.zeros(batch, num_quantizers, **flt)
        self.stop_eligible = torch.zeros(batch, device=device, dtype=torch.bool)
        self.stop_decision = torch.zeros(batch, device=device, dtype=torch.bool)
        self.stop_log_prob = torch.zeros(batch, **flt)
        for value in vars(self).values():
            torch._dynamo.mark_static_address(value)


def decode_step(model, head: AudioHead, body: StaticBody, state: DecodeState, stop_mode: str, pad_id: int,
                bank: AdapterBank | None = None) -> None:
    """One token for every slot, in place on `state` (see the module docstring for the rules);
    with a bank, each row's body step adds its adapter (`state.adapter`)."""
    layout = head.layout
    position = state.t  # [B]: tokens each row has generated, the position it samples now
    phase = state.phase  # []: position mod Q, shared by every live row
    boundary = phase == 0
    at_max = state.alive & (position >= state.max_new)
    live = state.alive & ~at_max
    past_floor = position >= state.floor
    stop = _stop_head(model, state, live & boundary & past_floor, boundary, stop_mode, layout.num_quantizers)
    sampling = live & ~stop
    token, log_prob = _sample(head, state, past_floor, boundary)
    ended = sampling & (token == layout.audio_end_token_id)
    going = sampling & ~ended
    _record(state, token, log_prob, sampling, going, layout.first_unit_id)
    reason = torch.where(at_max, MAX_TOKENS, torch.where(stop, STOP_HEAD, torch.where(ended, END_TOKEN, state.reason)))
    state.reason.copy_(reason)
    # One body step for every slot (a fixed shape); only continuing rows keep its result.
    hidden = body.decode(torch.where(going, token, pad_id), state.pos, bank, state.adapter if bank else None)
    state.hidden.copy_(torch.where(going[:, None], hidden, state.hidden))
    state.t.copy_(position + sampling.long())
    state.pos.copy_(state.pos + going.long())
    state.alive.copy_(going)
    state.phase.copy_((phase + 1) % layout.num_quantizers)


def _stop_head(model, state: DecodeState, eligible: torch.Tensor, boundary: torch.Tensor, stop_mode: str,
               num_quantizers: int) -> torch.Tensor:
    """Where the stop head ends a row ([B] bool, only where `eligible`): computed for every row
    (a fixed shape), recorded with its log-prob in the frame's stop buffers at a boundary."""
    logit = model.stop_logits(state.hidden)
    p_stop = torch.sigmoid(logit)
    if stop_mode == "threshold":
        stop = p_stop > STOP_THRESHOLD
    else:  # a Bernoulli draw with the row's pre-drawn uniform for this boundary
        slot = (state.t // num_quantizers).clamp(max=state.u_stop.shape[1] - 1)
        stop = state.u_stop.gather(1, slot[:, None]).squeeze(1) < p_stop
    stop = stop & eligible
    stop_log_prob = torch.where(stop, F.logsigmoid(logit), F.logsigmoid(-logit))
    state.stop_eligible.copy_(torch.where(boundary, eligible, state.stop_eligible))
    state.stop_decision.copy_(torch.where(boundary, stop, state.stop_decision))
    state.stop_log_prob.copy_(torch.where(boundary, torch.where(eligible, stop_log_prob, 0.0), state.stop_log_prob))
    return stop


def _sample(head: AudioHead, state: DecodeState, past_floor: torch.Tensor,
            boundary: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row's next token id and its log-prob ([B] each): the audio head's rows of this
    codebook (and `</audio>` where a row may end), the repetition penalty, then the sampler
    with the row's pre-drawn uniform for this position."""
    allow_end = past_floor & (boundary if head.restrict_phase else torch.ones_like(boundary))
    logits = head.step_logits(state.hidden, state.phase, allow_end)
    logits = penalize_repeats(logits, head.seen_columns(state.seen, state.phase), state.penalty)
    column = state.t.clamp(max=state.u_token.shape[1] - 1)
    uniform = state.u_token.gather(1, column[:, None]).squeeze(1)
    index, log_prob = sample_tokens(logits, state.temperature, state.top_k, state.top_p, uniform)
    return head.index_to_token(index, state.phase), log_prob


def _record(state: DecodeState, token: torch.Tensor, log_prob: torch.Tensor, sampling: torch.Tensor,
            going: torch.Tensor, first_unit_id: int) -> None:
    """The sampled tokens into the frame's buffers (-1 where a row sampled nothing), and the
    codes of continuing rows into `seen` (the repetition penalty's memory)."""
    unit = (token - first_unit_id).clamp(0, state.seen.shape[1] - 1)[:, None]
    state.seen.scatter_(1, unit, state.seen.gather(1, unit) | going[:, None])
    column = state.phase.view(1).expand(token.shape[0], 1)
    state.frame_tokens.scatter_(1, column, torch.where(sampling, token, -1)[:, None])
    state.frame_log_probs.scatter_(1, column, torch.where(sampling, log_prob.float(), 0.0)[:, None])


@dataclass
class FrameResult:
    """What one frame (Q steps) produced, on the host. B = number of slots.

    tokens: [B, Q] long (-1 where a row produced nothing); log_probs: [B, Q] float32;
    stop_eligible / stop_decision / stop_log_prob: [B], the stop head at this frame's start;
    alive: [B] bool after the frame; reason: [B] finish code (0 while running).
    """

    tokens: torch.Tensor
    log_probs: torch.Tensor
    stop_eligible: torch.Tensor
    stop_decision: torch.Tensor
    stop_log_prob: torch.Tensor
    alive: torch.Tensor
    reason: torch.Tensor


class SlotDecoder:
    """B decoding slots over one static KV cache, stepped a frame at a time.

    compile: wrap the step in `torch.compile(fullgraph=True)` (CUDA graphs on CUDA).
    backend: a torch.compile backend to use instead of the default (tests count graphs).
    bank: the AdapterBank that rows naming an `adapter` (a library voice) take their LoRA from.
    """

    def __init__(self, model, head: AudioHead, batch: int, max_len: int, stop_mode: str = "threshold",
                 pad_id: int = 0, compile: bool = False, backend=None, bank: AdapterBank | None = None):
        self.model = model
        self.head = head
        self.layout = head.layout
        self.batch = batch
        self.max_len = max_len
        self.stop_mode = stop_mode
        self.pad_id = pad_id
        weight = model.get_input_embeddings().weight
        self.device = weight.device
        self.body = StaticBody(model, batch, max_len)
        self.state = DecodeState(batch, model.config.hidden_size, self.layout.num_quantizers, self.layout.num_units,
                                 self.device, weight.dtype)
        self.free = list(range(batch))
        self.bank = bank
        self.adapters: dict[int, int] = {}  # decode slot -> its bank slot, for rows with an adapter
        self.in_use = False  # set while a BatchDecoder or a server loop drives it
        self.compiled = False
        self._checked: set = set()  # the compiled steps whose first frame checked every guard
        self._step = self._eager_step
        self._adapted_step = self._eager_adapted_step
        self._backend = backend
        if compile:
            self._step = self._compiled_step(backend)
            if bank is not None:
                self._adapted_step = self._compiled_step(backend, bank)
            self.compiled = True

    def use_bank(self, bank: AdapterBank | None) -> None:
        """Take adapters from `bank` from now on (the engine's library changed); only while no
        row holds an adapter. The adapted step is rebuilt (compiled again when compiling)."""
        if self.adapters:
            raise RuntimeError("use_bank while rows hold adapters; release them first")
        self.bank = bank
        self._checked.discard(self._adapted_step)
        self._adapted_step = self._eager_adapted_step
        if self.compiled and bank is not None:
            self._adapted_step = self._compiled_step(self._backend, bank)

    def _eager_step(self) -> None:
        decode_step(self.model, self.head, self.body, self.state, self.stop_mode, self.pad_id)

    def _eager_adapted_step(self) -> None:
        decode_step(self.model, self.head, self.body, self.state, self.stop_mode, self.pad_id, self.bank)

    def _compiled_step(self, backend=None, bank: AdapterBank | None = None):
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
        backend = backend if backend is not None else COMPILE_BACKEND
        cuda = self.device.type == "cuda" and backend is None
        if backend is not None:
            fn = torch.compile(decode_step, fullgraph=True, backend=backend)
        else:
            fn = torch.compile(decode_step, fullgraph=True, mode="reduce-overhead" if cuda else None)
        # Bound once: the compiled graph guards on these very objects.
        arguments = (self.model, self.head, self.body, self.state, self.stop_mode, self.pad_id, bank)

        def step() -> None:
            if cuda:
                torch.compiler.cudagraph_mark_step_begin()
            if step in self._checked:
                fn(*arguments)
                return
            try:  # the first call compiles; compilation fails before the step mutates anything
                fn(*arguments)
            except Exception as exc:  # noqa: BLE001 - any compiler failure: run eagerly instead
                log.warning("compiling the decode step failed (%s: %s); decoding eagerly", type(exc).__name__,
                            str(exc).splitlines()[0] if str(exc) else "")
                self._step, self._adapted_step = self._eager_step, self._eager_adapted_step
                self.compiled = False
                (self._eager_adapted_step if bank is not None else self._eager_step)()

        return step

    @torch.no_grad()
    def add(self, prompt_ids: Sequence[list[int]], rows: Sequence[RowParams]) -> list[int]:
        """Prefill prompts into free slots and arm them; only between frames. Returns the slots.

        Raises ValueError if there are not enough free slots or a prompt does not fit.
        """
        if len(prompt_ids) != len(rows) or not rows:
            raise ValueError("need one RowParams per prompt, and at least one prompt")
        if len(rows) > len(self.free):
            raise ValueError(f"{len(rows)} rows do not fit in {len(self.free)} free slots")
        longest = max(len(p) for p in prompt_ids) + max(r.max_new_tokens for r in rows)
        if longest >= self.max_len:
            raise ValueError(f"prompt + max_new_tokens = {longest} does not fit a cache of {self.max_len}")
        adapters = self._acquire(rows)
        slots = [self.free.pop(0) for _ in rows]
        for slot, adapter in zip(slots, adapters, strict=True):
            if adapter:
                self.adapters[slot] = adapter
        try:
            hidden = self.body.prefill(list(prompt_ids), slots, self.bank if any(adapters) else None, adapters)
            self._arm(slots, [len(p) for p in prompt_ids], rows, hidden)
            self.state.adapter[torch.tensor(slots, device=self.device)] = torch.tensor(adapters, device=self.device)
        except BaseException:
            for slot in slots:  # nothing half-added: the slots are free and their adapters unpinned
                self.release(slot)
            raise
        return slots

    def _acquire(self, rows: Sequence[RowParams]) -> list[int]:
        """Each row's bank slot (0 without an adapter), pinned; all or none (VoiceError)."""
        wanted = [row.adapter for row in rows]
        if any(wanted) and self.bank is None:
            raise ValueError("rows name adapters, but this SlotDecoder has no AdapterBank")
        taken: list[int] = []
        try:
            for name in wanted:
                taken.append(self.bank.acquire(name) if name else 0)
        except Exception:
            for slot in taken:
                self.bank.release(slot)
            raise
        return taken

    def _arm(self, slots: list[int], lengths: list[int], rows: Sequence[RowParams], hidden: torch.Tensor) -> None:
        """Write the new rows' state into their slots: position 0, their prompt lengths, sampling
        settings and pre-drawn uniforms (tokens from the row's seed, stop decisions from seed +
        STOP_SEED_OFFSET), and the hidden state that predicts their first token."""
        state = self.state
        index = torch.tensor(slots, device=self.device)

        def fill(buffer: torch.Tensor, values) -> None:
            buffer[index] = torch.as_tensor(values, dtype=buffer.dtype).to(self.device)

        fill(state.t, [0] * len(slots))
        fill(state.pos, lengths)
        fill(state.alive, [True] * len(slots))
        fill(state.reason, [RUNNING] * len(slots))
        state.hidden[index] = hidden.to(state.hidden.dtype)
        fill(state.temperature, [row.temperature for row in rows])
        fill(state.top_k, [row.top_k for row in rows])
        fill(state.top_p, [row.top_p for row in rows])
        fill(state.penalty, [row.repetition_penalty for row in rows])
        state.seen[index] = False
        fill(state.floor, [stop_floor(row.min_new_tokens, self.layout.num_quantizers) for row in rows])
        fill(state.max_new, [row.max_new_tokens for row in rows])
        state.u_token[index] = torch.stack([draw_uniforms(row.seed, state.u_token.shape[1]) for row in rows]).to(
            self.device)
        state.u_stop[index] = torch.stack([draw_uniforms(row.seed + STOP_SEED_OFFSET, state.u_stop.shape[1])
                                           for row in rows]).to(self.device)

    def release(self, slot: int) -> None:
        """Free a slot (its row stops at once, its adapter is unpinned); only between frames."""
        self.state.alive[slot] = False
        self._unpin(slot)
        if slot not in self.free:
            self.free.append(slot)

    def reset(self) -> None:
        """Free every slot."""
        self.state.alive.fill_(False)
        self.state.phase.fill_(0)
        for slot in list(self.adapters):
            self._unpin(slot)
        self.free = list(range(self.batch))

    def _unpin(self, slot: int) -> None:
        if (adapter := self.adapters.pop(slot, 0)) and self.bank is not None:
            self.bank.release(adapter)
            self.state.adapter[slot] = 0

    def _stance(self, step):
        """While stepping a compiled decoder, check only the guards that tell its compiled
        graphs apart: the full guard set (every parameter and buffer) was checked by the
        first call, nothing changes shape or dtype between steps, and a full check costs
        more than a whole step on CPU. So modules must not be swapped (e.g. wrapped by peft)
        after a compiled decoder's first frame: build a new decoder then."""
        if not (self.compiled and step in self._checked):
            return contextlib.nullcontext()
        return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)

    @torch.no_grad()
    def run_frame(self) -> FrameResult:
        """Q steps for every slot, then one transfer of the frame's results to the host.

        A frame is exactly Q steps, so between frames the phase is always 0: rows join there.
        """
        state = self.state
        q = self.layout.num_quantizers  # Q, as the docs write it: columns [0, Q) tokens, [Q, 2Q) log-probs
        adapted = bool(self.adapters)  # the step with per-row LoRA while any row holds an adapter
        with self._stance(self._adapted_step if adapted else self._step):
            for _ in range(q):  # looked up each time: a step that fails to compile is replaced
                (self._adapted_step if adapted else self._step)()
        self._checked.add(self._adapted_step if adapted else self._step)
        # One packed copy (token ids < 2**24 are exact in float32): one sync per frame.
        flags = [state.stop_eligible, state.stop_decision, state.stop_log_prob, state.alive, state.reason]
        packed = torch.cat([state.frame_tokens.float(), state.frame_log_probs,
                            *(flag.float()[:, None] for flag in flags)], 1)
        host = packed.cpu()
        return FrameResult(
            tokens=host[:, :q].long(), log_probs=host[:, q : 2 * q].clone(),
            stop_eligible=host[:, 2 * q].bool(), stop_decision=host[:, 2 * q + 1].bool(),
            stop_log_prob=host[:, 2 * q + 2].clone(), alive=host[:, 2 * q + 3].bool(), reason=host[:, 2 * q + 4].long(),
        )

    @torch.no_grad()
    def warmup(self) -> float:
        """Run (and so compile) the step once on dummy rows; returns the seconds it took."""
        start = time.perf_counter()
        self.reset()
        slots = self.add([[self.pad_id, self.pad_id]],
                         [RowParams(seed=0, max_new_tokens=2 * self.layout.num_quantizers)])
        for _ in range(2):
            self.run_frame()
        for slot in slots:
            self.release(slot)
        self.reset()
        return time.perf_counter() - start


class BatchDecoder(DecoderBase):
    """The fast sampler: the rows run in the slots of a `SlotDecoder` (static cache, fixed
    shapes, compiled on request), a frame at a time; see the module docstring.

    slots: a SlotDecoder to reuse (the engine keeps one per shape, so a compiled step is
    reused); None builds one sized for these rows (batch bucket, cache length bucket).
    compile: when building one, compile its step.
    """

    def __init__(self, model, head: AudioHead, prompt_ids: list[list[int]],
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
        slots = self.slots
        if slots.in_use:  # taken by another caller since we were built: use a private one
            slots = self.slots = SlotDecoder(self.model, self.head, slots.batch, slots.max_len,
                                             stop_mode=self.stop_mode, pad_id=self.pad_id, compile=slots.compiled,
                                             bank=slots.bank)
        slots.reset()
        slots.in_use = True
        try:
            ids = slots.add(self.prompt_ids, self.rows)
            self.timings["prefill_s"] = time.perf_counter() - start
            position = 0
            for frame_index in range(self.stop_slots):
                frame = slots.run_frame()
                self._record_stops(frame, ids, frame_index)
                for column in range(self.layout.num_quantizers):
                    tokens = frame.tokens[ids, column]
                    if bool((tokens >= 0).any()):
                        self._tokens.append(tokens)
                        self._log_probs.append(frame.log_probs[ids, column])
                        yield Step(t=position, tokens=tokens)
                        position += 1
                if not bool(frame.alive[ids].any()):
                    break
            reasons = frame.reason[ids].tolist()
            self.finish = [FINISH_NAMES.get(code, FINISH_MAX_TOKENS) for code in reasons]
        finally:
            slots.reset()
            slots.in_use = False
        self.timings["total_s"] = time.perf_counter() - start

    def _record_stops(self, frame, ids: list[int], frame_index: int) -> None:
        """The stop head's decision at this frame's start (slot = frames generated so far)."""
        self.stops.mask[:, frame_index] = frame.stop_eligible[ids]
        self.stops.decisions[:, frame_index] = frame.stop_decision[ids]
        self.stops.log_probs[:, frame_index] = frame.stop_log_prob[ids]
