"""Dialogue and SSML on the speech server, through the `openai` client.

Each part is an ordinary request on the scheduler's rows: a dialogue equals its turns spoken
alone with seeds base + k, joined with exact silences; the turns share decode steps; SSML's
breaks are exact zeros; bad scripts are one 400; a hang-up frees every part's row.

Run: .venv/bin/python -m pytest tests/rumik_app/test_serve_scripts.py -q
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from openai import OpenAI

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from tests.servers import ServerThread, wait_for
from tests.sockets import active, gauge

KEY = "script-key"
RATE = 24_000
SCRIPT = "Ira (happy): Hello there, how are you?\nAisha (sad, slow): Not so well today.\nIra: Oh no."
COMMON = {"response_format": "pcm", "max_seconds": 0.4}


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


@pytest.fixture
def server(engine):
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=4, max_queue=16, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY, max_seconds=0.4) as srv:
        yield srv


def client(server) -> OpenAI:
    return OpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0)


def pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def alone(server, text: str, voice: str, seed: int, **settings) -> np.ndarray:
    resp = httpx.post(server.url + "/v1/audio/speech", timeout=60, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "tiny", "input": text, "voice": voice, "seed": seed, **COMMON, **settings})
    assert resp.status_code == 200, resp.text
    return pcm(resp.content)


def test_a_dialogue_is_its_turns_alone_joined_by_exact_gaps_and_they_share_steps(server):
    audio = client(server).audio.speech.create(model="tiny", voice="Ira", input=SCRIPT, extra_body={
        "dialogue": True, "dialogue_gap": 0.25, "seed": 40, **COMMON}).content
    peak = server.health()["peak_active"]
    gap = np.zeros(round(0.25 * RATE), dtype="<i2")
    expected = np.concatenate([
        alone(server, "Hello there, how are you?", "Ira", 40, tone="happy"), gap,
        alone(server, "Not so well today.", "Aisha", 41, tone="sad", pace="slow"), gap,
        alone(server, "Oh no.", "Ira", 42)])
    assert np.array_equal(pcm(audio), expected)
    assert peak >= 2  # the turns were decoded side by side, not one after another


def test_ssml_breaks_are_exact_silence_between_its_parts(server):
    ssml = '<speak>Hello there. <break time="500ms"/> <prosody rate="slow">Bye now.</prosody></speak>'
    resp = httpx.post(server.url + "/v1/audio/speech", timeout=60, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "tiny", "input": ssml, "voice": "Zoya", "seed": 9, **COMMON})
    assert resp.status_code == 200, resp.text
    expected = np.concatenate([alone(server, "Hello there.", "Zoya", 9), np.zeros(RATE // 2, dtype="<i2"),
                               alone(server, "Bye now.", "Zoya", 10, pace="slow")])
    assert np.array_equal(pcm(resp.content), expected)
    assert resp.headers["x-rumik-seed"] == "9"


@pytest.mark.parametrize("body, words", [
    ({"input": "<speak>Hi <audio src='x.wav'/></speak>"}, "audio"),
    ({"input": "<speak><prosody pitch='high'>Hi</prosody></speak>"}, "pitch"),
    ({"input": "Bob: hello", "dialogue": True}, "Bob"),
    ({"input": "Ira (sleepy): hello", "dialogue": True}, "sleepy"),
    ({"input": "Ira: hello", "dialogue": True, "dialogue_gap": 99}, "dialogue_gap"),
])
def test_bad_scripts_get_one_400_that_names_the_problem(server, body, words):
    resp = httpx.post(server.url + "/v1/audio/speech", timeout=30, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "tiny", "voice": "Ira", **body})
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert words in error["message"] or error["param"] == words


def test_a_hang_up_mid_dialogue_frees_every_turns_row(server):
    turns = ["Ira", "Aisha", "Siya", "Zoya"]
    script = "\n".join(f"{voice}: A line that tiny never ends, number {i}." for i, voice in enumerate(turns))
    budget = len(turns) * 3000  # tokens: 30 s per turn, which tiny's random weights rarely end sooner
    before = gauge(server.url, "rumik_generated_tokens_total")
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {KEY}"}) as http:
        with http.stream("POST", server.url + "/v1/audio/speech", json={
                "model": "tiny", "voice": "Ira", "input": script, "dialogue": True, "seed": 1,
                "response_format": "pcm", "max_seconds": 30}) as resp:
            next(resp.iter_raw())  # the first turn is playing; then the client hangs up
    wait_for(lambda: active(server.url) == 0, what="every turn's row to be freed")
    assert gauge(server.url, "rumik_generated_tokens_total") - before < budget / 2  # the turns were cut short


def _silk_pcm(server, body: dict) -> np.ndarray:
    resp = httpx.post(server.url + "/v1/tts", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert resp.status_code == 200, resp.text
    return pcm(resp.content[44:])  # the WAV's 44-byte header, sizes filled in


def test_silk_takes_ssml_too(server):
    ssml = '<speak>Hello there. <break time="250ms"/> Bye now.</speak>'
    got = _silk_pcm(server, {"text": ssml, "seed": 3, "max_new_tokens": 40})
    expected = np.concatenate([_silk_pcm(server, {"text": "Hello there.", "seed": 3, "max_new_tokens": 40}),
                               np.zeros(RATE // 4, dtype="<i2"),
                               _silk_pcm(server, {"text": "Bye now.", "seed": 4, "max_new_tokens": 40})])
    assert np.array_equal(got, expected)


def test_spans_answer_json_with_the_whole_file_and_where_each_turn_sits(server):
    import base64

    resp = httpx.post(server.url + "/v1/audio/speech", timeout=60, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "tiny", "voice": "Ira", "input": SCRIPT, "dialogue": True, "seed": 40,
                            "dialogue_gap": 0.25, "spans": True, **COMMON})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    audio = pcm(base64.b64decode(body["audio"]))
    assert body["format"] == "pcm" and body["sample_rate"] == RATE and body["seed"] == 40
    assert [(span["voice"], span["seed"]) for span in body["spans"]] == [("Ira", 40), ("Aisha", 41), ("Ira", 42)]
    first, second = body["spans"][:2]
    assert second["start"] == pytest.approx(first["end"] + 0.25, abs=1e-4)
    assert body["spans"][-1]["end"] == pytest.approx(len(audio) / RATE, abs=1e-4)
    turn = audio[round(second["start"] * RATE):round(second["end"] * RATE)]
    assert np.array_equal(turn, alone(server, "Not so well today.", "Aisha", 41, tone="sad", pace="slow"))


def test_the_first_spoken_part_carries_the_seed_even_after_a_leading_break():
    from rumik_app.engine.script import build_script

    parts = build_script({"text": '<speak><break time="1s"/>Hello there.<break time="8s"/><break time="4s"/>Bye '
                                  'now.</speak>', "seed": 7})  # 12 s of breaks in a row: two silent parts
    assert [(part.request.seed if part.request else None, part.pause_after_s) for part in parts] == [
        (None, 1.0), (7, 10.0), (None, 2.0), (8, 0.0)]


def test_text_in_refuses_whole_script_options_and_ssml(server):
    import asyncio
    import json

    from websockets.asyncio.client import connect

    from tests.sockets import recv

    async def go():
        url = server.url.replace("http", "ws") + "/v1/audio/speech/stream"
        async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            await ws.send(json.dumps({"type": "session.config", "voice": "Ira", "dialogue": True}))
            first = await recv(ws)
            await ws.send(json.dumps({"type": "session.config", "voice": "Ira", "response_format": "pcm"}))
            await ws.send(json.dumps({"type": "input.text", "text": "<speak>Hi there.</speak>"}))
            await ws.send(json.dumps({"type": "input.done"}))
            while (message := await recv(ws))["type"] != "error":
                pass
            return first, message
    first, second = asyncio.run(go())
    assert first["type"] == "error" and first["param"] == "dialogue"
    assert "SSML is not taken" in second["message"] or "<speak>" in second["message"]
