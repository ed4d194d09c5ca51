"""Training sequences (docs/ARCHITECTURE.md §6): prompt + frame tokens + `</audio>`, masks and stop targets.

    ex = build_sequence(engine.prompt_ids(request), codes, engine.layout)   # codes: [Q, T]
    batch = collate([ex, ...], pad_id=engine.pad_id)                         # right-padded tensors

The full sequence is `[BOS] <text>... <audio>` (P tokens, from the engine's one prompt
function), then T frames of Q unit tokens (q0..q(Q-1)), then `</audio>`: L = P + T*Q + 1.
The model reads the first L - 1 tokens (`input_ids`); position i predicts `targets[i]` =
token i + 1. `loss_mask[i]` is 1 exactly where the target is a unit token or `</audio>`
(T*Q + 1 positions), 0 for text/condition targets and padding.

Stop head (same convention as the engine, docs/ARCHITECTURE.md §5): it reads the final hidden state at the
position of the last token of frame j (input index P + j*Q - 1, j = 1..T); that state also
predicts the next frame's q0 or `</audio>`. Target 1 only after the last frame (j = T).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from rumik_app.model.tokens import TokenLayout

IGNORE_INDEX = -100


@dataclass
class TrainingExample:
    """One utterance as arrays. L = P + T*Q (model inputs; `</audio>` is only a target).

    input_ids: [L] int64; targets: [L] int64 (next token); loss_mask: [L] bool;
    stop_index: [T] int64 input positions of each frame's last token; stop_target: [T] float32;
    prompt_len: P; num_frames: T.
    """

    input_ids: np.ndarray
    targets: np.ndarray
    loss_mask: np.ndarray
    stop_index: np.ndarray
    stop_target: np.ndarray
    prompt_len: int
    num_frames: int

    @property
    def num_targets(self) -> int:
        """Acoustic targets: T*Q units + `</audio>`."""
        return int(self.loss_mask.sum())


def acoustic_targets(num_frames: int, num_quantizers: int) -> int:
    """Number of unmasked targets of an utterance with `num_frames` frames: T*Q + 1."""
    return num_frames * num_quantizers + 1


def build_sequence(prompt_ids: Sequence[int], codes: np.ndarray, layout: TokenLayout) -> TrainingExample:
    """prompt_ids: [P] ([BOS] ... `<audio>`); codes: [Q, T] Mimi codes, T >= 1."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] < 1:
        raise ValueError(f"codes must be [{layout.num_quantizers}, T >= 1], got {codes.shape}")
    prompt = np.asarray(prompt_ids, dtype=np.int64)
    if len(prompt) < 1 or prompt[-1] != layout.audio_start_token_id:
        raise ValueError("prompt_ids must end with <audio> (use engine.prompt_ids)")
    units = layout.codes_to_ids(codes).astype(np.int64)
    full = np.concatenate([prompt, units, np.array([layout.audio_end_token_id], dtype=np.int64)])
    targets = full[1:]
    is_unit = (targets >= layout.first_unit_id) & (targets <= layout.last_unit_id)
    loss_mask = is_unit | (targets == layout.audio_end_token_id)
    p, q, t = len(prompt), layout.num_quantizers, codes.shape[1]
    stop_index = p + np.arange(1, t + 1, dtype=np.int64) * q - 1
    stop_target = np.zeros(t, dtype=np.float32)
    stop_target[-1] = 1.0
    return TrainingExample(input_ids=full[:-1], targets=targets, loss_mask=loss_mask, stop_index=stop_index,
                           stop_target=stop_target, prompt_len=p, num_frames=t)


def collate(examples: Sequence[TrainingExample], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a micro-batch. B rows, L = longest input, F = most frames.

    input_ids [B, L] long (pad_id); attention_mask [B, L] long; position_ids [B, L] long;
    targets [B, L] long (IGNORE_INDEX where masked); loss_mask [B, L] bool;
    stop_index [B, F] long; stop_target [B, F] float; stop_mask [B, F] bool;
    audio_start [B] long (input position predicting the first unit = P - 1);
    audio_len [B] long (T*Q + 1 acoustic targets).
    """
    if not examples:
        raise ValueError("collate needs at least one example")
    batch, width = len(examples), max(len(e.input_ids) for e in examples)
    frames = max(e.num_frames for e in examples)
    out = {
        "input_ids": torch.full((batch, width), pad_id, dtype=torch.long),
        "attention_mask": torch.zeros(batch, width, dtype=torch.long),
        "position_ids": torch.arange(width, dtype=torch.long).expand(batch, width).clone(),
        "targets": torch.full((batch, width), IGNORE_INDEX, dtype=torch.long),
        "loss_mask": torch.zeros(batch, width, dtype=torch.bool),
        "stop_index": torch.zeros(batch, frames, dtype=torch.long),
        "stop_target": torch.zeros(batch, frames, dtype=torch.float32),
        "stop_mask": torch.zeros(batch, frames, dtype=torch.bool),
        "audio_start": torch.tensor([e.prompt_len - 1 for e in examples], dtype=torch.long),
        "audio_len": torch.tensor([e.num_targets for e in examples], dtype=torch.long),
    }
    for i, e in enumerate(examples):
        n, t = len(e.input_ids), e.num_frames
        out["input_ids"][i, :n] = torch.from_numpy(e.input_ids)
        out["attention_mask"][i, :n] = 1
        mask = torch.from_numpy(e.loss_mask)
        out["loss_mask"][i, :n] = mask
        out["targets"][i, :n] = torch.where(mask, torch.from_numpy(e.targets), torch.tensor(IGNORE_INDEX))
        out["stop_index"][i, :t] = torch.from_numpy(e.stop_index)
        out["stop_target"][i, :t] = torch.from_numpy(e.stop_target)
        out["stop_mask"][i, :t] = True
    return out
