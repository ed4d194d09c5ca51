"""What a visitor can fetch over HTTP, with the app running on a temporary data dir after two
visitors have rated and an admin has exported.

- The ratings database, its WAL/SHM files, every export and every rated clip in the data dir,
  and an annotation campaign's files there (definition, clip manifest, assignment, clips,
  the raters file), are refused (400/403/404) by every file route Gradio exposes, under absolute, relative,
  traversing and encoded paths; the route list is checked against the running app, so a
  Gradio upgrade that adds a route fails here until someone reads it and classifies it.
- A visitor's own clips are served; another visitor's cannot be found by guessing.
- With an admin password, results and exports need it, and it never reaches the logs.
- With --auth logins, nothing (files included) is served before signing in.

Run: .venv/bin/python -m pytest tests/app/test_file_access.py -q
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import secrets
import sqlite3
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.app.campaign_fixtures import make_campaign
from tests.app.conftest import free_port, wait_until_up
from webapp.access import FIRST_BACKOFF_S, FREE_FAILURES, AdminGate
from webapp.campaign.data.definition import raters_path
from webapp.campaign.data.raters import RatersFile
from webapp.storage import without_random_chunk

SHORT = 0.5  # seconds of audio per clip
TOKEN_NAME = re.compile(r"[0-9a-f]{32}\.wav")
REFUSED = {400, 403, 404}
# Gradio 6.31 routes that read a file named (in part) by the request. Each {} takes the probe path.
FILE_ROUTES = {
    "/gradio_api/file={path_or_url:path}": ["/gradio_api/file={}"],
    "/gradio_api/file/{path:path}": ["/gradio_api/file/{}"],
    "/gradio_api/proxy={url_path:path}": ["/gradio_api/proxy={}"],
    "/static/{path:path}": ["/static/{}"],
    "/assets/{path:path}": ["/assets/{}"],
    "/svelte/{path:path}": ["/svelte/{}"],
    "/gradio_api/custom_component/{id}/{environment}/{type}/{file_name}": [
        "/gradio_api/custom_component/{}/client/js/index.js", "/gradio_api/custom_component/x/client/{}/index.js",
        "/gradio_api/custom_component/x/client/js/{}"],
    "/gradio_api/run-history/records/{endpoint}/{record_id}/assets/{asset_id}": [
        "/gradio_api/run-history/records/{}/r/assets/a", "/gradio_api/run-history/records/e/r/assets/{}"],
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/playlist-file": [
        "/gradio_api/stream/{}/0/1/playlist-file"],
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/{segment_id}.{ext}": [
        "/gradio_api/stream/s/0/1/{}.ts", "/gradio_api/stream/{}/0/1/x.aac"],
    "/gradio_api/stream/{session_hash}/{run}/{component_id}/playlist.m3u8": ["/gradio_api/stream/{}/0/1/playlist.m3u8"],
    "/pwa_icon/{size}": ["/pwa_icon/{}"],
    "/monitoring/{key}": ["/monitoring/{}"],
}
# Parameterised GET routes that never read a file: what they return, from Gradio's source.
NON_FILE_ROUTES = {
    "/gradio_api/heartbeat/{session_hash}": "an event stream for a session, no data",
    "/gradio_api/call/{api_name}/{event_id}": "results of the caller's own event id (random)",
    "/gradio_api/call/v2/{api_name}/{event_id}": "results of the caller's own event id (random)",
}
METHODS_WITH_HEAD = ("/gradio_api/file=", "/gradio_api/proxy=")


def app_routes(app) -> list[tuple[str, set[str]]]:
    """(path, methods) of every route of the running app, included routers and mounts too."""
    out = []

    def walk(routes, prefix=""):
        for r in routes:
            sub = getattr(r, "original_router", None)
            if sub is not None:
                walk(sub.routes, prefix + getattr(getattr(r, "include_context", None), "prefix", ""))
            elif hasattr(r, "routes") and hasattr(r, "path"):  # a mounted app serves anything below it
                out.append((prefix + r.path + "/{path:path}", {"GET"}))
            elif hasattr(r, "path"):
                out.append((prefix + r.path, set(getattr(r, "methods", None) or {"GET"})))

    walk(app.routes)
    return out


def fetch(port: int, path: str, method: str = "GET", cookie: str | None = None) -> tuple[int, bytes]:
    """One raw request (the path is sent exactly as given: no client-side '..' clean-up)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers={"Cookie": cookie} if cookie else {})
        resp = conn.getresponse()
        return resp.status, resp.read(4096)
    finally:
        conn.close()


def url_path(url: str) -> str:
    return urllib.parse.urlsplit(url).path


def probe_paths(target: Path, served_root: Path, upload_root: Path) -> dict[str, str]:
    """Ways a visitor might spell the target's path in a URL."""
    t = str(target)
    return {
        "absolute": t,
        "relative to the server's cwd": os.path.relpath(t),
        "through the served folder": str(served_root) + "/.." * len(served_root.parts) + t,
        "through Gradio's upload folder": str(upload_root) + "/.." * len(upload_root.parts) + t,
        "dot-dot from a route folder": "../" * 16 + t.lstrip("/"),
        "percent-encoded": urllib.parse.quote(t, safe=""),
        "file URL": "file://" + t,
    }


def _quote(p: str) -> str:
    return urllib.parse.quote(p, safe="/:=%")


def _rate_pair(client: Client, rater: str, seeds: tuple[int, int]) -> tuple[list[dict], str]:
    out = client.predict(text="That was so funny <laugh> really", prompt_id="", target_delivery="Happy",
                         system_a="rumik-oss-1", system_b="rumik-oss-1", seed_a=seeds[0], seed_b=seeds[1],
                         max_seconds=SHORT, api_name="/generate_pair")
    msg = client.predict(rater=rater, trial_id=out[2], score_1=4, score_2=2, preference="Clip 1", heard_1="laugh",
                         where_1=3, heard_2="none", where_2=None, comment="", api_name="/submit_rating")
    assert msg.startswith("✓ Stored"), msg
    return [out[0], out[1]], out[2]


@pytest.fixture(scope="module")
def guarded(tiny_checkpoint, tmp_path_factory):
    """An app with an admin password on a fresh data dir; two visitors rated a pair each and
    sent the same /synthesize request; the admin exported. A reader connection is held open
    so the database's WAL and SHM files exist (and the WAL holds the ratings) while probing."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import app

    # The data dir holds an annotation campaign (webapp.campaign) too: its files must stay private.
    campaign_layout, campaign = make_campaign(tmp_path_factory.mktemp("guarded"), name="guarded")
    RatersFile(raters_path(campaign_layout)).add("asha")
    data_dir = campaign_layout.root
    password = secrets.token_urlsafe(18)
    demo = app.build_demo(model=str(tiny_checkpoint), engine_options={"device": "cpu"}, data_dir=data_dir,
                          admin=AdminGate(password))
    port = free_port()
    _, url, _ = app.launch(demo, "127.0.0.1", port, prevent_thread_lock=True)
    wait_until_up(url)
    reader = sqlite3.connect(demo.data_layout.database)
    try:
        reader.execute("SELECT COUNT(*) FROM meta").fetchall()  # keeps -wal/-shm from being checkpointed away
        visitors = {name: Client(url, verbose=False, download_files=False) for name in ("asha", "ben")}
        pairs, trials, synth = {}, {}, {}
        for k, (name, client) in enumerate(visitors.items()):
            pairs[name], trials[name] = _rate_pair(client, name, (2 * k + 1, 2 * k + 2))
            synth[name] = client.predict(text="Same words, same seed.", seed=7, max_seconds=SHORT,
                                         api_name="/synthesize")
        admin = Client(url, verbose=False, download_files=False)
        exported = admin.predict(admin_password=password, api_name="/export_ratings")
        yield SimpleNamespace(demo=demo, url=url, port=port, password=password, visitors=visitors, pairs=pairs,
                              trials=trials, synth=synth, admin=admin, exported=exported, layout=demo.data_layout,
                              campaign=campaign)
    finally:
        reader.close()
        demo.close()


def test_every_parameterised_route_is_classified(guarded):
    """Every route that takes a path piece is either probed below or known not to read files."""
    routes = {p for p, methods in app_routes(guarded.demo.server_app) if "{" in p and methods & {"GET", "HEAD"}}
    unknown = routes - set(FILE_ROUTES) - set(NON_FILE_ROUTES)
    assert not unknown, (f"Gradio serves new parameterised routes {sorted(unknown)}: read their source and add "
                         "them to FILE_ROUTES (with probes) or NON_FILE_ROUTES (with the reason)")
    # The probes below hit real routes (run history's are absent here: it is off with an admin password).
    missing = set(FILE_ROUTES) - routes
    assert missing <= {p for p in FILE_ROUTES if "/run-history/" in p}, sorted(missing)
    # POST /component_server runs a component's @server functions (FileExplorer's `ls` lists folders): none here.
    server_fns = [f"{type(b).__name__}.{n}" for b in guarded.demo.blocks.values() for n in dir(type(b))
                  if getattr(getattr(type(b), n, None), "_is_server_fn", False)]
    assert not server_fns, server_fns


def test_private_files_are_refused_by_every_file_route(guarded):
    from gradio import utils as gr_utils

    layout = guarded.layout
    db = layout.database
    wal, shm = db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")
    assert db.read_bytes().startswith(b"SQLite format 3") and wal.stat().st_size > 0 and shm.exists()
    exports = sorted(p for p in layout.exports.rglob("*") if p.is_file())
    rated = sorted(layout.rated_clips.rglob("*.wav"))
    assert len(exports) >= 6 and len(rated) == 4  # zip, jsonl x2+, csv, manifest; two pairs
    served_root, upload_root = guarded.demo.served_folder.root, Path(gr_utils.get_upload_folder()).resolve()
    folder = guarded.campaign.folder
    campaign_files = [folder / "campaign.json", folder / "manifest.jsonl", folder / "assignment.json",
                      *sorted(folder.glob("clips/*.wav"))[:2], layout.campaigns / "raters.json", folder]
    assert all(f.exists() for f in campaign_files) and folder.parent == layout.campaigns
    targets = [db, wal, shm, *exports, *rated, layout.root, layout.exports, *campaign_files]

    # The probe can see a served file: the visitor's own clip, by the same route and spelling.
    own = Path(guarded.synth["asha"]["path"])
    status, body = fetch(guarded.port, _quote(f"/gradio_api/file={own}"))
    assert status == 200 and body.startswith(b"RIFF")

    served = []
    for target in targets:
        head = target.read_bytes()[:16] if target.is_file() else b""
        for templates in FILE_ROUTES.values():
            for template in templates:
                for how, path in probe_paths(target, served_root, upload_root).items():
                    methods = ("GET", "HEAD") if template.startswith(METHODS_WITH_HEAD) else ("GET",)
                    for method in methods:
                        status, body = fetch(guarded.port, _quote(template.format(path)), method)
                        if status not in REFUSED or (head and head in body):
                            served.append(f"{method} {template} [{how}] {target.name}: {status}")
    assert not served, "\n".join(served[:20])


def test_a_visitor_gets_their_own_clips(guarded):
    for name in guarded.visitors:
        trial = guarded.demo.rating_store.get_trial(guarded.trials[name])
        for clip_file, clip in zip(guarded.pairs[name], trial.clips, strict=True):
            status, body = fetch(guarded.port, url_path(clip_file["url"]))
            assert status == 200 and body.startswith(b"RIFF")
            served = without_random_chunk(Path(clip_file["path"]).read_bytes())  # a copy's own bytes: a new URL
            assert hashlib.sha256(served).hexdigest() == clip.audio_sha256  # what was rated is what was heard
        status, body = fetch(guarded.port, url_path(guarded.synth[name]["url"]))
        assert status == 200 and body.startswith(b"RIFF")


def test_another_visitors_clip_cannot_be_found_by_guessing(guarded):
    a, b = guarded.synth["asha"], guarded.synth["ben"]
    # The same request (text, seed, system) gives the same audio, so Gradio's cache folder (a keyed
    # hash of the content) is the same for both: the random file name is what keeps asha's copy hers.
    assert Path(a["path"]).read_bytes() == Path(b["path"]).read_bytes()
    assert Path(a["path"]).parent == Path(b["path"]).parent and a["url"] != b["url"]
    giveaways = ["seed", "rumik", "tiny", "asha", "ben", "clip-", *guarded.trials.values()]
    clip_urls = [a["url"], b["url"], *(c["url"] for pair in guarded.pairs.values() for c in pair)]
    for url in clip_urls:
        name = url.rsplit("/", 1)[-1]
        assert TOKEN_NAME.fullmatch(name), name  # 128 random bits, nothing derived from the request
        assert not any(g in url for g in giveaways), url
    assert len({u.rsplit("/", 1)[-1] for u in clip_urls}) == len(clip_urls)

    # What ben could try with what he knows about asha's clips (even her trial id):
    served = guarded.demo.served_folder.root
    trial_a = guarded.trials["asha"]
    ben_dir = Path(b["path"]).parent
    guesses = [
        guarded.layout.rated_clip(trial_a, "Clip 1"),  # where rated clips used to be served from
        *(folder / name for folder in (served, ben_dir)  # names the request could have given
          for name in ("rumik-oss-1-seed7.wav", "clip-1.wav", "clip-2.wav", f"{trial_a}.wav", "audio.wav")),
        served, ben_dir, ben_dir.parent,  # folder listings
    ]
    for guess in guesses:
        status, body = fetch(guarded.port, _quote(f"/gradio_api/file={guess}"))
        assert status in REFUSED and not body.startswith(b"RIFF"), (guess, status)
    assert all(TOKEN_NAME.fullmatch(p.name) or re.fullmatch(r"[0-9a-f]{32}", p.name)
               for p in served.iterdir() if not p.name.startswith("."))


def test_results_and_export_need_the_admin_password(guarded, caplog):
    caplog.set_level(logging.INFO)
    visitor = guarded.visitors["ben"]
    before = sorted(guarded.layout.exports.iterdir())
    for api_name in ("/rating_results", "/export_ratings"):
        with pytest.raises(AppError, match="needs the admin password"):
            visitor.predict(api_name=api_name)
        with pytest.raises(AppError, match="wrong admin password"):
            visitor.predict(admin_password=guarded.password[:-1] + "!", api_name=api_name)
    assert sorted(guarded.layout.exports.iterdir()) == before  # refused exports write nothing

    _, numbers = guarded.admin.predict(admin_password=guarded.password, api_name="/rating_results")
    assert sum(numbers["preferences"].values()) == 2 and len(numbers["indicemo"]) == 4  # two raters, four seeds
    # The admin's download is served (from Gradio's cache, under a random folder) and is the export.
    names = [Path(f["path"]).name for f in guarded.exported]
    assert names == ["ratings_export.zip", "indicemo_judgments.jsonl", "nova_prompts.jsonl", "ratings.csv"]
    status, body = fetch(guarded.port, url_path(guarded.exported[0]["url"]))
    assert status == 200 and body.startswith(b"PK")
    newest = max(guarded.layout.exports.iterdir())
    assert Path(guarded.exported[3]["path"]).read_bytes() == (newest / "ratings.csv").read_bytes()
    assert b"asha" in (newest / "ratings.csv").read_bytes()

    # The page asks for the password in a masked field; Gradio's run history (which would keep
    # what was typed in the browser's storage) is off.
    config = json.loads(_full(guarded.port, "/config"))
    field = _component(config, "admin-password")
    assert field["props"]["type"] == "password" and field["props"]["visible"] is True
    assert config["run_history"] is False
    assert not any(guarded.password in r.getMessage() for r in caplog.records)


def _full(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        return conn.getresponse().read()
    finally:
        conn.close()


def _component(config: dict, elem_id: str) -> dict:
    return next(c for c in config["components"] if c.get("props", {}).get("elem_id") == elem_id)


def test_without_an_admin_password_results_stay_open(client, app_server):
    md, numbers = client.predict(api_name="/rating_results")
    assert isinstance(numbers, dict) and isinstance(md, str)
    assert _component(json.loads(_full(app_server[0].server_port, "/config")), "admin-password")["props"][
        "visible"] is False


def test_auth_logins_close_everything_but_the_login(tiny_checkpoint, tmp_path):
    import app

    demo = app.build_demo(model=str(tiny_checkpoint), engine_options={"device": "cpu"}, data_dir=tmp_path / "data",
                          admin=AdminGate(), preload=False)
    port = free_port()
    _, url, _ = app.launch(demo, "127.0.0.1", port, prevent_thread_lock=True, logins=[("asha", "pass:word 1")])
    try:
        assert fetch(port, "/config")[0] == 401
        client = Client(url, verbose=False, download_files=False, auth=("asha", "pass:word 1"))
        wav = client.predict(text="Hello.", system="espeak", api_name="/synthesize")
        clip = url_path(wav["url"])
        assert fetch(port, clip)[0] in {401, 403}  # not even a visitor's own file without signing in
        for wrong in (("asha", "pass:word"), ("priya", "pass:word 1")):
            status, _ = _login(port, *wrong)
            assert status == 400
        status, cookie = _login(port, "asha", "pass:word 1")
        assert status == 200
        status, body = fetch(port, clip, cookie=cookie)
        assert status == 200 and body.startswith(b"RIFF")
        for _ in range(FREE_FAILURES):  # guessing makes the next try wait, even the right password's ...
            assert _login(port, "asha", "guess")[0] == 400
        start = time.monotonic()
        assert _login(port, "asha", "pass:word 1")[0] == 200  # ... which gets in after its wait, never locked out
        assert time.monotonic() - start >= FIRST_BACKOFF_S - 0.1
    finally:
        demo.close()


def _login(port: int, user: str, password: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = urllib.parse.urlencode({"username": user, "password": password})
        conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
        resp = conn.getresponse()
        resp.read()
        cookies = [h.split(";", 1)[0] for k, h in resp.getheaders() if k.lower() == "set-cookie"]
        return resp.status, "; ".join(cookies)
    finally:
        conn.close()
