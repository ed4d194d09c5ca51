"""The engine's sampling rules as batched tensor code, shared by vLLM's two runner interfaces.

`rumik_app.decode.slots.BatchDecoder` samples generated position n of a row as follows
(docs/ARCHITECTURE.md §5, `rumik_app.model.lm.AudioHead`):

- only the codebook q = n mod Q may be emitted (the 2,048 unit rows of that codebook);
- `</audio>` only at a frame boundary (q = 0) once n >= max(min_new_tokens, Q);
- at those same boundaries the stop head decides first: sigmoid(stop logit) > 0.5
  ("threshold") or u < sigmoid(stop logit) ("sample", u from the row's seed) ends the row
  with no token at n (finish reason "stop_head");
- the repetition penalty (`rumik_app.decode.sampling.penalize_repeats`, 1 = off) on the
  codes the row has produced, before the temperature;
- the token's log-prob is log softmax over the allowed rows at the row's temperature
  (1 for greedy), before top-k/top-p.

How that maps onto vLLM:

- `audio_logits` (called by the model's `compute_logits`) keeps the unit rows and
  `</audio>`, sets every other column to -inf, and writes the stop head's logit into the
  *stop column*: the first id after `</audio>` (an unused id in the published vocabulary).
- `apply_rules` (called by the logits processors) reads the stop column at eligible
  boundaries; a stopping row gets one finite entry, log p(stop) at the stop column, so
  whatever vLLM samples is the stop column (a stop token of the request), and the value
  vLLM reports for it is the stop decision's log-prob; the backend drops the token and
  reports "stop_head". Every other row gets the stop column at -inf, the phase
  restriction and the `</audio>` rule, and is divided by the row's temperature and
  normalised: the row then holds exactly the engine's log-probs. vLLM is run with
  temperature 1 (0 for greedy) and logprobs_mode="processed_logits": its top-k/top-p only
  sets entries to -inf, so the value it returns for the sampled token is the engine's
  log-prob, and a shift by the normaliser changes neither argmax, top-k, top-p nor sampling.

Per-request settings travel in `SamplingParams.extra_args["rumik"]` (see `RequestRules`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F

from rumik_app.decode.sampling import (
    STOP_SEED_OFFSET,
    STOP_THRESHOLD,
    RowParams,
    check_stop_mode,
    draw_uniforms,
    max_stop_slots,
    penalize_repeats,
    scoring_temperature,
    stop_floor,
)

EXTRA_ARGS_KEY = "rumik"
NEG_INF = float("-inf")


@dataclass(frozen=True)
class AudioColumns:
    """Where the audio rows sit in the vocabulary (all from config.json)."""

    first_unit_id: int
    num_quantizers: int
    codebook_size: int
    audio_end_token_id: int
    vocab_size: int

    @property
    def num_units(self) -> int:
        return self.codebook_size * self.num_quantizers

    @property
    def stop_column(self) -> int:
        """The unused id right after `</audio>` that carries the stop head (see module doc)."""
        return self.audio_end_token_id + 1

    @property
    def stop_slots(self) -> int:
        """Frame boundaries a row of at most MAX_NEW_TOKENS_CAP tokens can reach, plus one."""
        return max_stop_slots(self.num_quantizers)

    @classmethod
    def from_config(cls, config) -> "AudioColumns":
        """From a transformers config (vLLM's hf_config) holding the rumik-oss fields."""
        return cls.checked(int(config.first_unit_id), int(config.num_quantizers), int(config.codebook_size),
                           int(config.audio_end_token_id), int(config.vocab_size))

    @classmethod
    def from_layout(cls, layout, vocab_size: int) -> "AudioColumns":
        """From a `rumik_app.model.tokens.TokenLayout` and the vocabulary size."""
        return cls.checked(layout.first_unit_id, layout.num_quantizers, layout.codebook_size,
                           layout.audio_end_token_id, int(vocab_size))

    @classmethod
    def checked(cls, *fields) -> "AudioColumns":
        cols = cls(*fields)
        if cols.stop_column >= cols.vocab_size:
            raise ValueError(
                f"config.json: no unused id after </audio> ({cols.audio_end_token_id}) in a vocabulary of "
                f"{cols.vocab_size}; the vLLM backend needs one to carry the stop head"
            )
        return cols


@dataclass(frozen=True)
class RequestRules:
    """One request's settings, as sent in `SamplingParams.extra_args["rumik"]`: its row (the
    sampling settings declared once in `rumik_app.request`, checked there, and the seed) and
    the stop mode ("threshold" or "sample"). The processors apply the row's temperature (vLLM
    itself runs at 1, or 0 for greedy), min_new_tokens (no stop before it, and never before
    one whole frame), repetition_penalty (here rather than by vLLM, which would apply it after
    this processor has normalised the row) and, in "sample" mode, the stop uniforms of its seed.
    vLLM applies top_k, top_p and max_new_tokens itself (`SamplingParams`).
    """

    row: RowParams
    stop_mode: str

    def to_extra_args(self) -> dict:
        return {EXTRA_ARGS_KEY: {**asdict(self.row), "stop_mode": self.stop_mode}}

    @classmethod
    def from_sampling_params(cls, params) -> "RequestRules":
        """Read and check the rumik arguments (the declaration's checks); ValueError naming the fix otherwise."""
        args = (params.extra_args or {}).get(EXTRA_ARGS_KEY)
        if not isinstance(args, dict):
            raise ValueError(
                "rumik-oss-1 on vLLM needs SamplingParams.extra_args['rumik'] (the row's sampling settings, seed "
                "and stop_mode); build requests with rumik_app's vLLM backend "
                "(rumik_app.engine.loading.load_engine(..., backend='vllm'))"
            )
        missing = sorted({"stop_mode", *(spec.name for spec in fields(RowParams))} - set(args))
        if missing:  # the backend sends every one: a request made elsewhere is refused, not defaulted
            raise ValueError(f"bad extra_args['rumik'] {args!r}: it lacks {', '.join(missing)}")
        try:
            row = RowParams(**{name: value for name, value in args.items() if name != "stop_mode"})
            return cls(row, check_stop_mode(args["stop_mode"]))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"bad extra_args['rumik'] {args!r}: {exc}") from exc

    @property
    def repetition_penalty(self) -> float:
        return self.row.repetition_penalty

    def floor(self, num_quantizers: int) -> int:
        """First position where a stop may happen: max(min_new_tokens, Q)."""
        return stop_floor(self.row.min_new_tokens, num_quantizers)

    def effective_temperature(self) -> float:
        """What the row's logits are divided by: its temperature, or 1 for greedy."""
        return scoring_temperature(self.row.temperature)

    def stop_uniforms(self, cols: AudioColumns) -> torch.Tensor:
        """[stop_slots] uniforms for "sample" mode; NaN everywhere means "threshold"."""
        if self.stop_mode == "threshold":
            return torch.full((cols.stop_slots,), float("nan"))
        return draw_uniforms(self.row.seed + STOP_SEED_OFFSET, cols.stop_slots)


def audio_logits(logits: torch.Tensor, stop_logits: torch.Tensor, cols: AudioColumns) -> torch.Tensor:
    """Full-vocabulary logits [R, V] -> float32 [R, V] with only the unit rows and `</audio>`
    kept, -inf elsewhere, and the stop logits [R] in the stop column."""
    out = torch.full(logits.shape, NEG_INF, dtype=torch.float32, device=logits.device)
    units = slice(cols.first_unit_id, cols.first_unit_id + cols.num_units)
    out[:, units] = logits[:, units]
    out[:, cols.audio_end_token_id] = logits[:, cols.audio_end_token_id]
    out[:, cols.stop_column] = stop_logits.float()
    return out


def seen_units(output_ids: torch.Tensor, valid: torch.Tensor, cols: AudioColumns) -> torch.Tensor:
    """[r, num_units] bool: which audio codes each row has produced.
    output_ids: [r, L] long token ids; valid: [r, L] bool, the ones that count."""
    offset = output_ids - cols.first_unit_id
    valid = valid & (offset >= 0) & (offset < cols.num_units)
    seen = torch.zeros(output_ids.shape[0], cols.num_units + 1, dtype=torch.bool, device=output_ids.device)
    seen.scatter_(1, torch.where(valid, offset, cols.num_units), True)  # invalid ones land in a spare column
    return seen[:, :-1]


def apply_rules(logits: torch.Tensor, rows: torch.Tensor, position: torch.Tensor, floor: torch.Tensor,
                temperature: torch.Tensor, stop_uniform: torch.Tensor, cols: AudioColumns,
                penalty: torch.Tensor | None = None, seen: torch.Tensor | None = None) -> None:
    """Apply the engine's rules in place to `logits[rows]` (see the module docstring).

    logits: [R, V] float32 from `audio_logits`; rows: [r] long row indices to process;
    position: [r] long, generated position n being sampled; floor: [r] long,
    max(min_new_tokens, Q); temperature: [r] float32 > 0; stop_uniform: [r] float32, the
    row's uniform for this boundary ("sample") or NaN ("threshold"); penalty: [r] float32
    repetition penalties and seen: [r, num_units] bool codes produced (`seen_units`), or
    None when every row's penalty is 1.
    """
    if rows.numel() == 0:
        return
    q_count = cols.num_quantizers
    x = logits[rows]
    phase = position % q_count
    codes = torch.arange(cols.codebook_size, device=x.device)
    unit_ids = cols.first_unit_id + codes[None] * q_count + phase[:, None]  # [r, C]
    units = x.gather(1, unit_ids)
    eligible = (phase == 0) & (position >= floor)  # floor >= Q, so never at n = 0
    stop_logit = x[:, cols.stop_column]
    stop_prob = torch.sigmoid(stop_logit)
    threshold = torch.isnan(stop_uniform)
    stop = eligible & torch.where(threshold, stop_prob > STOP_THRESHOLD, stop_uniform < stop_prob)
    end = x[:, cols.audio_end_token_id].masked_fill(~eligible, NEG_INF)
    allowed = torch.cat([units, end[:, None]], dim=1)
    if penalty is not None:  # the engine's rule on the engine's columns (`AudioHead.seen_columns`)
        grid = seen.view(seen.shape[0], cols.codebook_size, q_count).gather(
            2, phase.view(-1, 1, 1).expand(-1, cols.codebook_size, 1)).squeeze(2)
        allowed = penalize_repeats(allowed, F.pad(grid, (0, 1), value=False), penalty)
    scaled = allowed / temperature[:, None]
    log_probs = scaled - torch.logsumexp(scaled, dim=1, keepdim=True)
    out = torch.full_like(x, NEG_INF)
    out.scatter_(1, unit_ids, log_probs[:, :-1])
    out[:, cols.audio_end_token_id] = log_probs[:, -1]
    out[stop] = NEG_INF
    out[stop, cols.stop_column] = F.logsigmoid(stop_logit[stop])
    logits[rows] = out
