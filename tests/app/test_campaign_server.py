"""The campaign server over HTTP: raters signed in through Gradio's login, each reaching only
their own queue; the admin view only for the admin; nothing before signing in; no private
campaign file (definition, manifest, assignment, clips, raters file, exports) through any file
route; and two raters rating at once while the server is SIGKILLed: every acknowledged
rating is stored exactly once, and a restarted server resumes each queue where it stopped.

Run: .venv/bin/python -m pytest tests/app/test_campaign_server.py -q
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import signal
import stat
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from tests.app.campaign_fixtures import make_campaign
from tests.app.conftest import ROOT, free_port
from tests.app.test_file_access import FILE_ROUTES, METHODS_WITH_HEAD, REFUSED, _login, _quote, fetch, probe_paths
from tests.warm_process import WarmProcess, start_module
from webapp.access import ADMIN_PASSWORD_ENV, AUTH_ENV, AdminGate
from webapp.campaign.data.definition import raters_path
from webapp.campaign.data.raters import RatersFile
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import design_of, plan_of
from webapp.storage import without_random_chunk

ADMIN_SECRET = "campaign-admin-secret-0123"
TOKEN_WAV = re.compile(r"[0-9a-f]{32}\.wav")


def answers_for(page: dict) -> dict:
    """Answers for the A/B page a /campaign_item or /campaign_submit call returned (NoVA's question
    where the page asks it: a prompt with an inline tag)."""
    answers = {"score": [4, 3], "preference": "A"}
    if page.get("tag_words") is not None:
        answers.update(heard=["laugh", "none"], where=[2, None])
    return answers


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from webapp.campaign.server.app import build_campaign_app, launch_campaign

    tmp = tmp_path_factory.mktemp("campaign-server")
    layout, campaign = make_campaign(tmp, raters_per_item=1, rater_slots=2)
    raters = RatersFile(raters_path(layout))
    passwords = {name: raters.add(name) for name in ("asha", "ben")}
    demo = build_campaign_app(layout.root, campaign.name)
    port = free_port()
    _, url, _ = launch_campaign(demo, AdminGate(ADMIN_SECRET), port=port, prevent_thread_lock=True)
    clients = {n: Client(url, auth=(n, pw), verbose=False, download_files=False) for n, pw in passwords.items()}
    clients["admin"] = Client(url, auth=("admin", ADMIN_SECRET), verbose=False, download_files=False)
    yield SimpleNamespace(demo=demo, url=url, port=port, layout=layout, campaign=campaign, passwords=passwords,
                          clients=clients, store=CampaignStore(layout.database, layout=design_of(campaign)))
    demo.close()


def test_each_rater_gets_their_own_queue_and_nothing_else(server):
    asha, ben, admin = (server.clients[n] for n in ("asha", "ben", "admin"))
    plan = plan_of(server.campaign)
    a_item, b_item = asha.predict("", api_name="/campaign_item"), ben.predict("", api_name="/campaign_item")
    slot = {r: s for s, r in server.store.slots(server.campaign.name).items()}
    assert a_item["entry"] == plan.slots[slot["asha"]][0].entry_id
    assert b_item["entry"] == plan.slots[slot["ben"]][0].entry_id
    assert (a_item["mode"], a_item["who"], len(a_item["clips"])) == ("trial", "asha", 2)
    # asha cannot rate ben's item, whatever she sends; ben's queue is untouched.
    with pytest.raises(AppError, match="not in your queue"):
        asha.predict("", b_item["entry"], {"score": [5, 5], "preference": "B"}, api_name="/campaign_submit")
    assert server.store.rows(server.campaign.name) == []
    # Nor the admin view; and the admin login has no queue and gets no rater's item.
    for api_name in ("/campaign_results", "/campaign_export"):
        with pytest.raises(AppError, match="admin view"):
            asha.predict(api_name=api_name)
    assert admin.predict("", api_name="/campaign_item") == {"mode": "admin", "who": "admin"}
    with pytest.raises(AppError, match="admin login has no rating queue"):
        admin.predict("", a_item["entry"], answers_for(a_item), api_name="/campaign_submit")
    # Her own item: stored once (a repeated call is "already stored"), and the next one comes back.
    out = asha.predict("", a_item["entry"], answers_for(a_item), api_name="/campaign_submit")
    assert out["status"] == "✓ Stored." and out["entry"] != a_item["entry"] and out["done"] == 1
    again = asha.predict("", a_item["entry"], answers_for(a_item), api_name="/campaign_submit")
    assert again["status"].startswith("Already stored")
    rows = server.store.rows(server.campaign.name)
    assert [(r["rater"], r["entry_id"]) for r in rows] == [("asha", a_item["entry"])]
    # The admin sees every slot.
    progress, md, *_ = admin.predict(api_name="/campaign_results")
    assert sorted(row[:3] for row in progress["data"]) == sorted([[slot["asha"], "asha", 1], [slot["ben"], "ben", 0]])
    assert "Krippendorff" in md


def test_a_removed_rater_is_refused_at_once_even_when_signed_in(server):
    raters = RatersFile(raters_path(server.layout))
    password = raters.add("ravi")
    ravi = Client(server.url, auth=("ravi", password), verbose=False, download_files=False)  # signed in
    assert raters.remove("ravi")  # what `python -m webapp.campaign remove-rater ravi` does
    with pytest.raises(httpx.HTTPStatusError, match="401"):  # the session ended with the login
        ravi.predict("", api_name="/campaign_item")
    with pytest.raises(httpx.HTTPStatusError, match="401"):
        ravi.predict("", "0" * 24, {"score": [4, 3], "preference": "A"}, api_name="/campaign_submit")
    assert _login(server.port, "ravi", password)[0] == 400
    assert "ravi" not in server.store.slots(server.campaign.name).values()


def test_clips_are_served_under_random_names_to_their_rater_only(server):
    item = server.clients["ben"].predict("", api_name="/campaign_item")
    trial = plan_of(server.campaign).entries()[item["entry"]]
    clips = server.campaign.clip_by_key()
    for clip, key in zip(item["clips"], trial.stimuli, strict=True):
        name = clip.rsplit("/", 1)[-1]
        assert TOKEN_WAV.fullmatch(name), clip
        assert not any(g in clip for g in ("sys0", "sys1", "folder", "espeak", trial.item_id, trial.prompt_id))
        path = _quote(f"/gradio_api/file={clip}")
        assert fetch(server.port, path)[0] in {401, 403}  # not without signing in
        _, cookie = _login(server.port, "ben", server.passwords["ben"])
        status, body = fetch(server.port, path, cookie=cookie)
        private = server.campaign.clip_file(clips[key]).read_bytes()
        assert status == 200 and body[8:] == private[8:len(body)]  # the clip's bytes (a 4 KB head)
        assert hashlib.sha256(without_random_chunk(Path(clip).read_bytes())).hexdigest() == clips[key]["sha256"]


def test_nothing_before_signing_in_and_the_page_holds_nobodys_data(server):
    assert fetch(server.port, "/config")[0] == 401
    assert _login(server.port, "asha", server.passwords["ben"])[0] == 400
    assert _login(server.port, "admin", server.passwords["asha"])[0] == 400
    status, cookie = _login(server.port, "asha", server.passwords["asha"])
    assert status == 200
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.request("GET", "/config", headers={"Cookie": cookie})
        resp = conn.getresponse()
        status, config = resp.status, resp.read().decode()
    finally:
        conn.close()
    # The page is the same for everyone: their item comes from /campaign_item after load.
    entries = [e.entry_id for q in plan_of(server.campaign).slots for e in q]
    assert status == 200 and "campaign-submit" in config
    assert not any(e in config for e in entries) and "ben" not in config
    assert config.count("asha") == config.count('"username":"asha"') == 1  # Gradio names the signed-in user


def test_private_campaign_files_are_refused_by_every_file_route(server):
    from gradio import utils as gr_utils

    folder = server.campaign.folder
    server.clients["admin"].predict(api_name="/campaign_export")  # an export in the campaign folder too
    targets = [folder / "campaign.json", folder / "manifest.jsonl", folder / "assignment.json",
               *sorted(folder.glob("clips/*.wav"))[:2], *sorted(server.campaign.exports_dir.rglob("*.zip")),
               raters_path(server.layout), raters_path(server.layout).with_name("raters.json.lock"),
               server.layout.database, folder, server.layout.campaigns]
    assert all(t.exists() for t in targets) and any(t.suffix == ".zip" for t in targets)
    _, cookie = _login(server.port, "asha", server.passwords["asha"])  # a signed-in rater probing
    served_root, upload_root = server.demo.served_folder.root, Path(gr_utils.get_upload_folder()).resolve()
    served = []
    for target in targets:
        head = target.read_bytes()[:16] if target.is_file() and target.stat().st_size else b""
        for templates in FILE_ROUTES.values():
            for template in templates:
                for how, path in probe_paths(target, served_root, upload_root).items():
                    for method in ("GET", "HEAD") if template.startswith(METHODS_WITH_HEAD) else ("GET",):
                        status, body = fetch(server.port, _quote(template.format(path)), method, cookie=cookie)
                        if status not in REFUSED or (head and head in body):
                            served.append(f"{method} {template} [{how}] {target.name}: {status}")
    assert not served, "\n".join(served[:20])


# ---------------------------------------------------------------- concurrency and a crash
def start_server(data_dir: Path, name: str, port: int, log: Path) -> WarmProcess:
    """`python -m webapp.campaign serve`, forked from a warm process (tests/warm_process.py)."""
    env = {"OMP_NUM_THREADS": "1", "GRADIO_ANALYTICS_ENABLED": "False", ADMIN_PASSWORD_ENV: ADMIN_SECRET,
           AUTH_ENV: None}
    return start_module("webapp.campaign", ["serve", "--name", name, "--data-dir", str(data_dir), "--port", str(port)],
                        cwd=ROOT, log=log, env=env)


def wait_for_login(port: int, proc: WarmProcess, user: str, password: str) -> None:
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the campaign server exited"
        try:
            if _login(port, user, password)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail("the campaign server did not come up")


def rate(url: str, name: str, password: str, acked: list, lock: threading.Lock) -> None:
    """Rate the whole queue, sending each submission twice (a double click or a retry)."""
    client = Client(url, auth=(name, password), verbose=False, download_files=False)
    page = client.predict("", api_name="/campaign_item")
    while page["mode"] == "trial":
        out = client.predict("", page["entry"], answers_for(page), api_name="/campaign_submit")
        assert out["status"] == "✓ Stored.", out["status"]
        with lock:
            acked.append((name, page["entry"]))
        again = client.predict("", page["entry"], answers_for(page), api_name="/campaign_submit")
        assert again["status"].startswith("Already stored")
        page = out


def run_raters(port: int, passwords: dict, acked: list, lock: threading.Lock) -> tuple[list[threading.Thread], list]:
    errors = []

    def work(name):
        try:
            rate(f"http://127.0.0.1:{port}/", name, passwords[name], acked, lock)
        except Exception as exc:  # noqa: BLE001 - reported (or expected, once the server is killed)
            errors.append(f"{name}: {exc!r}")

    threads = [threading.Thread(target=work, args=(n,)) for n in passwords]
    for t in threads:
        t.start()
    return threads, errors


@pytest.mark.slow
def test_concurrent_raters_and_a_killed_server_lose_nothing(tmp_path):
    import time

    layout, campaign = make_campaign(tmp_path, raters_per_item=2, rater_slots=2, repeat_fraction=0.3)
    raters = RatersFile(raters_path(layout))
    passwords = {name: raters.add(name) for name in ("asha", "ben")}
    log, acked, lock = tmp_path / "server.log", [], threading.Lock()
    store = CampaignStore(layout.database, layout=design_of(campaign))

    # Two raters at once; SIGKILL (no shutdown, no checkpoint) while they are still submitting.
    port = free_port()
    proc = start_server(layout.root, campaign.name, port, log)
    try:
        wait_for_login(port, proc, "asha", passwords["asha"])
        threads, _ = run_raters(port, passwords, acked, lock)
        deadline = time.monotonic() + 120
        while len(acked) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for t in threads:
            t.join(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = list(acked)
    stored = {(r["rater"], r["entry_id"]) for r in store.rows(campaign.name)}
    assert len(killed_at) >= 3 and set(killed_at) <= stored  # every acknowledged rating survived
    assert len(stored - set(killed_at)) <= len(passwords)  # at most the one in flight per rater (stored, not acked)

    # A restarted server: both raters carry on where their queues stopped and finish.
    port = free_port()
    proc = start_server(layout.root, campaign.name, port, log)
    try:
        wait_for_login(port, proc, "asha", passwords["asha"])
        threads, errors = run_raters(port, passwords, acked, lock)
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    rows = store.rows(campaign.name)
    keys = [(r["rater"], r["entry_id"]) for r in rows]
    assert len(keys) == len(set(keys)) == sum(len(q) for q in plan_of(campaign).slots)  # each exactly once
    assert set(acked) <= set(keys) and len(set(keys) - set(acked)) <= len(passwords)
    slot = {r: s for s, r in store.slots(campaign.name).items()}
    for name in passwords:  # resumed in queue order, nothing skipped or rated twice
        mine = sorted((r for r in rows if r["rater"] == name), key=lambda r: r["submitted_at"])
        assert [r["entry_id"] for r in mine] == [e.entry_id for e in plan_of(campaign).slots[slot[name]]]


# ---------------------------------------------------------------- hostile visitors


def _login_from(port: int, source: str, user: str, password: str) -> tuple[int, list[str]]:
    """POST /login from another loopback address (Linux routes all of 127/8 to lo)."""
    import urllib.parse

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        body = urllib.parse.urlencode({"username": user, "password": password})
        conn.request("POST", "/login", body, {"Content-Type": "application/x-www-form-urlencoded"})
        resp = conn.getresponse()
        resp.read()
        return resp.status, [v for k, v in resp.getheaders() if k.lower() == "set-cookie"]
    finally:
        conn.close()


def test_a_guesser_slows_only_its_own_address_never_locks_out_and_cookies_are_lax(server):
    from webapp.access import FIRST_BACKOFF_S, FREE_FAILURES

    for _ in range(FREE_FAILURES + 1):  # the last guess waits FIRST_BACKOFF_S; the next try waits twice that
        assert _login_from(server.port, "127.0.0.9", "ben", "guess")[0] == 400
    start = time.monotonic()
    status, cookies = _login_from(server.port, "127.0.0.1", "ben", server.passwords["ben"])  # ben, elsewhere
    assert status == 200 and time.monotonic() - start < 2 * FIRST_BACKOFF_S  # not held by the guesser's waits
    assert cookies and all("samesite=lax" in c.lower() for c in cookies if "samesite" in c.lower())
    start = time.monotonic()
    assert _login_from(server.port, "127.0.0.9", "ben", server.passwords["ben"])[0] == 200  # from the guesser's
    assert time.monotonic() - start >= FIRST_BACKOFF_S  # address too, but after its wait


def test_a_reset_password_ends_the_sessions_signed_in_before():
    from webapp.campaign.data.raters import ExpiringSessions

    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    hashes, clock = {"asha": "h1"}, Clock()
    sessions = ExpiringSessions(hashes.get, max_age_s=3600, clock=clock)
    sessions["t1"] = "asha"
    assert sessions.get("t1") == "asha" and "t1" in sessions
    hashes["asha"] = "h2"  # `add-rater asha --reset-password`
    assert sessions.get("t1") is None and "t1" not in sessions
    sessions["t2"] = "asha"
    clock.now = 3601.0
    assert sessions.get("t2") is None  # too old: sign in again
    sessions["t3"] = "gone"  # a login that no longer exists never gets a session
    assert sessions.get("t3") is None


def test_a_manifest_line_cut_by_a_crash_does_not_stop_create(tmp_path):
    from webapp.campaign.data.definition import read_manifest_lines, repair_tail

    path = tmp_path / "manifest.jsonl"
    path.write_text('{"prompt_id": "p1", "condition": 0}\n{"prompt_id": "p2", "cond', encoding="utf-8")
    assert read_manifest_lines(path) == [{"prompt_id": "p1", "condition": 0}]
    repair_tail(path)
    assert path.read_text(encoding="utf-8") == '{"prompt_id": "p1", "condition": 0}\n'


def test_the_campaign_manifest_is_owner_only(server):
    assert stat.S_IMODE(server.campaign.manifest_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(server.layout.database.stat().st_mode) == 0o600
