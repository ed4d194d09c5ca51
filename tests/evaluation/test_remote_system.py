"""`openai:URL` systems (evaluation.systems.remote): a second server of ours as a system, in `rumik eval`
too, and hostile servers (hanging, 500, 2 GB, a 1 Hz WAV) each refused with its reason.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import numpy as np
import pytest

from evaluation import run as runner
from evaluation.systems import SynthesisError, load_system
from evaluation.systems.remote import MAX_RESPONSE_BYTES, RemoteSpeechSystem
from rumik_app.audio import SAMPLE_RATE
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.request import SynthesisRequest
from rumik_app.serve.adapters import SchedulerAdapter
from tests.servers import ServerThread

KEY, KEY_ENV = "remote-test-key", "RUMIK_TEST_REMOTE_KEY"


@pytest.fixture(scope="module")
def second_server(tiny_engine):
    """A speech server of ours on the tiny checkpoint, with an API key."""
    adapter = SchedulerAdapter(BatchScheduler(tiny_engine, max_batch=2, max_queue=8))
    with ServerThread(adapter, api_key=KEY) as server:
        yield server


def test_a_second_server_is_a_system_with_its_key_from_the_environment(second_server, monkeypatch):
    spec = f"openai:{second_server.url}/v1;model=tiny;voice=Ira;key_env={KEY_ENV};seed=7;timeout=120"
    system = load_system(spec)
    assert isinstance(system, RemoteSpeechSystem) and system.name == "openai:127.0.0.1:tiny:Ira"
    with pytest.raises(SynthesisError, match=f"{KEY_ENV} \\(key_env\\) is not set"):
        system.synthesize(SynthesisRequest("Hello there."))
    monkeypatch.setenv(KEY_ENV, KEY)
    first = system.synthesize(SynthesisRequest("Hello there."))
    assert first.sample_rate == SAMPLE_RATE and first.samples.dtype == np.float32 and len(first.samples) > 0
    again = system.synthesize(SynthesisRequest("Hello there."))
    np.testing.assert_array_equal(first.samples, again.samples)  # seed=7 went to the server as a body field
    monkeypatch.setenv(KEY_ENV, "wrong")
    with pytest.raises(SynthesisError, match="answered 401"):
        system.synthesize(SynthesisRequest("Hello there."))


def test_rumik_eval_scores_the_remote_system(second_server, monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    prompts, hyps = tmp_path / "prompts.jsonl", tmp_path / "hyps.jsonl"
    prompts.write_text(json.dumps({"id": "p1", "text": "Hello there.", "language": "en"}) + "\n")
    hyps.write_text(json.dumps({"id": "p1", "hyp": "hello there"}) + "\n")
    spec = f"openai:{second_server.url}/v1;model=tiny;voice=Ira;key_env={KEY_ENV};timeout=120"
    out = tmp_path / "out"
    assert runner.main(["--system", spec, "--prompts", str(prompts), "--asr", f"supplied:{hyps}",
                        "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "tiny (Ira) at 127.0.0.1" in report and list(out.rglob("p1*.wav"))


def test_a_key_in_the_spec_and_bad_options_are_refused():
    with pytest.raises(SynthesisError, match="key_env=VARIABLE"):
        load_system("openai:http://127.0.0.1:9/v1;api_key=sk-123")
    with pytest.raises(SynthesisError, match="set by the system itself"):
        load_system("openai:http://127.0.0.1:9/v1;response_format=mp3")
    with pytest.raises(SynthesisError, match="openai:http"):
        load_system("openai:ftp://example.org")
    with pytest.raises(SynthesisError, match="1 to 600"):
        load_system("openai:http://127.0.0.1:9/v1;timeout=0")


def _wav_header(rate: int, frames: int) -> bytes:
    data = frames * 2
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
    return b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", data)


class Hostile(BaseHTTPRequestHandler):
    """/hang: never answers; /error: 500; /huge: declares 2 GB and streams zeros; /onehz: a 1 Hz WAV of hours;
    /long: 310 s of 24 kHz audio, past the system's 300 s."""

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        kind = self.path.split("/")[1]
        if kind == "hang":
            time.sleep(30)
            return
        if kind == "error":
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": "boom"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav")
        if kind == "huge":
            self.send_header("Content-Length", str(2 * 2**30))
            self.end_headers()
            zeros = bytes(2**20)
            try:
                for _ in range(2 * 2**10):
                    self.wfile.write(zeros)
            except OSError:
                pass  # the client stopped reading
            return
        frames = 3600 * 5 if kind == "onehz" else 24_000 * 310
        self.end_headers()
        self.wfile.write(_wav_header(1 if kind == "onehz" else 24_000, frames) + bytes(2 * frames))


@pytest.fixture(scope="module")
def hostile():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize("kind, reason", [
    ("hang", "ReadTimeout"),
    ("error", "answered 500 \\('\\{\"error\": \"boom\"\\}'\\)"),
    ("huge", f"declares 2,147,483,648 bytes; at most {MAX_RESPONSE_BYTES // 2**20} MB"),
    ("onehz", "not usable audio: .*sample rate of 1 Hz"),
    ("long", "not usable audio: .*310.0 s or longer; the limit here is 300 s"),
])
def test_a_hostile_server_is_refused_with_the_reason(hostile, kind, reason):
    system = load_system(f"openai:{hostile}/{kind};timeout=2")
    with pytest.raises(SynthesisError, match=reason):
        system.synthesize(SynthesisRequest("Hello there."))
    results = system.synthesize_many([SynthesisRequest("Hello."), SynthesisRequest("Again.")])
    assert all(isinstance(result, SynthesisError) for result in results)  # recorded per clip, never raised


def test_an_answer_without_a_length_is_cut_at_the_cap():
    def chunks():
        while True:
            yield bytes(2**20)

    endless = httpx.MockTransport(lambda request: httpx.Response(200, content=chunks()))
    system = RemoteSpeechSystem("openai:http://127.0.0.1:9/v1", transport=endless)
    with pytest.raises(SynthesisError, match="passed 64 MB; it was cut off there"):
        system.synthesize(SynthesisRequest("Hello there."))


def test_a_campaign_and_the_arena_take_the_remote_system(second_server, monkeypatch, tmp_path):
    """The same spec in a listening-test campaign (its clips generated) and in the arena (a battle with it)."""
    from evaluation.arena.battles import Arena
    from tests.app.campaign_fixtures import folder_system, write_prompts
    from webapp.campaign.clips.generate import generate_clips
    from webapp.campaign.data.conditions import build_conditions, parse_settings
    from webapp.campaign.prepare import define_campaign
    from webapp.storage import DataLayout, ServedFolder

    monkeypatch.setenv(KEY_ENV, KEY)
    spec = f"openai:{second_server.url}/v1;model=tiny;voice=Ira;key_env={KEY_ENV};seed=3;timeout=120"
    layout = DataLayout(tmp_path / "data")
    prompts = [{"id": "p1", "text": "Hello from the other server.", "language": "en"}]
    conditions = build_conditions([folder_system(tmp_path / "systems", "tone", 220.0, prompts), spec],
                                  parse_settings(["max_seconds=1"]))
    campaign = define_campaign(layout, "remote", write_prompts(tmp_path / "prompts.jsonl", prompts), conditions,
                               1, 1, 0.0, 0)
    assert generate_clips(campaign) == {"kept": 0, "generated": 2, "failed": 0}

    remote = load_system(spec)
    arena = Arena({"espeak": load_system("espeak"), remote.name: remote}, tmp_path / "arena.sqlite3",
                  ServedFolder(tmp_path / "served").write_wav, max_seconds=1.0, seed=0)
    battle = arena.new_battle("Hello there.", "en", session="s1")
    assert battle.seconds > 0 and arena.failures == {}
    assert arena.vote(battle.id, "tie", "s1", played=(True, True))["system_a"] in ("espeak", remote.name)
