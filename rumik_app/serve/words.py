"""Word timestamps beside a stream: each chunk aligned off the event loop once its audio is out.

    words = StreamWords(req, adapter, aligners, info)       # info: the dict adapter.stream fills live
    async for piece in adapter.stream(req, info):
        words.push(piece)                                    # schedules every chunk whose audio is complete
        for batch in await words.due():                      # the chunks before the one this piece completed
            send_words(batch)
        send_audio(piece)
    for batch in await words.finish():                       # after the last piece: the rest
        send_words(batch)
    words.timings()                                          # all words, the segments, what is missing

A chunk's place in the stream is exact: the assembler appends each chunk's decoded length to
`info["chunk_samples"]` before its last piece goes out, and `rumik_app.audio.chunk_spans` with
the engine's crossfade turns those into spans; a chunk is complete once the samples sent reach
its end (the seam with the next chunk included). One task per request aligns the complete
chunks in order on the aligners' own small thread pool (ALIGN_THREADS, so many requests never
fill the loop's default pool), so decoding never waits for it. `due()` holds back the piece
that completes chunk i+1 until chunk i's words are out: each chunk's words arrive after its
audio and before the next chunk's audio ends, whatever the load (audio waits only when the
aligner is slower than speech). Only the audio of chunks not yet handed over is kept.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from rumik_app.align import AlignerSet, Timings, WordTime
from rumik_app.align.timeline import WordTimer
from rumik_app.audio import chunk_spans
from rumik_app.engine.planning import plan_request
from rumik_app.engine.stream import CROSSFADE_SECONDS
from rumik_app.request import SynthesisRequest
from rumik_app.serve.protocol import SpeechAdapter

log = logging.getLogger(__name__)

ALIGN_THREADS = 2  # every request's alignment runs here; each aligner is also behind its own lock
_EXECUTOR = ThreadPoolExecutor(ALIGN_THREADS, thread_name_prefix="rumik-align")


class StreamWords:
    """Word timings of one streamed request (see the module docstring)."""

    def __init__(self, req: SynthesisRequest, adapter: SpeechAdapter, aligners: AlignerSet, info: dict):
        plan = plan_request(req, adapter.layout, adapter.limits)  # the adapter's plan: the same texts
        self.timer = WordTimer(req, [chunk.text for chunk in plan], aligners)
        self.chunks = len(plan)
        self.rate = adapter.sample_rate
        self.fade = int(CROSSFADE_SECONDS * self.rate)
        self.info = info
        self.pieces: list[np.ndarray] = []
        self.kept_from = 0  # the sample offset of the first kept piece
        self.sent = 0  # samples pushed so far
        self.scheduled = 0  # chunks handed to the worker
        self.queue: asyncio.Queue = asyncio.Queue()
        self.aligned: list[asyncio.Future] = []  # one per scheduled chunk, done once aligned
        self.results: list[list[WordTime]] = []
        self.worker: asyncio.Task | None = None

    def push(self, piece: np.ndarray) -> None:
        """One piece as it goes out; hands every chunk now complete to the worker."""
        if len(piece):
            self.pieces.append(piece)
            self.sent += len(piece)
        self._schedule(final=False)

    def ready(self) -> list[list[WordTime]]:
        """The chunks aligned since the last call, each a non-empty list of typed words."""
        out, self.results = self.results, []
        return [batch for batch in out if batch]

    async def due(self) -> list[list[WordTime]]:
        """`ready()`, after waiting for every chunk but the last one scheduled (see the module docstring)."""
        if self.scheduled > 1:
            await asyncio.gather(*self.aligned[: self.scheduled - 1])
        return self.ready()

    async def finish(self) -> list[list[WordTime]]:
        """After the stream's last piece: align what is left, wait, and return what is not yet read."""
        self._schedule(final=True)
        if self.aligned:
            await asyncio.gather(*self.aligned)
        self.cancel()
        return self.ready()

    def cancel(self) -> None:
        """Stop aligning (the client left, or everything is done); a chunk in a thread finishes there."""
        if self.worker is not None:
            self.worker.cancel()
        for future in self.aligned:
            future.cancel()

    def timings(self) -> Timings:
        """Every word aligned so far, the chunks' spans, and what is missing."""
        return self.timer.timings()

    def _schedule(self, final: bool) -> None:
        spans = chunk_spans(list(self.info.get("chunk_samples", ())), self.fade)
        while self.scheduled < min(len(spans), self.chunks):
            start, end = spans[self.scheduled]
            if self.sent < end and not final:
                return
            audio = self._take(start, min(end, self.sent), keep_from=max(0, end - self.fade))
            self.aligned.append(asyncio.get_running_loop().create_future())
            self.queue.put_nowait((self.scheduled, audio, start / self.rate))
            self.scheduled += 1
            if self.worker is None:
                self.worker = asyncio.create_task(self._work())

    def _take(self, start: int, end: int, keep_from: int) -> np.ndarray:
        """A copy of samples [start, end) of the stream; pieces wholly before keep_from are dropped
        (the next chunk starts at its seam, at most a crossfade before this one's end)."""
        kept = np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.float32)
        audio = kept[max(0, start - self.kept_from): max(0, end - self.kept_from)].copy()
        cut = max(0, keep_from - self.kept_from)
        self.pieces, self.kept_from = [kept[cut:].copy() if cut else kept], self.kept_from + cut
        return audio

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            index, audio, offset = await self.queue.get()
            try:
                words = await loop.run_in_executor(_EXECUTOR, self.timer.add_chunk, index, audio, self.rate, offset)
            except Exception as exc:  # noqa: BLE001 - word timings never break the audio they describe
                log.exception("aligning chunk %d failed", index)
                self.timer.missing.append(f"chunk {index}'s words have no times: the aligner failed "
                                          f"({type(exc).__name__}).")
                words = []
            self.results.append(words)
            if not self.aligned[index].done():
                self.aligned[index].set_result(None)
