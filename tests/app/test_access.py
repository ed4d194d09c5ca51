"""Access control without a server: the admin password gate, --auth logins, the
served folder's names and pruning, the data-dir layout check, and `app.main`'s wiring.

Run: .venv/bin/python -m pytest tests/app/test_access.py -q
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time

import numpy as np
import pytest

from webapp.access import (
    ADDRESS_FREE_FAILURES,
    ADMIN_PASSWORD_ENV,
    AUTH_ENV,
    FREE_FAILURES,
    MAX_BACKOFF_S,
    NAME_FREE_FAILURES,
    SHARED_MAX_WAIT_S,
    AccessDenied,
    AdminGate,
    GuessThrottle,
    LoginCheck,
    LoginError,
    read_logins,
    same_secret,
)
from webapp.storage import (
    DataLayout,
    ServedFolder,
    UnsafeLayoutError,
    check_not_served,
    served_roots,
)

SECRET = "correct horse battery staple"


# ---------------------------------------------------------------- admin password
def test_no_admin_password_means_open():
    gate = AdminGate()
    assert not gate.enabled and gate.allows(None) and gate.allows("anything")
    gate.require("", "Exporting")  # no error


def test_admin_password_is_required_and_compared_exactly(caplog):
    gate = AdminGate(SECRET)
    assert gate.enabled and gate.allows(SECRET)
    for wrong in (None, "", SECRET[:-1], SECRET + " ", SECRET.upper()):
        assert not gate.allows(wrong)
    with pytest.raises(AccessDenied, match="needs the admin password"):
        gate.require("", "Exporting the ratings")
    with caplog.at_level(logging.WARNING), pytest.raises(AccessDenied, match="wrong admin password") as info:
        gate.require("guess " + SECRET[:5], "Exporting the ratings")
    assert SECRET[:5] not in str(info.value) and all(SECRET[:5] not in r.getMessage() for r in caplog.records)
    assert SECRET not in repr(gate)


def test_admin_password_from_flag_then_environment():
    assert AdminGate.from_sources("from-flag-0123", {ADMIN_PASSWORD_ENV: "from-env-0123"}).allows("from-flag-0123")
    assert AdminGate.from_sources(None, {ADMIN_PASSWORD_ENV: "from-env-0123"}).allows("from-env-0123")
    assert not AdminGate.from_sources(None, {}).enabled
    assert not AdminGate.from_sources(None, {ADMIN_PASSWORD_ENV: ""}).enabled


def test_short_admin_password_warns(caplog):
    with caplog.at_level(logging.WARNING):
        AdminGate("qz7k9")
    assert "shorter than" in caplog.text and "qz7k9" not in caplog.text


def test_same_secret_handles_any_script():
    assert same_secret("पासवर्ड-ৰ", "पासवर्ड-ৰ") and not same_secret("पासवर्ड", "पासवर्ड-ৰ")
    assert not same_secret(None, "x")


# ---------------------------------------------------------------- guess throttle
class FakeClock:
    """The throttle's clock; `sleep`/`asleep` record each wait and move the clock on by it."""

    def __init__(self):
        self.now, self.waits = 1000.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


def _throttle(clock: FakeClock, **kwargs) -> GuessThrottle:
    return GuessThrottle(clock=clock, sleep=clock.sleep, asleep=clock.asleep, **kwargs)


def _fail(throttle, name="asha", address="10.0.0.1") -> bool:
    return throttle.check(name, lambda: False, address)


def _afail(throttle, name="asha", address="10.0.0.1") -> bool:
    return asyncio.run(throttle.acheck(name, lambda: False, address))


def test_a_login_waits_after_repeated_failures_the_wait_doubles_and_the_right_password_gets_in():
    clock = FakeClock()
    throttle = _throttle(clock)
    for _ in range(FREE_FAILURES - 1):
        _fail(throttle)
    assert throttle.wait_s("asha", "10.0.0.1") == 0 and clock.waits == []  # typos are free
    _fail(throttle)
    assert throttle.wait_s("asha", "10.0.0.1") == pytest.approx(1.0) and throttle.wait_s("ben", "10.0.0.1") == 0
    assert throttle.check("asha", lambda: True, "10.0.0.1")  # held 1 s, then checked: in
    assert clock.waits == [pytest.approx(1.0)] and throttle.wait_s("asha", "10.0.0.1") == 0  # and afresh
    for _ in range(FREE_FAILURES + 8):
        _afail(throttle)  # the login page's path: awaited in the event loop, up to MAX_BACKOFF_S
    assert clock.waits[1:] == [pytest.approx(w) for w in (1, 2, 4, 8, 16, 32, 60, 60)]  # doubled, capped
    assert asyncio.run(throttle.acheck("asha", lambda: True, "10.0.0.1"))  # after its wait, in
    assert clock.waits[-1] == pytest.approx(MAX_BACKOFF_S) and throttle.refused == 0


def test_a_guesser_slows_only_itself_never_the_user_elsewhere():
    clock = FakeClock()
    throttle = _throttle(clock)
    for _ in range(3 * FREE_FAILURES):
        _afail(throttle, address="6.6.6.6")
    assert throttle.wait_s("asha", "6.6.6.6") > 0
    waited = len(clock.waits)
    assert throttle.check("asha", lambda: True, "10.0.0.1") and len(clock.waits) == waited  # elsewhere: at once
    gate = AdminGate(SECRET, _throttle(clock))
    for _ in range(FREE_FAILURES):
        with pytest.raises(AccessDenied, match="wrong admin password"):
            gate.require("guess", "Exporting the ratings", "6.6.6.6")
    gate.require(SECRET, "Exporting the ratings", "10.0.0.1")  # the admin, elsewhere
    gate.require(SECRET, "Exporting the ratings", "6.6.6.6")  # and from the guesser's address, after 1 s


def test_parallel_tries_take_slots_in_turn_and_a_flood_is_refused_unchecked():
    """The race: 32 tries at once after a pause each take the next slot (counted before they
    are checked); those whose slot is more than the longest hold away are refused unchecked."""
    clock = FakeClock()
    waits: list[float] = []
    throttle = GuessThrottle(clock=clock, asleep=lambda s: waits.append(s) or asyncio.sleep(0))
    for _ in range(FREE_FAILURES):
        _fail(throttle)  # (the fifth sets a 1 s wait)
    clock.now += 1.0  # the wait is over; the clock stands still while the 32 run
    checked = []

    async def flood():
        return await asyncio.gather(*(throttle.acheck("asha", lambda: checked.append(1) or False, "10.0.0.1")
                                      for _ in range(32)))

    asyncio.run(flood())
    assert sorted(waits) == [2.0, 6.0, 14.0, 30.0]  # slots 0, 2, 6, 14, 30 s: the waits double in turn
    assert len(checked) == 5 and throttle.refused == 27  # the next slot (62 s) is past MAX_BACKOFF_S


def test_inventing_names_behind_one_address_slows_but_never_locks_out_the_admin():
    """The NAT finding: 31+ wrong passwords for invented names from one address (a campus, a
    Space's proxy) make that address's tries wait a few seconds; a right password still gets in."""
    clock = FakeClock()
    check = LoginCheck([("admin", SECRET), ("asha", "a-pass-long")], _throttle(clock))
    for k in range(ADDRESS_FREE_FAILURES + 40):
        assert not asyncio.run(_login(check, f"invented{k}", "guess", "100.64.0.1"))
    assert 0 < max(clock.waits) <= SHARED_MAX_WAIT_S
    assert asyncio.run(_login(check, "admin", SECRET, "100.64.0.1"))
    assert asyncio.run(_login(check, "asha", "a-pass-long", "100.64.0.1"))
    assert clock.waits[-1] <= SHARED_MAX_WAIT_S and check.throttle.refused == 0


async def _login(check: LoginCheck, user: str, password: str, address: str) -> bool:
    """`check.acheck` as Gradio's login route calls it, from `address` (as the guard records it)."""
    from webapp import guard

    token = guard._client.set(address)
    try:
        return await check.acheck(user, password)
    finally:
        guard._client.reset(token)


def test_guessing_one_name_from_many_addresses_adds_a_bounded_wait_for_its_user():
    clock = FakeClock()
    throttle = _throttle(clock)
    for k in range(NAME_FREE_FAILURES + 30):
        _afail(throttle, "asha", f"198.51.100.{k}")
    waited = len(clock.waits)
    assert throttle.check("asha", lambda: True, "10.0.0.1")  # the real user: slowed, then in
    assert len(clock.waits) == waited + 1 and 0 < clock.waits[-1] <= SHARED_MAX_WAIT_S


def test_the_table_forgets_the_least_recently_used_and_never_refuses_a_newcomer():
    clock = FakeClock()
    throttle = _throttle(clock, max_keys=200)
    for k in range(500):  # many addresses (a botnet), one invented name each
        _fail(throttle, f"user{k}", f"192.0.2.{k % 250}")
        clock.now += 0.01
    assert len(throttle._entries) <= 200  # memory bounded
    assert "\x00address\x00192.0.2.249" in throttle._entries and "user0\x00192.0.2.0" not in throttle._entries  # LRU
    waited = len(clock.waits)
    assert throttle.check("someone-new", lambda: True, "10.9.9.9") and len(clock.waits) == waited  # in, at once


def test_ipv6_clients_are_counted_by_their_64():
    clock = FakeClock()
    throttle = _throttle(clock)
    for k in range(FREE_FAILURES):
        _fail(throttle, "asha", f"2001:db8:1:2::{k + 1}")  # one host hopping through its /64
    assert throttle.wait_s("asha", "2001:db8:1:2:ffff::9") > 0 and throttle.wait_s("asha", "2001:db8:1:3::1") == 0


def test_logins_and_admin_form_are_throttled_per_name():
    clock = FakeClock()
    check = LoginCheck([("asha", "a-pass-long"), ("ben", "b-pass-long")], _throttle(clock))  # address ""
    for _ in range(FREE_FAILURES):
        assert not check("Asha", "guess")
    assert check("ben", "b-pass-long") and clock.waits == []  # other logins are untouched
    assert check("asha", "a-pass-long") and clock.waits == [pytest.approx(1.0)]  # waits (names fold case), gets in
    gate = AdminGate(SECRET, _throttle(clock, first_backoff_s=8.0))
    for _ in range(FREE_FAILURES):
        with pytest.raises(AccessDenied, match="wrong admin password"):
            gate.require("guess", "Exporting the ratings")
    # A wait longer than a worker thread may hold (SYNC_MAX_HOLD_S) is refused, with the time to try again.
    with pytest.raises(AccessDenied, match="too many wrong admin passwords; try again in 8 s"):
        gate.require(SECRET, "Exporting the ratings")
    clock.now += 8.0
    gate.require(SECRET, "Exporting the ratings")


def test_login_check_for_gradio_is_a_coroutine_function():
    """Gradio awaits `auth=` only when inspect says it is a coroutine function; a plain one runs
    on the event loop, where a try's wait would stall every visitor."""
    import inspect

    assert inspect.iscoroutinefunction(LoginCheck([("asha", "a-pass-long")]).acheck)


# ---------------------------------------------------------------- --auth logins
def test_logins_from_flags_file_and_environment(tmp_path):
    auth_file = tmp_path / "logins.txt"
    auth_file.write_text("# raters\npriya:p:with:colons\n\n  ben:b pass\n", encoding="utf-8")
    logins = read_logins(["asha:a-pass"], auth_file, environ={AUTH_ENV: "ravi:r-pass"})
    assert logins == [("asha", "a-pass"), ("priya", "p:with:colons"), ("ben", "b pass"), ("ravi", "r-pass")]
    assert read_logins([], None, environ={}) == []
    check = LoginCheck(logins)
    assert check("priya", "p:with:colons") and check("ben", "b pass")
    assert not check("priya", "a-pass") and not check("nobody", "a-pass") and not check("asha", "")
    assert "a-pass" not in repr(check)


@pytest.mark.parametrize(("pairs", "message"), [
    (["justapassword"], "--auth entry 1: expected USER:PASS"),
    ([":nouser"], "expected USER:PASS"),
    (["asha:"], "expected USER:PASS"),
    (["asha:one", "asha:two"], "login asha is given more than once"),
])
def test_bad_logins_say_what_to_fix_without_echoing_them(pairs, message):
    with pytest.raises(LoginError, match=message) as info:
        read_logins(pairs, None, environ={})
    assert "justapassword" not in str(info.value) and "nouser" not in str(info.value)


def test_unreadable_auth_file_is_one_message(tmp_path):
    with pytest.raises(LoginError, match="--auth-file .*missing.txt: cannot read it"):
        read_logins([], tmp_path / "missing.txt", environ={})
    with pytest.raises(LoginError, match=r"\$RUMIK_APP_AUTH line 2"):
        read_logins([], None, environ={AUTH_ENV: "a:b\nnocolon"})


# ---------------------------------------------------------------- served folder
def test_served_names_are_random_tokens_and_downloads_keep_their_names(tmp_path):
    served = ServedFolder(tmp_path / "served")
    wavs = [served.write_wav(np.zeros(240, np.float32)) for _ in range(3)]
    assert all(re.fullmatch(r"[0-9a-f]{32}\.wav", p.name) for p in wavs) and len({p.name for p in wavs}) == 3
    src = tmp_path / "private" / "ratings.csv"
    src.parent.mkdir()
    src.write_text("rater\nasha\n", encoding="utf-8")
    copy = served.copy(src)
    assert re.fullmatch(r"[0-9a-f]{32}\.csv", copy.name) and copy.read_text() == src.read_text()
    (download,) = served.publish([src])
    assert download.name == "ratings.csv" and re.fullmatch(r"[0-9a-f]{32}", download.parent.name)
    assert download.parent.parent == served.root and download.read_bytes() == src.read_bytes()
    reserved = served.reserve("scores.csv")  # a path the caller writes, in a fresh token folder
    assert reserved.name == "scores.csv" and reserved.parent.parent == served.root and not reserved.exists()
    assert reserved.parent != download.parent
    assert not any(p.name.startswith(".") for p in served.root.rglob("*"))  # no temp files left behind


def test_served_folder_keeps_the_newest_and_drops_old_entries(tmp_path):
    served = ServedFolder(tmp_path / "served", keep=3, max_age_s=60)
    paths = []
    for k in range(5):
        paths.append(served.write_wav(np.zeros(240, np.float32)))
        os.utime(paths[-1], (time.time() - 10 + k, time.time() - 10 + k))  # distinct, ordered times
    served.prune()
    assert sorted(served.root.iterdir()) == sorted(paths[2:])
    old = served.publish([paths[4]])[0].parent  # a fourth entry: the oldest clip goes
    assert served.entries() == [*paths[3:], old]
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # past max_age_s
    in_progress = served.root / ".x.wav.tmp"  # a write in progress is never pruned
    in_progress.write_bytes(b"")
    os.utime(in_progress, (0, 0))
    served.prune()
    assert not old.exists() and in_progress.exists() and served.entries() == paths[3:]


def test_default_served_folder_is_a_fresh_private_temp_folder():
    a, b = ServedFolder(), ServedFolder()
    assert a.root != b.root and a.root.is_dir() and not any(a.root.iterdir())
    root = a.root
    del a
    assert not root.exists()  # removed with its folder object (and at exit)


# ---------------------------------------------------------------- data-dir layout
def test_layout_lists_every_private_file(tmp_path):
    layout = DataLayout(tmp_path / "data")
    names = {p.name for p in layout.private_paths()}
    assert {"ratings.sqlite", "ratings.sqlite-wal", "ratings.sqlite-shm", "clips", "exports", "campaigns"} <= names
    assert layout.database.parent == layout.root == (tmp_path / "data").resolve()
    assert layout.new_export_dir().parent == layout.exports


def test_a_data_dir_inside_a_served_folder_is_refused(tmp_path, monkeypatch):
    layout = DataLayout(tmp_path / "data")
    check_not_served(layout, [tmp_path / "served", tmp_path / "gradio-tmp"])  # side by side: fine
    for roots in ([tmp_path], [tmp_path / "data"], [tmp_path / "data" / "exports" / "x"]):
        with pytest.raises(UnsafeLayoutError, match="would be downloadable"):
            check_not_served(layout, roots)
    check_not_served(layout, [tmp_path / "data" / "gradio-tmp"])  # a served folder beside the private files
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # Gradio's upload folder holds the data dir
    with pytest.raises(UnsafeLayoutError, match="GRADIO_TEMP_DIR"):
        check_not_served(layout, served_roots(ServedFolder(tmp_path / "elsewhere")))


# ---------------------------------------------------------------- app.py wiring
def test_help_never_prints_a_secret(monkeypatch, capsys):
    import webapp.main as app

    monkeypatch.setenv(ADMIN_PASSWORD_ENV, SECRET)
    with pytest.raises(SystemExit):
        app.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "--admin-password" in out and "--auth-file" in out and SECRET not in out


def test_main_wires_logins_admin_password_and_data_dir(tmp_path, monkeypatch, capsys):
    import webapp.main as app

    launched = {}
    monkeypatch.setattr(app, "launch", lambda demo, host, port, share=False, logins=None, allowed_hosts=(), **kw:
                        launched.update(demo=demo, logins=logins, **kw))
    monkeypatch.setenv(ADMIN_PASSWORD_ENV, SECRET)
    monkeypatch.delenv(AUTH_ENV, raising=False)
    app.main(["--model", str(tmp_path / "no-model"), "--data-dir", str(tmp_path / "data"), "--auth", "asha:a-pass"])
    demo = launched["demo"]
    assert launched["logins"] == [("asha", "a-pass")] and demo.admin.enabled and demo.admin.allows(SECRET)
    assert launched["forwarded_allow_ips"] == ""  # no proxy believed unless named (not uvicorn's 127.0.0.1)
    assert demo.data_layout.root == (tmp_path / "data").resolve()
    assert demo.rating_store.path == demo.data_layout.database
    out = capsys.readouterr().out
    assert "admin password required" in out and "1 login(s)" in out and SECRET not in out and "a-pass" not in out


@pytest.mark.parametrize("argv_extra", [["--auth", "nocolon"], ["--data-dir", "{gradio}/app"]])
def test_main_stops_with_one_message(argv_extra, tmp_path, monkeypatch, capsys):
    import webapp.main as app

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    argv = ["--model", str(tmp_path / "no-model"), "--data-dir", str(tmp_path / "data")]
    argv += [a.replace("{gradio}", str(tmp_path / "gradio")) for a in argv_extra]
    monkeypatch.setattr(app, "launch", lambda *a, **k: pytest.fail("launched despite the error"))
    with pytest.raises(SystemExit) as stop:
        app.main(argv)
    assert stop.value.code == 2  # a user error, as in every command line
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "Traceback" not in err
