"""`rumik-ai` 1.0.0, Rumik's official SDK, sync and async, pointed at our server by base_url."""

from __future__ import annotations

import asyncio
import io
import threading
import time
import wave

import httpx
import pytest
import rumikai
from rumikai import AsyncRumik, AudioChunk, Rumik, UtteranceCancelled, UtteranceDone

from tests.agents.conftest import active_rows, wait_for


def _wav(content: bytes) -> tuple[int, int, int, int]:
    with wave.open(io.BytesIO(content)) as w:
        return w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()


def test_create_gives_a_24_khz_wav(server):
    url, key = server
    client = Rumik(api_key=key, base_url=url, max_retries=0)
    audio = client.speech.create(text="[happy] Namaste, kaise ho?", model="muga", max_new_tokens=80)
    assert audio.is_wav and audio.request_id.startswith("req_")
    rate, channels, width, frames = _wav(audio.content)
    assert (rate, channels, width) == (24000, 1, 2) and frames > 0
    legacy = client.speech.create(text="Hello.", model="mulberry", speaker="speaker_3", temperature=0,
                                  max_new_tokens=80)  # greedy: the same audio for the same voice
    assert legacy.content == client.speech.create(text="Hello.", model="mulberry", speaker="Aisha", temperature=0,
                                                  max_new_tokens=80).content


def _tokens_total(url: str) -> int:
    """Audio tokens the server has generated since it started (its /health)."""
    return httpx.get(url + "/health", timeout=5).json()["tokens_total"]


# Several text chunks (the server splits text at ~16 s of expected speech), each up to the
# server's --max-seconds of audio: the utterance is generated long after its first audio is ready.
LONG_TEXT = " ".join(["This sentence is streamed to the client while the server still generates it."] * 12)


def test_stream_yields_pcm_while_the_server_is_still_generating_it(server):
    url, key = server
    wait_for(lambda: active_rows(url) == 0, what="the server to be idle")  # only this utterance from here on
    client = Rumik(api_key=key, base_url=url, max_retries=0)
    before, at_first, chunks, pcm = _tokens_total(url), None, 0, b""
    with client.speech.stream(text=LONG_TEXT, model="mulberry", speaker="ira") as stream:
        for chunk in stream.iter_bytes():
            if at_first is None:
                at_first = _tokens_total(url)  # the first audio is here: how far is the server?
            chunks += 1
            pcm += chunk
        assert stream.request_id.startswith("req_")
    wait_for(lambda: active_rows(url) == 0, what="the utterance's row to be freed")
    total = _tokens_total(url) - before
    assert chunks >= 3 and len(pcm) % 2 == 0
    # Streamed as generated, not sent at the end: part of the utterance was generated only after
    # its first audio reached the client. (A slower server only widens the gap.)
    assert before <= at_first < before + total, (before, at_first, total)


def test_session_interrupt_gives_cancelled_and_the_next_send_gives_done(server):
    url, key = server
    client = Rumik(api_key=key, base_url=url, max_retries=0)
    with client.speech.session(model="mulberry", speaker="siya", description="calm") as session:
        session.send("A first utterance, long enough to interrupt.")
        for event in session:
            if isinstance(event, AudioChunk):
                threading.Thread(target=session.interrupt).start()
                break
        cancelled = next(e for e in session if not isinstance(e, AudioChunk))
        assert isinstance(cancelled, UtteranceCancelled) and cancelled.reason == "cancel"
        wait_for(lambda: active_rows(url) == 0, what="the cancelled row to be freed")
        session.send("Second.")
        done = next(e for e in session if not isinstance(e, AudioChunk))
        assert isinstance(done, UtteranceDone) and done.request_id.startswith("req_")
        session.send("A third utterance that the fourth replaces.")
        time.sleep(0.1)
        session.send("Fourth.")
        ends = []
        for event in session:
            if isinstance(event, (UtteranceCancelled, UtteranceDone)):
                ends.append(event)
                if isinstance(event, UtteranceDone):
                    break
        assert [type(e) for e in ends] == [UtteranceCancelled, UtteranceDone] and ends[0].reason == "interrupt"


def test_an_unknown_speaker_and_a_wrong_key_get_readable_errors(server):
    url, key = server
    client = Rumik(api_key=key, base_url=url, max_retries=0)
    with pytest.raises(rumikai.UnprocessableEntityError) as info:
        client.speech.create(text="Hi.", model="mulberry", speaker="emma")
    assert info.value.code == "unknown_speaker" and "Ira, Aisha, Siya, Zoya" in str(info.value)
    with pytest.raises(rumikai.BadRequestError) as info:
        client.speech.create(text="[whisper] psst", model="muga")
    assert "no equivalent in rumik-oss-1" in str(info.value)
    with pytest.raises(rumikai.AuthenticationError) as info:
        Rumik(api_key="wrong", base_url=url, max_retries=0).speech.create(text="Hi.")
    assert info.value.status_code == 401 and info.value.code == "invalid_api_key"
    with client.speech.session(model="mulberry", speaker="lucas") as session:
        session.send("Hi.")
        with pytest.raises(rumikai.StreamError) as info:
            for _ in session:
                pass
        assert info.value.code == "unknown_speaker"


def test_the_async_client_creates_streams_and_interrupts(server):
    url, key = server

    async def go():
        async with AsyncRumik(api_key=key, base_url=url, max_retries=0) as client:
            audio = await client.speech.create(text="Namaste.", model="mulberry", speaker="zoya", max_new_tokens=80)
            assert _wav(audio.content)[:3] == (24000, 1, 2)
            async with client.speech.stream(text="Async stream.") as stream:
                pcm = await stream.read()
            assert len(pcm) > 0 and len(pcm) % 2 == 0
            async with client.speech.session(model="muga") as session:
                await session.send("[neutral] Ek do teen chaar paanch.")
                async for event in session:
                    if isinstance(event, AudioChunk):
                        await session.interrupt()
                        continue
                    assert isinstance(event, UtteranceCancelled) and event.reason == "cancel"
                    break
                await session.send("[sad] Phir se.")
                async for event in session:
                    if not isinstance(event, AudioChunk):
                        assert isinstance(event, UtteranceDone)
                        break
    asyncio.run(go())
