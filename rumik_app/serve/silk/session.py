"""One socket session of Rumik's protocol (`WS /v1/tts/ws`): text frames in, audio and control frames out.

    await SilkSession(session, ctx).run()        # session: rumik_app.serve.sockets.Session

The rules (docs/ARCHITECTURE.md §15): the first frame's voice holds until a frame changes
it; one utterance plays at a time, as s16le PCM binary frames between `queued` and `done`
JSON frames (this server's `response_format` ulaw or alaw and `sample_rate` fields, held like
the voice, send G.711 or another rate instead); `cancel` stops it (`cancelled`, reason cancel;
ignored while idle: livekit's keepalive), new text interrupts it (`cancelled`, reason
interrupt); `close` or a hang-up aborts; a bad frame gets an `error` frame and the session
goes on; an idle session times out after IDLE_TIMEOUT_S, every session after
MAX_SESSION_AGE_S. Audio comes from `SpeechAdapter.stream`, the rows and stream assembler
every other route uses.

Word timestamps (this server's `timestamps` field, held like the format; needs the server's
aligners and plain text, else an `error` frame): each planned chunk is aligned off the event
loop once its audio is out (`rumik_app.serve.words.StreamWords`), and its typed words go out as
`{"type": "words", "request_id", "words": [{word, start, end, kind}]}` between the audio
frames, the rest after the last audio and before `done`; times are seconds from the start of
that utterance's audio (the output's timeline, at any `sample_rate`). A chunk whose words are
still being aligned never holds its audio back; `done` then also carries `aligner` and
`missing` (None, or why some words have no times).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator

import numpy as np

from rumik_app.engine.script import Part
from rumik_app.engine.serving import EngineFailed, ServerBusy, ShuttingDown
from rumik_app.prompt import PromptError
from rumik_app.request import SynthesisRequest
from rumik_app.serve.adapters import off_loop
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import RAW_FORMATS, make_encoder
from rumik_app.serve.scripts import first_request, script_stream
from rumik_app.serve.silk.schema import (
    SilkAudio,
    SilkError,
    SilkFields,
    SilkVoice,
    check_silk_model,
    check_silk_timestamps,
    silk_output,
    silk_request,
    silk_script,
)
from rumik_app.serve.sockets import CLOSE_NORMAL, Session, SessionsFull
from rumik_app.serve.words import StreamWords
from rumik_app.watermark import WatermarkUnavailable

log = logging.getLogger(__name__)

IDLE_TIMEOUT_S = 60.0  # the hosted API's: no client frame (and nothing playing) this long ends a session
MAX_SESSION_AGE_S = 1800.0  # livekit replaces its sessions at 300 s; a session never ends mid-utterance
QUEUED_EVERY_S = 5.0  # `queued` frames while an utterance waits: livekit gives up after 10 s of silence
SOCKET_FORMAT = "pcm"  # the hosted API's s16le frames


def request_id() -> str:
    return "req_" + secrets.token_hex(12)


def silk_error(exc: BaseException) -> SilkError:
    """What an adapter raised before the first audio, as the hosted API answers it."""
    if isinstance(exc, SilkError):
        return exc
    if isinstance(exc, PromptError):
        return SilkError(422 if exc.field in (None, "text") else 400, str(exc), "invalid_request")
    if isinstance(exc, (ServerBusy, ShuttingDown, SessionsFull)):
        code = "shutting_down" if isinstance(exc, ShuttingDown) else "overloaded"
        return SilkError(503, str(exc), code, headers={"Retry-After": str(exc.retry_after)})
    if isinstance(exc, EngineFailed):
        log.error("the speech engine failed: %s", exc)
        return SilkError(500, "The speech engine failed; the server log says why.", "server_error")
    if isinstance(exc, WatermarkUnavailable):  # this voice's audio must be marked: refused, never sent unmarked
        log.error("refused a request that must be watermarked: %s", exc)
        return SilkError(500, str(exc), "watermark_unavailable")
    log.error("Silk request failed", exc_info=exc)
    return SilkError(500, "Synthesis failed; the server log says why.", "server_error")


class SilkSession:
    """One socket session (see docs/ARCHITECTURE.md §15 for the frames and their rules):
    the first frame's voice holds until a frame changes it; one utterance plays at a time;
    `cancel` stops it (`cancelled`, reason cancel; ignored while idle: livekit's keepalive),
    new text interrupts it (`cancelled`, reason interrupt); `close` or a hang-up aborts."""

    def __init__(self, session: Session, ctx: ServeContext):
        self.session, self.ctx = session, ctx
        self.adapter, self.metrics, self.accepted = ctx.adapter, ctx.metrics, ctx.accepted
        self.voice = SilkVoice()
        self.audio = SilkAudio()
        self.current: asyncio.Task | None = None
        self.current_id: str | None = None
        self.last_frame = time.monotonic()

    @property
    def playing(self) -> bool:
        return self.current is not None and not self.current.done()

    async def run(self) -> None:
        recv: asyncio.Task | None = None
        try:
            while True:
                recv = recv or asyncio.ensure_future(self.session.ws.receive())
                waits = {recv, self.current} if self.playing else {recv}
                done, _ = await asyncio.wait(waits, timeout=None if self.playing else self._quiet_left(),
                                             return_when=asyncio.FIRST_COMPLETED)
                if recv not in done:
                    if not self.playing and not done:  # idle past the timeout, or too old
                        await self._time_out()
                        return
                    continue
                message, recv = recv.result(), None
                if message["type"] == "websocket.disconnect" or not await self._on_message(message):
                    return
        finally:
            if recv is not None:
                recv.cancel()
            await self._stop(reason=None)

    def _quiet_left(self) -> float:
        """Seconds until an idle session times out (or reaches its maximum age)."""
        now = time.monotonic()
        return max(0.0, min(self.last_frame + IDLE_TIMEOUT_S, self.session.opened + MAX_SESSION_AGE_S) - now)

    async def _time_out(self) -> None:
        old = time.monotonic() - self.session.opened >= MAX_SESSION_AGE_S
        message = (f"The session reached its maximum age of {MAX_SESSION_AGE_S / 60:.0f} minutes." if old else
                   f"No frame from the client for {IDLE_TIMEOUT_S:.0f} s.")
        await self.session.send_json({"type": "timeout", "message": message + " Open a new session with "
                                      "POST /v1/tts/ws-connect."})
        await self.session.close(CLOSE_NORMAL)

    async def _on_message(self, message: dict) -> bool:
        """Handle one client frame; False ends the session."""
        self.last_frame = time.monotonic()
        try:
            if message.get("text") is None:
                raise SilkError(400, "Binary frames are not accepted; send JSON text frames, e.g. "
                                     "{\"text\": \"Namaste!\"}.", "invalid_frame")
            try:
                fields = SilkFields.parse(json.loads(message["text"]))
            except ValueError:
                raise SilkError(400, "The frame is not valid JSON; send e.g. {\"text\": \"Namaste!\"} or "
                                     "{\"type\": \"cancel\"}.", "invalid_json") from None
            return await self._on_fields(fields)
        except SilkError as exc:  # a bad frame: say so; the session (and any playing utterance) goes on
            self.metrics.error(exc.code)
            await self.session.send_json(exc.frame())
            return True

    async def _on_fields(self, fields: SilkFields) -> bool:
        if fields.type == "cancel":
            await self._stop(reason="cancel")
            return True
        if fields.type == "close":
            await self._stop(reason=None)
            await self.session.close(CLOSE_NORMAL)
            return False
        if fields.type is not None:
            raise SilkError(400, f"Unknown frame type {fields.type!r}: use \"cancel\" or \"close\", or send text "
                                 "without a type.", "invalid_frame")
        if fields.model is not None:
            check_silk_model(fields.model, self.accepted)  # the model is fixed at ws-connect; only check it
        voice, audio = self.voice.updated(fields), self.audio.updated(fields)
        check_silk_timestamps(audio.timestamps, self.ctx)  # no aligners: refused, the playing utterance goes on
        await self._stop(reason="interrupt")
        output = silk_output(audio.response_format, audio.sample_rate, SOCKET_FORMAT, RAW_FORMATS,
                             self.adapter.sample_rate)
        parts = await off_loop(silk_script, fields, voice, self.ctx)  # SSML: its parts in order; None: plain
        check_silk_timestamps(audio.timestamps, self.ctx, parts)
        req = silk_request(fields, voice, self.ctx) if parts is None else first_request(parts)
        self.voice, self.audio = voice, audio  # only a frame that made a valid request changes them
        self.current_id = request_id()
        self.current = asyncio.create_task(self._speak(req, self.current_id, parts, output, audio.timestamps))
        return True

    async def _stop(self, reason: str | None) -> None:
        """Stop the playing utterance (its row is freed), then say `cancelled` (reason None: say nothing)."""
        if not self.playing:
            return
        self.current.cancel()
        await asyncio.gather(self.current, return_exceptions=True)
        self.metrics.error("cancelled")
        if reason is not None:
            await self.session.send_json({"type": "cancelled", "reason": reason, "request_id": self.current_id})

    async def _speak(self, req: SynthesisRequest, rid: str, parts: list[Part] | None = None,
                     output: tuple[str, int | None] = (SOCKET_FORMAT, None), timestamps: bool = False) -> None:
        started = time.perf_counter()
        info: dict = {}  # filled live by the stream: where each chunk lies (StreamWords reads it)
        samples = 0
        words: StreamWords | None = None
        encoder = make_encoder(output[0], self.adapter.sample_rate, output[1])  # raw: pcm, ulaw or alaw
        pieces = script_stream(self.adapter, parts, info) if parts else self.adapter.stream(req, info)
        try:
            async with self.session.utterance():
                await self.session.send_json({"type": "queued", "queue_depth": self.adapter.stats().queue_depth,
                                              "request_id": rid})
                first = await first_piece(pieces, lambda: self.session.send_json(
                    {"type": "queued", "queue_depth": self.adapter.stats().queue_depth, "request_id": rid}))
                self.metrics.first_audio.observe(time.perf_counter() - started)
                if timestamps:  # plain text only (checked); built once admitted: the plan's chunk texts, off the loop
                    words = await off_loop(StreamWords, req, self.adapter, self.ctx.aligners, info)
                async for piece in _chain(first, pieces):
                    samples += len(piece)
                    if words is not None:  # a chunk's words before the next chunk's audio ends
                        words.push(piece)
                        if not await self._send_words(rid, await words.due()):
                            return
                    if (data := encoder.encode(piece)) and not await self.session.send_audio(data):
                        return
                if (data := encoder.finish()) and not await self.session.send_audio(data):  # the resampler's tail
                    return
                if words is not None and not await self._send_words(rid, await words.finish()):  # the rest
                    return
            seconds, elapsed = samples / self.adapter.sample_rate, time.perf_counter() - started
            self.metrics.request_done(200, encoder.fmt, elapsed)
            done = {"type": "done", "request_id": rid, "audio_duration": round(seconds, 3),
                    "rtf": round(elapsed / seconds, 4) if seconds else 0.0, "credits_used": 0, "seed": req.seed}
            if words is not None:  # which aligner placed the words, and why any have no times (None: all have)
                timings = words.timings()
                done.update(aligner=timings.aligner, missing=timings.missing)
            await self.session.send_json(done)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes one error frame
            error = silk_error(exc)
            self.metrics.error(error.code)
            self.metrics.request_done(error.status, encoder.fmt)
            await self.session.send_json({**error.frame(), "request_id": rid})
        finally:
            await pieces.aclose()
            if words is not None:
                words.cancel()

    async def _send_words(self, rid: str, batches: list[list]) -> bool:
        """One `words` frame per aligned chunk that completed any typed words; False if the socket is gone."""
        for batch in batches:
            if batch and not await self.session.send_json(
                    {"type": "words", "request_id": rid, "words": [word.to_dict() for word in batch]}):
                return False
        return True


async def first_piece(pieces: AsyncIterator[np.ndarray], tick, every: float = QUEUED_EVERY_S) -> np.ndarray:
    """The first piece of a stream, calling `await tick()` every `every` seconds while it waits."""
    task = asyncio.ensure_future(anext(pieces, np.zeros(0, dtype=np.float32)))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=every)
            if done:
                return task.result()
            await tick()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def _chain(first: np.ndarray, pieces: AsyncIterator[np.ndarray]) -> AsyncIterator[np.ndarray]:
    yield first
    async for piece in pieces:
        yield piece
