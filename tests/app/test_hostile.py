"""A visitor with bad intent against the running app, over HTTP where it matters.

Each test is one attack: audio bombs, judges a visitor names, URL fetches, text that
normalisation multiplies, large bodies, foreign hosts and origins, forged export labels,
long names, formula cells, private file modes, and exception text.
"""

from __future__ import annotations

import http.client
import json
import socket
import stat
import tracemalloc

import numpy as np
import pytest
import soundfile as sf
from gradio_client import handle_file
from gradio_client.exceptions import AppError

from tests.app.test_file_access import fetch
from tests.evaluation.test_audio_bombs import constant_flac, one_hertz_wav
from webapp.scoring import UNKNOWN_JUDGE, score_uploads
from webapp.uploads import MAX_CLIP_SECONDS

SHORT = 0.5


def _raw(port: int, method: str, path: str, headers: dict, body: bytes = b"", send_body: bool = True):
    """(status, headers, body) of one request; `send_body=False` sends the headers only."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        sock.sendall(head.encode("latin-1") + (body if send_body else b""))
        resp = http.client.HTTPResponse(sock)
        resp.begin()
        return resp.status, dict(resp.getheaders()), resp.read(4096)


def _port(app_server) -> int:
    return int(app_server[1].rstrip("/").rsplit(":", 1)[1])


# ---------------------------------------------------------------- 1. audio bombs


def test_audio_bombs_are_refused_per_clip_over_http_and_the_app_stays_up(client, tmp_path):
    wav, flac = one_hertz_wav(tmp_path / "rate.wav"), constant_flac(tmp_path / "hour.flac", 3600)
    summary, table, _, _ = client.predict(
        files=[handle_file(str(wav)), handle_file(str(flac))], references="rate.wav | hi\nhour.flac | hi",
        manifest=None, judge="pasted", transcripts="rate.wav | hi\nhour.flac | hi", language="en",
        api_name="/evaluate")
    rows = {r[0]: r[-1] for r in table["data"]}
    assert "sample rate of 1 Hz" in rows["rate.wav"] and f"limit here is {MAX_CLIP_SECONDS:g} s" in rows["hour.flac"]
    assert "0 of 2 clip(s) scored" in summary
    assert client.predict(api_name="/model_status") is not None  # still serving


def test_scoring_bombs_keeps_the_apps_memory_bounded(tmp_path):
    bombs = [one_hertz_wav(tmp_path / "rate.wav"), constant_flac(tmp_path / "hour.flac", 3600),
             constant_flac(tmp_path / "hidden.flac", 3600, declare_length=False)]
    tracemalloc.start()
    try:
        report = score_uploads([str(b) for b in bombs], "\n".join(f"{b.name} | hi" for b in bombs), judge="pasted",
                               transcripts="\n".join(f"{b.name} | hi" for b in bombs))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(c.message and not c.scores for c in report.clips)
    assert peak < 200 * 2**20, f"{peak / 2**20:.0f} MiB"  # the 1 Hz WAV alone once made 1.9 GB


# ---------------------------------------------------------------- 2. judges a visitor names


@pytest.mark.parametrize("judge", ["hf:someone/big-model", "hf:/etc", "hf:/nonexistent/folder", "/tmp",
                                   "whisper:large-v3", "indicconformer:/root", "supplied:/etc/passwd"])
def test_a_judge_not_offered_gets_one_message_and_nothing_loads(client, tmp_path, judge, monkeypatch):
    import evaluation.asr

    clip = tmp_path / "hello.wav"
    sf.write(clip, 0.3 * np.sin(np.arange(12_000) / 5.0), 24_000)
    monkeypatch.setattr(evaluation.asr, "load_asr", lambda *a, **k: pytest.fail("a visitor's judge was loaded"))
    with pytest.raises(AppError) as err:
        client.predict(files=[handle_file(str(clip))], references="hello.wav | hello",
                       manifest=None, judge=judge, transcripts="", language="en", api_name="/evaluate")
    assert str(err.value) == UNKNOWN_JUDGE  # the same words whatever was sent: nothing about the machine


def test_the_judge_cache_is_bounded_and_frees_what_it_evicts(monkeypatch):
    import gc
    import weakref

    import evaluation.asr
    from webapp.scoring import JudgeCatalog

    class FakeJudge:  # the judge interface JudgeCatalog wraps (evaluation.asr)
        def __init__(self, spec):
            self.spec = spec

        def transcribe(self, samples, sample_rate, language=None):
            return ""

    monkeypatch.setattr(evaluation.asr, "load_asr", lambda spec: FakeJudge(spec))
    catalog = JudgeCatalog(["org/a", "org/b", "org/c"], max_loaded=2)
    first = weakref.ref(catalog.get("hf:org/a")[0])
    catalog.get("hf:org/b")
    catalog.get("hf:org/c")
    gc.collect()
    assert catalog.loaded() == ["hf:org/b", "hf:org/c"] and first() is None  # evicted and gone


# ---------------------------------------------------------------- 3. URL fetches


@pytest.mark.parametrize("path", ["/gradio_api/file=https://example.com/a.wav", "/gradio_api/file=//example.com/a",
                                  "/gradio_api/file=http%3A%2F%2F127.0.0.1%3A1%2Fx",
                                  "/gradio_api/proxy=https://x.hf.space/config", "/file=https://example.com/a.wav"])
def test_url_routes_are_refused(app_server, path):
    assert fetch(_port(app_server), path)[0] == 403


def test_a_url_as_a_file_input_is_refused_before_gradio_fetches_it(app_server):
    body = json.dumps({"data": [[{"path": "https://example.com/big.wav", "meta": {"_type": "gradio.FileData"}}],
                                "", None, "pasted", "", "", "grapheme"],
                       "fn_index": 0, "session_hash": "attacker"}).encode()
    status, _, text = _raw(_port(app_server), "POST", "/gradio_api/queue/join",
                           {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(len(body))},
                           body)
    assert status == 400 and b"does not fetch URLs" in text


# ---------------------------------------------------------------- 4. normalisation blow-up


def test_text_that_normalisation_multiplies_is_refused_and_plain_text_at_the_cap_passes(client, app_server):
    from rumik_app.request import APP_LIMITS
    from webapp.forms import SynthForm
    from webapp.synth_tab import SynthHandlers

    dense = "₹99,99,999 " * 180  # 1,980 characters typed
    assert len(dense.strip()) <= APP_LIMITS.max_chars
    with pytest.raises(AppError, match=r"reads as [\d,]+ once numbers, amounts and dates are spelled out"):
        client.predict(text=dense, seed=1, max_seconds=SHORT, api_name="/synthesize")
    demo = app_server[0]
    plain = ("Plain words that read as they are written. " * 60)[: APP_LIMITS.max_chars]
    handlers = SynthHandlers(demo.registry, demo.served_folder)
    _, req = handlers.build(SynthForm(text=plain, seed=1, max_seconds=20.0, system="tiny"))  # no error: it passes
    assert len(req.text) == len(plain.strip())


# ---------------------------------------------------------------- 5/9. bodies, hosts, origins


def test_a_large_body_is_refused_before_it_is_read(app_server):
    status, _, _ = _raw(_port(app_server), "POST", "/gradio_api/queue/join",
                        {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(50 * 2**20)},
                        send_body=False)  # nothing sent: an answer now shows the body was never waited for
    assert status == 413


def test_foreign_hosts_and_origins_are_refused(app_server):
    port = _port(app_server)
    assert _raw(port, "GET", "/config", {"Host": "attacker.example"})[0] == 400  # DNS rebinding
    assert _raw(port, "GET", "/config", {"Host": f"127.0.0.1:{port}"})[0] == 200
    assert _raw(port, "GET", "/config", {"Host": f"localhost:{port}"})[0] == 200
    evil = {"Host": f"127.0.0.1:{port}", "Origin": "https://attacker.example"}
    assert _raw(port, "GET", "/config", evil)[0] == 403
    _, headers, _ = _raw(port, "OPTIONS", "/gradio_api/queue/join", {**evil, "Access-Control-Request-Method": "POST"})
    assert headers.get("access-control-allow-origin") != "https://attacker.example"
    body = b'{"data": [], "fn_index": 0, "session_hash": "x"}'
    status, _, _ = _raw(port, "POST", "/gradio_api/queue/join", {**evil, "Content-Type": "application/json",
                                                                  "Content-Length": str(len(body))}, body)
    assert status == 403  # the cross-site request itself, whatever a preflight said
    status, _, _ = _raw(port, "GET", "/config", {"Host": f"127.0.0.1:{port}", "Origin": f"http://127.0.0.1:{port}"})
    assert status == 200


def test_the_login_cookie_is_same_site_lax(monkeypatch):
    from webapp.guard import VisitorGuard

    sent = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"set-cookie", b"access-token=x; HttpOnly; Path=/; SameSite=none; Secure")]})
        await send({"type": "http.response.body", "body": b""})

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    import asyncio

    guard = VisitorGuard(app, hosts=["localhost"])
    asyncio.run(guard({"type": "http", "method": "GET", "path": "/", "headers": [(b"host", b"localhost")],
                       "client": ("127.0.0.1", 1)}, receive, send))
    assert b"SameSite=Lax" in dict(sent[0]["headers"])[b"set-cookie"]
    monkeypatch.setenv("SPACE_ID", "owner/space")  # on a Space the app lives in huggingface.co's iframe
    on_space = VisitorGuard.options("0.0.0.0")["middleware"][0].kwargs
    assert on_space["on_space"] is True


# ---------------------------------------------------------------- 7/8. forged labels, long names, formula cells


def test_a_label_cannot_pass_one_system_for_another_and_fields_are_bounded(client, app_server, tmp_path):
    base = dict(text="A short one.", prompt_id="", target_delivery="", system_a="espeak", system_b="tiny", seed_a=1,
                seed_b=2, max_seconds=SHORT, api_name="/generate_pair")
    with pytest.raises(AppError, match="is a system's name"):
        client.predict(**base, label_a="rumik-oss-1")
    for bad in ("a b", "x" * 41, "rumik:oss", "![i](http://x)"):
        with pytest.raises(AppError, match="export label may be"):
            client.predict(**base, label_a=bad)
    out = client.predict(**base, label_a="ckpt-2000")
    trial = app_server[0].rating_store.get_trial(out[2])
    ids = {c.settings["system"]: c.system_id for c in trial.clips}
    assert ids["espeak"] == "espeak:ckpt-2000" and ids["tiny"].startswith("tiny")  # the real system leads
    with pytest.raises(AppError, match="rater name may be"):
        client.predict(rater="r" * 300, trial_id=out[2], score_1=3, score_2=4, preference="Clip 1", comment="",
                       api_name="/submit_rating")
    with pytest.raises(AppError, match="rater name may be"):
        client.predict(rater="![x](http://attacker/pixel)", trial_id=out[2], score_1=3, score_2=4,
                       preference="Clip 1", comment="", api_name="/submit_rating")
    client.predict(rater="priya", trial_id=out[2], score_1=3, score_2=4, preference="Clip 1",
                   comment="=HYPERLINK(\"http://attacker\")", api_name="/submit_rating")
    export = app_server[0].rating_store.export(tmp_path / "export")
    csv_text = next(p for p in export if p.name == "ratings.csv").read_text(encoding="utf-8")
    assert "'=HYPERLINK" in csv_text and ",=HYPERLINK" not in csv_text


def test_private_files_are_owner_only(app_server, tmp_path):
    layout = app_server[0].data_layout
    assert stat.S_IMODE(layout.database.stat().st_mode) == 0o600
    export = app_server[0].rating_store.export(tmp_path / "modes")
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in export if p.suffix in (".csv", ".jsonl"))


def test_exception_text_never_reaches_a_visitor():
    import gradio as gr

    from webapp.common import user_errors

    with pytest.raises(gr.Error) as err:
        with user_errors("Synthesis"):
            raise RuntimeError("/srv/secret/model.safetensors: CUDA error 700 at 0xdeadbeef")
    assert "secret" not in err.value.message and "0xdeadbeef" not in err.value.message
    assert "incident" in err.value.message


def test_uploads_must_declare_their_size_and_fit_an_hourly_budget(app_server):
    port = _port(app_server)
    head = {"Host": "127.0.0.1", "Content-Type": "multipart/form-data; boundary=x"}
    assert _raw(port, "POST", "/gradio_api/upload", {**head, "Transfer-Encoding": "chunked"}, b"0\r\n\r\n")[0] == 411
    from webapp.guard import VisitorGuard

    clock = [0.0]
    guard = VisitorGuard(None, hosts=["localhost"], upload_budget=100, clock=lambda: clock[0])
    assert guard._upload_refusal("10.0.0.1", 60) is None
    assert guard._upload_refusal("10.0.0.1", 60)[0] == 429  # over 100 bytes this hour
    assert guard._upload_refusal("10.0.0.2", 60) is None  # another client has its own budget
    clock[0] = 3601.0
    assert guard._upload_refusal("10.0.0.1", 60) is None  # an hour later
