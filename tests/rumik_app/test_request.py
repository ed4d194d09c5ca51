"""The request: each setting declared once, checked once, and one builder for every front end.

A new sampling setting is added to a copy of the repository in one place (its declaration in
`rumik_app.request`), and a fresh interpreter shows it reaching every front end unedited:
the CLI's flags, OpenAI's, Rumik's and text-in's fields, the app's sliders and form, then the
decoders' row and the vLLM processors' arguments.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from dataclasses import fields

import pytest

from rumik_app.decode.sampling import RowParams
from rumik_app.errors import PromptError
from rumik_app.request import (
    REQUEST_FIELDS,
    SamplingSettings,
    SynthesisRequest,
    build_request,
    check_temperature,
    derive,
    wire_settings,
)
from tests.servers import ROOT


def test_a_copy_checks_only_what_changed():
    req = SynthesisRequest("hi", temperature=0.5, top_k=30.0, seed=4)
    assert req.top_k == 30 and isinstance(req.top_k, int)  # canonical types once, when made
    chunk = req.with_(text="first part.", seed=5)
    assert (chunk.text, chunk.seed, chunk.temperature, chunk.top_k) == ("first part.", 5, 0.5, 30)
    object.__setattr__(req, "top_k", 999)  # as if unchecked: a copy does not look at it again
    assert req.with_(text="x").top_k == 999
    with pytest.raises(PromptError, match="Top-k 999 is out of range"):
        SynthesisRequest(**req.to_dict())  # (a new request does)
    with pytest.raises(PromptError, match="Seed -3 is not valid"):
        req.with_(seed=-3)  # a changed field is checked
    with pytest.raises(TypeError, match="no field 'temprature'"):
        req.with_(temprature=1)
    with pytest.raises(TypeError, match="RowParams needs 'seed'"):
        derive(SamplingSettings(), RowParams)  # a field the source lacks and that has no default


def test_a_decoder_row_is_the_requests_settings_a_seed_and_an_adapter():
    req = SynthesisRequest("hi", temperature=0.3, top_k=7, top_p=0.9, repetition_penalty=1.2, max_new_tokens=64)
    row = RowParams.of(req, seed=11)
    expected = {spec.name for spec in fields(SamplingSettings)} | {"seed", "adapter"}
    assert {spec.name for spec in fields(RowParams)} == expected
    assert (row.seed, row.temperature, row.top_k, row.top_p, row.repetition_penalty, row.max_new_tokens) == (
        11, 0.3, 7, 0.9, 1.2, 64)
    assert row.adapter is None  # a request's own row: the checkpoint's weights (the engine names a library voice's)
    with pytest.raises(PromptError, match="library voice's name or None"):
        RowParams(seed=1, adapter="  ")
    with pytest.raises(PromptError, match="max_new_tokens 5000 is out of range"):  # every decoder sizes by the cap
        RowParams(seed=1, max_new_tokens=5000)


def test_build_request_maps_fields_draws_the_seed_and_names_the_bad_field():
    req = build_request({"text": " नमस्ते <laugh> ", "voice": "zoya", "tone": "", "pace": "Slow", "max_seconds": 2,
                         "top_k": 12, "seed": -1, "language": ""}, voices=("Ira", "Zoya"))
    assert (req.text, req.voice, req.tone, req.pace, req.top_k, req.language) == (
        "नमस्ते <laugh>", "Zoya", None, "Slow", 12, None)
    assert req.max_new_tokens == 200 and 0 <= req.seed < 2**31  # 2 s at the published layout; a seed was drawn
    assert build_request({"text": "hi", "seed": 9, "max_new_tokens": 80, "max_seconds": 1}).max_new_tokens == 80
    with pytest.raises(PromptError, match="Max seconds 0 is out of range"):  # checked even where it does not count
        build_request({"text": "hi", "max_new_tokens": 80, "max_seconds": 0})
    assert build_request({"text": "hi"}, default_max_seconds=1.0).max_new_tokens == 96
    for bad, field in (({"temperature": 3}, "temperature"), ({"voice": "bob"}, "voice"), ({"text": ""}, "text"),
                       ({"max_seconds": 31}, "max_seconds"), ({"tone": "joyful"}, "tone")):
        with pytest.raises(PromptError) as info:
            build_request({"text": "hi", **bad}, voices=("Ira",))
        assert info.value.field == field
    with pytest.raises(TypeError, match="unknown field 'colour'"):
        build_request({"text": "hi", "colour": "blue"})
    assert set(REQUEST_FIELDS) | {spec.name for spec in wire_settings()} >= {"temperature", "text", "max_seconds"}


def test_the_declaration_holds_each_settings_default_bounds_and_message():
    spec = next(spec for spec in wire_settings() if spec.name == "temperature")
    assert spec.default == 0.8 and spec.metadata["check"] is check_temperature
    assert spec.metadata["slider"].high == 2.0 and "greedy" in spec.metadata["help"]
    assert [spec.name for spec in wire_settings()] == ["temperature", "top_k", "top_p", "repetition_penalty"]


# What the fresh interpreter does with the copy: each front end given min_p by its own name.
REACHES_EVERY_FRONT_END = textwrap.dedent('''
    import gradio as gr
    from rumik_app.decode.sampling import RowParams
    from rumik_app.request import RequestLimits, build_request
    from rumik_app.synthesize import parse_args, request_fields
    from rumik_app.serve.context import ServeContext
    from rumik_app.serve.openai.schema import SpeechRequest, speech_job
    from rumik_app.serve.silk.schema import SilkFields, SilkVoice, silk_request
    from rumik_app.serve.text_in import parse_config
    from rumik_vllm.rules import RequestRules
    from webapp.forms import SynthForm
    from webapp.synth_widgets import sampling_sliders

    class Adapter:  # what the server's protocols read of an adapter
        voices, limits, sample_rate = ("Ira",), RequestLimits(4096, 8192), 24000
        def max_new_tokens_for(self, seconds):
            return int(seconds * 100)

    ctx = ServeContext(Adapter(), None, None, ("tiny",))
    got = {
        "cli": build_request(request_fields(parse_args(["--text", "hi", "--min-p", "0.25", "--out", "x.wav"]))),
        "openai": speech_job(SpeechRequest(model="tiny", input="hi", voice="Ira", min_p=0.25), ctx).request,
        "silk": silk_request(SilkFields.parse({"text": "hi", "min_p": 0.25}), SilkVoice(), ctx),
        "app": build_request(SynthForm.from_inputs(text="hi", min_p=0.25).request_fields()),
    }
    config = parse_config({"type": "session.config", "voice": "Ira", "min_p": 0.25}, ctx)
    got["text-in"] = speech_job(SpeechRequest(input="hi", **{**config.fields, "seed": 1}), ctx).request
    assert {name: req.min_p for name, req in got.items()} == dict.fromkeys(got, 0.25), got
    row = RowParams.of(got["openai"], seed=3)
    sent = RequestRules(row, "threshold").to_extra_args()

    class Params:
        extra_args = sent

    assert row.min_p == 0.25 and RequestRules.from_sampling_params(Params).row.min_p == 0.25
    with gr.Blocks():
        assert sampling_sliders()["min_p"].label == "Min-p"
    try:
        build_request({"text": "hi", "min_p": 7})
    except ValueError as exc:
        print(exc)
''')
MIN_P = textwrap.dedent('''
    def check_min_p(value) -> float:
        """0 (off) to 1."""
        p = _number(value, "Min-p", "min_p")
        if not 0.0 <= p <= 1.0:
            raise PromptError(f"Min-p {_show(value)} is out of range: use 0 (off) to 1.", field="min_p")
        return p


''')


@pytest.mark.slow
def test_a_setting_declared_once_reaches_every_front_end_unedited(tmp_path):
    for name in ("rumik_app", "rumik_vllm", "webapp", "evaluation"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    request = tmp_path / "rumik_app" / "request.py"
    source = request.read_text(encoding="utf-8")
    declaration = ('    min_p: float = setting(0.0, check_min_p, "0 = off, at most 1", Slider(0.0, 1.0, 0.01, '
                   '"Min-p"))\n')
    anchor = "    min_new_tokens: int = setting("
    assert source.count(anchor) == 1 and source.count("class SamplingSettings") == 1
    source = source.replace("@dataclass(frozen=True, kw_only=True)\nclass SamplingSettings",
                            MIN_P + "@dataclass(frozen=True, kw_only=True)\nclass SamplingSettings")
    request.write_text(source.replace(anchor, declaration + anchor), encoding="utf-8")  # the one edit
    proc = subprocess.run([sys.executable, "-c", REACHES_EVERY_FRONT_END], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "Min-p 7 is out of range: use 0 (off) to 1."
