"""`Audio` results and the small waveform helpers every part shares (WAV I/O, crossfade).

No torch here: samples are float32 numpy arrays, mono, in [-1, 1] nominally.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from rumik_app.files import atomic_write

SAMPLE_RATE = 24_000


@dataclass
class Audio:
    """A synthesised utterance.

    samples: float32 [N] mono waveform; sample_rate: Hz (24000 for Mimi).
    seed: the seed actually used (so a random draw can be reproduced).
    info: free-form facts about generation (tokens, frames, finish reasons, timings).
    timings: the word timestamps (`rumik_app.align.Timings`) when asked for
    (`engine.synthesize(req, timestamps=True)`), else None.
    """

    samples: np.ndarray
    sample_rate: int = SAMPLE_RATE
    seed: int | None = None
    info: dict = field(default_factory=dict)
    timings: Any = None

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return len(self.samples) / float(self.sample_rate)

    def to_wav_bytes(self) -> bytes:
        """16-bit PCM WAV bytes."""
        buf = io.BytesIO()
        sf.write(buf, self.samples, self.sample_rate, format="WAV", subtype="PCM_16")
        return buf.getvalue()

    def save(self, path: str | os.PathLike) -> Path:
        """Write a 16-bit PCM WAV atomically (temp file + rename); returns the path."""
        return write_wav(path, self.samples, self.sample_rate)


def write_wav(path: str | os.PathLike, samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> Path:
    """Write mono float samples as 16-bit PCM WAV, atomically (`rumik_app.files`), creating parent folders."""
    pcm = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0)
    return atomic_write(path, lambda fh: sf.write(fh, pcm, sample_rate, format="WAV", subtype="PCM_16"))


def _seam(tail: np.ndarray, head: np.ndarray) -> np.ndarray:
    """Equal-power crossfade of two equal-length pieces (cos fade-out, sin fade-in)."""
    t = np.linspace(0.0, np.pi / 2, len(tail), dtype=np.float32)
    return (tail * np.cos(t) + head * np.sin(t)).astype(np.float32)


class CrossfadeStream:
    """Join chunks with crossfaded seams while they arrive piece by piece.

    Per chunk: `start_chunk()`, any number of `push(samples)`, `end_chunk()`; then
    `finish()`. Every call returns the samples that are final (possibly empty). The last
    `fade` samples are held back until the next chunk's head is known, so the emitted
    stream equals `crossfade_concat` of the whole chunks exactly.
    """

    def __init__(self, fade_samples: int):
        self.fade = int(fade_samples)
        self.out_len = 0  # samples of the joined output so far (emitted + held)
        self.held = np.zeros(0, dtype=np.float32)
        self.head: np.ndarray | None = None  # head of the current chunk while a seam is pending

    def start_chunk(self) -> np.ndarray:
        self.head = np.zeros(0, dtype=np.float32) if self.out_len else None
        return np.zeros(0, dtype=np.float32)

    def push(self, samples: np.ndarray) -> np.ndarray:
        samples = np.asarray(samples, dtype=np.float32)
        if self.head is None:
            self.out_len += len(samples)
            return self._emit(samples)
        self.head = np.concatenate([self.head, samples])
        return self._join() if len(self.head) >= self.fade else np.zeros(0, dtype=np.float32)

    def end_chunk(self) -> np.ndarray:
        return self._join() if self.head is not None else np.zeros(0, dtype=np.float32)

    def finish(self) -> np.ndarray:
        out, self.held = self.held, np.zeros(0, dtype=np.float32)
        return out

    def _emit(self, samples: np.ndarray) -> np.ndarray:
        combined = np.concatenate([self.held, samples])
        cut = max(0, len(combined) - self.fade)
        self.held = combined[cut:]
        return combined[:cut]

    def _join(self) -> np.ndarray:
        head, self.head = self.head, None
        n = min(self.fade, self.out_len, len(head))
        before = self.held[: len(self.held) - n]
        seam = _seam(self.held[len(self.held) - n:], head[:n])
        self.held = np.zeros(0, dtype=np.float32)
        self.out_len += len(head) - n
        return self._emit(np.concatenate([before, seam, head[n:]]))


def chunk_spans(lengths: list[int], fade_samples: int) -> list[tuple[int, int]]:
    """Where each chunk lies in `crossfade_concat` of chunks with these lengths: (start, end)
    sample offsets; a chunk starts where its seam with the previous one starts."""
    spans, out_len = [], 0
    for n in lengths:
        start = out_len - min(fade_samples, out_len, n) if out_len else 0
        spans.append((start, start + n))
        out_len = start + n
    return spans


def crossfade_concat(chunks: list[np.ndarray], fade_samples: int) -> np.ndarray:
    """Join waveforms with an equal-power crossfade of `fade_samples` at each seam.

    Each seam overlaps the tail of the output so far with the head of the next chunk, so the
    result is shorter than the plain concatenation by min(fade, lengths) per seam. Empty
    chunks are skipped; a single chunk is returned unchanged.
    """
    stream = CrossfadeStream(fade_samples)
    parts = []
    for chunk in chunks:
        parts += [stream.start_chunk(), stream.push(chunk), stream.end_chunk()]
    parts.append(stream.finish())
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
