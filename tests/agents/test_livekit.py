"""LiveKit against our server: `livekit-plugins-rumik` (its pooled socket) and
`livekit-plugins-openai`'s TTS (our OpenAI route), through `synthesize()` and `stream()`."""

from __future__ import annotations

import asyncio

import aiohttp
from livekit.agents import APIConnectOptions
from livekit.agents import tts as lk_tts
from livekit.agents.tokenize import basic
from livekit.plugins import openai as lk_openai
from livekit.plugins import rumik

from tests.agents.conftest import active_rows, wait_for

FAST = APIConnectOptions(max_retry=0, timeout=20)


async def _frames(stream) -> list:
    frames = [event.frame async for event in stream]
    assert frames and {(f.sample_rate, f.num_channels) for f in frames} == {(24000, 1)}
    return frames


def _samples(frames) -> int:
    return sum(f.samples_per_channel for f in frames)


def test_rumik_plugin_synthesize_and_stream_on_one_pooled_socket(server):
    url, key = server

    async def go():
        async with aiohttp.ClientSession() as http:
            tts = rumik.TTS(api_key=key, base_url=url, http_session=http)  # muga: adds [neutral] itself
            said = await _frames(tts.synthesize("Namaste, kaise ho?", conn_options=FAST))
            stream = tts.stream(conn_options=FAST)
            for word in ("Hello ", "there, ", "this is ", "a stream."):
                stream.push_text(word)
            stream.end_input()
            streamed = await _frames(stream)
            await tts.aclose()
            mulberry = rumik.TTS(api_key=key, base_url=url, http_session=http, model="mulberry",
                                 speaker="speaker_2", description="warm", temperature=0.5)
            legacy = await _frames(mulberry.synthesize("Hello <laugh> world.", conn_options=FAST))
            await mulberry.aclose()
            return said, streamed, legacy
    for frames in asyncio.run(go()):
        assert _samples(frames) > 0


def test_rumik_plugin_barge_in_cancels_and_the_socket_is_reused(server):
    url, key = server

    async def go():
        async with aiohttp.ClientSession() as http:
            tts = rumik.TTS(api_key=key, base_url=url, http_session=http)
            stream = tts.stream(conn_options=FAST)
            stream.push_text("A long sentence which we abandon after the first frames arrive.")
            stream.end_input()
            got = 0
            async for _ in stream:
                got += 1
                if got == 2:
                    break
            await stream.aclose()  # livekit sends {"type": "cancel"} and waits for "cancelled"
            await asyncio.to_thread(wait_for, lambda: active_rows(url) == 0, 30.0, "the cancelled row")
            again = await _frames(tts.synthesize("Phir se.", conn_options=FAST))
            await tts.aclose()
            return got, again
    got, again = asyncio.run(go())
    assert got == 2 and _samples(again) > 0


def test_livekit_openai_plugin_synthesize_and_stream(server):
    url, key = server

    async def go():
        results = []
        for fmt in ("pcm", "wav", None):  # None: the plugin's default, mp3 over SSE
            options = {"response_format": fmt} if fmt else {}
            tts = lk_openai.TTS(base_url=url + "/v1", api_key=key, model="rumik-oss-1", voice="ash", **options)
            results.append(await _frames(tts.synthesize("Hello from LiveKit's OpenAI plugin.", conn_options=FAST)))
            await tts.aclose()
        tts = lk_openai.TTS(base_url=url + "/v1", api_key=key, model="rumik-oss-1", voice="ash",
                            response_format="pcm")
        adapter = lk_tts.StreamAdapter(tts=tts, sentence_tokenizer=basic.SentenceTokenizer())  # its stream()
        stream = adapter.stream(conn_options=FAST)
        for part in ("First sentence here. ", "And the second one."):
            stream.push_text(part)
        stream.end_input()
        results.append(await _frames(stream))
        await adapter.aclose()
        return results
    for frames in asyncio.run(go()):
        assert _samples(frames) > 0
