"""Crowd mode without a server: only links the server signed let a participant in, and only
until they expire, each id starts a bounded number of times, the campaign takes a bounded
number of ids (also under concurrent starts), an address starts a bounded number of new ids
from the study link, places of failed or unfinished participants are given back after the time
limit, session tokens are bound to one campaign and one session and expire with the place, and
the completion code is given only once the queue is done.

Run: python -m pytest -n0 tests/app/test_campaign_crowd.py -q
"""

from __future__ import annotations

import json
import re
import stat
import threading
import time
from urllib.parse import parse_qsl, urlsplit

import pytest

from webapp.campaign.data.crowd import (
    BAD_LINK,
    LINK_DAYS,
    MAX_SESSIONS_PER_ID,
    PROLIFIC_COMPLETE_URL,
    CrowdError,
    CrowdLinks,
    ParticipantStore,
    completion_code,
    crowd_secret_path,
    load_crowd_secret,
    prolific_completion_url,
)
from webapp.campaign.data.crowd_gate import CrowdGate, StartLimit
from webapp.campaign.data.store import CampaignStore
from webapp.storage import DataLayout

SECRET = bytes(range(32))
PROLIFIC_ID = "5f8a1b2c3d4e5f6a7b8c9d0e"  # 24 hex, as Prolific's
MTURK_ID = "A1B2C3D4E5F6G7"
BASE = "https://rate.example.org/crowd/pilot"


def query(link: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(link).query))


@pytest.fixture()
def links() -> CrowdLinks:
    return CrowdLinks(SECRET, "pilot")


@pytest.fixture()
def store(tmp_path) -> ParticipantStore:
    return ParticipantStore(tmp_path / "ratings.sqlite")


def refused():
    """Refused with the one message every bad link or token gets (it does not say what was wrong)."""
    return pytest.raises(CrowdError, match=re.escape(BAD_LINK))


# ---------------------------------------------------------------- links
@pytest.mark.parametrize("pid", [PROLIFIC_ID, MTURK_ID])
def test_a_signed_participant_link_admits_exactly_its_id(links, pid):
    link = links.participant_link(BASE, pid)
    q = query(link)
    assert link.startswith(BASE + "?PROLIFIC_PID=") and q["PROLIFIC_PID"] == pid
    assert re.fullmatch(r"[0-9a-f]{32}", q["sig"])
    assert links.verify(q["PROLIFIC_PID"], sig=q["sig"], expires=q["expires"]) == pid
    with refused():  # the same signature for another id
        links.verify("A9Z9Z9Z9Z9Z9Z9", sig=q["sig"], expires=q["expires"])
    with refused():  # or with another expiry: the expiry is signed with the id
        links.verify(pid, sig=q["sig"], expires=str(int(q["expires"]) + 86400))


def test_forged_or_foreign_signatures_are_refused(links):
    q = query(links.participant_link(BASE, MTURK_ID))
    sig, expires = q["sig"], q["expires"]
    flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
    for bad in [flipped, sig.upper(), sig[:-1], sig + "0", "", "x" * 10_000, None, ["a"], 7]:
        with pytest.raises(CrowdError) as err:
            links.verify(MTURK_ID, sig=bad, expires=expires) if bad is not None else links.verify(MTURK_ID)
        assert str(err.value) == BAD_LINK and err.value.reason == "link"
    for bad_expiry in [None, "", "0" + expires, "1e12", "9" * 13, "-1", 12345, expires + "\n"]:
        with refused():
            links.verify(MTURK_ID, sig=sig, expires=bad_expiry)
    other_campaign = CrowdLinks(SECRET, "other")
    with refused():
        other_campaign.verify(MTURK_ID, sig=sig, expires=expires)
    other_server = CrowdLinks(bytes(32), "pilot")
    with refused():
        other_server.verify(MTURK_ID, sig=sig, expires=expires)


def test_links_expire(links):
    """A genuine link is refused once its (signed) expiry has passed, with its own message."""
    q = query(links.participant_link(BASE, MTURK_ID, expires_at=2_000_000_000))
    assert links.verify(MTURK_ID, sig=q["sig"], expires=q["expires"], now=1_999_999_999) == MTURK_ID
    with pytest.raises(CrowdError, match="expired") as err:
        links.verify(MTURK_ID, sig=q["sig"], expires=q["expires"], now=2_000_000_000)
    assert err.value.reason == "expired"
    study = query(links.study_link(BASE, expires_at=2_000_000_000))
    assert links.verify(PROLIFIC_ID, study=study["study"], expires=study["expires"], now=1.9e9) == PROLIFIC_ID
    with pytest.raises(CrowdError, match="expired"):
        links.verify(PROLIFIC_ID, study=study["study"], expires=study["expires"], now=2.1e9)
    default = int(query(links.participant_link(BASE, MTURK_ID))["expires"])  # LINK_DAYS from now
    assert abs(default - (time.time() + LINK_DAYS * 86400)) < 60


@pytest.mark.parametrize("pid", ["", "a" * 65, "a b", "a/b", "ä" * 3, "x\n", "<script>", None, 12])
def test_participant_ids_are_checked_before_any_work(links, pid):
    with refused():
        links.verify(pid, sig="0" * 32)
    with pytest.raises(CrowdError):
        links.participant_link(BASE, pid)


def test_the_study_link_carries_prolific_placeholders_and_admits_only_prolific_shaped_ids(links):
    link = links.study_link(BASE)
    assert "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}&expires=" in link
    token, expires = query(link)["study"], query(link)["expires"]
    assert links.verify(PROLIFIC_ID, study=token, expires=expires) == PROLIFIC_ID
    for pid in [MTURK_ID, PROLIFIC_ID[:-1], PROLIFIC_ID + "0", "g" * 24, "{{%PROLIFIC_PID%}}"]:
        with refused():
            links.verify(pid, study=token, expires=expires)
    with refused():
        CrowdLinks(SECRET, "other").verify(PROLIFIC_ID, study=token, expires=expires)
    with refused():
        links.verify(PROLIFIC_ID, study=token[:-1] + ("0" if token[-1] != "0" else "1"), expires=expires)
    with refused():
        links.verify(PROLIFIC_ID, study=token, expires=str(int(expires) + 1))
    with refused():  # a participant link's signature is not a study token, nor the other way round
        links.verify(PROLIFIC_ID, sig=token, expires=expires)


def test_links_keep_an_existing_query_and_fragment(links):
    link = links.participant_link("https://h/crowd?campaign=pilot#top", MTURK_ID)
    assert link.startswith("https://h/crowd?campaign=pilot&PROLIFIC_PID=") and link.endswith("#top")


# ---------------------------------------------------------------- session tokens and rater names
def test_session_tokens_are_bound_to_campaign_id_and_session(links):
    token = links.session_token(MTURK_ID, 2)
    assert links.verify_token(token) == (MTURK_ID, 2)
    pid, n, mac = token.split(".")
    tampered = [f"{pid}.1.{mac}", f"A9Z9Z9Z9Z9Z9Z9.{n}.{mac}", f"{pid}.{n}.{mac[:-1]}0" if mac[-1] != "0"
                else f"{pid}.{n}.{mac[:-1]}1", f"{pid}.0{n}.{mac}", f"{pid}.{n}.{mac}.x", token + "0", "", None,
                "a" * 5000, f"{pid}.{n}"]
    for bad in tampered:
        with refused():
            links.verify_token(bad)
    with refused():  # a token from campaign "pilot" is worthless in campaign "other"
        CrowdLinks(SECRET, "other").verify_token(token)


def test_rater_names_hide_the_participant_id(links):
    name = links.rater_name(PROLIFIC_ID)
    assert re.fullmatch(r"crowd-[0-9a-f]{12}", name) and PROLIFIC_ID[:6] not in name
    assert name == links.rater_name(PROLIFIC_ID) != links.rater_name(MTURK_ID)
    assert CrowdLinks(SECRET, "other").rater_name(PROLIFIC_ID) != name


# ---------------------------------------------------------------- the secret file
def test_the_secret_is_created_once_private_and_reused(tmp_path):
    layout = DataLayout(tmp_path / "data")
    path = crowd_secret_path(layout)
    assert path.parent == layout.campaigns and layout.campaigns in layout.private_paths()
    first = load_crowd_secret(path)
    assert len(first) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}\n", path.read_text())
    assert load_crowd_secret(path) == first
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp files left
    q = query(CrowdLinks.for_layout(layout, "pilot").participant_link(BASE, MTURK_ID))
    assert CrowdLinks(first, "pilot").verify(MTURK_ID, sig=q["sig"], expires=q["expires"]) == MTURK_ID


def test_concurrent_first_use_agrees_on_one_secret(tmp_path):
    path = tmp_path / "campaigns" / "crowd_secret"
    results, barrier = [], threading.Barrier(8)

    def load():
        barrier.wait()
        results.append(load_crowd_secret(path))

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and len(set(results)) == 1
    assert [p.name for p in path.parent.iterdir()] == ["crowd_secret"]


def test_a_damaged_secret_names_the_fix(tmp_path):
    path = tmp_path / "crowd_secret"
    path.write_text("not hex")
    with pytest.raises(CrowdError, match="delete it"):
        load_crowd_secret(path)


# ---------------------------------------------------------------- bounds
def test_an_id_starts_at_most_max_sessions_times(store):
    assert [store.start("pilot", MTURK_ID, 10) for _ in range(MAX_SESSIONS_PER_ID)] == [1, 2]
    with pytest.raises(CrowdError, match="used already") as err:
        store.start("pilot", MTURK_ID, 10)
    assert err.value.reason == "used"
    assert store.start("other", MTURK_ID, 10) == 1  # campaigns are counted apart
    assert store.participants("pilot")[0]["sessions"] == 2


def test_a_finished_id_cannot_start_again(store):
    store.start("pilot", MTURK_ID, 10, max_sessions=5)
    assert store.complete("pilot", MTURK_ID, "CODE1234") == "CODE1234"
    assert store.complete("pilot", MTURK_ID, "OTHER999") == "CODE1234"  # idempotent: the first code stays
    with pytest.raises(CrowdError, match="finished") as err:
        store.start("pilot", MTURK_ID, 10, max_sessions=5)
    assert err.value.reason == "finished"
    with pytest.raises(CrowdError):
        store.complete("pilot", "never-started", "CODE1234")


def test_a_full_campaign_refuses_new_ids_but_not_known_ones(store):
    assert store.start("pilot", "p1", 2) == 1 and store.start("pilot", "p2", 2) == 1
    with pytest.raises(CrowdError, match="full") as err:
        store.start("pilot", "p3", 2)
    assert err.value.reason == "full"
    assert store.start("pilot", "p1", 2) == 2  # a reload of someone already in
    assert [p["participant_id"] for p in store.participants("pilot")] == ["p1", "p2"]


def test_prolific_ids_are_recorded_when_id_shaped(store):
    store.start("pilot", PROLIFIC_ID, 5, rater="crowd-abc", study_id="60aa" * 6, session_id="{{%SESSION_ID%}}")
    (row,) = store.participants("pilot")
    assert row["rater"] == "crowd-abc" and row["study_id"] == "60aa" * 6 and row["session_id"] is None
    assert row["started_at"] and row["completed_at"] is None


def test_concurrent_starts_of_one_new_id_get_distinct_sessions_within_bounds(store):
    n_threads, max_sessions = 6, 3
    got, errors, barrier = [], [], threading.Barrier(n_threads)

    def start():
        barrier.wait()
        try:
            got.append(store.start("pilot", MTURK_ID, 1, max_sessions))
        except CrowdError as exc:
            errors.append(exc.reason)

    threads = [threading.Thread(target=start) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == [1, 2, 3] and errors == ["used"] * (n_threads - max_sessions)
    assert store.participants("pilot")[0]["sessions"] == max_sessions


def test_concurrent_new_ids_never_exceed_max_participants(store):
    n_threads, cap = 8, 3
    got, errors, barrier = [], [], threading.Barrier(n_threads)

    def start(k: int):
        barrier.wait()
        try:
            got.append(store.start("pilot", f"worker{k}", cap))
        except CrowdError as exc:
            errors.append(exc.reason)

    threads = [threading.Thread(target=start, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [1] * cap and errors == ["full"] * (n_threads - cap)
    assert len(store.participants("pilot")) == cap


def test_the_participants_table_shares_the_ratings_database(tmp_path):
    db = tmp_path / "ratings.sqlite"
    CampaignStore(db).claim_slot("pilot", "asha", 2)
    ParticipantStore(db).start("pilot", MTURK_ID, 2)
    assert CampaignStore(db).slots("pilot") == {0: "asha"} and len(ParticipantStore(db).participants("pilot")) == 1
    assert stat.S_IMODE(db.stat().st_mode) == 0o600


# ---------------------------------------------------------------- completion codes
def test_a_generated_completion_code_is_made_once_per_campaign(tmp_path):
    folder = tmp_path / "campaigns" / "pilot"
    code = completion_code(folder)
    assert re.fullmatch(r"[A-Z0-9]{8}", code) and completion_code(folder) == code
    assert json.loads((folder / "crowd.json").read_text())["completion_code"] == code
    other = completion_code(tmp_path / "campaigns" / "other")  # each campaign its own code and file
    assert re.fullmatch(r"[A-Z0-9]{8}", other) and completion_code(folder) == code


def test_a_configured_completion_code_is_checked_and_kept(tmp_path):
    folder = tmp_path / "pilot"
    assert completion_code(folder, configured="C1A2B3C4") == "C1A2B3C4"
    assert completion_code(folder) == "C1A2B3C4"  # later runs without --completion-code keep it
    for bad in ["abc12345", "AB1", "A" * 33, "AB-123", "AB 123"]:
        with pytest.raises(CrowdError, match="4-32 capital letters"):
            completion_code(folder, configured=bad)
    assert prolific_completion_url("C1A2B3C4") == f"{PROLIFIC_COMPLETE_URL}?cc=C1A2B3C4"
    assert PROLIFIC_COMPLETE_URL == "https://app.prolific.com/submissions/complete"


# ---------------------------------------------------------------- the gate
def gate_for(tmp_path, links: CrowdLinks, max_participants: int = 3) -> CrowdGate:
    return CrowdGate(links, ParticipantStore(tmp_path / "ratings.sqlite"), max_participants, "K7M2Q9XH")


def test_the_gate_admits_a_signed_link_and_gives_the_code_only_when_the_queue_is_done(tmp_path, links):
    gate = gate_for(tmp_path, links)
    session = gate.enter(query(links.participant_link(BASE, MTURK_ID)))
    assert session.session_no == 1 and session.rater == links.rater_name(MTURK_ID)
    assert gate.resume(session.token) == session
    with pytest.raises(CrowdError, match="2 items are left") as err:
        gate.finish(session.token, remaining=2)
    assert err.value.reason == "unfinished"
    assert gate.store.participants("pilot")[0]["completed_at"] is None
    assert gate.finish(session.token, remaining=0) == "K7M2Q9XH"
    assert gate.resume(session.token).completion_code == "K7M2Q9XH"  # a reload of the last page
    with pytest.raises(CrowdError) as err:  # the link cannot start the test again
        gate.enter(query(links.participant_link(BASE, MTURK_ID)))
    assert err.value.reason == "finished"


def test_the_gate_refuses_forged_reused_and_foreign_entries(tmp_path, links):
    gate = gate_for(tmp_path, links)
    q = query(links.participant_link(BASE, MTURK_ID))
    with refused():
        gate.enter({**q, "PROLIFIC_PID": "A9Z9Z9Z9Z9Z9Z9"})
    with refused():
        gate.enter({"PROLIFIC_PID": MTURK_ID})
    first = gate.enter(q)
    second = gate.enter(q)  # a reload
    with pytest.raises(CrowdError) as err:
        gate.resume(first.token)  # the older tab is superseded
    assert err.value.reason == "superseded"
    assert gate.resume(second.token).session_no == 2
    with pytest.raises(CrowdError) as err:
        gate.enter(q)
    assert err.value.reason == "used"
    other = gate_for(tmp_path, CrowdLinks(SECRET, "other"))
    with refused():
        other.resume(second.token)
    with refused():
        other.enter(q)


def test_the_gate_admits_any_prolific_id_through_the_study_link_within_bounds(tmp_path, links):
    gate = gate_for(tmp_path, links, max_participants=2)
    study = query(links.study_link(BASE))
    token, expires = study["study"], study["expires"]
    ids = [f"{k:024x}" for k in range(3)]
    for k, pid in enumerate(ids[:2]):
        s = gate.enter({"PROLIFIC_PID": pid, "STUDY_ID": "a" * 24, "SESSION_ID": "b" * 24, "study": token,
                        "expires": expires}, address=f"198.51.100.{k}")
        assert s.participant_id == pid
    with pytest.raises(CrowdError) as err:
        gate.enter({"PROLIFIC_PID": ids[2], "study": token, "expires": expires}, address="198.51.100.9")
    assert err.value.reason == "full"
    with refused():
        gate.enter({"PROLIFIC_PID": MTURK_ID, "study": token, "expires": expires})


# ---------------------------------------------------------------- places: per-address starts, reclaimed places
def test_study_starts_are_counted_per_address_in_a_window():
    now = [0.0]
    limit = StartLimit(per_address=2, window_s=3600, clock=lambda: now[0])
    limit.take("198.51.100.1")
    limit.take("198.51.100.1")
    with pytest.raises(CrowdError, match="network address") as err:
        limit.take("198.51.100.1")
    assert err.value.reason == "busy"
    limit.take("198.51.100.2")  # another address has its own share
    now[0] = 3600.0  # the window has passed
    limit.take("198.51.100.1")


def test_the_gate_counts_only_new_study_ids_against_the_address(tmp_path, links):
    gate = CrowdGate(links, ParticipantStore(tmp_path / "ratings.sqlite"), 5, "K7M2Q9XH",
                     starts=StartLimit(per_address=1))
    study = query(links.study_link(BASE))
    gate.enter({**study, "PROLIFIC_PID": PROLIFIC_ID}, address="198.51.100.1")
    gate.enter({**study, "PROLIFIC_PID": PROLIFIC_ID}, address="198.51.100.1")  # a reload: no new id
    with pytest.raises(CrowdError) as err:
        gate.enter({**study, "PROLIFIC_PID": "0" * 24}, address="198.51.100.1")
    assert err.value.reason == "busy"
    for k in range(2):  # signed participant links admit one id each: not counted
        gate.enter(query(links.participant_link(BASE, f"worker{k}")), address="198.51.100.1")


def test_late_and_failed_places_are_given_back_with_their_slots(tmp_path, links):
    db = tmp_path / "ratings.sqlite"
    now = [time.time()]
    campaigns = CampaignStore(db)
    gate = CrowdGate(links, ParticipantStore(db), 2, "K7M2Q9XH", campaign_store=campaigns, time_limit_s=600,
                     clock=lambda: now[0])
    late, deaf = (gate.enter(query(links.participant_link(BASE, pid))) for pid in ("late01", "deaf01"))
    for session in (late, deaf):
        campaigns.claim_slot("pilot", session.rater, 2)
    with pytest.raises(CrowdError) as err:
        gate.enter(query(links.participant_link(BASE, "real01")))
    assert err.value.reason == "full"
    campaigns.record_qualification("pilot", deaf.rater, False, ["000"])
    assert gate.reclaim() == ["deaf01"] and campaigns.slots("pilot") == {0: late.rater}
    real = gate.enter(query(links.participant_link(BASE, "real01")))
    assert gate.resume(late.token).participant_id == "late01"
    now[0] += 601  # past the time limit, unfinished: the session ends and the place goes back
    with pytest.raises(CrowdError, match="ran out") as err:
        gate.resume(late.token)
    assert err.value.reason == "released" and campaigns.slots("pilot") == {}
    with pytest.raises(CrowdError) as err:  # a released id cannot start again
        gate.enter(query(links.participant_link(BASE, "late01")))
    assert err.value.reason == "released"
    rows = {p["participant_id"]: p for p in gate.store.participants("pilot")}
    assert rows["late01"]["release_reason"] == "timed out" and rows["deaf01"]["release_reason"] == "hearing check"
    assert rows["real01"]["released_at"] is not None  # real01 started before the clock moved too
    with pytest.raises(CrowdError, match="ran out"):
        gate.resume(real.token)
    gate.enter(query(links.participant_link(BASE, "next01")))  # both places free again


def test_a_finished_participant_keeps_the_place_and_the_code(tmp_path, links):
    now = [time.time()]
    gate = CrowdGate(links, ParticipantStore(tmp_path / "ratings.sqlite"), 1, "K7M2Q9XH", time_limit_s=600,
                     clock=lambda: now[0])
    session = gate.enter(query(links.participant_link(BASE, MTURK_ID)))
    assert gate.finish(session.token, remaining=0) == "K7M2Q9XH"
    now[0] += 10_000
    assert gate.reclaim() == [] and gate.resume(session.token).completion_code == "K7M2Q9XH"
    with pytest.raises(CrowdError) as err:
        gate.enter(query(links.participant_link(BASE, "worker9")))
    assert err.value.reason == "full"
