"""One validation: a bad value gets the same message from every front end.

Every range and message lives in `rumik_app.request` (sampling, lengths, seeds) and
`rumik_app.prompt` (text, tags, voice, tone, description), and every front end builds its
request with `rumik_app.request.build_request`. One table drives five: the CLI in-process
(`rumik_app.synthesize.main`, which checks before loading any model), the app through
gradio_client, and one speech server's three protocols: OpenAI's route with OpenAI's client,
Rumik's `/v1/tts` over HTTP, and the text-in socket (a config frame, or a sentence).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from gradio_client.exceptions import AppError
from websockets.asyncio.client import connect

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.openai.schema import OPENAI_NAMES  # each protocol's names for the request's fields
from rumik_app.serve.silk.schema import SILK_NAMES
from rumik_app.synthesize import main as cli_main
from tests.servers import ServerThread

ALL = ("cli", "app", "openai", "silk", "text_in")
# (what, CLI flags, the field and value, the message every front end gives, the front ends
# that have the field). The app's /synthesize has no `language` (its language picker only
# chooses examples); Rumik's protocol has no max_seconds (it takes max_new_tokens), no
# language, and reads a tone from a `[tag]` and voices with its own legacy names.
CASES = [
    ("temperature", ["--temperature", "3"], ("temperature", 3), "Temperature 3 is out of range: use 0 (greedy) to 2.",
     ALL),
    ("top_k", ["--top-k", "500"], ("top_k", 500), "Top-k 500 is out of range: use a whole number 0 (off) to 200.",
     ALL),
    ("top_p", ["--top-p", "0"], ("top_p", 0), "Top-p 0 is out of range: use a value above 0 and at most 1.", ALL),
    ("repetition_penalty", ["--repetition-penalty", "3"], ("repetition_penalty", 3),
     "Repetition penalty 3 is out of range: use a value above 0 and at most 2 (1 = off; above 1 discourages "
     "repeating audio codes).", ALL),
    ("seed", ["--seed", "-5"], ("seed", -5), "Seed -5 is not valid. Use -1 for a random seed or a whole number", ALL),
    ("max_seconds", ["--max-seconds", "45"], ("max_seconds", 45),
     "Max seconds 45 is out of range: use more than 0 and at most 30.", ("cli", "app", "openai", "text_in")),
    ("max_seconds_zero", ["--max-seconds", "0"], ("max_seconds", 0),
     "Max seconds 0 is out of range: use more than 0 and at most 30.", ("cli", "app", "openai", "text_in")),
    ("top_k_huge", ["--top-k", "1" + "0" * 400], ("top_k", 10**400),
     "Top-k ~1e400 is out of range: use a whole number 0 (off) to 200.", ALL),
    ("seed_huge", ["--seed", "1" + "0" * 400], ("seed", 10**400), "Seed ~1e400 is not valid.", ALL),
    ("tag", ["--text", "hi <boom>"], ("text", "hi <boom>"),
     "Unknown tag <boom>. Allowed inline tags: <laugh>, <chuckle>, <sigh> (lower case).", ALL),
    ("description", ["--description", "x" * 301], ("description", "x" * 301),
     "Description is longer than 300 characters; shorten it.", ALL),
    ("tone", ["--tone", "joyful"], ("tone", "joyful"),
     "Unknown tone 'joyful'. Choose one of: happy, sad, angry, excited, professional.",
     ("cli", "app", "openai", "text_in")),
    ("voice", ["--voice", "bob"], ("voice", "bob"), "Unknown voice 'bob'. Choose one of: Ira, Aisha, Siya, Zoya.",
     ("cli", "app", "openai", "text_in")),
    ("language", ["--language", "klingon"], ("language", "klingon"), "Unknown language 'klingon'. Supported:",
     ("cli", "openai", "text_in")),
]
SHORT = 0.5
KEY = "k"


def _cli(tmp_path, capsys, flags: list[str]) -> str:
    argv = ["--model", "tiny", "--text", "hi", *flags, "--out", str(tmp_path / "x.wav")]
    assert cli_main(argv) == 2
    # One line, after the tiny checkpoint's build progress when the voice needs the model's config.
    *progress, line = capsys.readouterr().err.rpartition("\r")[2].strip().splitlines()
    assert line.startswith("error: ") and all(p.startswith("Writing model shards") for p in progress), progress
    return line.removeprefix("error: ").strip()


def _app(client, field: str, value) -> str:
    fields = {"text": "hi", "max_seconds": SHORT, **{field: value}}
    with pytest.raises(AppError) as info:
        client.predict(api_name="/synthesize", **fields)
    return str(info.value)


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=1, max_queue=4, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY) as server:
        yield server


def _openai(server, field: str, value) -> str:
    speech = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    body = {"input": value} if field == "text" else {"input": "hi"}
    extra = {} if field in ("text", "voice") else {OPENAI_NAMES.get(field, field): value}
    with pytest.raises(openai.BadRequestError) as info:
        speech.audio.speech.create(model="tiny", voice=value if field == "voice" else "Ira", response_format="wav",
                                   **body, extra_body=extra)
    error = info.value.body
    assert error["param"] == OPENAI_NAMES.get(field, field), error
    return error["message"]


def _silk(server, field: str, value) -> str:
    body = {"text": "hi", "model": "mulberry", SILK_NAMES.get(field, field): value}
    resp = httpx.post(server.url + "/v1/tts", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert resp.status_code in (400, 422) and resp.json()["code"] == "invalid_request", resp.text
    return resp.json()["message"]


def _text_in(server, field: str, value) -> str:
    """A bad config field is refused at session.config; bad text when its sentence is spoken."""
    async def go() -> str:
        url = server.url.replace("http", "ws") + "/v1/audio/speech/stream"
        async with connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
            config = {"type": "session.config", "voice": "Ira", "response_format": "pcm", "max_seconds": SHORT}
            if field != "text":
                config[OPENAI_NAMES.get(field, field)] = value
            await ws.send(json.dumps(config))
            await ws.send(json.dumps({"type": "input.text", "text": value if field == "text" else "hi."}))
            await ws.send(json.dumps({"type": "input.done"}))
            while True:
                message = await asyncio.wait_for(ws.recv(), 60)
                if isinstance(message, str) and json.loads(message)["type"] == "error":
                    return json.loads(message)["message"]

    return asyncio.run(go())


@pytest.mark.parametrize("what, flags, field_value, message, front_ends", CASES, ids=[c[0] for c in CASES])
def test_every_front_end_gives_the_same_message(what, flags, field_value, message, front_ends, tmp_path, capsys,
                                                client, server):
    field, value = field_value
    ask = {"cli": lambda: _cli(tmp_path, capsys, flags), "app": lambda: _app(client, field, value),
           "openai": lambda: _openai(server, field, value), "silk": lambda: _silk(server, field, value),
           "text_in": lambda: _text_in(server, field, value)}
    said = {name: ask[name]() for name in front_ends}
    assert all(text.startswith(message) for text in said.values()), said
    assert len(set(said.values())) == 1, said  # word for word, not only the same start
