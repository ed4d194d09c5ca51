"""The framing check at load: a tokenizer that disagrees with config.json stops every loader.

Run: .venv/bin/python -m pytest tests/rumik_app/test_framing.py -q
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from rumik_app.checkpoint.framing import check_framing
from rumik_app.checkpoint.load import load_tokenizer
from rumik_app.errors import CheckpointError
from rumik_app.model.config import RumikOSSConfig
from rumik_app.synthesize import main as cli_main
from tests.servers import ROOT, free_port


def _with_config(src, dst, **changes):
    shutil.copytree(src, dst)
    data = json.loads((dst / "config.json").read_text())
    data.update(changes)
    (dst / "config.json").write_text(json.dumps(data))
    return dst


@pytest.fixture(scope="module")
def swapped(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint with config.json's <text> and <audio> ids swapped."""
    data = json.loads((tiny_checkpoint / "config.json").read_text())
    return _with_config(tiny_checkpoint, tmp_path_factory.mktemp("fr") / "swapped",
                        text_start_token_id=data["audio_start_token_id"],
                        audio_start_token_id=data["text_start_token_id"])


def test_the_published_format_frames_prompts_as_declared(tiny_checkpoint):
    config = RumikOSSConfig.from_file(tiny_checkpoint)
    tokenizer = load_tokenizer(tiny_checkpoint, config)
    assert check_framing(tokenizer, config) == config.lm.bos_token_id


def test_each_mismatch_names_the_token_and_both_ids(tiny_checkpoint, swapped, tmp_path):
    config = RumikOSSConfig.from_file(swapped)
    with pytest.raises(CheckpointError, match=r"maps <audio> to id \d+, but config.json declares "
                                              r"audio_start_token_id = \d+"):
        load_tokenizer(swapped, config)
    data = json.loads((tiny_checkpoint / "config.json").read_text())
    for field, token in (("audio_end_token_id", "</audio>"), ("bos_token_id", "<BOS_TOKEN>")):
        other = _with_config(tiny_checkpoint, tmp_path / field, **{field: data[field] - 1})
        message = f"maps {token} to id {data[field]}, but config.json declares {field} = {data[field] - 1}"
        with pytest.raises(CheckpointError, match=message):
            load_tokenizer(other, RumikOSSConfig.from_file(other))


def test_a_tokenizer_that_splits_the_markers_is_refused(tiny_checkpoint):
    config = RumikOSSConfig.from_file(tiny_checkpoint)
    tokenizer = load_tokenizer(tiny_checkpoint, config)

    class Splitting:  # reads <audio> as characters, as a broken special-token setup would
        unk_token_id = tokenizer.unk_token_id

        def convert_tokens_to_ids(self, token):
            return tokenizer.convert_tokens_to_ids(token)

        def encode(self, text, add_special_tokens=False):
            return tokenizer.encode(text.replace("<audio>", "< audio>"), add_special_tokens=add_special_tokens)
    with pytest.raises(CheckpointError, match=r"frames a prompt as \[\d+, …, \d+\] instead of \[<text> = \d+, …, "
                                              r"<audio> = \d+\]"):
        check_framing(Splitting(), config)


def test_the_cli_refuses_it_in_one_line_with_status_2(swapped, tmp_path, capsys):
    assert cli_main(["--model", str(swapped), "--text", "hi", "--out", str(tmp_path / "x.wav")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "<audio>" in err
    assert not (tmp_path / "x.wav").exists()


def test_the_server_refuses_to_start_with_status_2(swapped):
    proc = subprocess.run([sys.executable, "-m", "rumik_app.serve", "--model", str(swapped), "--port",
                           str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "<audio>" in lines[0], proc.stderr[-2000:]
