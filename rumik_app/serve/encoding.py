"""Audio response formats, encoded piece by piece as audio arrives.

    enc = make_encoder("wav", 24_000)
    body = enc.header() + enc.encode(first_piece)  # then enc.encode(piece) ..., then enc.finish()

  pcm   raw 16-bit little-endian mono at 24 kHz (OpenAI's `pcm`); streams.
  wav   16-bit PCM WAV; streams: the header is sent before the length is known, so its RIFF
        and data sizes hold 0xFFFFFFFF ("to the end of the stream", as OpenAI's streamed WAV
        does); libsndfile/soundfile, Python's `wave` and ffmpeg read it to the end.
  mp3   MPEG-2 Layer III, constant bit rate (~80 kb/s at 24 kHz), by libsndfile's LAME
        through soundfile; streams (CBR: readers need no length header).
  opus  Opus in Ogg (libsndfile's libopus); streams, an Ogg page at a time.
  flac  16-bit FLAC; sent whole when the audio is complete, because readers such as
        soundfile reject a FLAC whose header does not carry the length.
Float samples become 16-bit integers as libsndfile (1.2) converts them, `floor(x * 32768)`
clipped to [-32768, 32767], so `pcm`/`wav` bytes equal `Audio.to_wav_bytes()` and the CLI's
WAV of the same samples.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile as sf

S16_SCALE = 32768  # libsndfile's float <-> 16-bit scale
S16_MIN, S16_MAX = -32768, 32767
UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF/data size of a WAV streamed before its length is known
MP3_COMPRESSION_LEVEL = 0.5  # libsndfile CBR bit rate between its min (0) and max (1): ~80 kb/s at 24 kHz
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "mp3": "audio/mpeg", "opus": "audio/ogg", "flac": "audio/flac"}
STREAMED_FORMATS = ("wav", "pcm", "mp3", "opus")
FORMATS = tuple(MEDIA_TYPES)


def to_s16(samples: np.ndarray) -> np.ndarray:
    """float32 [n] -> int16 [n] (little-endian) exactly as libsndfile writes PCM_16."""
    scaled = np.floor(np.asarray(samples, dtype=np.float32) * np.float32(S16_SCALE))
    return np.clip(scaled, S16_MIN, S16_MAX).astype("<i2")


def wav_header(sample_rate: int, data_bytes: int = UNKNOWN_SIZE) -> bytes:
    """44-byte header of a mono 16-bit PCM WAV; `data_bytes` unknown -> 0xFFFFFFFF sizes."""
    riff = UNKNOWN_SIZE if data_bytes == UNKNOWN_SIZE else 36 + data_bytes
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)  # PCM, mono, rate, byte rate, align, bits
    return b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + \
        b"data" + struct.pack("<I", data_bytes)


class Encoder:
    """Streams one response: `header()`, `encode(piece)` per piece, `finish()`; each returns bytes."""

    media_type = "application/octet-stream"

    def __init__(self, sample_rate: int):
        self.sample_rate = sample_rate

    def header(self) -> bytes:
        return b""

    def encode(self, samples: np.ndarray) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        return b""


class PcmEncoder(Encoder):
    media_type = MEDIA_TYPES["pcm"]

    def encode(self, samples: np.ndarray) -> bytes:
        return to_s16(samples).tobytes()


class WavEncoder(PcmEncoder):
    media_type = MEDIA_TYPES["wav"]

    def header(self) -> bytes:
        return wav_header(self.sample_rate)


class _ByteSink:
    """A seekable in-memory file for libsndfile that hands out what was appended since the
    last `take()`. Rewrites of bytes already taken (header fields patched at close) are lost,
    which is why only formats readable without them are streamed through it."""

    def __init__(self):
        self.buf, self.pos, self.sent = bytearray(), 0, 0

    def write(self, data) -> int:
        data = bytes(data)
        end = self.pos + len(data)
        if end > len(self.buf):
            self.buf.extend(bytes(end - len(self.buf)))
        self.buf[self.pos:end] = data
        self.pos = end
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: len(self.buf)}[whence] + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, size: int = -1) -> bytes:
        end = len(self.buf) if size < 0 else min(len(self.buf), self.pos + size)
        data = bytes(self.buf[self.pos:end])
        self.pos = end
        return data

    def take(self) -> bytes:
        data = bytes(self.buf[self.sent:])
        self.sent = len(self.buf)
        return data


class SoundFileEncoder(Encoder):
    """mp3 / opus through libsndfile, streamed as the encoder writes."""

    SETTINGS = {"mp3": dict(format="MP3", subtype="MPEG_LAYER_III", bitrate_mode="CONSTANT",
                            compression_level=MP3_COMPRESSION_LEVEL),
                "opus": dict(format="OGG", subtype="OPUS")}

    def __init__(self, sample_rate: int, fmt: str):
        super().__init__(sample_rate)
        self.media_type = MEDIA_TYPES[fmt]
        self.sink = _ByteSink()
        self.file = sf.SoundFile(self.sink, "w", sample_rate, 1, **self.SETTINGS[fmt])

    def encode(self, samples: np.ndarray) -> bytes:
        self.file.write(np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0))
        return self.sink.take()

    def finish(self) -> bytes:
        self.file.close()
        return self.sink.take()


class FlacEncoder(Encoder):
    """FLAC, written whole at the end (its header carries the length and checksum)."""

    media_type = MEDIA_TYPES["flac"]

    def __init__(self, sample_rate: int):
        super().__init__(sample_rate)
        self.pieces: list[np.ndarray] = []

    def encode(self, samples: np.ndarray) -> bytes:
        self.pieces.append(to_s16(samples))
        return b""

    def finish(self) -> bytes:
        buf = io.BytesIO()
        samples = np.concatenate(self.pieces) if self.pieces else np.zeros(0, dtype="<i2")
        sf.write(buf, samples, self.sample_rate, format="FLAC", subtype="PCM_16")
        return buf.getvalue()


def make_encoder(fmt: str, sample_rate: int) -> Encoder:
    """The encoder for one of FORMATS."""
    if fmt == "pcm":
        return PcmEncoder(sample_rate)
    if fmt == "wav":
        return WavEncoder(sample_rate)
    if fmt == "flac":
        return FlacEncoder(sample_rate)
    if fmt in SoundFileEncoder.SETTINGS:
        return SoundFileEncoder(sample_rate, fmt)
    raise ValueError(f"unknown format {fmt!r}; one of {FORMATS}")
