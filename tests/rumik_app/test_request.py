"""The request: each setting declared once, checked once, and one builder for every front end.

A new request field (`volume`, a gain on the audio) is added to a copy of the repository in one
place (its declaration in `rumik_app.request`) plus the engine's use of it, and a fresh
interpreter shows it reaching every front end unedited (the CLI, OpenAI's route, batch and
jobs, Rumik's Silk, text-in, the app's form and its widget), having its effect on the audio, and
its bad value getting the declared message from each; a new sampling setting (`min_p`) declared
the same way reaches the decoders' row and the vLLM processors' arguments.
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
    LengthSetting,
    SamplingSettings,
    SynthesisRequest,
    build_request,
    check_temperature,
    request_settings,
    wire_settings,
)
from rumik_app.settings import Slider, derive, flag_name, wire_name
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
    assert spec.metadata["form"].high == 2.0 and "greedy" in spec.metadata["help"]
    assert [spec.name for spec in wire_settings()] == ["temperature", "top_k", "top_p", "repetition_penalty"]


def test_every_request_field_and_the_length_cap_is_declared_with_how_it_travels():
    declared = [spec.name for spec in request_settings()]
    assert declared == [*(spec.name for spec in fields(SynthesisRequest)), "max_seconds"]
    assert set(REQUEST_FIELDS) == set(declared) and all("help" in spec.metadata for spec in request_settings())
    travels = {spec.name: (wire_name(spec), flag_name(spec)) for spec in request_settings()}
    assert travels["normalize"] == ("normalize", "--no-normalize") and travels["top_k"] == ("top_k", "--top-k")
    assert travels["lexicons"] == ("lexicon", "--lexicon") and travels["max_new_tokens"] == (None, None)
    assert isinstance(fields(LengthSetting)[0].metadata["form"], Slider)


# What the fresh interpreter does with the copy: each front end given volume by its own name, a
# good value and a bad one; min_p through the decoders' row and the vLLM processors' arguments.
REACHES_EVERY_FRONT_END = textwrap.dedent('''
    import contextlib, io, sys
    import numpy as np
    from rumik_app.decode.sampling import RowParams
    from rumik_app.engine.local import TTSEngine
    from rumik_app.errors import PromptError
    from rumik_app.request import RequestLimits, SynthesisRequest, build_request
    from rumik_app.serve.context import ServeContext
    from rumik_app.serve.errors import ApiError
    from rumik_app.serve.jobs.routes import plan_job
    from rumik_app.serve.jobs.runner import chunk_spec
    from rumik_app.serve.jobs.store import JobLimits
    from rumik_app.serve.openai.batch import check_item
    from rumik_app.serve.openai.schema import SpeechRequest, speech_job
    from rumik_app.serve.protocol import OPEN_OWNER
    from rumik_app.serve.silk.schema import SilkError, SilkFields, SilkVoice, silk_request
    from rumik_app.serve.text_in import parse_config
    from rumik_app.synthesize import main, parse_args, request_fields
    from rumik_vllm.rules import RequestRules
    from webapp.forms import SynthForm
    from webapp.synth_tab import LAID_OUT, SynthHandlers

    engine = TTSEngine.from_pretrained(sys.argv[1], device="cpu")

    class Adapter:  # what the server's protocols read of an adapter
        voices, limits, sample_rate, layout = ("Ira",), RequestLimits(4096, 8192, 600.0), 24000, engine.layout
        max_new_tokens_for = staticmethod(engine.max_new_tokens_for)

    ctx = ServeContext(Adapter(), None, None, ("tiny",))
    speech = {"model": "tiny", "input": "hi", "voice": "Ira"}

    def cli(value):
        return build_request(request_fields(parse_args(["--text", "hi", "--volume", str(value), "--out", "x.wav"])))

    def cli_error(value):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            assert main(["--model", "tiny", "--text", "hi", "--volume", str(value), "--out", "x.wav"]) == 2
        return err.getvalue().strip().removeprefix("error: ")

    def text_in(value):
        config = parse_config({"type": "session.config", "voice": "Ira", "volume": value}, ctx)
        return speech_job(SpeechRequest(input="hi", **{**config.fields, "seed": 1}), ctx).request

    def app_error(value):  # what the app's handlers check first (the page shows the message as it is)
        try:
            SynthHandlers(None, None).build(SynthForm.from_inputs(text="hi", volume=value))
        except PromptError as exc:
            return str(exc)

    def batch(value):
        item = check_item(0, {**speech, "volume": value}, ctx, OPEN_OWNER)
        if item.error is not None:
            raise item.error
        return item.job.request

    def job(value):
        request, _, _, chunks = plan_job(SpeechRequest(**speech, volume=value), ctx, JobLimits(), OPEN_OWNER)
        assert SynthesisRequest(**chunk_spec(chunks[0])).volume == request.volume  # a resumed job's chunk
        return request

    made = {
        "cli": cli,
        "openai": lambda value: speech_job(SpeechRequest(**speech, volume=value), ctx).request,
        "batch": batch,
        "jobs": job,
        "silk": lambda value: silk_request(SilkFields.parse({"text": "hi", "volume": value}), SilkVoice(), ctx),
        "text-in": text_in,
        "app": lambda value: build_request(SynthForm.from_inputs(text="hi", volume=value).request_fields()),
    }
    assert {name: make(0.5).volume for name, make in made.items()} == dict.fromkeys(made, 0.5)
    said = {"cli": cli_error(7), "app": app_error(7)}
    for name in ("openai", "batch", "jobs", "silk", "text-in"):
        try:
            made[name](7)
        except (ApiError, SilkError) as exc:
            said[name] = exc.message
    for name, message in sorted(said.items()):
        print(name, message, sep=": ")

    inputs = list(SynthForm.input_defaults())  # the synthesis events' API parameters (webapp.forms.form_event)
    assert inputs[-3:] == ["lexicon_entries", "min_p", "volume"], inputs  # declared since: after the pinned ones
    assert "volume" not in LAID_OUT  # so the tab gives it its declared slider under Generation

    loud = SynthesisRequest("Hello there.", seed=5, max_new_tokens=48)
    quiet = loud.with_(volume=0.5)
    assert np.array_equal(engine.synthesize(quiet).samples, engine.synthesize(loud).samples * np.float32(0.5))
    streamed = [np.concatenate(list(engine.stream(req))) for req in (loud, quiet)]
    assert np.array_equal(streamed[1], streamed[0] * np.float32(0.5))

    row = RowParams.of(SynthesisRequest("hi", min_p=0.25), seed=3)

    class Params:
        extra_args = RequestRules(row, "threshold").to_extra_args()

    assert row.min_p == 0.25 and RequestRules.from_sampling_params(Params).row.min_p == 0.25
    assert speech_job(SpeechRequest(**speech, min_p=0.25), ctx).request.min_p == 0.25
    try:
        RowParams(seed=1, min_p=7)
    except PromptError as exc:
        print("row", exc, sep=": ")
''')
CHECKS = textwrap.dedent('''
    def check_volume(value) -> float:
        """0 (silence) to 2."""
        gain = _number(value, "Volume", "volume")
        if not 0.0 <= gain <= 2.0:
            raise PromptError(f"Volume {_show(value)} is out of range: use 0 (silence) to 2 (1 = as made).",
                              field="volume")
        return gain


    def check_min_p(value) -> float:
        """0 (off) to 1."""
        p = _number(value, "Min-p", "min_p")
        if not 0.0 <= p <= 1.0:
            raise PromptError(f"Min-p {_show(value)} is out of range: use 0 (off) to 1.", field="min_p")
        return p


''')
# Each edit goes in before its anchor. The one declaration of each setting: volume a request
# field (after the others), min_p a sampling setting (their checks beside the others).
DECLARATIONS = {
    "@dataclass(frozen=True, kw_only=True)\nclass SamplingSettings": CHECKS,
    "    min_new_tokens: int = setting(": '    min_p: float = setting(0.0, check_min_p, "0 = off, at most 1", '
                                         'Slider(0.0, 1.0, 0.01, "Min-p"))\n',
    "    def spoken_text(self": '    volume: float = setting(1.0, check_volume, "gain on the audio", '
                               'Slider(0.0, 2.0, 0.05, "Volume"))\n\n',
}
# The engine's use of volume: a gain where a request's audio leaves the engine, whole and streamed.
ENGINE_USE = {
    "base.py": {"        marker = self.watermarker_for(plan[0])\n        if marker is not None and samples.size:":
                "        samples = samples * plan[0].volume\n"},
    "stream.py": {"        self.joiner = CrossfadeStream(fade)": "        self.volume = plan[0].volume\n",
                  "        return audio if self.watermark is None or not len(audio)":
                  "        audio = audio * self.volume\n"},
}


def _insert(path, edits: dict[str, str]) -> None:
    """Each text of `edits` put in before its anchor, which must occur once."""
    source = path.read_text(encoding="utf-8")
    for anchor, text in edits.items():
        assert source.count(anchor) == 1, anchor
        source = source.replace(anchor, text + anchor)
    path.write_text(source, encoding="utf-8")


@pytest.mark.slow
def test_a_field_declared_once_reaches_every_front_end_unedited(tmp_path, tiny_checkpoint):
    for name in ("rumik_app", "rumik_vllm", "webapp", "evaluation"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    _insert(tmp_path / "rumik_app" / "request.py", DECLARATIONS)  # the one edit of the request
    for name, edits in ENGINE_USE.items():
        _insert(tmp_path / "rumik_app" / "engine" / name, edits)
    proc = subprocess.run([sys.executable, "-c", REACHES_EVERY_FRONT_END, str(tiny_checkpoint)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines()[-8:])
    declared = "Volume 7 is out of range: use 0 (silence) to 2 (1 = as made)."
    assert said == {**dict.fromkeys(("app", "batch", "cli", "jobs", "openai", "silk", "text-in"), declared),
                    "row": "Min-p 7 is out of range: use 0 (off) to 1."}, said
