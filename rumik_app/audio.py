"""`Audio` results and the small waveform helpers every part shares (WAV I/O, crossfade).

No torch here: samples are float32 numpy arrays, mono, in [-1, 1] nominally.
"""

from __future__ import annotations

import io
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import soundfile as sf

SAMPLE_RATE = 24_000


@dataclass
class Audio:
    """A synthesised utterance.

    samples: float32 [N] mono waveform; sample_rate: Hz (24000 for Mimi).
    seed: the seed actually used (so a random draw can be reproduced).
    info: free-form facts about generation (tokens, frames, finish reasons, timings).
    """

    samples: np.ndarray
    sample_rate: int = SAMPLE_RATE
    seed: int | None = None
    info: dict = field(default_factory=dict)

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
    """Write mono float samples as 16-bit PCM WAV, atomically, creating parent folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        sf.write(tmp, np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0), sample_rate,
                 format="WAV", subtype="PCM_16")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def crossfade_concat(chunks: list[np.ndarray], fade_samples: int) -> np.ndarray:
    """Join waveforms with an equal-power crossfade of `fade_samples` at each seam.

    Each seam overlaps the tail of one chunk with the head of the next, so the result is
    shorter than the plain concatenation by `fade_samples` per seam (clipped to the chunk
    lengths). A single chunk is returned unchanged.
    """
    chunks = [np.asarray(c, dtype=np.float32) for c in chunks if len(c)]
    if not chunks:
        return np.zeros(0, dtype=np.float32)
    out = chunks[0]
    for nxt in chunks[1:]:
        n = min(fade_samples, len(out), len(nxt))
        if n == 0:
            out = np.concatenate([out, nxt])
            continue
        t = np.linspace(0.0, np.pi / 2, n, dtype=np.float32)
        seam = out[-n:] * np.cos(t) + nxt[:n] * np.sin(t)
        out = np.concatenate([out[:-n], seam, nxt[n:]])
    return out.astype(np.float32, copy=False)
