"""Pipecat against our server: `pipecat-rumik`'s two services and pipecat's own OpenAI TTS.

Each runs in a minimal pipeline from pipecat's test utilities (`run_test`: source ->
service -> sink), as pipecat's own service tests do.
"""

from __future__ import annotations

import asyncio

import aiohttp
from pipecat.frames.frames import ErrorFrame, InterruptionFrame, TTSAudioRawFrame, TTSSpeakFrame, TTSStoppedFrame
from pipecat.services.openai.tts import OpenAITTSService
from pipecat.tests.utils import SleepFrame, run_test
from pipecat_rumik import RumikHttpTTSService, RumikTTSService

# pipecat's own watchdog without an output transport, not a failure of the service
NO_TRANSPORT = "BotStartedSpeakingFrame"


def _audio(frames) -> bytes:
    chunks = [f for f in frames if isinstance(f, TTSAudioRawFrame)]
    assert chunks and {(f.sample_rate, f.num_channels) for f in chunks} == {(24000, 1)}
    return b"".join(f.audio for f in chunks)


# How long a pipeline runs after its last frame: an utterance (at most 1.5 s of audio) is
# synthesised and sent back well within it, even on a busy 2-core machine (1 s was not always).
SETTLE_S = 3.0

def _errors(frames) -> list[str]:
    return [str(f.error) for f in frames if isinstance(f, ErrorFrame) and NO_TRANSPORT not in str(f.error)]


def test_rumik_websocket_service_speaks_two_utterances(server):
    url, key = server
    tts = RumikTTSService(api_key=key, gateway_url=url,
                          settings=RumikTTSService.Settings(model="mulberry", voice="ira", temperature=0.7))
    down, up = asyncio.run(run_test(tts, frames_to_send=[
        TTSSpeakFrame(text="Hello from pipecat."), SleepFrame(sleep=3.0),
        TTSSpeakFrame(text="And a second one."), SleepFrame(sleep=3.0)]))
    assert len(_audio(down)) > 24000  # both utterances: more than half a second of audio
    assert sum(isinstance(f, TTSStoppedFrame) for f in down) >= 2 and not _errors(down + up)


def test_rumik_websocket_service_recovers_from_an_interruption(server):
    url, key = server
    tts = RumikTTSService(api_key=key, gateway_url=url)  # muga, the default
    down, up = asyncio.run(run_test(tts, frames_to_send=[
        TTSSpeakFrame(text="[neutral] A long sentence that the user interrupts."), SleepFrame(sleep=0.5),
        InterruptionFrame(), SleepFrame(sleep=1.0),
        TTSSpeakFrame(text="[happy] After the interruption."), SleepFrame(sleep=6.0)]))  # past pipecat's 3 s watchdog
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
            frames = [TTSSpeakFrame(text="Hello over HTTP."), SleepFrame(sleep=SETTLE_S)]
            return await run_test(tts, frames_to_send=frames)
    down, up = asyncio.run(go())
    assert len(_audio(down)) > 0 and not _errors(down + up)


def test_pipecats_openai_service_against_the_openai_route(server):
    url, key = server
    tts = OpenAITTSService(api_key=key, base_url=url + "/v1", sample_rate=24000,
                           settings=OpenAITTSService.Settings(voice="alloy", model="rumik-oss-1"))
    down, up = asyncio.run(run_test(tts, frames_to_send=[TTSSpeakFrame(text="Hello from pipecat's OpenAI service."),
                                                         SleepFrame(sleep=SETTLE_S)]))
    assert len(_audio(down)) > 0 and not _errors(down + up)
