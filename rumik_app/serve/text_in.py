"""`WS /v1/audio/speech/stream`: text streamed in (an LLM's deltas), speech out per sentence.

    async with websockets.connect("ws://127.0.0.1:8000/v1/audio/speech/stream") as ws:
        await ws.send(json.dumps({"type": "session.config", "voice": "Ira", "response_format": "pcm",
                                  "stream_audio": True, "seed": 7}))
        for delta in llm_deltas:
            await ws.send(json.dumps({"type": "input.text", "text": delta}))
        await ws.send(json.dumps({"type": "input.done"}))
        # <- audio.start, binary PCM..., audio.done per sentence, then session.done

vLLM-Omni's protocol as published (docs/serving/speech_api.md, "Streaming Text Input"):
  client  session.config (first; again between utterances), input.text {text}, input.done
          (the end of one utterance: the socket stays open), session.close.
  server  audio.start {utterance_index, sentence_index, sentence_text, format, sample_rate,
          channels}, binary audio, audio.done {utterance_index, sentence_index, total_bytes,
          error}, and session.done {utterance_index, total_sentences} after input.done's
          sentences; error {message, code} for a bad frame (the session stays open).
The config takes the fields of POST /v1/audio/speech except `input` and the whole-script ones
(`voice`, or its alias `speaker`; `instructions`, `speed`, `response_format`, `sample_rate`, and
every request setting on the wire: `rumik_app.serve.fields`), checked by the same code
(`rumik_app.serve.openai.schema.speech_job`), plus `stream_audio` (false: one whole file per
sentence in one binary frame, as vLLM-Omni; true: raw audio as it is generated, needs response_format
pcm, ulaw or alaw; audio.start's sample_rate is the output rate) and
`split_granularity` ("sentence", the default here: speak each sentence once it is complete;
"none": the whole utterance at input.done). `timestamps: true` (the speech route's field; refused
at session.config when the server has no aligners) adds one frame per sentence:
  words   {utterance_index, sentence_index, words: [{word, start, end, kind}], aligner, missing}
          the sentence's typed words ("₹250" is one word, a tag such as <laugh> has kind "tag"),
          with start and end in seconds from the start of THAT sentence's audio (its audio.start),
          as a voice agent counts what it has played of the sentence playing when the user barges
          in; missing: None, or why some words have no times.
It comes after the sentence's audio.done and before the next sentence's audio.done (whole files:
before its audio frame) or the utterance's session.done. The words are aligned off the event loop
while the next sentence is synthesized (`rumik_app.serve.words.StreamWords`), so synthesis never
waits for them; at most one sentence's words are outstanding (the next sentence's audio.done
waits for them if the aligner is slower than speech). SSML sentences are refused with timestamps.

Sentences are cut as text arrives by `rumik_app.text.chunking.SentenceCutter` (the
project's sentence rules; the cut points depend on the text only, not on how it was split
into deltas). Sentence k of the session (counting across utterances) is sampled with seed
base + k, where base is the config's seed (or one drawn per session), so a session speaks
exactly what POST /v1/audio/speech says for each sentence with that seed. Sentences play in
order, one at a time, through `SpeechAdapter.stream` (the rows every route uses). Text
waiting to be spoken is bounded (the server's text limit): a delta beyond it gets an error
and is dropped. A hang-up stops the sentence playing and frees its row.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from dataclasses import dataclass

import numpy as np
from fastapi import APIRouter, WebSocket
from pydantic import ValidationError

from rumik_app.prompt import PromptError, check_characters
from rumik_app.serve.adapters import off_loop
from rumik_app.serve.context import ServeContext
from rumik_app.serve.encoding import RAW_FORMATS, encode_whole, make_encoder
from rumik_app.serve.errors import ApiError, engine_error, prompt_error
from rumik_app.serve.openai.schema import SpeechRequest, check_format, check_model, speech_job, validation_error
from rumik_app.serve.protocol import OPEN_OWNER
from rumik_app.serve.sockets import CLOSE_NORMAL, Session
from rumik_app.serve.words import StreamWords
from rumik_app.text.chunking import SentenceCutter

PATH = "/v1/audio/speech/stream"
CONFIG_TIMEOUT_S = 10.0  # vLLM-Omni's: the first session.config must come this soon
IDLE_TIMEOUT_S = 30.0  # vLLM-Omni's: no client frame this long, with nothing to say, ends the session
DEFAULT_FORMAT = "wav"  # vLLM-Omni's default
GRANULARITIES = ("sentence", "none")
STREAM_KEYS = ("type", "stream_audio", "split_granularity")
NOT_HERE = ("dialogue", "dialogue_gap", "spans")  # whole-script options of POST /v1/audio/speech
CHECK_TEXT = "Hello."  # a config is checked as a request with this text
MAX_QUEUED_ITEMS = 64  # sentences and utterance ends in line per session (with the server's character bound)


@dataclass(frozen=True)
class StreamConfig:
    """A checked session.config: the speech request's fields (all but `input`) and ours."""

    fields: dict
    stream_audio: bool
    granularity: str
    response_format: str
    seed_base: int
    sample_rate: int | None = None  # the output rate (None: the format's default)


@dataclass(frozen=True)
class Unit:
    """One sentence to speak: which utterance, its index there, its text, seed and config."""

    utterance: int
    index: int
    text: str
    seed: int
    config: StreamConfig


def parse_config(data: dict, ctx: ServeContext, owner: str = OPEN_OWNER) -> StreamConfig:
    """StreamConfig from a session.config frame (`owner`'s lexicons by id); ApiError names the bad field."""
    refused = [key for key in NOT_HERE if key in data]
    if refused:
        raise ApiError(400, f"{refused[0]} is not taken on a text-in session (sentences are spoken as they "
                            "arrive); send a dialogue or spans to POST /v1/audio/speech.", param=refused[0])
    fields = {k: v for k, v in data.items() if k not in STREAM_KEYS}
    if "speaker" in fields:
        fields.setdefault("voice", fields.pop("speaker"))
    fields.setdefault("model", ctx.accepted[0])
    fields.setdefault("voice", ctx.adapter.voices[0])
    fields.setdefault("response_format", DEFAULT_FORMAT)
    stream_audio, granularity = data.get("stream_audio", False), data.get("split_granularity", "sentence")
    if not isinstance(stream_audio, bool):
        raise ApiError(400, "stream_audio must be true or false.", param="stream_audio")
    if granularity not in GRANULARITIES:
        raise ApiError(400, f"split_granularity must be one of: {', '.join(GRANULARITIES)}.",
                       param="split_granularity")
    try:
        body = SpeechRequest(input=CHECK_TEXT, **fields)
    except ValidationError as exc:
        raise validation_error(exc.errors()) from None
    check_model(body.model, ctx.accepted)
    fmt = check_format(body.response_format, sse=False)
    if stream_audio and fmt not in RAW_FORMATS:
        raw = ", ".join(RAW_FORMATS[:-1]) + " or " + RAW_FORMATS[-1]
        raise ApiError(400, f"stream_audio needs response_format {raw} (raw audio as it is generated); with "
                            f"{fmt!r}, leave stream_audio false to get one {fmt} file per sentence.",
                       param="response_format", code="unsupported_format")
    job = speech_job(body, ctx, owner)  # every field checked now, on a stand-in text (the seed is drawn here)
    return StreamConfig(fields, stream_audio, granularity, fmt, job.request.seed, job.sample_rate)


class TextInSession:
    """One text-in socket session (see the module docstring)."""

    def __init__(self, session: Session, ctx: ServeContext):
        self.session, self.ctx, self.adapter, self.metrics = session, ctx, ctx.adapter, ctx.metrics
        self.owner = session.ws.scope.get("state", {}).get("owner", OPEN_OWNER)  # set by RequestGate
        self.config: StreamConfig | None = None
        self.cutter = SentenceCutter()
        self.units: asyncio.Queue = asyncio.Queue()
        self.queued_chars = 0  # text cut into units, not yet spoken
        self.utterance = 0
        self.sentences = 0  # units of the open utterance
        self.spoken = 0  # units of the session: the seed offset
        self.busy = False
        self.last_frame = time.monotonic()
        self.words: asyncio.Task | None = None  # the last spoken sentence's words frame, being aligned

    async def run(self) -> None:
        """Serve the session until the client hangs up, times out or closes it (after session.close,
        what is queued is spoken unless the client hangs up first)."""
        speaker = asyncio.create_task(self._speaker())
        try:
            if await self._receive(speaker):  # session.close: speak what is queued, unless the client goes
                await _first_of(speaker, asyncio.create_task(self._until_hang_up()))
        finally:
            speaker.cancel()  # a hang-up: the sentence playing stops, its row is freed, the queue is dropped
            await asyncio.gather(speaker, return_exceptions=True)
            await self.session.close(CLOSE_NORMAL)

    async def _receive(self, speaker: asyncio.Task) -> bool:
        """Handle frames until session.close (True), or a hang-up, a timeout or a gone client (False)."""
        while True:
            try:
                message = await _first_of(speaker, asyncio.ensure_future(self.session.ws.receive()),
                                          timeout=self._quiet_left())
            except TimeoutError:
                if self.busy or not self.units.empty():
                    continue
                what = "Timeout waiting for session.config" if self.config is None else \
                    f"Idle timeout: no message received for {IDLE_TIMEOUT_S:.0f} s"
                await self.session.send_json({"type": "error", "message": what, "code": "timeout"})
                return False
            if message is None or message["type"] == "websocket.disconnect":
                return False  # None: the speaker ended, its client gone
            self.last_frame = time.monotonic()
            if not await self._on_message(message):
                await self.units.put(None)  # session.close: the speaker ends after what is queued
                return True

    async def _until_hang_up(self) -> None:
        """After session.close: read (and ignore) frames until the client hangs up."""
        while (await self.session.ws.receive())["type"] != "websocket.disconnect":
            pass

    def _quiet_left(self) -> float:
        limit = CONFIG_TIMEOUT_S if self.config is None else IDLE_TIMEOUT_S
        return max(0.05, self.last_frame + limit - time.monotonic())

    async def _on_message(self, message: dict) -> bool:
        try:
            if message.get("text") is None:
                raise ApiError(400, "Binary frames are not accepted; send JSON text frames.", code="invalid_frame")
            try:
                data = json.loads(message["text"])
            except ValueError:
                raise ApiError(400, "The frame is not valid JSON.", code="invalid_json") from None
            if not isinstance(data, dict) or not isinstance(data.get("type"), str):
                raise ApiError(400, "A frame is a JSON object with a \"type\": session.config, input.text, "
                                    "input.done or session.close.", code="invalid_frame")
            return await self._on_frame(data)
        except ApiError as exc:  # a bad frame: say so; the session goes on
            self.metrics.error(exc.code or "invalid_frame")
            await self.session.send_json({"type": "error", "message": exc.message, "code": exc.code,
                                          "param": exc.param})
            return True

    async def _on_frame(self, data: dict) -> bool:
        kind = data["type"]
        if kind == "session.config":
            if self.cutter.pending or self.sentences:
                raise ApiError(400, "An utterance is open: send input.done first, then the new session.config.",
                               code="utterance_open")
            self.config = parse_config(data, self.ctx, self.owner)
            self.spoken = 0  # a new config starts a new seed sequence
            return True
        if kind == "session.close":
            await self._flush()
            return False
        if self.config is None:
            raise ApiError(400, "Send session.config first (e.g. {\"type\": \"session.config\", \"voice\": \"Ira\"}).",
                           code="no_config")
        if kind == "input.text":
            text = data.get("text")
            if not isinstance(text, str):
                raise ApiError(400, "input.text needs \"text\": a string.", param="text", code="invalid_text")
            self._check_backlog(text)
            try:
                check_characters(text)  # before it is cut: a sentence is echoed back in audio.start
            except PromptError as exc:
                raise prompt_error(exc) from None
            if self.config.granularity == "sentence":
                trial = copy.copy(self.cutter)  # the cutter moves on only if its sentences fit in line
                units = trial.push(text)
                self._check_room(len(units))
                self.cutter = trial
                await self._queue(units)
            else:
                self.cutter.buffer += text
            return True
        if kind == "input.done":
            await self._flush()
            return True
        raise ApiError(400, f"Unknown frame type {kind!r}: use session.config, input.text, input.done or "
                            "session.close.", code="invalid_frame")

    def _check_backlog(self, text: str) -> None:
        limit = self.adapter.limits.max_chars
        if self.cutter.pending + self.queued_chars + len(text) > limit:
            raise ApiError(400, f"This text would put more than {limit:,} characters in line to be spoken; it was "
                                "dropped. Send it again once audio has played, or in smaller parts.",
                           code="text_backlog")

    def _check_room(self, items: int) -> None:
        """Every queued item (a sentence, an utterance's end) counts against MAX_QUEUED_ITEMS."""
        if self.units.qsize() + items > MAX_QUEUED_ITEMS:
            raise ApiError(400, f"More than {MAX_QUEUED_ITEMS} sentences and utterance ends would be in line to be "
                                "spoken; this frame was dropped. Send it again once audio has played.",
                           code="text_backlog")

    async def _queue(self, texts: list[str]) -> None:
        for text in texts:
            seed = self.config.seed_base + self.spoken
            await self.units.put(Unit(self.utterance, self.sentences, text, seed, self.config))
            self.queued_chars += len(text)
            self.sentences += 1
            self.spoken += 1

    async def _flush(self) -> None:
        """The end of an utterance: its last text, then session.done once it has played."""
        if self.config is None and not self.cutter.pending:
            return
        self._check_room(2)  # at most the cutter's last unit and the end
        await self._queue(self.cutter.flush())
        await self.units.put(("done", self.utterance, self.sentences))
        self.utterance, self.sentences = self.utterance + 1, 0

    async def _speaker(self) -> None:
        try:
            while (item := await self.units.get()) is not None:
                if isinstance(item, tuple):
                    _, utterance, total = item
                    await self._words_sent()
                    await self._send_json({"type": "session.done", "utterance_index": utterance,
                                           "total_sentences": total})
                    continue
                self.queued_chars -= len(item.text)
                self.busy = True
                try:
                    await self._speak(item)
                finally:
                    self.busy = False
                    self.last_frame = max(self.last_frame, time.monotonic())
            await self._words_sent()  # session.close: the last words before the socket closes
        finally:
            if self.words is not None and not self.words.done():  # a hang-up: nobody to tell
                self.words.cancel()
                await asyncio.gather(self.words, return_exceptions=True)

    async def _words_sent(self) -> None:
        """Wait for the last sentence's words frame to be sent (ClientGone if the client went)."""
        task, self.words = self.words, None
        if task is not None:
            await task

    async def _send_words(self, words: StreamWords, ids: dict) -> None:
        """A sentence's words frame, once its last chunk is aligned (a task: the next sentence goes on)."""
        try:
            batches = await words.finish()
        finally:
            words.cancel()
        timings = words.timings()
        await self._send_json({"type": "words", **ids, "words": [w.to_dict() for batch in batches for w in batch],
                               "aligner": timings.aligner, "missing": timings.missing})

    async def _speak(self, unit: Unit) -> None:
        cfg, started, total, opened = unit.config, time.perf_counter(), 0, False
        words: StreamWords | None = None
        fields = {**cfg.fields, "seed": unit.seed}
        ids = {"utterance_index": unit.utterance, "sentence_index": unit.index}
        source_rate = self.adapter.sample_rate
        encoder = make_encoder(cfg.response_format, source_rate, cfg.sample_rate) if cfg.stream_audio else None

        async def start() -> None:
            nonlocal opened
            if not opened:
                opened = True
                await self._send_json({"type": "audio.start", **ids, "sentence_text": unit.text,
                                       "format": cfg.response_format,
                                       "sample_rate": cfg.sample_rate or source_rate, "channels": 1})
        failed = True
        try:
            job = speech_job(SpeechRequest(input=unit.text, **fields), self.ctx, self.owner)
            if job.parts:  # a sentence that is an SSML document: not spoken in pieces here
                raise ApiError(400, "SSML is not taken on a text-in session; send plain text, or the document to "
                                    "POST /v1/audio/speech.", param="text", code="invalid_text")
            info: dict = {}  # filled live by the stream: where each chunk lies (StreamWords reads it)
            if job.timestamps:
                words = await off_loop(StreamWords, job.request, self.adapter, self.ctx.aligners, info)
            async with self.session.utterance():
                audio = []
                async for piece in self.adapter.stream(job.request, info):
                    if not opened:
                        self.metrics.first_audio.observe(time.perf_counter() - started)
                    await start()
                    if encoder is None:
                        audio.append(piece)
                    elif data := encoder.encode(piece):
                        total += len(data)
                        await self._send_audio(data)
                    if words is not None:
                        words.push(piece)
            if encoder is not None:
                data = encoder.finish()  # the resampler's tail
                total += len(data)
            else:
                samples = np.concatenate(audio) if audio else np.zeros(0, dtype=np.float32)
                data = await off_loop(encode_whole, cfg.response_format, samples, source_rate, cfg.sample_rate)
                total = len(data)
            await self._words_sent()  # the previous sentence's words, before this one's last frames
            if encoder is None:
                await start()
            if data:
                await self._send_audio(data)
            failed = False
            self.metrics.request_done(200, cfg.response_format, time.perf_counter() - started)
        except (asyncio.CancelledError, ClientGone):
            opened = False  # nobody to tell
            raise
        except Exception as exc:  # noqa: BLE001 - one error frame; the next sentence goes on
            error = exc if isinstance(exc, ApiError) else engine_error(exc)
            self.metrics.error(error.code)
            self.metrics.request_done(error.status, cfg.response_format)
            await start()
            await self._send_json({"type": "error", "message": error.message, "code": error.code, **ids})
        finally:
            try:
                if opened:
                    await self._send_json({"type": "audio.done", **ids, "total_bytes": total, "error": failed})
            finally:
                if words is not None and not failed:  # aligned while the next sentence is made; sent when ready
                    self.words = asyncio.create_task(self._send_words(words, ids))
                elif words is not None:
                    words.cancel()

    async def _send_json(self, frame: dict) -> None:
        if not await self.session.send_json(frame):
            raise ClientGone

    async def _send_audio(self, data: bytes) -> None:
        if not await self.session.send_audio(data):
            raise ClientGone


class ClientGone(Exception):
    """A send failed: the client hung up, so the speaker stops (and its queue is dropped)."""


async def _first_of(speaker: asyncio.Task, other: asyncio.Future, timeout: float | None = None):
    """`other`'s result, or None when the speaker ends first (a gone client); `other` is
    cancelled unless it is the answer. TimeoutError past `timeout` seconds."""
    try:
        done, _ = await asyncio.wait({speaker, other}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not other.done():
            other.cancel()
            await asyncio.gather(other, return_exceptions=True)
    if other in done:
        return other.result()
    if not done:
        raise TimeoutError
    return None


router = APIRouter()


@router.websocket(PATH)
async def speech_stream(ws: WebSocket) -> None:
    """`WS /v1/audio/speech/stream` (the API key, when set, is checked in front)."""
    ctx: ServeContext = ws.app.state.ctx
    async with ctx.sessions.session(ws) as session:
        if session is not None:
            await TextInSession(session, ctx).run()
