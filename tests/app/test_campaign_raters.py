"""Rater logins, slots and queues without a server: the raters file holds scrypt hashes only
and survives concurrent writers; each rater reaches only their own queue; a submission is
stored once, in one transaction, and only by the entry's own rater.

Run: .venv/bin/python -m pytest tests/app/test_campaign_raters.py -q
"""

from __future__ import annotations

import asyncio
import inspect
import multiprocessing
import re
import stat
import threading

import pytest

from tests.app.campaign_fixtures import make_campaign, pair_answers
from webapp.access import FREE_FAILURES, SYNC_MAX_HOLD_S, AccessDenied, AdminGate, GuessThrottle, throttled_auth
from webapp.campaign import cli
from webapp.campaign.data.definition import raters_path
from webapp.campaign.data.raters import (
    CampaignLogin,
    RaterError,
    RatersFile,
    check_password,
    hash_password,
)
from webapp.campaign.data.store import CampaignStore, NotYourItem
from webapp.campaign.designs import design_of
from webapp.campaign.queues import RaterQueues
from webapp.common import UserError
from webapp.storage import ServedFolder, without_random_chunk

ADMIN_SECRET = "a-long-admin-secret-0123"


# ---------------------------------------------------------------- the raters file
def test_passwords_are_stored_as_salted_scrypt_hashes_only(tmp_path):
    raters = RatersFile(tmp_path / "raters.json")
    pw = raters.add("asha")
    assert re.fullmatch(r"[A-Za-z0-9_-]{16}", pw)
    text = raters.path.read_text()
    assert pw not in text and "scrypt$16384$8$1$" in text
    assert stat.S_IMODE(raters.path.stat().st_mode) == 0o600
    assert raters.verify("asha", pw) and not raters.verify("asha", pw[:-1]) and not raters.verify("ben", pw)
    # The same password hashes differently for every rater (per-user salt).
    assert hash_password("same") != hash_password("same") and check_password("same", hash_password("same"))
    assert not check_password("x", "md5$abc") and not check_password("x", "garbage")


def test_add_reset_and_bad_names(tmp_path):
    raters = RatersFile(tmp_path / "raters.json")
    old = raters.add("asha")
    with pytest.raises(RaterError, match="exists already"):
        raters.add("asha")
    new = raters.add("asha", reset=True)
    assert raters.verify("asha", new) and not raters.verify("asha", old)
    for bad in ("admin", "Admin", "", "a b", "../x", "x" * 41):
        with pytest.raises(RaterError):
            raters.add(bad)
    raters.path.write_text("{not json")
    with pytest.raises(RaterError, match="unreadable"):
        raters.names()
    assert not raters.verify("asha", new)  # a broken file lets nobody in


def _add_many(path: str, names: list[str], out) -> None:
    raters = RatersFile(path)
    out.put({n: raters.add(n) for n in names})


def test_concurrent_add_rater_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "raters.json")
    ctx = multiprocessing.get_context("fork")  # children share the imports: quick
    out = ctx.Queue()
    procs = [ctx.Process(target=_add_many, args=(path, [f"r{p}_{k}" for k in range(3)], out)) for p in range(4)]
    for p in procs:
        p.start()
    passwords = {}
    for _ in procs:
        passwords.update(out.get(timeout=120))
    for p in procs:
        p.join(timeout=60)
    raters = RatersFile(path)
    assert raters.names() == sorted(passwords) and len(passwords) == 12
    assert all(raters.verify(n, pw) for n, pw in passwords.items())
    assert not list(tmp_path.glob(".raters.json.*"))  # no temp files left


def test_campaign_login_roles(tmp_path):
    raters = RatersFile(tmp_path / "raters.json")
    pw = raters.add("asha")
    login = CampaignLogin(raters, AdminGate(ADMIN_SECRET))
    assert login("asha", pw) and login("admin", ADMIN_SECRET)
    assert not login("asha", ADMIN_SECRET) and not login("admin", pw) and not login("nobody", pw)
    open_login = CampaignLogin(raters, AdminGate())  # no admin password: no admin login at all
    assert not open_login("admin", "") and not open_login("admin", "anything") and open_login("asha", pw)
    assert ADMIN_SECRET not in repr(login) and pw not in repr(login)


def test_campaign_login_holds_guessing_without_hashing_and_then_lets_the_right_password_in(tmp_path, monkeypatch):
    raters = RatersFile(tmp_path / "raters.json")
    pw = raters.add("asha")
    waits = []

    async def asleep(seconds):  # records the event loop's waits instead of sleeping them
        waits.append(seconds)

    # A first wait longer than a worker thread may hold: the synchronous check refuses that try.
    throttle = GuessThrottle(first_backoff_s=2 * SYNC_MAX_HOLD_S, asleep=asleep)
    login = CampaignLogin(raters, AdminGate(ADMIN_SECRET), throttle)
    for _ in range(FREE_FAILURES):
        assert not login("asha", "guess")
    hashed = []
    monkeypatch.setattr(raters, "verify", lambda *a: hashed.append(a) or True)
    assert not login("asha", pw) and hashed == []  # refused unchecked: before any scrypt work
    monkeypatch.undo()
    assert login("admin", ADMIN_SECRET)  # the wait is per name
    # Gradio's path waits in the event loop instead: the right password gets in after its wait.
    assert asyncio.run(throttled_auth(throttle, login.acheck)("asha", pw)) is True
    assert waits and waits[0] > SYNC_MAX_HOLD_S


def test_campaign_login_has_an_async_form_for_gradio(tmp_path):
    raters = RatersFile(tmp_path / "raters.json")
    pw = raters.add("asha")
    login = CampaignLogin(raters, AdminGate(ADMIN_SECRET))
    # Gradio awaits auth only when inspect says it is a coroutine function; a plain callable's
    # coroutine object would be truthy and let anyone in.
    assert inspect.iscoroutinefunction(login.acheck)
    assert asyncio.run(login.acheck("asha", pw)) is True
    assert asyncio.run(login.acheck("asha", "guess")) is False


# ---------------------------------------------------------------- slots and queues
def test_slots_are_claimed_once_each_even_at_the_same_time(tmp_path):
    layout, campaign = make_campaign(tmp_path, rater_slots=4)
    store = CampaignStore(layout.database)
    got, barrier = {}, threading.Barrier(6)

    def claim(name):
        barrier.wait()
        got[name] = store.claim_slot(campaign.name, name, 4)

    threads = [threading.Thread(target=claim, args=(f"r{k}",)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    slots = [s for s in got.values() if s is not None]
    assert sorted(slots) == [0, 1, 2, 3] and list(got.values()).count(None) == 2
    assert store.claim_slot(campaign.name, "r0", 4) == got["r0"]  # the same slot on every sign-in
    assert store.slots(campaign.name) == {s: r for r, s in got.items() if s is not None}


def test_a_rater_reaches_only_their_own_queue(tmp_path):
    layout, campaign = make_campaign(tmp_path, raters_per_item=1, rater_slots=2)
    store, served = CampaignStore(layout.database), ServedFolder(tmp_path / "served")
    queues = RaterQueues(campaign, store, served)
    asha, ben = queues.next_trial("asha"), queues.next_trial("ben")
    assert queues.plan.slots[queues.slot_for("asha")][0].entry_id == asha.entry_id != ben.entry_id
    # Clips are copies under random names in the served folder, with the private clips' bytes.
    assert len(asha.clips) == 2 and asha.reference is None
    for path in asha.clips:
        assert path.parent == served.root and re.fullmatch(r"[0-9a-f]{32}\.wav", path.name)
    private = campaign.clip_file(queues.clips[asha.trial.stimuli[0]])
    assert without_random_chunk(asha.clips[0].read_bytes()) == private.read_bytes()
    again = served.copy(private)  # the same clip served twice (a repeated item): different bytes, same audio
    assert again.read_bytes() != asha.clips[0].read_bytes()
    assert without_random_chunk(again.read_bytes()) == private.read_bytes()
    # Another rater's entry, an unknown id, the admin: refused, the same way.
    for who, entry_id in (("asha", ben.entry_id), ("asha", "0" * 24), ("ben", asha.entry_id)):
        with pytest.raises(AccessDenied, match="not in your queue"):
            queues.submit(who, entry_id, pair_answers(queues, asha.entry_id))
    with pytest.raises(AccessDenied, match="admin login has no rating queue"):
        queues.next_trial("admin")
    # The store checks ownership itself too (inside the submission's transaction).
    rows = queues.design.rows(ben.trial, {"score": [3, 3], "preference": "A", "heard": [None] * 2,
                                          "where": [None] * 2}, queues.clips)
    with pytest.raises(NotYourItem):
        store.submit(campaign.name, ben.trial, "asha", rows)
    assert store.rows(campaign.name) == []


def test_submissions_are_idempotent_checked_and_resume_where_left(tmp_path):
    layout, campaign = make_campaign(tmp_path, raters_per_item=2, rater_slots=2, repeat_fraction=0.5)
    store = CampaignStore(layout.database, layout=design_of(campaign))
    queues = RaterQueues(campaign, store, ServedFolder(tmp_path / "served"))
    total = len(queues.queue("asha"))
    item = queues.next_trial("asha")
    with pytest.raises(UserError, match="expression score"):
        queues.submit("asha", item.entry_id, pair_answers(queues, item.entry_id, a=0, b=3))
    with pytest.raises(UserError, match="preference"):
        queues.submit("asha", item.entry_id, pair_answers(queues, item.entry_id, "left", 3, 3))
    assert queues.submit("asha", item.entry_id, pair_answers(queues, item.entry_id))
    assert not queues.submit("asha", item.entry_id, pair_answers(queues, item.entry_id, "B"))  # a double click
    rows = store.rows(campaign.name)
    assert len(rows) == 1 and rows[0]["preference"] == "A" and rows[0]["seconds"] >= 0
    # A fresh RaterQueues (a restarted server) continues at the next item.
    again = RaterQueues(campaign, CampaignStore(layout.database), ServedFolder(tmp_path / "served2"))
    nxt = again.next_trial("asha")
    assert nxt.entry_id == again.queue("asha")[1].entry_id and (nxt.done, nxt.total) == (1, total)
    # The NoVA question: required for a tagged prompt, dropped for an untagged one.
    tagged = next(e for e in again.queue("asha") if e.prompt_id == "p_tag")
    with pytest.raises(UserError, match="laugh, chuckle or sigh"):
        again.submit("asha", tagged.entry_id, {"score": [3, 3], "preference": "B"})
    with pytest.raises(UserError, match="click the word"):
        again.submit("asha", tagged.entry_id, pair_answers(again, tagged.entry_id, "B", 3, 3,
                                                           ("laugh", 99, "none", None)))
    plain = next(e for e in again.queue("asha") if e.prompt_id != "p_tag" and e.entry_id != item.entry_id)
    sent = {"score": [3, 3], "preference": "none", "heard": ["laugh", "sigh"], "where": [2, 1]}
    assert again.submit("asha", plain.entry_id, sent)
    stored = next(r for r in store.rows(campaign.name) if r["entry_id"] == plain.entry_id)
    assert (stored["heard_a"], stored["where_a"], stored["preferred_condition"]) == (None, None, None)


def test_the_admin_sees_every_slot(tmp_path):
    layout, campaign = make_campaign(tmp_path, raters_per_item=1, rater_slots=3)
    queues = RaterQueues(campaign, CampaignStore(layout.database), ServedFolder(tmp_path / "served"))
    item = queues.next_trial("asha")
    queues.submit("asha", item.entry_id, pair_answers(queues, item.entry_id))
    progress = queues.progress()
    assert [(p["slot"], p["rater"], p["done"]) for p in progress] == [(0, "asha", 1), (1, None, 0), (2, None, 0)]
    assert sum(p["total"] for p in progress) == sum(len(q) for q in queues.plan.slots)


# ---------------------------------------------------------------- removing a rater
def test_a_removed_rater_frees_their_slot_and_their_session_ends(tmp_path):
    layout, campaign = make_campaign(tmp_path, raters_per_item=1, rater_slots=1, repeat_fraction=0.5)
    raters, store = RatersFile(raters_path(layout)), CampaignStore(layout.database, layout=design_of(campaign))
    raters.add("asha")
    raters.add("ben")
    queues = RaterQueues(campaign, store, ServedFolder(tmp_path / "served"), has_login=raters.has)
    first = queues.next_trial("asha")
    queues.submit("asha", first.entry_id, pair_answers(queues, first.entry_id))
    with pytest.raises(UserError, match="slot"):
        queues.next_trial("ben")  # the one slot is asha's
    assert raters.remove("asha") and not raters.has("asha") and not raters.remove("asha")
    with pytest.raises(AccessDenied, match="login was removed"):
        queues.next_trial("asha")  # a session signed in before the removal
    assert store.release_slots("asha") == [{"campaign": campaign.name, "slot": 0, "ratings": 1}]
    # ben takes the slot over and continues where asha stopped; her rating stays hers.
    nxt = queues.next_trial("ben")
    assert (nxt.done, nxt.entry_id) == (1, queues.queue("ben")[1].entry_id)
    assert [(r["rater"], r["entry_id"]) for r in store.rows(campaign.name)] == [("asha", first.entry_id)]
    with pytest.raises(AccessDenied, match="login was removed"):
        queues.next_trial("asha")  # and cannot claim the slot back


def test_remove_rater_with_dropped_ratings_restarts_the_queue(tmp_path, capsys):
    layout, campaign = make_campaign(tmp_path, raters_per_item=1, rater_slots=2)
    data = str(layout.root)
    assert cli.main(["add-rater", "asha", "--campaign", campaign.name, "--data-dir", data]) == 0
    queues = RaterQueues(campaign, CampaignStore(layout.database), ServedFolder(tmp_path / "served"))
    for _ in range(2):
        item = queues.next_trial("asha")
        queues.submit("asha", item.entry_id, pair_answers(queues, item.entry_id))
    capsys.readouterr()
    assert cli.main(["remove-rater", "asha", "--drop-ratings", "--data-dir", data]) == 0
    out = capsys.readouterr().out
    assert "login removed" in out and f"campaign {campaign.name}: slot 0 is free (2 rating(s) deleted" in out
    assert queues.store.rows(campaign.name) == [] and queues.store.slots(campaign.name) == {}
    assert queues.next_trial("ravi").done == 0  # the next holder rates the whole queue
    assert cli.main(["remove-rater", "nobody", "--data-dir", data]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No rater 'nobody'") and err.count("\n") == 1


def test_repeat_consistency_counts_only_a_raters_own_first_hearing(tmp_path):
    from webapp.campaign.reports import results_for

    layout, campaign = make_campaign(tmp_path, raters_per_item=1, rater_slots=1, repeat_fraction=0.5)
    store = CampaignStore(layout.database)
    queues = RaterQueues(campaign, store, ServedFolder(tmp_path / "served"))
    queue = queues.queue("asha")
    originals = [e for e in queue if e.repeat_of is None]
    for entry in originals:  # asha hears every pair once, then leaves
        queues.submit("asha", entry.entry_id, pair_answers(queues, entry.entry_id))
    store.release_slots("asha")
    for entry in (e for e in queue if e.repeat_of is not None):  # ben hears the repeats
        queues.submit("ben", entry.entry_id, pair_answers(queues, entry.entry_id))
    stats = {r.rater: r for r in results_for(campaign, store).raters}
    assert stats["ben"].repeats == 0 and stats["asha"].repeats == 0
