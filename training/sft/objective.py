"""The SFT objective (docs/ARCHITECTURE.md §6) as one module, so DDP/FSDP/DeepSpeed see a single forward.

    objective = SFTObjective(engine.model, engine.layout, head="full")
    sums = objective(**collate(examples, pad_id))       # {"acoustic_sum", "stop_sum"}
    loss = sums["acoustic_sum"] / n_targets + stop_lambda * sums["stop_sum"] / n_boundaries

Returns sums, not means: the trainer divides by the number of unmasked targets (and frame
boundaries) of the whole global batch, so gradient accumulation and data parallelism give
exactly the loss of one big batch.

head:
  "full"  cross-entropy over the full vocabulary with transformers' (tied) LM head times
          `logit_scale`, evaluated only at acoustic targets, in chunks whose logits are
          recomputed in backward (a 277k-row head would otherwise need B*L*277k floats).
  "audio" the engine's audio-only head (`rumik_app.model.lm.AudioHead`, restrict_phase=True):
          softmax over the codebook the position needs plus `</audio>`, exactly the
          distribution the engine samples from. Reads the embedding outside the LM head's
          own forward: right with one process, DDP and `distributed = "fsdp2"` (training.fsdp
          keeps the embedding in the root unit, gathered for the whole forward), not with
          other FSDP wrappings that shard the embedding in a unit of its own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from rumik_app.model.lm import AudioHead, RumikOSSForCausalLM
from rumik_app.model.tokens import TokenLayout
from training.sft.config import CE_CHUNK_TOKENS, HEADS


class SFTObjective(nn.Module):
    """Cross-entropy on acoustic targets plus the stop head's BCE at frame boundaries."""

    def __init__(self, model: RumikOSSForCausalLM, layout: TokenLayout, head: str = "full",
                 ce_chunk_tokens: int = CE_CHUNK_TOKENS):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"loss head {head!r} is not one of {HEADS}")
        self.model = model
        self.layout = layout
        self.head = head
        self.ce_chunk_tokens = int(ce_chunk_tokens)
        self.audio_head = AudioHead(model, layout, restrict_phase=True) if head == "audio" else None

    def _full_ce(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """hidden: [N, h], targets: [N] -> summed CE over the full vocabulary."""
        scale = float(self.model.config.logit_scale)

        def chunk_ce(h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            logits = self.model.lm_head(h).float() * scale
            return F.cross_entropy(logits, t, reduction="sum")

        total = hidden.new_zeros((), dtype=torch.float32)
        step = self.ce_chunk_tokens
        recompute = torch.is_grad_enabled() and hidden.shape[0] > step
        for lo in range(0, hidden.shape[0], step):
            h, t = hidden[lo : lo + step], targets[lo : lo + step]
            total = total + (checkpoint(chunk_ce, h, t, use_reentrant=False) if recompute else chunk_ce(h, t))
        return total

    def _audio_ce(self, hidden: torch.Tensor, targets: torch.Tensor, audio_start: torch.Tensor,
                  audio_len: torch.Tensor) -> torch.Tensor:
        """hidden: [B, L, h]; the generated region of row b is audio_start[b] + [0, audio_len[b])."""
        steps = int(audio_len.max())
        offsets = torch.arange(steps, device=hidden.device)
        valid = offsets[None] < audio_len[:, None]
        index = (audio_start[:, None] + offsets[None]).clamp(max=hidden.shape[1] - 1)
        region = hidden.gather(1, index[..., None].expand(-1, -1, hidden.shape[-1]))
        tokens = targets.gather(1, index)
        tokens = torch.where(valid, tokens, torch.full_like(tokens, self.layout.first_unit_id))
        logp = self.audio_head.sequence_log_probs(region, tokens)
        return -torch.where(valid, logp, torch.zeros_like(logp)).sum()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                targets: torch.Tensor, loss_mask: torch.Tensor, stop_index: torch.Tensor,
                stop_target: torch.Tensor, stop_mask: torch.Tensor, audio_start: torch.Tensor,
                audio_len: torch.Tensor) -> dict[str, torch.Tensor]:
        """Tensors from `training.sft.sequences.collate` ([B, L] and [B, F]); returns float32 sums."""
        hidden = self.model.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                 use_cache=False).last_hidden_state  # [B, L, h], post-norm
        if self.head == "full":
            acoustic = self._full_ce(hidden[loss_mask], targets[loss_mask])
        else:
            acoustic = self._audio_ce(hidden, targets, audio_start, audio_len)
        boundary = hidden.gather(1, stop_index[..., None].expand(-1, -1, hidden.shape[-1]))  # [B, F, h]
        stop_logits = self.model.stop_logits(boundary)
        bce = F.binary_cross_entropy_with_logits(stop_logits, stop_target, reduction="none")
        stop = torch.where(stop_mask, bce, torch.zeros_like(bce)).sum()
        return {"acoustic_sum": acoustic, "stop_sum": stop}
