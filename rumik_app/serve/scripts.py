"""Dialogue and SSML on the speech server: a script's parts streamed in order with their pauses.

    parts = ctx.build_script(fields, dialogue=True, gap_s=0.3)    # None: one plain request
    async for piece in script_stream(ctx.adapter, parts, info):   # float32 [n] at adapter.sample_rate
        send(piece)

Every part is an ordinary request on `SpeechAdapter.stream` (the rows every route uses), so
parts share decode steps with each other and with other clients, in order, while the audio
goes out in order; a part's pause is sent as zeros after it. At most MAX_PARTS_AT_ONCE (and
`max_batch`) parts generate at a time, so one script leaves rows to the other clients.
Abandoning the iteration (a hang-up) cancels every part, freeing their rows.
`info` sums the parts' token counts, as one request's would, and gets each part's span
(`info["spans"]`: index, speaker, voice, text, start, end in seconds, pause_after, seed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import numpy as np

from rumik_app.engine.script import Part
from rumik_app.serve.protocol import SpeechAdapter

_END = object()
# A script's parts decoding at once: enough to share decode steps, few enough that one request
# cannot take every row from the other clients.
MAX_PARTS_AT_ONCE = 4


def first_request(parts: Sequence[Part]):
    """A script's first spoken request: its seed is the script's base (the seed header)."""
    return next(part.request for part in parts if part.request is not None)


async def script_stream(adapter: SpeechAdapter, parts: Sequence[Part], info: dict | None = None
                        ) -> AsyncIterator[np.ndarray]:
    """The script's audio in order (see the module docstring); the first part's errors (bad
    input, a full queue) raise before any audio, as `adapter.stream`'s do."""
    slots = asyncio.Semaphore(max(1, min(adapter.max_batch, MAX_PARTS_AT_ONCE)))
    queues = [asyncio.Queue() for _ in parts]
    infos = [{} for _ in parts]

    async def run(index: int, part: Part) -> None:
        async with slots:
            try:
                async for piece in adapter.stream(part.request, infos[index]):
                    queues[index].put_nowait(piece)
                queues[index].put_nowait(_END)
            except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it in order
                queues[index].put_nowait(exc)

    tasks = [asyncio.create_task(run(i, part)) for i, part in enumerate(parts) if part.request is not None]
    spans, position, rate = [], 0, adapter.sample_rate
    if info is not None:
        info["spans"] = spans
    try:
        for index, part in enumerate(parts):
            start = position
            while part.request is not None and (item := await queues[index].get()) is not _END:
                if isinstance(item, Exception):
                    raise item
                position += len(item)
                yield item
            spans.append(_span(index, part, start, position, rate))
            if samples := round(part.pause_after_s * rate):
                position += samples
                yield np.zeros(samples, dtype=np.float32)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if info is not None:
            info["tokens"] = sum(int(part_info.get("tokens", 0)) for part_info in infos)
            info["prompt_tokens"] = sum(int(part_info.get("prompt_tokens", 0)) for part_info in infos)


def _span(index: int, part: Part, start: int, end: int, rate: int) -> dict:
    """Where part `index` sits in the output, in seconds (as `rumik_app.engine.script`'s spans)."""
    request = part.request
    return {"index": index, "speaker": part.speaker, "voice": request.voice if request else None,
            "text": request.text if request else "", "start": round(start / rate, 4), "end": round(end / rate, 4),
            "pause_after": part.pause_after_s, "seed": request.seed if request else None}
