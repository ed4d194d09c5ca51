"""The one stream assembler: a request's generated ids in, its crossfaded audio pieces out.

    assembler = StreamAssembler(engine.codec, engine.layout, plan, stats)   # plan: the request's chunks
    for chunk in plan:
        assembler.start_chunk()
        for token in generated_ids(chunk):          # as the decoder produces them
            if assembler.push(token):               # enough frames for a piece
                send(assembler.piece())             # float32 [n] at 24 kHz (may be empty)
        send(assembler.end_chunk(finish_reason))
    send(assembler.finish())

Every streaming path runs through it: `TTSEngine.stream`, `VLLMEngine.astream` (which calls
`piece()` in a worker thread) and the speech server's scheduler rows. Per chunk it owns the
`FrameParser` (ids -> frames, docs/ARCHITECTURE.md §4), a streaming Mimi decoder (causal
state carried across pieces, so the pieces concatenate to the offline decode up to float
rounding) and the frames not yet decoded: the first piece after `first_frames` frames (low
time to first audio), then every `frames_per_piece`. Across chunks a `CrossfadeStream` joins
them with the engine's crossfade; a one-chunk request skips it, so nothing is held back.

With a `StreamWatermarker` (`BaseEngine.assembler` gives one when the engine's watermark policy
asks it for the request's voice) every sample goes through it last, so the pieces concatenate
to the offline clip marked whole; it holds back up to `latency_seconds()` (about 0.3 s of
audio), so the first piece waits for that many more frames (4 at 24 kHz) to carry audio.

`stats` is filled as `TTSEngine.stream` documents: `seed`, `chunks`, `max_tokens` (the token
budget) and `watermarked` at the start, then `tokens` (every id pushed), `finish_reasons`
(one per chunk) and `chunk_samples` (each finished chunk's decoded length, before the
crossfade: with `rumik_app.audio.chunk_spans` it says exactly where each chunk lies in the
stream, which word timestamps need; appended before the chunk's last piece is returned).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from rumik_app.audio import CrossfadeStream, chunk_spans
from rumik_app.model.tokens import FrameParser, TokenLayout
from rumik_app.request import SynthesisRequest
from rumik_app.watermark.stream import StreamWatermarker

CROSSFADE_SECONDS = 0.05  # between the chunks of long text (equal-power)
FIRST_PIECE_FRAMES = 2  # 160 ms of audio: low time to first audio
PIECE_FRAMES = 5  # then 400 ms pieces
# `stream` and `synthesize` sample the same tokens; only the codec decode differs (piece by
# piece with carried state vs the whole sequence at once), so the float32 samples agree to
# rounding, |difference| <= STREAM_ATOL; written as 16-bit PCM that is at most 1 step (LSB),
# measured on 20 s: 907 of 480,000 samples one step apart, none further (tests/rumik_app/test_engine.py).
STREAM_ATOL = 1e-5

_EMPTY = np.zeros(0, dtype=np.float32)


def chunk_seconds(chunk_samples: Sequence[int], sample_rate: int) -> list[list[float]]:
    """[start, end] in seconds of each chunk in the joined audio, from each chunk's decoded length
    (`stats["chunk_samples"]`, or the offline waves' lengths) and the engine's crossfade."""
    spans = chunk_spans(list(chunk_samples), int(CROSSFADE_SECONDS * sample_rate))
    return [[start / sample_rate, end / sample_rate] for start, end in spans]


def new_stream_stats(plan: Sequence[SynthesisRequest], stats: dict | None = None) -> dict:
    """`stats` (or a new dict) reset for a stream of these chunks: seed, chunks, max_tokens,
    tokens 0 and no finish reasons yet."""
    stats = stats if stats is not None else {}
    stats.update(seed=plan[0].seed, tokens=0, chunks=len(plan), finish_reasons=[], chunk_samples=[],
                 max_tokens=sum(chunk.max_new_tokens for chunk in plan))
    return stats


class StreamAssembler:
    """Audio pieces of one request as its chunks' ids arrive (see the module docstring).

    codec: a `MimiCodec`; layout: the checkpoint's token layout; plan: the request's chunk
    requests (`engine.plan(req)`); stats: filled as described above (a new dict if None);
    watermark: marks every sample on its way out (None: untouched).
    Every method returns float32 samples that are final (possibly empty).
    """

    def __init__(self, codec, layout: TokenLayout, plan: Sequence[SynthesisRequest], stats: dict | None = None,
                 first_frames: int = FIRST_PIECE_FRAMES, frames_per_piece: int = PIECE_FRAMES,
                 watermark: StreamWatermarker | None = None):
        self.codec = codec
        self.layout = layout
        self.first_frames = first_frames
        self.frames_per_piece = frames_per_piece
        self.stats = new_stream_stats(plan, stats)
        self.stats["watermarked"] = watermark is not None
        fade = int(CROSSFADE_SECONDS * codec.sample_rate)
        self.joiner = CrossfadeStream(fade) if len(plan) > 1 else None  # one chunk: nothing held back
        self.watermark = watermark
        # the first piece also covers what the watermark holds back, so that it carries audio
        self.lead = 0 if watermark is None else math.ceil(watermark.latency_seconds() * codec.sample_rate
                                                          / codec.frame_size)
        self.parser: FrameParser | None = None
        self.codec_stream = None
        self.pending: list[list[int]] = []
        self.want = first_frames
        self.decoded = 0  # samples of the current chunk decoded so far

    def start_chunk(self) -> None:
        """Begin the next chunk: a fresh parser and codec state; the first piece comes early again."""
        self.parser = FrameParser(self.layout)
        self.codec_stream = self.codec.streaming_decoder(batch=1)
        self.pending = []
        self.decoded = 0
        self.want = self.first_frames + self.lead
        self.lead = 0
        if self.joiner is not None:
            self.joiner.start_chunk()

    def push(self, token: int) -> bool:
        """One generated id of the current chunk; True when a piece is due (call `piece()`)."""
        self.stats["tokens"] += 1
        frame = self.parser.push(int(token))
        if frame is not None:
            self.pending.append(frame)
        return len(self.pending) >= self.want

    def piece(self) -> np.ndarray:
        """Decode the frames not yet decoded; the next piece waits for `frames_per_piece` frames."""
        if not self.pending:
            return _EMPTY
        codes = torch.tensor(self.pending, dtype=torch.long, device=self.codec.device).T[None]  # [1, Q, t]
        self.pending = []
        self.want = self.frames_per_piece
        audio = self.codec_stream.decode(codes)[0].cpu().numpy().astype(np.float32)
        self.decoded += len(audio)
        return self._out(self.joiner.push(audio) if self.joiner is not None else audio)

    def end_chunk(self, finish_reason: str) -> np.ndarray:
        """The chunk ended (`finish_reason`, as the decoder reports it): the rest of its audio."""
        self.stats["finish_reasons"].append(finish_reason)
        out = self.piece()
        self.stats["chunk_samples"].append(self.decoded)  # before its last piece goes out
        if self.joiner is None:
            return out
        return np.concatenate([out, self._out(self.joiner.end_chunk())])

    def finish(self) -> np.ndarray:
        """After the last chunk: the samples held back for a seam that never came, and by the watermark."""
        out = self._out(self.joiner.finish()) if self.joiner is not None else _EMPTY
        return out if self.watermark is None else np.concatenate([out, self.watermark.finish()])

    def _out(self, audio: np.ndarray) -> np.ndarray:
        """Final samples on their way out: through the watermark when there is one."""
        return audio if self.watermark is None or not len(audio) else self.watermark.push(audio)
