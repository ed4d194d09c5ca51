"""Pipecat against our server: `pipecat-rumik`'s two services and pipecat's own OpenAI TTS.

Each runs in a minimal pipeline from pipecat's test utilities (source -> service -> sink), as
pipecat's own service tests do, except that each test waits for what it checks (an utterance's
TTSStoppedFrame) instead of sleeping a fixed time, so a busy machine makes it slower, not red.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import aiohttp
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
    TTSStoppedFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.tests.utils import QueuedFrameProcessor, SleepFrame
from pipecat.workers.runner import WorkerRunner
from pipecat_rumik import RumikHttpTTSService, RumikTTSService

# pipecat's own watchdog without an output transport, not a failure of the service
NO_TRANSPORT = "BotStartedSpeakingFrame"


def _audio(frames) -> bytes:
    chunks = [f for f in frames if isinstance(f, TTSAudioRawFrame)]
    assert chunks and {(f.sample_rate, f.num_channels) for f in chunks} == {(24000, 1)}
    return b"".join(f.audio for f in chunks)


# The most a wait for an utterance may take: a deadline for a hang, not a speed check.
WAIT_S = 120.0


def _errors(frames) -> list[str]:
    return [str(f.error) for f in frames if isinstance(f, ErrorFrame) and NO_TRANSPORT not in str(f.error)]


class _Downstream(BaseObserver):
    """Every frame `service` pushes downstream, in order, and an event set on each."""

    def __init__(self, service: FrameProcessor):
        super().__init__()
        self.service, self.frames, self.changed = service, [], asyncio.Event()

    async def on_push_frame(self, data: FramePushed):
        if data.source is self.service and data.direction == FrameDirection.DOWNSTREAM:
            self.frames.append(data.frame)
            self.changed.set()

    async def until(self, done: Callable[[list[Frame]], bool]) -> None:
        while not done(self.frames):
            self.changed.clear()
            await self.changed.wait()


async def _run_until(service: FrameProcessor, steps: Sequence) -> tuple[list[Frame], list[Frame]]:
    """pipecat's `run_test` (source -> service -> sink, then EndFrame), where a callable step waits (up
    to WAIT_S) until it holds for the frames the service has pushed downstream so far."""
    down, up = asyncio.Queue(), asyncio.Queue()
    source = QueuedFrameProcessor(queue=up, queue_direction=FrameDirection.UPSTREAM, ignore_start=True)
    sink = QueuedFrameProcessor(queue=down, queue_direction=FrameDirection.DOWNSTREAM, ignore_start=True)
    seen = _Downstream(service)
    worker = PipelineWorker(Pipeline([source, service, sink]), cancel_on_idle_timeout=False, enable_rtvi=False,
                            observers=[seen])

    async def push():
        await asyncio.sleep(0.01)  # the runner's head start, as in run_test
        for step in steps:
            if callable(step):
                await asyncio.wait_for(seen.until(step), WAIT_S)
            elif isinstance(step, SleepFrame):
                await asyncio.sleep(step.sleep)
            else:
                await worker.queue_frame(step)
        await worker.queue_frame(EndFrame())

    runner = WorkerRunner()
    await runner.add_workers(worker)
    await asyncio.gather(runner.run(), push())
    received_down = [down.get_nowait() for _ in range(down.qsize())]
    return [f for f in received_down if not isinstance(f, EndFrame)], [up.get_nowait() for _ in range(up.qsize())]


def _stopped(count: int) -> Callable[[list[Frame]], bool]:
    """A wait step: the service has ended `count` utterances."""
    return lambda frames: sum(isinstance(f, TTSStoppedFrame) for f in frames) >= count


def _stopped_after_interruption(frames: list[Frame]) -> bool:
    """A wait step: an utterance begun after the interruption has ended."""
    cut = next((i for i, f in enumerate(frames) if isinstance(f, InterruptionFrame)), None)
    return cut is not None and any(isinstance(f, TTSStoppedFrame) for f in frames[cut:])


def test_rumik_websocket_service_speaks_two_utterances(server):
    url, key = server
    tts = RumikTTSService(api_key=key, gateway_url=url,
                          settings=RumikTTSService.Settings(model="mulberry", voice="ira", temperature=0.7))
    down, up = asyncio.run(_run_until(tts, [TTSSpeakFrame(text="Hello from pipecat."), _stopped(1),
                                            TTSSpeakFrame(text="And a second one."), _stopped(2)]))
    assert len(_audio(down)) > 24000  # both utterances: more than half a second of audio
    assert sum(isinstance(f, TTSStoppedFrame) for f in down) >= 2 and not _errors(down + up)


def test_rumik_websocket_service_recovers_from_an_interruption(server):
    url, key = server
    tts = RumikTTSService(api_key=key, gateway_url=url)  # muga, the default
    down, up = asyncio.run(_run_until(tts, [
        TTSSpeakFrame(text="[neutral] A long sentence that the user interrupts."), SleepFrame(sleep=0.5),
        InterruptionFrame(), SleepFrame(sleep=1.0),
        TTSSpeakFrame(text="[happy] After the interruption."), _stopped_after_interruption]))
    assert _audio(down) and not _errors(down + up)
    cut = next(i for i, f in enumerate(down) if isinstance(f, InterruptionFrame))
    after = down[cut:]
    assert any(isinstance(f, TTSAudioRawFrame) for f in after) and isinstance(after[-1], TTSStoppedFrame)


def test_rumik_http_service_turns_the_wav_into_audio_frames(server):
    url, key = server

    async def go():
        async with aiohttp.ClientSession() as session:
            tts = RumikHttpTTSService(api_key=key, gateway_url=url, aiohttp_session=session,
                                      settings=RumikHttpTTSService.Settings(model="mulberry", voice="aisha",
                                                                            description="calm and warm"))
            return await _run_until(tts, [TTSSpeakFrame(text="Hello over HTTP."), _stopped(1)])
    down, up = asyncio.run(go())
    assert len(_audio(down)) > 0 and not _errors(down + up)


def test_pipecats_openai_service_against_the_openai_route(server):
    url, key = server
    tts = OpenAITTSService(api_key=key, base_url=url + "/v1", sample_rate=24000,
                           settings=OpenAITTSService.Settings(voice="alloy", model="rumik-oss-1"))
    down, up = asyncio.run(_run_until(tts, [TTSSpeakFrame(text="Hello from pipecat's OpenAI service."), _stopped(1)]))
    assert len(_audio(down)) > 0 and not _errors(down + up)
