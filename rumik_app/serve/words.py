"""Word timestamps beside a stream: each chunk aligned off the event loop once its audio is out.

    words = StreamWords(req, adapter, aligners, info)       # info: the dict adapter.stream fills live
    async for piece in adapter.stream(req, info):
        send_audio(piece)
        words.push(piece)                                    # schedules every chunk whose audio is complete
        for batch in words.ready():                          # aligned chunks, in order, never waiting
            send_words(batch)
    for batch in await words.finish():                       # after the last piece: the rest
        send_words(batch)
    words.timings()                                          # all words, the segments, what is missing

A chunk's place in the stream is exact: the assembler appends each chunk's decoded length to
`info["chunk_samples"]` before its last piece goes out, and `rumik_app.audio.chunk_spans` with
the engine's crossfade turns those into spans; a chunk is complete once the samples sent reach
its end (the seam with the next chunk included). One task aligns the complete chunks in order
in a worker thread, so decoding never waits for it; the words of a chunk therefore arrive after
its audio and, unless the aligner is slower than speech, before the next chunk's audio ends.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from rumik_app.align import AlignerSet, Timings, WordTime
from rumik_app.align.timeline import WordTimer
from rumik_app.audio import chunk_spans
from rumik_app.engine.planning import plan_request
from rumik_app.engine.stream import CROSSFADE_SECONDS
from rumik_app.request import SynthesisRequest
from rumik_app.serve.protocol import SpeechAdapter

log = logging.getLogger(__name__)


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
        self.sent = 0  # samples pushed so far
        self.scheduled = 0  # chunks handed to the worker
        self.queue: asyncio.Queue = asyncio.Queue()
        self.results: list[list[WordTime]] = []
        self.worker: asyncio.Task | None = None

    def push(self, piece: np.ndarray) -> None:
        """One piece as it went out; hands every chunk now complete to the worker."""
        if len(piece):
            self.pieces.append(piece)
            self.sent += len(piece)
        self._schedule(final=False)

    def ready(self) -> list[list[WordTime]]:
        """The chunks aligned since the last call, each a list of typed words (possibly empty)."""
        out, self.results = self.results, []
        return out

    async def finish(self) -> list[list[WordTime]]:
        """After the stream's last piece: align what is left, wait, and return what is not yet read."""
        self._schedule(final=True)
        if self.worker is not None:
            await self.queue.join()
            self.worker.cancel()
        return self.ready()

    def cancel(self) -> None:
        if self.worker is not None:
            self.worker.cancel()

    def timings(self) -> Timings:
        return self.timer.timings()

    def _schedule(self, final: bool) -> None:
        spans = chunk_spans(list(self.info.get("chunk_samples", ())), self.fade)
        while self.scheduled < min(len(spans), self.chunks):
            start, end = spans[self.scheduled]
            if self.sent < end and not final:
                return
            audio = np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.float32)
            self.queue.put_nowait((self.scheduled, audio[start:min(end, self.sent)], start / self.rate))
            self.scheduled += 1
            if self.worker is None:
                self.worker = asyncio.create_task(self._work())

    async def _work(self) -> None:
        while True:
            index, audio, offset = await self.queue.get()
            try:
                words = await asyncio.to_thread(self.timer.add_chunk, index, audio, self.rate, offset)
            except Exception as exc:  # noqa: BLE001 - word timings never break the audio they describe
                log.exception("aligning chunk %d failed", index)
                self.timer.missing.append(f"chunk {index}'s words have no times: the aligner failed "
                                          f"({type(exc).__name__}).")
                words = []
            self.results.append(words)
            self.queue.task_done()
