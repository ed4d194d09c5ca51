"""One validation: a bad value gets the same message from the CLI, the app and the speech server.

Every range and message lives in `rumik_app.request` (sampling, lengths, seeds) and
`rumik_app.prompt` (text, tags, voice, tone, description); the three front ends only pass
the values on. One table drives all three: the CLI in-process (`rumik_app.synthesize.main`,
which checks before loading any model), the app through gradio_client, and the speech server
over HTTP with OpenAI's client.
"""

from __future__ import annotations

import openai
import pytest
from gradio_client.exceptions import AppError

from rumik_app.engine.local import TTSEngine
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.scheduler import BatchScheduler
from rumik_app.synthesize import main as cli_main
from tests.servers import ServerThread

# (what, CLI flags, app/server field and value, the message every front end gives); the app's
# /synthesize has no `language` field (its language picker only chooses examples), so that
# row checks the CLI and the server, and so does repetition_penalty (a setting of the API
# clients; the app's sliders stay with temperature, top-k and top-p).
CASES = [
    ("temperature", ["--temperature", "3"], ("temperature", 3), "Temperature 3 is out of range: use 0 (greedy) to 2."),
    ("top_k", ["--top-k", "500"], ("top_k", 500), "Top-k 500 is out of range: use a whole number 0 (off) to 200."),
    ("top_p", ["--top-p", "0"], ("top_p", 0), "Top-p 0 is out of range: use a value above 0 and at most 1."),
    ("repetition_penalty", ["--repetition-penalty", "3"], ("repetition_penalty", 3),
     "Repetition penalty 3 is out of range: use a value above 0 and at most 2 (1 = off; above 1 discourages "
     "repeating audio codes)."),
    ("seed", ["--seed", "-5"], ("seed", -5), "Seed -5 is not valid. Use -1 for a random seed or a whole number"),
    ("max_seconds", ["--max-seconds", "45"], ("max_seconds", 45),
     "Max seconds 45 is out of range: use more than 0 and at most 30."),
    ("tag", ["--text", "hi <boom>"], ("text", "hi <boom>"),
     "Unknown tag <boom>. Allowed inline tags: <laugh>, <chuckle>, <sigh> (lower case)."),
    ("tone", ["--tone", "joyful"], ("tone", "joyful"),
     "Unknown tone 'joyful'. Choose one of: happy, sad, angry, excited, professional."),
    ("language", ["--language", "klingon"], ("language", "klingon"), "Unknown language 'klingon'. Supported:"),
]
SHORT = 0.5


def _cli(tmp_path, capsys, flags: list[str]) -> str:
    argv = ["--model", "tiny", "--text", "hi", *flags, "--out", str(tmp_path / "x.wav")]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.removeprefix("error: ").strip()


def _app(client, field: str, value) -> str:
    fields = {"text": "hi", "max_seconds": SHORT, **{field: value}}
    with pytest.raises(AppError) as info:
        client.predict(api_name="/synthesize", **fields)
    return str(info.value)


@pytest.fixture(scope="module")
def speech(tiny_checkpoint):
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=1, max_queue=4, max_prompt_tokens=256))
    with ServerThread(adapter) as server:
        yield openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)


def _server(speech, field: str, value) -> str:
    body = {"input": value} if field == "text" else {"input": "hi"}
    extra = {} if field == "text" else {field: value}
    with pytest.raises(openai.BadRequestError) as info:
        speech.audio.speech.create(model="tiny", voice="Ira", response_format="wav", **body, extra_body=extra)
    error = info.value.body
    assert error["param"] == ("input" if field == "text" else field), error
    return error["message"]


@pytest.mark.parametrize("what, flags, field_value, message", CASES, ids=[c[0] for c in CASES])
def test_cli_app_and_server_give_the_same_message(what, flags, field_value, message, tmp_path, capsys, client,
                                                   speech):
    field, value = field_value
    said = {"cli": _cli(tmp_path, capsys, flags), "server": _server(speech, field, value)}
    if field not in ("language", "repetition_penalty"):
        said["app"] = _app(client, field, value)
    assert all(text.startswith(message) for text in said.values()), said
    assert len(set(said.values())) == 1, said  # word for word, not only the same start
