"""The app on a ZeroGPU Space (a stand-in `spaces` module) and off one; the app's idle unload.

Run: .venv/bin/python -m pytest tests/app/test_zerogpu.py -q

ZeroGPU itself cannot run here (no Space, no GPU), so a stand-in `spaces` package on the
path of a real `python app.py` records every `spaces.GPU` call: which function, the
duration it asked for. What stays unmeasured: the real
GPU attachment, the quota, and the GPU seconds a second of audio really costs there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import soundfile as sf
from gradio_client import Client

from tests.app.conftest import wait_until_up
from tests.servers import ROOT, free_port, wait_for

FAKE_SPACES = textwrap.dedent('''
    """A stand-in for Hugging Face's `spaces` (ZeroGPU): GPU(duration=...) records each call."""
    import functools, inspect, json, os, threading

    LOG = os.environ["FAKE_SPACES_LOG"]
    inside = threading.local()

    def _record(fn, args, kwargs, duration):
        seconds = duration(*args, **kwargs) if callable(duration) else duration
        with open(LOG, "a") as f:
            f.write(json.dumps({"fn": fn.__qualname__, "duration": seconds}) + "\\n")

    def GPU(fn=None, duration=60):
        def wrap(fn):
            if inspect.isgeneratorfunction(fn):
                @functools.wraps(fn)
                def gen(*args, **kwargs):
                    _record(fn, args, kwargs, duration)
                    inside.on = True
                    try:
                        yield from fn(*args, **kwargs)
                    finally:
                        inside.on = False
                return gen
            @functools.wraps(fn)
            def call(*args, **kwargs):
                _record(fn, args, kwargs, duration)
                inside.on = True
                try:
                    return fn(*args, **kwargs)
                finally:
                    inside.on = False
            return call
        return wrap(fn) if fn is not None else wrap
''')
def _start_app(tmp_path, tiny_checkpoint, env_extra: dict, *flags: str):
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]), **env_extra}
    log = open(tmp_path / "app.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([sys.executable, "app.py", "--model", str(tiny_checkpoint), "--device", "cpu", "--port",
                             str(port), "--data-dir", str(tmp_path / "data"), *flags],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/"
    wait_until_up(url, proc)
    return proc, url


def _stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.mark.slow
def test_on_zerogpu_every_generation_runs_inside_spaces_gpu_with_a_duration_from_its_length(tiny_checkpoint,
                                                                                                tmp_path):
    site = tmp_path / "site" / "spaces"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(FAKE_SPACES)
    log = tmp_path / "gpu.jsonl"
    proc, url = _start_app(tmp_path, tiny_checkpoint, {"SPACES_ZERO_GPU": "true", "FAKE_SPACES_LOG": str(log)})
    try:
        client = Client(url, verbose=False)
        client.predict(text="hi", system="rumik-oss-1", max_seconds=0.5, seed=1, api_name="/synthesize")
        client.predict(text="hi", system="rumik-oss-1", max_seconds=3.0, seed=1, api_name="/synthesize")
        job = client.submit("hello", "Ira", "", "", "", "", 2, 0.8, 30, 1.0, 1.0, "rumik-oss-1",
                            api_name="/synthesize_stream")
        job.result()
        client.predict(text="Namaste.", prompt_id="", target_delivery="", system_a="rumik-oss-1", system_b="tiny",
                       seed_a=1, seed_b=2, max_seconds=0.5, api_name="/generate_pair")
    finally:
        _stop(proc)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    by_fn = {}
    for call in calls:
        by_fn.setdefault(call["fn"].rsplit(".", 1)[-1], []).append(call["duration"])
    assert len(by_fn.get("synthesize", [])) >= 4, calls  # the two /synthesize and the pair's two clips
    assert len(by_fn.get("_engine_stream", [])) == 1, calls  # the streamed synthesis
    short, long = by_fn["synthesize"][:2]
    assert long > short >= 10  # asks for more GPU time for a longer budget, at least the floor


def test_zerogpu_quota_refusals_read_as_a_message_that_names_what_still_works(monkeypatch):
    import gradio as gr

    from webapp import zerogpu

    class Spaces:
        @staticmethod
        def GPU(duration):
            def wrap(fn):
                def call(*args, **kwargs):
                    raise RuntimeError("You have exceeded your GPU quota (60s requested vs. 12s left).")
                return call
            return wrap
    monkeypatch.setenv(zerogpu.ZERO_GPU_ENV, "true")
    monkeypatch.setitem(sys.modules, "spaces", Spaces)
    task = zerogpu.gpu_task(lambda req: "audio", lambda req: 10.0)
    with pytest.raises(gr.Error, match="free GPU time is used up .* espeak-ng baseline .* duplicate the Space"):
        task("req")
    assert zerogpu.engine_options({"device": None}) == {"device": "cuda", "compile": False}
    assert zerogpu.duration_for(0) == zerogpu.MIN_DURATION_S and zerogpu.duration_for(10_000) == zerogpu.MAX_DURATION_S


def test_the_rate_override_is_checked_and_leaves_the_asr_judges_rate_alone(monkeypatch):
    from webapp import zerogpu

    monkeypatch.setenv(zerogpu.RATE_ENV, "0.25")
    assert zerogpu.duration_for(40) == 20  # 40 s x 0.25 + 10 s
    assert zerogpu.duration_for(40, zerogpu.ASR_GPU_SECONDS_PER_AUDIO_SECOND) == 18  # 40 s x 0.2 + 10 s
    monkeypatch.setenv(zerogpu.ZERO_GPU_ENV, "true")
    monkeypatch.setitem(sys.modules, "spaces", type("Spaces", (), {"GPU": staticmethod(lambda duration: lambda f: f)}))
    for hostile in ("abc", "-1", "0", "nan", "inf", "1e9"):
        monkeypatch.setenv(zerogpu.RATE_ENV, hostile)
        with pytest.raises(ValueError, match="RUMIK_ZEROGPU_RATE=.* above 0 and at most 10"):
            zerogpu.gpu_task(lambda req: "audio", lambda req: 1.0)  # when the handler is built: at start-up


def test_off_a_space_spaces_is_never_imported_and_an_idle_model_is_unloaded_and_reloaded(tiny_checkpoint,
                                                                                          tmp_path, monkeypatch):
    # Off a Space: a `spaces` on the path that notes any import of it but Gradio's own probe
    # (gradio.blocks tries `import spaces` at import time, whatever the app does), and fails it.
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    marker, site = tmp_path / "spaces-imported", tmp_path / "site" / "spaces"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(
        "import traceback\n"
        "if not any('/gradio/' in frame.filename for frame in traceback.extract_stack()):\n"
        f"    open({str(marker)!r}, 'w').write(''.join(traceback.format_stack()))\n"
        "raise ImportError('spaces must not be imported off a ZeroGPU Space')\n")
    # On int8 weights: the app loads, serves and reloads them quantised.
    proc, url = _start_app(tmp_path, tiny_checkpoint, {}, "--idle-unload", "0.01", "--quantize", "int8")  # 0.6 s
    try:
        client = Client(url, verbose=False)
        first = client.predict(text="hi", system="rumik-oss-1", max_seconds=0.5, seed=3, api_name="/synthesize")
        wait_for(lambda: "unloaded after" in (tmp_path / "app.log").read_text(), timeout=60,
                 what="the idle model to be unloaded")
        again = client.predict(text="hi", system="rumik-oss-1", max_seconds=0.5, seed=3, api_name="/synthesize")
        assert "reloaded for a visitor" in (tmp_path / "app.log").read_text()
        assert open(first, "rb").read()[44:] == open(again, "rb").read()[44:]  # the same audio after the reload
        assert sf.info(first).samplerate == 24_000
        assert (tmp_path / "app.log").read_text().count("int8 (aten _weight_int8pack_mm") >= 2  # load and reload
        assert not marker.exists(), marker.read_text()  # through start-up, synthesis, unload and reload
    finally:
        _stop(proc)
