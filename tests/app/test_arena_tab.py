"""The arena as visitors use it (`rumik arena serve`, webapp.arena_app and webapp.arena_tab), through
its API with gradio_client: battles on a typed text, must-play, a vote and its reveal, one vote per
battle, a fast voter screened, the leaderboard and its pictures; nothing about a system leaks before
the vote; a system that cannot answer is skipped and counted while the arena keeps serving.

Systems: espeak-ng, the tiny checkpoint and a dead OpenAI-speech server (connection refused).
The arena's clock is the test's, so "voted before the clips could play" needs no waiting.

Run: .venv/bin/python -m pytest -n0 tests/app/test_arena_tab.py -q
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import soundfile as sf

from tests.app.conftest import ARTIFACTS, free_port, wait_until_up
from tests.app.test_browser import _errors_shown, _wait, driver  # noqa: F401 - driver: the Chromium fixture

pytestmark = pytest.mark.slow

DEAD = "openai:http://127.0.0.1:9/v1;model=gone;voice=nobody;timeout=5"
TEXT = "The weather is lovely today, let us go for a walk."


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def arena_app(tiny_checkpoint, tmp_path_factory):
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from webapp.arena_app import build_arena_app
    from webapp.main import launch

    clock = Clock()
    demo = build_arena_app(["espeak", "tiny", DEAD], tmp_path_factory.mktemp("arena"), max_seconds=2.0, clock=clock,
                           seed=0)  # "tiny": the checkpoint tiny_checkpoint has built
    _, url, _ = launch(demo, "127.0.0.1", free_port(), prevent_thread_lock=True)
    wait_until_up(url)
    yield demo, url, clock
    demo.close()


@pytest.fixture(scope="module")
def client(arena_app):
    from gradio_client import Client

    return Client(arena_app[1], verbose=False)


def battle(client) -> tuple[str, Path, Path]:
    battle_id, clip_a, clip_b, note = client.predict(TEXT, "en", api_name="/arena_battle")
    assert battle_id.startswith("battle_") and "Battle ready" in note
    return battle_id, Path(clip_a), Path(clip_b)


def test_a_battle_gives_no_side_away_before_the_vote(client):
    import pyloudnorm

    for _ in range(3):
        battle_id, clip_a, clip_b = battle(client)
        (a, rate_a), (b, rate_b) = sf.read(clip_a, dtype="float32"), sf.read(clip_b, dtype="float32")
        assert rate_a == rate_b == 24_000 and a.shape == b.shape  # one rate, one length
        meter = pyloudnorm.Meter(24_000)
        assert abs(meter.integrated_loudness(a) - meter.integrated_loudness(b)) < 1.0  # within 1 LU
        for clip in (clip_a, clip_b):
            assert not re.search(r"espeak|tiny|openai|rumik", clip.name, re.I), clip.name
            assert sf.info(clip).extra_info.count("espeak") == 0


def test_must_play_then_a_vote_reveals_the_names_once(client, arena_app):
    _, _, clock = arena_app
    battle_id, _, _ = battle(client)
    with pytest.raises(Exception, match="Play both clips to the end before voting"):
        client.predict(battle_id, "a", True, False, api_name="/arena_vote")
    clock.now += 60  # both clips have had time to play
    reveal = client.predict(battle_id, "b", True, True, api_name="/arena_vote")
    names = re.findall(r"\*\*A\*\* was \*\*(.+?)\*\*, \*\*B\*\* was \*\*(.+?)\*\*", reveal)
    assert names and set(names[0]) == {"espeak", "rumik:tiny"} and "B is better" in reveal
    again = client.predict(battle_id, "a", True, True, api_name="/arena_vote")  # one vote per battle
    assert again == reveal


def test_a_fast_voter_is_screened_and_the_leaderboard_counts_it_apart(client, arena_app):
    from gradio_client import Client

    demo, url, clock = arena_app
    hasty = Client(url, verbose=False)  # another browser session
    hasty_battles = [battle(hasty)[0]]
    clock.now += 60
    hasty_battles.append(battle(hasty)[0])  # the first vote waits long enough, the second does not
    for battle_id in hasty_battles:
        assert " was " in hasty.predict(battle_id, "a", True, True, api_name="/arena_vote")
    hasty_votes = [vote for vote in demo.arena.votes() if vote.battle_id in hasty_battles]
    assert len(hasty_votes) == 2 and all(vote.screened for vote in hasty_votes)  # the whole session
    for _ in range(3):
        battle_id, _, _ = battle(client)
        clock.now += 60
        client.predict(battle_id, "tie", True, True, api_name="/arena_vote")
    table, win_rate, counts = client.predict(api_name="/arena_leaderboard")
    assert "left out: 2 from screened sessions" in table and "Failed syntheses" in table and "## en" in table
    assert "espeak" in table and "rumik:tiny" in table and "unranked" in table  # the dead server has no battle
    assert demo.arena.failures["openai:127.0.0.1:gone:nobody"] >= 1  # skipped and counted, never a loss
    assert Path(win_rate).stat().st_size > 1000 and Path(counts).stat().st_size > 1000
    rows = demo.arena.votes()
    assert len({vote.battle_id for vote in rows}) == len(rows)  # stored once each
    assert all(len(vote.clip_a_sha256) == 64 and vote.session and "api" not in vote.session for vote in rows)
    exported = {Path(path).name: Path(path) for path in client.predict("", api_name="/arena_export")}
    assert set(exported) == {"votes.jsonl", "votes.csv", "leaderboard.md", "leaderboard.csv", "leaderboard.json",
                             "win_rate.png", "battles.png"}
    from evaluation.arena.leaderboard import main as leaderboard_main
    from evaluation.arena.votes import read_votes

    again, repeats = read_votes(exported["votes.jsonl"])  # the export alone gives the leaderboard back
    assert again == rows and repeats == 0
    assert leaderboard_main([str(exported["votes.jsonl"]), "--rounds", "1000"])["counted"] == len(rows) - 2


def test_a_typed_text_goes_through_the_guard_and_a_budget_holds(client, arena_app):
    with pytest.raises(Exception, match="at most 300 characters"):
        client.predict("x" * 301, "en", api_name="/arena_battle")
    with pytest.raises(Exception, match="Unknown tag <giggle>"):
        client.predict("hello <giggle> there", "en", api_name="/arena_battle")
    demo, _, _ = arena_app
    demo.arena.budgets["battles_per_session"] = 0
    try:
        with pytest.raises(Exception, match="the most the arena takes"):
            client.predict(TEXT, "en", api_name="/arena_battle")
    finally:
        demo.arena.budgets["battles_per_session"] = 30


def test_the_app_has_the_arena_tab_with_arena_systems(tiny_checkpoint, tmp_path):
    import app

    demo = app.build_demo(model=str(tiny_checkpoint), data_dir=tmp_path / "data", preload=False,
                          arena_systems=["espeak", "tiny"])
    names = {dependency.api_name for dependency in demo.fns.values()}
    assert {"arena_battle", "arena_vote", "arena_leaderboard", "synthesize"} <= names


@pytest.mark.browser
def test_in_chromium_a_battle_must_play_votes_reveals_and_the_leaderboard_shows(arena_app, driver):  # noqa: F811
    from selenium.webdriver.common.by import By

    demo, url, clock = arena_app
    drv = driver
    drv.get(url)
    text = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#arena-text textarea"), "the arena's text box")
    text.send_keys(TEXT)
    drv.find_element(By.CSS_SELECTOR, "#arena-start").click()
    for side in ("a", "b"):
        _wait(drv, lambda d, side=side: d.find_elements(By.CSS_SELECTOR, f"#arena-{side} button[aria-label='Play']"),
              f"clip {side.upper()}'s player", 120)
    vote_a = drv.find_element(By.CSS_SELECTOR, "#arena-vote-a")
    assert not vote_a.is_enabled()  # must-play: nothing played yet
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for side in ("a", "b"):
        play = drv.find_element(By.CSS_SELECTOR, f"#arena-{side} button[aria-label='Play']")
        drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", play)
        play.click()
        _wait(drv, lambda d, side=side: d.find_elements(By.CSS_SELECTOR, f"#arena-{side} button[aria-label='Play']"),
              f"clip {side.upper()} to play to its end", 60)
        if side == "a":
            assert not drv.find_element(By.CSS_SELECTOR, "#arena-vote-a").is_enabled()  # one of two played
    _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#arena-vote-a").is_enabled(), "the vote buttons", 30)
    shot = ARTIFACTS / "arena-battle.png"
    drv.save_screenshot(str(shot))
    clock.now += 60
    drv.find_element(By.CSS_SELECTOR, "#arena-vote-a").click()
    reveal = _wait(drv, lambda d: (el := d.find_element(By.CSS_SELECTOR, "#arena-reveal")).text and " was " in el.text
                   and el, "the reveal")
    assert re.search(r"A was (espeak|rumik:tiny), B was (espeak|rumik:tiny)", reveal.text), reveal.text
    revealed = ARTIFACTS / "arena-reveal.png"
    drv.save_screenshot(str(revealed))
    drv.find_element(By.XPATH, "//button[contains(., 'Leaderboard')]").click()
    refresh = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#arena-refresh"), "the refresh button")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", refresh)
    refresh.click()
    _wait(drv, lambda d: "Bradley" in d.find_element(By.CSS_SELECTOR, "#arena-board").text, "the leaderboard", 60)
    _wait(drv, lambda d: d.find_elements(By.CSS_SELECTOR, "#arena-win-rate img"), "the win-rate picture", 60)
    assert not _errors_shown(drv)
    board = ARTIFACTS / "arena-leaderboard.png"
    drv.save_screenshot(str(board))
    print(f"\nscreenshots: {shot} {revealed} {board}")
