"""`RumikOSSForCausalLM` (Cohere2 body + stop head) and the audio-only output head.

The published checkpoint ships `modeling_rumik_oss.py` for `trust_remote_code`; we never run
it. This module is our own definition of the same network, matching its weight names:

    model.embed_tokens.weight            tied with the output projection (no lm_head.weight)
    model.layers.{i}.*, model.norm.weight   transformers' Cohere2 body
    stop_predictor.0.*  LayerNorm(h)     stop_predictor.1.*  Linear(h, max(64, h // 4))
    (2 = GELU, no weights)               stop_predictor.3.*  Linear(., 1)

`AudioHead` replaces the 277k-row LM head at inference and in GRPO: it multiplies the final
hidden state by the unit rows of the (tied) embedding plus the `</audio>` row only, times
`logit_scale`, optionally restricted to the codebook the position needs (q = step mod Q).
It reads the live embedding every call (views, no copies), so it never goes stale while
training updates the weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Cohere2Config, Cohere2ForCausalLM

from rumik_app.model.tokens import TokenLayout


def build_stop_predictor(hidden_size: int) -> nn.Sequential:
    """LayerNorm(h) -> Linear(h, max(64, h//4)) -> GELU -> Linear(., 1): logit of 'ends here'."""
    width = max(64, hidden_size // 4)
    return nn.Sequential(nn.LayerNorm(hidden_size), nn.Linear(hidden_size, width), nn.GELU(), nn.Linear(width, 1))


class RumikOSSForCausalLM(Cohere2ForCausalLM):
    """Cohere2 causal LM over text + Mimi unit tokens, plus a stop head.

    `forward` is transformers' (full-vocabulary logits, used by SFT); `stop_logits(hidden)`
    applies the stop head to final (post-norm) hidden states [..., h] -> [...].
    """

    config_class = Cohere2Config

    def __init__(self, config: Cohere2Config):
        super().__init__(config)
        self.stop_predictor = build_stop_predictor(config.hidden_size)
        self.post_init()

    def stop_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [..., h] final hidden states -> stop logits [...] (float32)."""
        return self.stop_predictor(hidden).squeeze(-1).float()

    def body(self, **kwargs):
        """The Cohere2 body (no LM head): returns `last_hidden_state` [B, T, h] and the cache."""
        return self.model(**kwargs)


class AudioHead:
    """Audio-only logits from final hidden states, reading the tied embedding in place.

    restrict_phase: at generated position t only codebook q = t mod Q is allowed (plus
    `</audio>` at frame boundaries), so every stream parses into whole frames and each step
    multiplies by codebook_size + 1 rows instead of vocab_size.
    """

    def __init__(self, model: RumikOSSForCausalLM, layout: TokenLayout, restrict_phase: bool = True):
        self.model = model
        self.layout = layout
        self.restrict_phase = restrict_phase
        self.logit_scale = float(model.config.logit_scale)

    @property
    def weight(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight

    @property
    def end_index(self) -> int:
        """Index of `</audio>` in this head's output (the last column)."""
        return self.layout.codebook_size if self.restrict_phase else self.layout.num_units

    def unit_rows(self, phase: int | None) -> torch.Tensor:
        """Embedding rows this step may emit (excluding `</audio>`): [C, h] or [C*Q, h] (views)."""
        lay = self.layout
        if self.restrict_phase:
            start = lay.first_unit_id + phase
            return self.weight[start : start + lay.num_units : lay.num_quantizers]
        return self.weight[lay.first_unit_id : lay.first_unit_id + lay.num_units]

    def allows_end(self, step: int, min_new_tokens: int) -> bool:
        """May `</audio>` be emitted at generated position `step`?"""
        if step < max(min_new_tokens, self.layout.num_quantizers):
            return False
        return step % self.layout.num_quantizers == 0 or not self.restrict_phase

    def logits(self, hidden: torch.Tensor, phase: int, allow_end: bool | torch.Tensor) -> torch.Tensor:
        """hidden: [B, h] -> float32 logits [B, V] over this step's rows, `</audio>` last.

        allow_end: bool, or a bool tensor [B] for per-row minimum lengths.
        """
        rows = self.unit_rows(phase)
        units = F.linear(hidden, rows)
        end = F.linear(hidden, self.weight[self.layout.audio_end_token_id].unsqueeze(0))
        logits = torch.cat([units, end], dim=-1).float() * self.logit_scale
        return self._mask_end(logits, allow_end)

    def step_logits(self, hidden: torch.Tensor, phase: torch.Tensor, allow_end: torch.Tensor) -> torch.Tensor:
        """`logits` with the phase as a 0-dim long tensor (the fixed-shape, compiled step).

        hidden: [B, h]; phase: [] long; allow_end: [B] bool -> float32 [B, V], `</audio>` last.
        Same rows and arithmetic as `logits`, gathered by index instead of by Python slice.
        """
        lay = self.layout
        if self.restrict_phase:
            units = self.weight[lay.first_unit_id : lay.first_unit_id + lay.num_units]
            rows = units.view(lay.codebook_size, lay.num_quantizers, -1).index_select(1, phase.view(1)).squeeze(1)
        else:
            rows = self.unit_rows(None)
        units = F.linear(hidden, rows)
        end = F.linear(hidden, self.weight[lay.audio_end_token_id].unsqueeze(0))
        logits = torch.cat([units, end], dim=-1).float() * self.logit_scale
        end_logit = logits[:, -1:].masked_fill(~allow_end[:, None], float("-inf"))
        return torch.cat([logits[:, :-1], end_logit], dim=-1)

    def _mask_end(self, logits: torch.Tensor, allow_end: bool | torch.Tensor) -> torch.Tensor:
        if isinstance(allow_end, bool):
            if not allow_end:
                logits[..., -1] = float("-inf")
            return logits
        logits[..., -1] = logits[..., -1].masked_fill(~allow_end, float("-inf"))
        return logits

    def seen_columns(self, seen: torch.Tensor, phase: int | torch.Tensor) -> torch.Tensor:
        """Which of this step's logit columns a row has already produced (for the repetition
        penalty). seen: [B, num_units] bool over audio codes (unit id - first_unit_id); phase:
        an int or a 0-dim long tensor -> [B, V] bool, `</audio>` (never seen) last."""
        lay = self.layout
        if self.restrict_phase:
            grid = seen.view(seen.shape[0], lay.codebook_size, lay.num_quantizers)
            index = phase.view(1) if isinstance(phase, torch.Tensor) else torch.tensor([phase], device=seen.device)
            seen = grid.index_select(2, index).squeeze(2)
        return F.pad(seen, (0, 1), value=False)

    def index_to_token(self, index: torch.Tensor, phase: int) -> torch.Tensor:
        """Head output index [B] -> vocabulary ids [B]."""
        lay = self.layout
        if self.restrict_phase:
            units = lay.first_unit_id + index * lay.num_quantizers + phase
        else:
            units = lay.first_unit_id + index
        return torch.where(index == self.end_index, torch.full_like(index, lay.audio_end_token_id), units)

    def token_to_index(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Vocabulary ids [...] -> head output indices [...] (inverse of `index_to_token`)."""
        lay = self.layout
        offset = token_ids - lay.first_unit_id
        unit_index = offset // lay.num_quantizers if self.restrict_phase else offset
        return torch.where(token_ids == lay.audio_end_token_id, torch.full_like(token_ids, self.end_index), unit_index)

    def sequence_log_probs(
        self,
        hidden: torch.Tensor,
        tokens: torch.Tensor,
        temperature: float = 1.0,
        min_new_tokens: int | torch.Tensor = 0,
    ) -> torch.Tensor:
        """Teacher-forced log-probs of generated tokens under this head (the GRPO policy).

        hidden: [B, N, h] final hidden states that predicted generated positions 0..N-1;
        tokens: [B, N] the generated ids (anything at padded positions);
        returns float32 [B, N]: log softmax(logits / temperature) at each token, with the
        same per-position rows and `</audio>` rule the sampler used.
        """
        batch, steps, _ = hidden.shape
        out = torch.zeros(batch, steps, dtype=torch.float32, device=hidden.device)
        min_new = torch.as_tensor(min_new_tokens, device=hidden.device).expand(batch)
        index = self.token_to_index(tokens)
        phases = range(self.layout.num_quantizers) if self.restrict_phase else [None]
        for phase in phases:
            positions = (
                torch.arange(phase or 0, steps, self.layout.num_quantizers, device=hidden.device)
                if self.restrict_phase
                else torch.arange(steps, device=hidden.device)
            )
            if len(positions) == 0:
                continue
            rows = self.unit_rows(phase)
            units = F.linear(hidden[:, positions], rows)
            end = F.linear(hidden[:, positions], self.weight[self.layout.audio_end_token_id].unsqueeze(0))
            logits = torch.cat([units, end], dim=-1).float() * self.logit_scale
            allow = self._allow_end_grid(positions, min_new)
            logits[..., -1] = logits[..., -1].masked_fill(~allow, float("-inf"))
            logp = torch.log_softmax(logits / temperature, dim=-1)
            idx = index[:, positions].clamp(0, logits.shape[-1] - 1)
            out[:, positions] = logp.gather(-1, idx.unsqueeze(-1)).squeeze(-1)
        return out

    def _allow_end_grid(self, positions: torch.Tensor, min_new: torch.Tensor) -> torch.Tensor:
        """[B, P] bool: `allows_end` for each row's minimum length at each position."""
        q = self.layout.num_quantizers
        floor = torch.clamp(min_new, min=q).unsqueeze(1)
        boundary = (positions % q == 0) | (not self.restrict_phase)
        return (positions.unsqueeze(0) >= floor) & boundary.unsqueeze(0)
