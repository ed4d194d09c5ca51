"""The official `openai` client against the installed `rumik serve --model tiny` process.

The in-process OpenAI protocol tests are tests/rumik_app/test_serve*.py; this one checks what a
user does after `pip install`: start the console command, point the client's base_url at it.
"""

from __future__ import annotations

import io
import wave

import openai
import pytest


def test_speech_create_answers_with_a_24_khz_wav(server):
    url, key = server
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
    audio = client.audio.speech.create(model="rumik-oss-1", voice="alloy", input="Namaste! Kaise ho?",
                                       response_format="wav")
    with wave.open(io.BytesIO(audio.content)) as clip:
        assert (clip.getframerate(), clip.getnchannels(), clip.getsampwidth()) == (24000, 1, 2)
        assert clip.getnframes() > 0


def test_a_wrong_key_is_refused(server):
    url, _ = server
    client = openai.OpenAI(base_url=url + "/v1", api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.audio.speech.create(model="rumik-oss-1", voice="alloy", input="Hello.")
