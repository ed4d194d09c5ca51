"""Audio response formats and output rates, encoded piece by piece as audio arrives.

    enc = make_encoder("wav", 24_000)                    # the model's 24 kHz samples in, a 24 kHz WAV out
    body = enc.header() + enc.encode(first_piece)        # then enc.encode(piece) ..., then enc.finish()
    enc = make_encoder("ulaw", 24_000)                   # G.711 mu-law at 8 kHz (its default rate)
    enc = make_encoder("pcm", 24_000, 16_000)            # resampled to 16 kHz as the pieces come
    data = encode_whole("wav", samples, 24_000, 8_000)   # one complete file (WAV sizes filled in)
    rate_problem("opus", 22_050)                         # why a rate cannot be used, or None

Every encoder takes float32 pieces at the model's rate (`source_rate`) and resamples them to the
output rate (`sample_rate`, one of RATES) with `rumik_app.resample.Resampler` before encoding,
so the concatenated streamed bytes equal the encoding of the whole clip (no seam at piece
boundaries); `finish()` flushes the resampler. Output rate by default: 8 kHz for ulaw and alaw
(telephony's rate), the source rate for every other format. Headers carry the output rate.

  pcm   raw 16-bit little-endian mono (OpenAI's `pcm`); streams.
  wav   16-bit PCM WAV; streams: the header is sent before the length is known, so its RIFF
        and data sizes hold 0xFFFFFFFF ("to the end of the stream", as OpenAI's streamed WAV
        does); libsndfile/soundfile, Python's `wave` and ffmpeg read it to the end.
  ulaw  raw G.711 mu-law (8 bits a sample, no header), by libsndfile from the 16-bit `pcm`
        samples; streams. alaw: the same with G.711 A-law.
  mp3   MPEG Layer III, constant bit rate (~80 kb/s at 24 kHz), by libsndfile's LAME
        through soundfile; streams (CBR: readers need no length header).
  opus  Opus in Ogg (libsndfile's libopus); streams, an Ogg page at a time. Opus codes 8, 16,
        24 and 48 kHz only (OPUS_RATES).
  aac   AAC-LC in ADTS frames (each with its own header, so it streams), by ffmpeg's native
        encoder in a subprocess fed as pieces arrive; ADTS carries no priming information,
        so decoders return the encoder's AAC_PRIMING samples of delay first.
  flac  16-bit FLAC; sent whole when the audio is complete, because readers such as
        soundfile reject a FLAC whose header does not carry the length.
Float samples become 16-bit integers as libsndfile (1.2) converts them, `floor(x * 32768)`
clipped to [-32768, 32767], so `pcm`/`wav` bytes equal `Audio.to_wav_bytes()` and the CLI's
WAV of the same samples (at the same rate). Call `close()` when a response ends early: it
stops an AAC encoder's ffmpeg.
"""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import tempfile
import threading
import weakref
from functools import lru_cache

import numpy as np
import soundfile as sf

from rumik_app.resample import RATES, Resampler

S16_SCALE = 32768  # libsndfile's float <-> 16-bit scale
S16_MIN, S16_MAX = -32768, 32767
UNKNOWN_SIZE = 0xFFFFFFFF  # RIFF/data size of a WAV streamed before its length is known
MP3_COMPRESSION_LEVEL = 0.5  # libsndfile CBR bit rate between its min (0) and max (1): ~80 kb/s at 24 kHz
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "mp3": "audio/mpeg", "opus": "audio/ogg", "flac": "audio/flac",
               "ulaw": "audio/PCMU", "alaw": "audio/PCMA", "aac": "audio/aac"}  # PCMU/PCMA: RFC 4856, with ;rate=
FORMATS = tuple(MEDIA_TYPES)
STREAMED_FORMATS = ("wav", "pcm", "mp3", "opus", "ulaw", "alaw", "aac")  # readable before the audio is complete
RAW_FORMATS = ("pcm", "ulaw", "alaw")  # headerless: any cut of the byte stream is playable on its own
BLOCKING_FORMATS = ("aac", "flac")  # encoders that block (a pipe to ffmpeg; the whole file at the end): off the loop
G711_SUBTYPES = {"ulaw": "ULAW", "alaw": "ALAW"}  # libsndfile's RAW subtypes
DEFAULT_RATES = {"ulaw": 8_000, "alaw": 8_000}  # the output rate when none is asked for (others: the source's)
OPUS_RATES = (8_000, 16_000, 24_000, 48_000)  # the RATES libopus codes (also 12 kHz, not offered)
RATE_HEADER = "x-rumik-sample-rate"  # HTTP responses: the output rate (raw formats carry none)
AAC_BITRATE = "64k"  # ffmpeg's native AAC-LC, mono; ffmpeg clamps it down at low rates
AAC_PRIMING = 1024  # samples of encoder delay at the start of a decoded ADTS stream (one AAC frame)
AAC_FRAME = 1024  # samples per AAC frame
FFMPEG_EXIT_TIMEOUT_S = 30.0  # finish(): ffmpeg drains what it was given, then exits
FFMPEG_ERROR_BYTES = 2_000  # of ffmpeg's stderr kept for an error message
READ_BYTES = 1 << 16


class EncodingError(RuntimeError):
    """An encoder failed (ffmpeg missing or exited with an error); the message says why."""


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


@lru_cache(maxsize=1)
def ffmpeg_path() -> str | None:
    """The ffmpeg executable on PATH (setup.sh installs Debian's), or None."""
    return shutil.which("ffmpeg")


def output_rate(fmt: str, source_rate: int, requested: int | None = None) -> int:
    """The rate `fmt` is sent at: `requested`, else 8 kHz for ulaw/alaw, else `source_rate`."""
    return requested if requested is not None else DEFAULT_RATES.get(fmt, source_rate)


# The most bytes a second of each format can take (a bound checked before any work): 16-bit
# samples for the uncompressed ones (FLAC never much above its PCM), one byte a sample for G.711,
# and the codec's highest bit rate for the compressed ones (MP3 320 kb/s, Opus 510 kb/s, and our
# AAC's 64 kb/s with its ADTS headers).
BYTES_PER_SAMPLE = {"pcm": 2.0, "wav": 2.0, "flac": 2.1, "ulaw": 1.0, "alaw": 1.0}
BYTES_PER_SECOND = {"mp3": 320_000 / 8, "opus": 510_000 / 8, "aac": 1.1 * 64_000 / 8}


def max_bytes_per_second(fmt: str, sample_rate: int) -> float:
    """An upper bound on one second of `fmt` audio at `sample_rate` Hz, in bytes."""
    if fmt in BYTES_PER_SAMPLE:
        return BYTES_PER_SAMPLE[fmt] * sample_rate
    return BYTES_PER_SECOND[fmt]


def rate_problem(fmt: str, rate: int | None) -> str | None:
    """Why output rate `rate` (None: the default) cannot be used with `fmt`: one sentence naming
    the allowed values; None when it can."""
    if rate is None:
        return None
    if isinstance(rate, bool) or not isinstance(rate, int) or rate not in RATES:
        return f"Unsupported sample_rate {rate!r}. Choose one of: {', '.join(map(str, RATES))} (Hz)."
    if fmt == "opus" and rate not in OPUS_RATES:
        return (f"response_format 'opus' cannot use sample_rate {rate}: Opus codes "
                f"{', '.join(map(str, OPUS_RATES))} Hz only. Choose one of those, or another format.")
    return None


def format_problem(fmt: str, allowed: tuple[str, ...] = FORMATS) -> str | None:
    """Why `fmt` cannot be sent (unknown, not among `allowed`, or aac without ffmpeg), or None."""
    if fmt not in FORMATS:
        return f"Unsupported response_format {fmt!r}. Choose one of: {', '.join(allowed)}."
    if fmt not in allowed:
        return f"response_format {fmt!r} cannot be used here. Choose one of: {', '.join(allowed)}."
    if fmt == "aac" and ffmpeg_path() is None:
        others = ", ".join(f for f in allowed if f != "aac")
        return f"response_format 'aac' needs ffmpeg on the server, which is not installed. Choose one of: {others}."
    return None


def media_type(fmt: str, sample_rate: int) -> str:
    """The Content-Type of `fmt` at `sample_rate` (G.711 names its rate, RFC 4856)."""
    base = MEDIA_TYPES[fmt]
    return f"{base};rate={sample_rate}" if fmt in G711_SUBTYPES else base


class Encoder:
    """Streams one response: `header()`, `encode(piece)` per piece, `finish()`; each returns bytes.
    Pieces are float32 at `source_rate`; the bytes are at `sample_rate` (resampled first).
    Subclasses encode output-rate samples in `_encode` and end in `_finish`."""

    fmt = "pcm"

    def __init__(self, source_rate: int, sample_rate: int | None = None):
        self.source_rate = source_rate
        self.sample_rate = output_rate(self.fmt, source_rate, sample_rate)
        self.media_type = media_type(self.fmt, self.sample_rate)
        self._resampler = Resampler(source_rate, self.sample_rate)

    def header(self) -> bytes:
        return b""

    def encode(self, samples: np.ndarray) -> bytes:
        return self._encode(self._resampler.push(samples))

    def finish(self) -> bytes:
        """What is left: the resampler's tail, then the format's end."""
        tail = self._resampler.push(np.zeros(0, dtype=np.float32), last=True)
        return (self._encode(tail) if tail.size else b"") + self._finish()

    def close(self) -> None:
        """Release what the encoder holds (idempotent; after finish() or instead of it)."""

    def _encode(self, samples: np.ndarray) -> bytes:
        raise NotImplementedError

    def _finish(self) -> bytes:
        return b""


class PcmEncoder(Encoder):
    fmt = "pcm"

    def _encode(self, samples: np.ndarray) -> bytes:
        return to_s16(samples).tobytes()


class WavEncoder(PcmEncoder):
    fmt = "wav"

    def header(self) -> bytes:
        return wav_header(self.sample_rate)


class G711Encoder(Encoder):
    """ulaw / alaw: libsndfile's G.711 of the 16-bit `pcm` samples; each sample is coded on
    its own, so pieces need no state."""

    def __init__(self, source_rate: int, sample_rate: int | None, fmt: str):
        self.fmt = fmt
        super().__init__(source_rate, sample_rate)

    def _encode(self, samples: np.ndarray) -> bytes:
        if not samples.size:
            return b""
        buf = io.BytesIO()
        sf.write(buf, to_s16(samples), self.sample_rate, format="RAW", subtype=G711_SUBTYPES[self.fmt])
        return buf.getvalue()


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

    def __init__(self, source_rate: int, sample_rate: int | None, fmt: str):
        self.fmt = fmt
        super().__init__(source_rate, sample_rate)
        self.sink = _ByteSink()
        self.file = sf.SoundFile(self.sink, "w", self.sample_rate, 1, **self.SETTINGS[fmt])

    def _encode(self, samples: np.ndarray) -> bytes:
        self.file.write(np.clip(samples, -1.0, 1.0))
        return self.sink.take()

    def _finish(self) -> bytes:
        self.file.close()
        return self.sink.take()

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()


class FlacEncoder(Encoder):
    """FLAC, written whole at the end (its header carries the length and checksum)."""

    fmt = "flac"

    def __init__(self, source_rate: int, sample_rate: int | None = None):
        super().__init__(source_rate, sample_rate)
        self.pieces: list[np.ndarray] = []

    def _encode(self, samples: np.ndarray) -> bytes:
        self.pieces.append(to_s16(samples))
        return b""

    def _finish(self) -> bytes:
        buf = io.BytesIO()
        samples = np.concatenate(self.pieces) if self.pieces else np.zeros(0, dtype="<i2")
        sf.write(buf, samples, self.sample_rate, format="FLAC", subtype="PCM_16")
        return buf.getvalue()


def _stop(proc: subprocess.Popen, reader: threading.Thread) -> None:
    """Kill ffmpeg if it still runs, reap it, let the reader see the end, close the pipes (an
    encoder closed or dropped early; after finish() it has already exited)."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    reader.join(FFMPEG_EXIT_TIMEOUT_S)  # the pipe's end is closed only once nobody reads it
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None and not pipe.closed:
            try:
                pipe.close()
            except BrokenPipeError:  # stdin's unflushed bytes, ffmpeg gone
                pass


def _drain(fd: int, out: bytearray, lock: threading.Lock) -> None:
    """ffmpeg's stdout into `out` until it ends (a thread: it must not hold the encoder)."""
    while data := os.read(fd, READ_BYTES):
        with lock:
            out += data


class AacEncoder(Encoder):
    """AAC in ADTS by ffmpeg: the `pcm` samples go to its stdin as they come; a thread drains
    its stdout (so neither side blocks on a full pipe) and each call returns what ffmpeg has
    written since the last. ffmpeg starts at the first audio, not when the encoder is made."""

    fmt = "aac"

    def __init__(self, source_rate: int, sample_rate: int | None = None):
        super().__init__(source_rate, sample_rate)
        self.proc: subprocess.Popen | None = None
        self._out = bytearray()
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._stopper: weakref.finalize | None = None
        self._errors = None

    def _start(self) -> subprocess.Popen:
        exe = ffmpeg_path()
        if exe is None:
            raise EncodingError("response_format 'aac' needs ffmpeg, which is not installed (setup.sh installs it).")
        self._errors = tempfile.TemporaryFile()
        # -probesize/-analyzeduration: ffmpeg would otherwise hold ~2 s of piped input while it probes
        # a raw stream whose layout the flags already give, and the first AAC bytes would come that late.
        cmd = [exe, "-hide_banner", "-loglevel", "error", "-probesize", "32", "-analyzeduration", "0",
               "-f", "s16le", "-ar", str(self.sample_rate), "-ac", "1",
               "-i", "pipe:0", "-c:a", "aac", "-b:a", AAC_BITRATE, "-f", "adts", "-flush_packets", "1", "pipe:1"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errors)
        self._reader = threading.Thread(target=_drain, args=(self.proc.stdout.fileno(), self._out, self._lock),
                                        daemon=True)
        self._reader.start()
        self._stopper = weakref.finalize(self, _stop, self.proc, self._reader)  # dropped without close(): killed
        return self.proc

    def _take(self) -> bytes:
        with self._lock:
            data = bytes(self._out)
            self._out.clear()
        return data

    def _encode(self, samples: np.ndarray) -> bytes:
        if not samples.size:
            return self._take()
        proc = self.proc or self._start()
        try:
            proc.stdin.write(to_s16(samples).tobytes())
            proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise EncodingError(f"ffmpeg's AAC encoder stopped early: {self._why()}") from None
        return self._take()

    def _finish(self) -> bytes:
        proc = self.proc or self._start()
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        self._reader.join(FFMPEG_EXIT_TIMEOUT_S)
        try:
            code = proc.wait(FFMPEG_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        if code != 0 or self._reader.is_alive():
            self.close()
            raise EncodingError(f"ffmpeg's AAC encoder failed (exit {code}): {self._why()}")
        data = self._take()
        self.close()
        return data

    def _why(self) -> str:
        if self._errors is None:
            return "no output"
        self._errors.seek(0)
        return self._errors.read(FFMPEG_ERROR_BYTES).decode("utf-8", "replace").strip() or "no message"

    def close(self) -> None:
        if self._stopper is not None:
            self._stopper()  # runs _stop once
        if self._errors is not None:
            self._errors.close()
            self._errors = None


def make_encoder(fmt: str, source_rate: int, sample_rate: int | None = None) -> Encoder:
    """The encoder for one of FORMATS: float32 pieces at `source_rate` in, `fmt` at `sample_rate`
    (None: the format's default, see `output_rate`) out. ValueError for an unknown format or a
    rate `rate_problem` refuses (routes check both first, with their own error bodies)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {FORMATS}")
    if problem := rate_problem(fmt, sample_rate):
        raise ValueError(problem)
    if fmt == "pcm":
        return PcmEncoder(source_rate, sample_rate)
    if fmt == "wav":
        return WavEncoder(source_rate, sample_rate)
    if fmt == "flac":
        return FlacEncoder(source_rate, sample_rate)
    if fmt == "aac":
        return AacEncoder(source_rate, sample_rate)
    if fmt in G711_SUBTYPES:
        return G711Encoder(source_rate, sample_rate, fmt)
    return SoundFileEncoder(source_rate, sample_rate, fmt)


def encode_whole(fmt: str, samples: np.ndarray, source_rate: int, sample_rate: int | None = None) -> bytes:
    """One complete file of `samples` (float32 [N] at `source_rate`) in `fmt` at `sample_rate`;
    a WAV gets its real sizes (it is not streamed)."""
    encoder = make_encoder(fmt, source_rate, sample_rate)
    try:
        body = encoder.encode(samples) + encoder.finish()
    finally:
        encoder.close()
    return wav_header(encoder.sample_rate, len(body)) + body if fmt == "wav" else encoder.header() + body
