"""The voice library on the speech server: GET/POST /v1/voices, DELETE /v1/voices/{name}.

Run: .venv/bin/python -m pytest -n0 tests/rumik_app/test_serve_voices.py -q

One real server (the tiny checkpoint, `--voices` as `build_server` attaches it) with an API key
and an admin key: listing takes the API key, importing and deleting the admin key; a server
without an admin key keeps them closed (403). Speech: a library voice's carries the watermark and a
built-in voice's does not; without resemble-perth a library voice is refused (500, naming the install).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import httpx
import numpy as np
import pytest

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve import gate, voices
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.voices.library import use_library
from rumik_app.voices.package import ADAPTER_FILE, base_fingerprint
from rumik_app.voices.tiny import model_shapes
from rumik_app.watermark.marker import shared_watermarker
from tests.rumik_app.test_watermark_engine import perth_uninstalled
from tests.rumik_app.voices.packages import archive_of, write_voice, zip_bytes
from tests.servers import ServerThread

KEY, ADMIN = "voices-api-key-0123456789", "voices-admin-key-0123456789"
ZIP = {"Content-Type": "application/zip"}
BUILTIN = ["Ira", "Aisha", "Siya", "Zoya"]
SPEECH = {"model": "tiny", "input": "Hello there.", "response_format": "pcm", "seed": 5, "max_seconds": 0.3}


def auth(key: str, **headers) -> dict:
    return {"Authorization": f"Bearer {key}", **headers}


@pytest.fixture(scope="module")
def made(tiny_checkpoint, tmp_path_factory):
    """(library folder with Arjun and a package of another base, Meera's package made elsewhere, the engine)."""
    engine = TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")
    root, shapes = tmp_path_factory.mktemp("voices"), model_shapes(engine.model)
    fingerprint = base_fingerprint(tiny_checkpoint)
    write_voice(root / "library", "Arjun", fingerprint, shapes=shapes)
    write_voice(root / "library", "Old", "sha256:" + "b" * 64, shapes=shapes, seed=1)
    meera = write_voice(root / "made", "Meera", fingerprint, shapes=shapes, seed=2)
    use_library(engine, root / "library")
    return root, meera, engine


@pytest.fixture(scope="module")
def server(made):
    adapter = SchedulerAdapter(BatchScheduler(made[2], max_batch=2, max_queue=8, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY, admin_key=ADMIN) as srv:
        yield srv


def names(server) -> list[tuple[str, str]]:
    listed = httpx.get(server.url + "/v1/voices", headers=auth(KEY), timeout=10)
    assert listed.status_code == 200, listed.text
    return [(voice["name"], voice["kind"]) for voice in listed.json()["data"]]


def error_of(resp: httpx.Response, status: int) -> str:
    """The one readable message of an error answer (OpenAI's body), never a trace."""
    assert resp.status_code == status, resp.text
    assert "Traceback" not in resp.text
    return resp.json()["error"]["message"]


def test_lists_both_kinds_with_figures_and_a_consent_summary(server):
    listed = httpx.get(server.url + "/v1/voices", headers=auth(KEY), timeout=10).json()["data"]
    assert [(v["name"], v["kind"]) for v in listed] == [(name, "builtin") for name in BUILTIN] + [("Arjun", "library")]
    arjun = listed[-1]
    assert arjun["data_hours"] == 1.5 and arjun["evaluation"] == {"wer": 0.04} and arjun["created_at"]
    assert set(arjun["consent"]) == {"sha256", "recorded_at", "checked_by"} and "agree" not in str(arjun)
    assert "ta" in listed[0]["languages"]
    openai = httpx.get(server.url + "/v1/audio/voices", headers=auth(KEY), timeout=10).json()
    assert openai["voices"] == BUILTIN + ["Arjun"]  # "Old" was made on another checkpoint: not served
    assert httpx.get(server.url + "/v1/voices", timeout=10).status_code == 401  # reading takes an API key


def test_a_library_voice_speaks(server):
    spoken = httpx.post(server.url + "/v1/audio/speech", json={**SPEECH, "voice": "arjun"}, headers=auth(KEY),
                        timeout=60)
    assert spoken.status_code == 200 and len(spoken.content) > 0, spoken.text


def test_a_library_voices_speech_is_watermarked_and_a_builtin_one_is_not(server):
    """The server's path: its scheduler's streamed pieces, marked on their way out (docs/watermark.md)."""
    marker = shared_watermarker()
    for voice, marked in (("arjun", True), ("Ira", False)):
        spoken = httpx.post(server.url + "/v1/audio/speech", json={**SPEECH, "voice": voice, "max_seconds": 1.0},
                            headers=auth(KEY), timeout=60)
        assert spoken.status_code == 200, spoken.text
        wave = np.frombuffer(spoken.content, "<i2").astype(np.float32) / 32768  # pcm: 16-bit at 24 kHz
        assert marker.is_watermarked(wave, 24_000) is marked, voice


def test_without_resemble_perth_a_library_voice_is_refused_with_the_fix(server, monkeypatch):
    with perth_uninstalled(monkeypatch):
        refused = httpx.post(server.url + "/v1/audio/speech", json={**SPEECH, "voice": "Arjun"}, headers=auth(KEY),
                             timeout=60)
        assert "pip install resemble-perth==1.0.1" in error_of(refused, 500)  # never sent unmarked
        spoken = httpx.post(server.url + "/v1/audio/speech", json={**SPEECH, "voice": "Ira"}, headers=auth(KEY),
                            timeout=60)
        assert spoken.status_code == 200 and len(spoken.content) > 0, spoken.text


def test_import_and_delete_take_the_admin_key(server, made):
    archive = archive_of(made[1])
    for headers, message in ((ZIP, "You didn't provide an API key"), (auth(KEY, **ZIP), "(--admin-key)")):
        posted = httpx.post(server.url + "/v1/voices", content=archive, headers=headers, timeout=10)
        assert message in error_of(posted, 401)  # an API key is not the admin key
        assert message in error_of(httpx.delete(server.url + "/v1/voices/Arjun", headers=headers, timeout=10), 401)
    assert ("Arjun", "library") in names(server) and ("Meera", "library") not in names(server)


def test_admin_routes_are_closed_without_an_admin_key(made):
    adapter = SchedulerAdapter(BatchScheduler(made[2], max_batch=1, max_queue=1, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY) as srv:
        refused = httpx.post(srv.url + "/v1/voices", content=archive_of(made[1]), headers=auth(KEY, **ZIP), timeout=10)
        assert "start the server with --admin-key" in error_of(refused, 403)
        assert httpx.delete(srv.url + "/v1/voices/Arjun", headers=auth(KEY), timeout=10).status_code == 403


def test_import_replace_delete_and_reload(server, made):
    archive = archive_of(made[1])
    created = httpx.post(server.url + "/v1/voices", content=archive, headers=auth(ADMIN, **ZIP), timeout=30)
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "Meera" and created.json()["kind"] == "library"
    assert ("Meera", "library") in names(server)
    again = httpx.post(server.url + "/v1/voices", content=archive, headers=auth(ADMIN, **ZIP), timeout=30)
    assert "import with replace" in error_of(again, 409)
    replaced = httpx.post(server.url + "/v1/voices?replace=true", content=archive, headers=auth(ADMIN, **ZIP),
                          timeout=30)
    assert replaced.status_code == 201, replaced.text
    assert httpx.delete(server.url + "/v1/voices/meera", headers=auth(ADMIN), timeout=10).status_code == 204
    assert ("Meera", "library") not in names(server)
    unknown = httpx.post(server.url + "/v1/audio/speech", json={**SPEECH, "voice": "Meera"}, headers=auth(KEY),
                         timeout=10)
    assert "Unknown voice 'Meera'" in error_of(unknown, 400)
    write_voice(made[0] / "library", "Dev", made[2].library.base_fingerprint, shapes=model_shapes(made[2].model),
                seed=4)  # by hand, beside the server
    assert ("Dev", "library") in names(server)
    assert httpx.delete(server.url + "/v1/voices/Dev", headers=auth(ADMIN), timeout=10).status_code == 204


def test_delete_refuses_builtin_and_unknown_voices(server):
    assert "checkpoint's own voices" in error_of(httpx.delete(server.url + "/v1/voices/ira", headers=auth(ADMIN),
                                                              timeout=10), 400)
    assert "No library voice 'Nobody'" in error_of(httpx.delete(server.url + "/v1/voices/Nobody",
                                                                headers=auth(ADMIN), timeout=10), 404)


BAD = {
    "a pickled adapter": (zip_bytes({"adapter.bin": b"\x80\x04K\x01."}), 400, "adapters are safetensors only"),
    "not a zip": (b"hello", 400, "is not a zip archive"),
    "path traversal": (zip_bytes({"../../voice.json": b"{}"}), 400, "no folders"),
    "a bomb": (zip_bytes({"voice.json": b" " * (8 * 2**20)}), 400, "unpacks to 8,388,608 bytes"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_archives_get_one_readable_error(server, case):
    body, status, message = BAD[case]
    resp = httpx.post(server.url + "/v1/voices", content=body, headers=auth(ADMIN, **ZIP), timeout=30)
    assert message in error_of(resp, status)


def with_header(folder: Path, change) -> Path:
    """`folder` with its adapter's safetensors header changed by `change(table)`; the data kept."""
    adapter = folder / ADAPTER_FILE
    raw = adapter.read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    table = json.loads(raw[8 : 8 + length])
    change(table[min(name for name in table if name != "__metadata__")])
    header = json.dumps(table).encode()
    adapter.write_bytes(struct.pack("<Q", len(header)) + header + raw[8 + length :])
    return folder


def scaled(shapes: list[dict], factor: int) -> list[dict]:
    return [{module: (inner * factor, outer * factor) for module, (inner, outer) in layer.items()} for layer in shapes]


FORGERIES = {  # an adapter that passes the old checks and can never load on the served checkpoint
    "a shape past its bytes": (lambda shapes: shapes, lambda entry: entry.update(shape=[entry["shape"][0], 999]),
                               "the file is damaged or altered"),
    "F16 over F32 data": (lambda shapes: shapes, lambda entry: entry.update(dtype="F16"), "the file is damaged"),
    "another model's dimensions": (lambda shapes: scaled(shapes, 2), None, "it was made for another model"),
    "another layer count": (lambda shapes: shapes[:1], None, "it must cover all 2 layers"),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_an_adapter_that_could_never_load_is_refused_and_not_served(server, made, tmp_path, case):
    shapes_of, change, message = FORGERIES[case]
    folder = write_voice(tmp_path, "Kabir", made[2].library.base_fingerprint,
                         shapes=shapes_of(model_shapes(made[2].model)), seed=6)
    if change is not None:
        with_header(folder, change)
    imported = httpx.post(server.url + "/v1/voices", content=archive_of(folder), headers=auth(ADMIN, **ZIP), timeout=30)
    assert message in error_of(imported, 400)
    shutil.copytree(folder, made[0] / "library" / "Kabir")  # by hand, beside the server: listed as a problem only
    try:
        assert ("Kabir", "library") not in names(server)
        assert "Kabir" in made[2].library.problems
    finally:
        shutil.rmtree(made[0] / "library" / "Kabir")


def test_wrong_type_and_oversized_uploads_are_refused(server, made, monkeypatch):
    archive = archive_of(made[1])
    wrong = httpx.post(server.url + "/v1/voices", json={"zip": "no"}, headers=auth(ADMIN), timeout=10)
    assert "Content-Type: application/zip" in error_of(wrong, 415)
    monkeypatch.setitem(gate.STREAMED_BODIES, "/v1/voices", len(archive) - 1)
    monkeypatch.setattr(voices, "MAX_ARCHIVE_BYTES", len(archive) - 1)
    declared = httpx.post(server.url + "/v1/voices", content=archive, headers=auth(ADMIN, **ZIP), timeout=10)
    assert "A voice archive is at most" in error_of(declared, 413)  # by its Content-Length, before it is read
    chunked = httpx.post(server.url + "/v1/voices", content=iter([archive[:1000], archive[1000:]]),
                         headers=auth(ADMIN, **ZIP), timeout=10)
    assert "A voice archive is at most" in error_of(chunked, 413)  # counted while it arrives
    assert ("Meera", "library") not in names(server)
    assert not [p for p in (made[0] / "library").iterdir() if p.name.startswith(".")]  # no upload left behind


def test_a_server_without_adapt_voices_answers_adaptations_with_the_flags_to_start_it(server, capsys):
    from rumik_app.serve.__main__ import parse_args

    posted = httpx.post(server.url + "/v1/voices/adaptations", headers=auth(ADMIN), timeout=10,
                        files=[("recordings", ("a.wav", b"RIFF", "audio/wav"))], data={"name": "Dev"})
    assert "--adapt-voices --voices DIR --data-dir DIR" in error_of(posted, 501)
    listed = httpx.get(server.url + "/v1/voices/adaptations/vjob_1", headers=auth(KEY), timeout=10)
    assert "(--admin-key)" in error_of(listed, 401)  # every adaptation route takes the admin key
    with pytest.raises(SystemExit):
        parse_args(["--model", "tiny", "--adapt-voices", "--voices", "voices/"])
    assert "--adapt-voices needs --voices DIR" in capsys.readouterr().err
