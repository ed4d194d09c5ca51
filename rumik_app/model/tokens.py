"""Audio token layout (docs/ARCHITECTURE.md §2, §4): unit ids <-> Mimi codes, and parsing generated ids.

Unit tokens are named `<c_q>` (code c in 0..codebook_size-1, codebook q in 0..Q-1) and
ordered code-major:

    id = first_unit_id + c * Q + q        c = (id - first_unit_id) // Q,  q = (id - first_unit_id) % Q

After `<audio>` the model emits frames of Q unit tokens in codebook order q0..q(Q-1);
`</audio>` ends the utterance. Every number comes from the checkpoint's config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np


def unit_token_name(code: int, codebook: int) -> str:
    """Vocabulary name of a unit token: `<c_q>`."""
    return f"<{code}_{codebook}>"


@dataclass(frozen=True)
class TokenLayout:
    """Where the audio tokens live in the vocabulary (all fields from config.json)."""

    first_unit_id: int
    num_quantizers: int
    codebook_size: int
    text_start_token_id: int
    audio_start_token_id: int
    audio_end_token_id: int
    frame_rate_hz: float = 12.5

    def __post_init__(self) -> None:
        if self.last_unit_id >= min(self.text_start_token_id, self.audio_start_token_id, self.audio_end_token_id):
            raise ValueError("unit tokens overlap the <text>/<audio>/</audio> ids in config.json")

    @property
    def num_units(self) -> int:
        """Number of unit tokens: codebook_size * num_quantizers."""
        return self.codebook_size * self.num_quantizers

    @property
    def last_unit_id(self) -> int:
        return self.first_unit_id + self.num_units - 1

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of audio (100 for Mimi at 8 codebooks)."""
        return self.frame_rate_hz * self.num_quantizers

    def unit_id(self, code: int | np.ndarray, codebook: int | np.ndarray) -> int | np.ndarray:
        """Token id of code `code` in codebook `codebook`."""
        return self.first_unit_id + code * self.num_quantizers + codebook

    def is_unit(self, token_id: int) -> bool:
        return self.first_unit_id <= token_id <= self.last_unit_id

    def split(self, token_id: int) -> tuple[int, int]:
        """(code, codebook) of a unit token id; ValueError for non-unit ids."""
        if not self.is_unit(token_id):
            raise ValueError(f"token id {token_id} is not an audio unit")
        offset = token_id - self.first_unit_id
        return offset // self.num_quantizers, offset % self.num_quantizers

    def codes_to_ids(self, codes: np.ndarray) -> np.ndarray:
        """codes: [Q, T] int -> flat ids [T*Q], frame-major (all Q codes of a frame, then the next)."""
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[0] != self.num_quantizers:
            raise ValueError(f"codes must be [{self.num_quantizers}, T], got {codes.shape}")
        q = np.arange(self.num_quantizers)[:, None]
        return np.asarray(self.unit_id(codes, q)).T.reshape(-1)

    def parse(self, token_ids: Iterable[int]) -> np.ndarray:
        """Generated ids -> codes [1, Q, T] with the resync rules of docs/ARCHITECTURE.md §4 (see FrameParser)."""
        parser = FrameParser(self)
        frames = [frame for token_id in token_ids if (frame := parser.push(int(token_id))) is not None]
        codes = np.asarray(frames, dtype=np.int64).reshape(len(frames), self.num_quantizers)
        return codes.T[None]

    @classmethod
    def from_config(cls, extras: dict) -> "TokenLayout":
        return cls(
            first_unit_id=int(extras["first_unit_id"]),
            num_quantizers=int(extras["num_quantizers"]),
            codebook_size=int(extras["codebook_size"]),
            text_start_token_id=int(extras["text_start_token_id"]),
            audio_start_token_id=int(extras["audio_start_token_id"]),
            audio_end_token_id=int(extras["audio_end_token_id"]),
            frame_rate_hz=float(extras.get("frame_rate_hz", 12.5)),
        )


class FrameParser:
    """Incremental parser: push generated ids one by one, get each completed frame.

    Rules (docs/ARCHITECTURE.md §4): stop at `</audio>`; a non-unit token drops the partial frame; an
    out-of-order codebook drops the partial frame, except a q0, which starts a new frame;
    an incomplete last frame is never returned.
    """

    def __init__(self, layout: TokenLayout):
        self.layout = layout
        self.partial: list[int] = []
        self.ended = False

    def push(self, token_id: int) -> list[int] | None:
        """Feed one id; returns the frame's Q codes when this id completes a frame."""
        lay = self.layout
        if self.ended:
            return None
        if token_id == lay.audio_end_token_id:
            self.ended = True
            self.partial = []
            return None
        if not lay.is_unit(token_id):
            self.partial = []
            return None
        code, codebook = lay.split(token_id)
        if codebook == len(self.partial):
            self.partial.append(code)
        elif codebook == 0:
            self.partial = [code]
        else:
            self.partial = []
        if len(self.partial) == lay.num_quantizers:
            frame, self.partial = self.partial, []
            return frame
        return None
