"""Say it right in the app, through gradio_client on the tiny checkpoint: a visitor's
pronunciation lexicon (an uploaded file and the *My words* editor), SSML input and dialogue
scripts in the Synthesise tab.

Run: .venv/bin/python -m pytest tests/app/test_say_it_right.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from gradio_client import handle_file
from gradio_client.exceptions import AppError

SHORT = 0.5  # seconds of audio per part: enough to test, quick on 2 CPU cores
RATE = 24_000
PREVIEW = dict(voice="Ira", tone="", accent="", pace="", description="", description_mode="Tone, accent and pace",
               system="rumik-oss-1", language="en", normalize=True)


def _samples(path: str) -> np.ndarray:
    data, rate = sf.read(path, dtype="int16")
    assert rate == RATE
    return data


def _error(client, **kwargs) -> str:
    with pytest.raises(AppError) as info:
        client.predict(api_name="/synthesize", **{"max_seconds": SHORT, "seed": 5, **kwargs})
    message = str(info.value)
    assert "Traceback" not in message and 'File "' not in message and "/tmp" not in message, message
    return message


def _words(*rows) -> dict:
    """The lexicon editor's value as an API caller sends it (the table's headers and rows)."""
    from webapp.scripts import EDITOR_COLUMNS

    return {"headers": list(EDITOR_COLUMNS), "data": [list(row) for row in rows]}


BLANK = ("", "", "")


def _zero_runs(samples: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of every run of exact zeros, longest first."""
    zero = np.concatenate([[0], (samples == 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(zero))
    return sorted(((int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2], strict=True)), key=lambda r: -r[1])


@pytest.fixture
def lexicon(tmp_path):
    """A TSV lexicon: "zebra" is said "monkey"."""
    path = tmp_path / "animals.tsv"
    path.write_text("grapheme\talias\nzebra\tmonkey\n", encoding="utf-8")
    return path


def test_a_lexicon_changes_the_preview_and_the_audio_like_the_alias_typed(client, lexicon):
    text, typed = "I saw a zebra today.", "I saw a monkey today."
    plain, _ = client.predict(text=text, **PREVIEW, api_name="/prompt_preview")
    aliased, notes = client.predict(text=text, **PREVIEW, lexicon=handle_file(str(lexicon)),
                                    api_name="/prompt_preview")
    assert "zebra" in plain and "monkey" not in plain
    assert aliased == plain.replace("zebra", "monkey") and "`animals`" in notes

    def speak(text, **extra):
        return _samples(client.predict(text=text, seed=11, max_seconds=SHORT, api_name="/synthesize", **extra))

    with_lexicon = speak(text, lexicon=handle_file(str(lexicon)))
    assert not np.array_equal(with_lexicon, speak(text))
    assert np.array_equal(with_lexicon, speak(typed))
    # A script's parts carry the lexicon too.
    script, _ = client.predict(text="Ira: A zebra.\nZoya: Two zebra!", **{**PREVIEW, "dialogue": True},
                               lexicon=handle_file(str(lexicon)), api_name="/prompt_preview")
    assert "zebra" not in script and script.count("monkey") == 2, script


def test_a_lexicon_applies_to_the_requests_that_carry_it_only(client, lexicon):
    """Per visitor by construction: the next request without the upload reads the text as typed."""
    client.predict(text="a zebra", seed=1, max_seconds=SHORT, lexicon=handle_file(str(lexicon)), api_name="/synthesize")
    after, _ = client.predict(text="a zebra", **PREVIEW, api_name="/prompt_preview")
    assert "zebra" in after and "monkey" not in after


def test_an_editor_row_changes_the_preview_and_the_audio_like_the_alias_typed(client):
    text, typed = "I saw a zebra today.", "I saw a monkey today."
    words = _words(BLANK, ("zebra", "monkey", ""), BLANK)  # blank rows are ignored
    plain, _ = client.predict(text=text, **PREVIEW, api_name="/prompt_preview")
    aliased, notes = client.predict(text=text, **PREVIEW, lexicon_entries=words, api_name="/prompt_preview")
    assert "zebra" in plain and "monkey" not in plain
    assert aliased == plain.replace("zebra", "monkey") and "My words* (1 entry)" in notes, notes

    def speak(text, **extra):
        return _samples(client.predict(text=text, seed=11, max_seconds=SHORT, api_name="/synthesize", **extra))

    with_words = speak(text, lexicon_entries=words)
    assert not np.array_equal(with_words, speak(text))
    assert np.array_equal(with_words, speak(typed))
    # A blank table is no lexicon; a language-scoped row applies to that language only.
    blank, notes = client.predict(text=text, **PREVIEW, lexicon_entries=_words(BLANK, BLANK),
                                  api_name="/prompt_preview")
    assert blank == plain and "My words" not in notes
    scoped = _words(("zebra", "monkey", "hi"))
    assert client.predict(text=text, **PREVIEW, lexicon_entries=scoped, api_name="/prompt_preview")[0] == plain
    in_hindi, _ = client.predict(text=text, **{**PREVIEW, "language": "hi"}, lexicon_entries=scoped,
                                 api_name="/prompt_preview")
    assert "monkey" in in_hindi and "zebra" not in in_hindi
    # The stream's UI path reads it too (same seed: the API twin's audio, streamed pieces joined
    # to within 2 LSB, as tests/app/test_api.py compares them).
    job = client.submit(text=text, seed=11, max_seconds=SHORT, lexicon_entries=words, api_name="/synthesize_stream")
    streamed = _samples(job.result()[2])
    assert streamed.shape == with_words.shape and np.abs(streamed.astype(int) - with_words).max() <= 2


def test_editor_and_uploaded_file_apply_together_the_editor_first(client, tmp_path):
    path = tmp_path / "animals.tsv"
    path.write_text("zebra\tmonkey\nlion\ttiger\n", encoding="utf-8")
    text, typed = "A zebra and a lion.", "A horse and a tiger."
    words = _words(("Zebra", "horse", ""))  # the same word as the file's (case-insensitive): the editor's wins
    preview, notes = client.predict(text=text, **PREVIEW, lexicon=handle_file(str(path)), lexicon_entries=words,
                                    api_name="/prompt_preview")
    assert preview == "[BOS]<text>Ira: A horse and a tiger.<audio>", preview
    assert "My words* (1 entry) and your lexicon `animals` (2 entries) apply" in notes, notes
    both = client.predict(text=text, seed=4, max_seconds=SHORT, lexicon=handle_file(str(path)),
                          lexicon_entries=words, api_name="/synthesize")
    assert np.array_equal(_samples(both), _samples(client.predict(text=typed, seed=4, max_seconds=SHORT,
                                                                  api_name="/synthesize")))


def test_positional_callers_keep_their_places(client):
    """The editor's table is the last input: the arguments before it keep their positions."""
    before = ("a zebra", "Ira", "", "", "", "", "Tone, accent and pace", "rumik-oss-1", "en", True, None, False, 0.3)
    plain, _ = client.predict(*before, api_name="/prompt_preview")
    aliased, _ = client.predict(*before, _words(("zebra", "monkey", "")), api_name="/prompt_preview")
    assert "zebra" in plain and aliased == plain.replace("zebra", "monkey")


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ((("zebra", "monkey", ""), ("lion", "", "")),
         "My words, row 2: Lexicon entry 'lion': the alias is empty; give the text to say instead."),
        ((BLANK, ("", "monkey", "")), "My words, row 2: Lexicon entry '': the grapheme is empty; give the word"),
        ((("zebra", "<laugh> monkey", ""),), "My words, row 1: Lexicon entry 'zebra': the alias has '<' or '>'"),
        ((("zebra", "m" * 301, ""),), "My words, row 1: Lexicon entry 'zebra': the alias is 301 characters; the "
                                      "limit is 300."),
        ((("zebra", "monkey", "xx"),), "My words, row 1: Lexicon entry 'zebra': Unknown language 'xx'"),
        ((("zebra", "monkey", "", "extra"),), "My words, row 1 has 4 cells; the table has 3 columns"),
    ],
)
def test_a_bad_editor_row_is_one_readable_error(client, rows, expected):
    message = _error(client, text="a zebra", lexicon_entries=_words(*rows))
    assert expected in message and "gradio" not in message.lower(), message
    preview, _ = client.predict(text="a zebra", **PREVIEW, lexicon_entries=_words(*rows), api_name="/prompt_preview")
    assert preview.startswith("⚠") and expected in preview, preview


def test_more_rows_than_the_editor_takes_are_refused(client):
    from webapp.scripts import MAX_EDITOR_ROWS

    rows = [(f"word{i}", f"alias{i}", "") for i in range(MAX_EDITOR_ROWS)]
    full, notes = client.predict(text="say word7", **{**PREVIEW, "normalize": False}, lexicon_entries=_words(*rows),
                                 api_name="/prompt_preview")  # (normalize off: the alias's digits as typed)
    assert "say alias7" in full and f"({MAX_EDITOR_ROWS} entries)" in notes
    message = _error(client, text="say word7", lexicon_entries=_words(*rows, BLANK))  # blank rows count too
    assert f"My words: the table has {MAX_EDITOR_ROWS + 1} rows; the limit is {MAX_EDITOR_ROWS}." in message, message
    assert "upload it instead" in message


def test_ssml_break_is_exactly_that_much_silence(client):
    ssml = '<speak>Hello there <break time="500ms"/> world again</speak>'
    preview, notes = client.predict(text=ssml, **PREVIEW, api_name="/prompt_preview")
    assert preview.splitlines() == ["[BOS]<text>Ira: Hello there<audio>", "[0.5 s of silence]",
                                    "[BOS]<text>Ira: world again<audio>"]
    assert "one piece" in notes  # the stream falls back to one piece for scripts, and says so
    samples = _samples(client.predict(text=ssml, seed=3, max_seconds=SHORT, api_name="/synthesize"))
    (start, length), *others = _zero_runs(samples)
    assert length == RATE // 2  # 0.5 s of exact zeros, joined, never crossfaded
    assert 0 < start and start + length < len(samples)  # between the two parts
    assert all(n < 100 for _, n in others)  # the parts' own audio holds no other silence like it


def test_dialogue_info_lists_both_turns_with_spans(client):
    script = "Ira: Hello there, how are you?\nAisha (happy, fast): Very well, thank you!"
    preview, notes = client.predict(text=script, **PREVIEW, dialogue=True, dialogue_gap=0.4,
                                    api_name="/prompt_preview")
    assert preview.splitlines() == ["[BOS]<text>Ira: Hello there, how are you?<audio>", "[0.4 s of silence]",
                                    '[BOS]<text>Aisha: <description="happy, fast pace"> Very well, thank you!<audio>']
    assert "2 turns by Ira, Aisha" in notes
    job = client.submit(text=script, seed=9, max_seconds=SHORT, dialogue=True, dialogue_gap=0.4,
                        api_name="/synthesize_stream")
    audio, seed_used, wav, info = job.result()
    assert seed_used == "9"
    rows = [line for line in info.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 2, info
    spans = []
    for row, speaker, seed in zip(rows, ("Ira", "Aisha"), ("9", "10"), strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == speaker and cells[5] == seed, row
        spans.append((float(cells[2]), float(cells[3])))
    (start_1, end_1), (start_2, end_2) = spans
    assert start_1 == 0.0 < end_1 and start_2 == pytest.approx(end_1 + 0.4, abs=0.01) and end_2 > start_2
    assert len(_samples(wav)) / RATE == pytest.approx(end_2, abs=0.01)
    # The API twin makes the same audio (same seed).
    again = client.predict(text=script, seed=9, max_seconds=SHORT, dialogue=True, dialogue_gap=0.4,
                           api_name="/synthesize")
    assert np.array_equal(_samples(again), _samples(wav))


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("broken.tsv", "zebra monkey\n", "TSV line 1 has 1 column(s)"),
        ("broken.json", '{"entries": [{"grapheme": "zebra"}]}', "has no 'alias'"),
        ("broken.pls", "<lexicon><lexeme><grapheme>x</grapheme></lexeme>", "not well-formed XML"),
        ("words.txt", "zebra\tmonkey\n", "Upload a PLS (.pls or .xml), TSV (.tsv) or JSON (.json) file"),
    ],
)
def test_a_bad_lexicon_is_one_readable_error(client, tmp_path, name, content, expected):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    message = _error(client, text="a zebra", lexicon=handle_file(str(path)))
    assert expected in message and name in message, message
    preview, _ = client.predict(text="a zebra", **PREVIEW, lexicon=handle_file(str(path)), api_name="/prompt_preview")
    assert preview.startswith("⚠") and expected in preview


def test_an_oversized_lexicon_is_refused_before_it_is_read(client, tmp_path):
    from rumik_app.text.lexicon import MAX_LEXICON_BYTES

    path = tmp_path / "huge.json"
    path.write_text(json.dumps({"entries": []}) + " " * MAX_LEXICON_BYTES, encoding="utf-8")
    assert "the limit is 1 MB" in _error(client, text="hi", lexicon=handle_file(str(path)))


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"text": "<speak>Hello <blink>there</blink></speak>"}, "SSML: "),
        ({"text": "<speak>Hello <break time=\"500ms\"></speak>"}, "SSML: "),
        ({"text": "Ira: Hello.\nBob: Hi!", "dialogue": True},
         "Dialogue line 2: unknown speaker 'Bob'. Start the line with a voice's name (Ira, Aisha, Siya, Zoya)."),
        ({"text": "Hello.\nIra: Hi!", "dialogue": True}, "Dialogue line 1: the script must start with a speaker"),
        ({"text": "Ira: Hello.", "dialogue": True, "dialogue_gap": 5}, "Gap between turns 5 is out of range"),
        ({"text": "<speak>Hello</speak>", "dialogue": True}, "Dialogue is on, but this text is SSML"),
        ({"text": "<speak>Hello</speak>", "system": "espeak"}, "SSML needs a rumik system"),
        ({"text": "Ira: Hello.", "dialogue": True, "system": "espeak"}, "Dialogue needs a rumik system"),
    ],
)
def test_bad_scripts_are_one_readable_error(client, kwargs, expected):
    assert expected in _error(client, **kwargs)


def test_a_bad_script_in_the_stream_is_one_error_and_an_info_line(client):
    job = client.submit(text="Ira: Hello.\nBob: Hi!", seed=1, max_seconds=SHORT, dialogue=True,
                        api_name="/synthesize_stream")
    with pytest.raises(AppError, match="unknown speaker 'Bob'"):
        job.result()
    assert job.outputs()[-1][3].startswith("⚠ Not synthesised: Dialogue line 2: unknown speaker 'Bob'")


def test_script_totals_are_bounded_by_the_app_limits(client):
    """Each turn fits, the script does not: its characters and its audio budget are summed over
    the parts and checked against the app's limits (APP_LIMITS: 2,000 characters, 300 s)."""
    turn = "Words to say. " * 70  # 980 characters
    script = "\n".join(f"Ira: {turn}" for _ in range(3))
    assert "the limit is 2,000" in _error(client, text=script, dialogue=True)
    short_turns = "\n".join(["Ira: Hi.", "Aisha: Hello."] * 10)  # 20 parts of up to 20 s each
    assert "the limit here is 300 s" in _error(client, text=short_turns, dialogue=True, max_seconds=20)
    ssml = "<speak>" + '<break time="1s"/>'.join(["Hi."] * 15) + "</speak>"  # 15 parts of 20 s and 14 s of pauses
    assert "the limit here is 300 s" in _error(client, text=ssml, max_seconds=20)



def test_a_lexicon_input_cannot_name_a_file_on_the_server(client, app_server, tmp_path):
    """Only uploads: a FileData naming a server path outside Gradio's upload folder is refused
    before the handler reads it (sent raw: gradio_client would upload a local path first)."""
    import httpx
    from gradio_client import utils as client_utils

    demo, url = app_server
    secret = tmp_path / "secret.tsv"
    secret.write_text("zebra\tmonkey\n", encoding="utf-8")
    params = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/prompt_preview"]["parameters"]
    data = client_utils.construct_args(params, (), {**PREVIEW, "text": "a zebra"})
    data[[p["parameter_name"] for p in params].index("lexicon")] = {"path": str(secret), "orig_name": "secret.tsv",
                                                                     "meta": {"_type": "gradio.FileData"}}
    fn_index = next(fn._id for fn in demo.fns.values() if fn.api_name == "prompt_preview")
    body = {"data": data, "fn_index": fn_index, "session_hash": "lexicon-path", "event_data": None, "trigger_id": None}
    with httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("gradio_api/queue/join", json=body).status_code == 200
        with http.stream("GET", "gradio_api/queue/data", params={"session_hash": "lexicon-path"}) as events:
            for line in events.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if message.get("msg") == "process_completed":
                    break
    assert message["success"] is False and "monkey" not in json.dumps(message), message
