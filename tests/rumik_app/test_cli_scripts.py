"""The CLI's say-it-right flags: --lexicon, SSML text, --dialogue, --print-prompt.

Run: .venv/bin/python -m pytest tests/rumik_app/test_cli_scripts.py -q
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from rumik_app import synthesize

RATE = 24_000


@pytest.fixture
def lexicon(tmp_path):
    path = tmp_path / "brands.tsv"
    path.write_text("SBI\tState Bank\nUPI\tyou pee eye\n", encoding="utf-8")
    return path


def test_print_prompt_shows_lexicons_and_ssml_parts_without_loading_weights(tiny_checkpoint, lexicon, monkeypatch,
                                                                            capsys):
    monkeypatch.setattr("rumik_app.engine.loading.load_engine", lambda *a, **k: pytest.fail("weights loaded"))
    ssml = ('<speak>Pay SBI <break time="700ms"/> <prosody rate="slow">by <say-as interpret-as="cardinal">42'
            '</say-as> UPI</prosody></speak>')
    assert synthesize.main(["--model", str(tiny_checkpoint), "--text", ssml, "--lexicon", str(lexicon), "--seed", "5",
                            "--print-prompt"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["# part 1 (Ira), seed 5, then 0.7 s of silence",
                   "[BOS]<text>Ira: Pay State Bank<audio>",
                   "# part 2 (Ira), seed 6, then 0 s of silence",
                   '[BOS]<text>Ira: <description="slow pace"> by forty two you pee eye<audio>']


def test_a_dialogue_file_is_one_clip_of_its_turns_and_gaps(tiny_checkpoint, tmp_path, capsys):
    script = tmp_path / "scene.txt"
    script.write_text("Ira (happy): Hello there.\nAisha (sad, slow): Not today.\n", encoding="utf-8")
    out, spans = tmp_path / "scene.wav", tmp_path / "scene.json"
    assert synthesize.main(["--model", str(tiny_checkpoint), "--dialogue", str(script), "--gap", "0.5", "--seed", "3",
                            "--max-seconds", "0.4", "--out", str(out), "--spans", str(spans)]) == 0
    turns = json.loads(spans.read_text(encoding="utf-8"))
    assert [(t["speaker"], t["text"], t["seed"]) for t in turns] == [("Ira", "Hello there.", 3),
                                                                     ("Aisha", "Not today.", 4)]
    assert turns[1]["start"] == pytest.approx(turns[0]["end"] + 0.5)
    printed = capsys.readouterr().out
    assert "Ira: Hello there." in printed and "Aisha: Not today." in printed and "seed 4" in printed
    samples, rate = sf.read(out, dtype="int16")
    assert rate == RATE
    gap = np.flatnonzero(samples == 0)
    longest = max((len(run) for run in np.split(gap, np.flatnonzero(np.diff(gap) != 1) + 1)), default=0)
    assert longest >= RATE // 2  # the 0.5 s gap between the turns, as exact zeros


@pytest.mark.parametrize("args, message", [
    (["--dialogue", "SCRIPT"], "Dialogue line 1: unknown speaker 'Bob'"),
    (["--text", "<speak>Hi <audio src='x'/></speak>"], "audio"),
    (["--text", "Hi", "--lexicon", "LEXICON"], "lexicon entry 1"),
    (["--text", "<speak>Hi</speak>", "--stream"], "--stream speaks one request"),
])
def test_bad_scripts_and_lexicons_are_one_line_and_status_2(tiny_checkpoint, tmp_path, capsys, args, message):
    (tmp_path / "script.txt").write_text("Bob: hello\n", encoding="utf-8")
    (tmp_path / "bad.json").write_text('{"entries": [{"grapheme": ""}]}', encoding="utf-8")
    args = [str(tmp_path / "script.txt") if a == "SCRIPT" else str(tmp_path / "bad.json") if a == "LEXICON" else a
            for a in args]
    status = synthesize.main(["--model", str(tiny_checkpoint), *args, "--out", str(tmp_path / "x.wav")])
    err = capsys.readouterr().err
    assert status == 2 and message in err and "Traceback" not in err
