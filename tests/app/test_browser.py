"""The app in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium).

Types Devanagari, inserts a tag at the cursor, synthesises on the tiny checkpoint and waits
for the streamed audio element; rates a blind pair by clicking the word where the sound was
heard; runs an annotation campaign (espeak vs tiny) end to end: two raters sign in on
Gradio's login page and rate their queues, then the admin reads the results. Screenshots go to
artifacts/app/ (gitignored) and their paths are printed.

Run: .venv/bin/python -m pytest tests/app/test_browser.py -q -s
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from rumik_app.prompt import VOICE_NOTE
from tests.app.conftest import ARTIFACTS, free_port

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROME_ARGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
               "--window-size=1400,1900", "--lang=en-US")
WAIT_S = 90


@pytest.fixture(scope="module")
def driver():
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found: the browser test needs Debian's chromium and "
                    "chromium-driver (./setup.sh installs them; or sudo apt-get install chromium chromium-driver).")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="rumik-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (*CHROME_ARGS, f"--user-data-dir={profile}"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(WAIT_S)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _wait(drv, condition, what: str, timeout: float = WAIT_S):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(drv, timeout).until(condition)
    except TimeoutException:
        shot = ARTIFACTS / "failure.png"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        drv.save_screenshot(str(shot))
        pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; screenshot: {shot}")


def _set_number(drv, css: str, value: str) -> None:
    """Type a value into a slider's number box and commit it (Tab blurs it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    # An accordion renders its contents after the click: wait for the box, do not race it.
    box = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, css), f"the number box {css}", 20)
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(value, Keys.TAB)


def _errors_shown(drv) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in drv.find_elements(By.CSS_SELECTOR, ".toast-body.error, [data-testid='toast-body']")
            if "error" in (e.get_attribute("class") or "").lower() or "Error" in e.text]


def test_devanagari_tag_button_and_streamed_audio(driver, app_server):
    from selenium.webdriver.common.by import By

    drv, url = driver, app_server[1]
    drv.get(url)
    text = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#tts-text textarea"), "the text box")
    assert VOICE_NOTE in drv.find_element(By.TAG_NAME, "body").text
    text.clear()
    text.send_keys("नमस्ते दोस्तों, आज मौसम अच्छा है")
    # Put the cursor right after the first word, as a user clicking there would.
    drv.execute_script("const t = arguments[0]; t.focus(); t.setSelectionRange(6, 6);", text)
    drv.find_element(By.CSS_SELECTOR, "#insert-laugh").click()
    _wait(drv, lambda d: text.get_attribute("value") == "नमस्ते <laugh> दोस्तों, आज मौसम अच्छा है",
          "the tag at the cursor", 10)
    preview = drv.find_element(By.CSS_SELECTOR, "#prompt-preview textarea")
    _wait(drv, lambda d: preview.get_attribute("value") == "[BOS]<text>Ira: नमस्ते <laugh> दोस्तों, आज मौसम अच्छा है<audio>",
          "the live prompt preview", 20)

    drv.find_element(By.XPATH, "//button[contains(., 'Generation')]").click()
    _set_number(drv, "#max-seconds input[type='number']", "1")
    go = drv.find_element(By.CSS_SELECTOR, "#synthesize-button")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", go)
    go.click()
    audio = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#audio-out audio"), "the streamed audio element")
    info = _wait(drv, lambda d: (el := d.find_element(By.CSS_SELECTOR, "#synth-info")).text
                 and " s of audio · seed " in el.text and el, "synthesis to finish")  # not the progress line
    seconds = float(info.text.split(" s of audio")[0])
    assert 0 < seconds < 2, info.text  # the 1 s limit typed into the Generation accordion took effect
    seed = drv.find_element(By.CSS_SELECTOR, "#seed-used input, #seed-used textarea").get_attribute("value")
    assert seed.isdigit() and f"seed {seed}" in info.text
    assert audio.get_attribute("src")
    assert not _errors_shown(drv)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "synthesise-devanagari.png"
    drv.execute_script("window.scrollTo(0, 0);")
    drv.save_screenshot(str(shot))
    print(f"\nscreenshot: {shot}")


def test_blind_pair_rating_by_clicking_the_word(driver, app_server):
    from selenium.webdriver.common.by import By

    drv, url = driver, app_server[1]
    drv.get(url)
    tab = _wait(drv, lambda d: d.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Compare')]"), "tabs")
    tab.click()
    rater = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#rater input, #rater textarea"), "the rater box")
    rater.send_keys("browser-rater")
    drv.find_element(By.CSS_SELECTOR, "#rate-text textarea").send_keys("That is so funny <laugh> I cannot stop")
    for side in ("a", "b"):
        seed = drv.find_element(By.CSS_SELECTOR, f"#seed-{side} input")
        seed.send_keys("\ue009a", str(3 if side == "a" else 4))  # Ctrl+A, then the seed
    _set_number(drv, "#pair-seconds input[type='number']", "0.5")
    drv.find_element(By.CSS_SELECTOR, "#generate-pair").click()
    trial = drv.find_element(By.CSS_SELECTOR, "#trial-id textarea, #trial-id input")
    _wait(drv, lambda d: trial.get_attribute("value"), "the pair to be generated")
    assert len(drv.find_elements(By.CSS_SELECTOR, "#clip-1 audio, #clip-2 audio")) == 2

    def click_choice(elem_id: str, label: str) -> None:
        box = drv.find_element(By.XPATH, f"//*[@id='{elem_id}']//label[normalize-space(.)='{label}']")
        drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
        box.click()

    click_choice("score-1", "4")
    click_choice("score-2", "2")
    _wait(drv, lambda d: d.find_element(By.ID, "heard-1").is_displayed(), "the tag question", 10)
    click_choice("heard-1", "laugh")
    _wait(drv, lambda d: d.find_element(By.ID, "where-1").is_displayed(), "the word choices", 10)
    assert not any(e.is_displayed() for e in drv.find_elements(By.ID, "where-2"))  # no sound picked for clip 2 yet
    click_choice("where-1", "“I”")  # the sound came just before "I": the requested word
    click_choice("heard-2", "not heard")
    click_choice("preference", "Clip 1")
    drv.find_element(By.CSS_SELECTOR, "#submit-rating").click()
    status = _wait(drv, lambda d: (el := d.find_element(By.ID, "rating-status")).text.startswith("✓") and el,
                   "the rating to be stored", 30)
    assert "browser-rater" in status.text
    rows = [r for r in app_server[0].rating_store.rows() if r["rater"] == "browser-rater"]
    assert len(rows) == 2
    tagged = next(r for r in rows if r["label"] == "Clip 1")
    assert (tagged["expression_score"], tagged["heard_cls"], tagged["heard_index"]) == (4, "laugh", 4)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "compare-and-rate.png"
    drv.save_screenshot(str(shot))
    print(f"\nscreenshot: {shot}")


# ---------------------------------------------------------------- annotation campaign, end to end
CAMPAIGN_ADMIN = "browser-campaign-admin-0123"
CLIP_LINKS = "#campaign-clip-a a[data-testid='download-link'], #campaign-clip-b a[data-testid='download-link']"
CAMPAIGN_ANSWERS = {"asha": ("4", "2", "A"), "ben": ("3", "5", "B")}  # score A, score B, preference


@pytest.fixture(scope="module")
def campaign_server(tmp_path_factory):
    """A campaign of espeak vs tiny made with the command line, served with two rater logins."""
    from tests.app.campaign_fixtures import write_prompts
    from webapp.access import AdminGate
    from webapp.campaign import cli
    from webapp.campaign.data.definition import raters_path
    from webapp.campaign.data.raters import RatersFile
    from webapp.campaign.server.app import build_campaign_app, launch_campaign
    from webapp.storage import DataLayout

    tmp = tmp_path_factory.mktemp("browser-campaign")
    data = tmp / "data"
    prompts = write_prompts(tmp / "prompts.jsonl")
    assert cli.main(["create", "--name", "e2e", "--prompts", str(prompts), "--systems", "espeak,tiny",
                     "--setting", "max_seconds=0.5", "--raters-per-item", "2", "--rater-slots", "2",
                     "--repeat-fraction", "0.34", "--data-dir", str(data)]) == 0
    raters = RatersFile(raters_path(DataLayout(data)))
    passwords = {name: raters.add(name) for name in CAMPAIGN_ANSWERS}
    demo = build_campaign_app(data, "e2e")
    _, url, _ = launch_campaign(demo, AdminGate(CAMPAIGN_ADMIN), port=free_port(), prevent_thread_lock=True)
    yield demo, url, passwords, data
    demo.close()


def _sign_in(drv, url: str, user: str, password: str) -> None:
    from selenium.webdriver.common.by import By

    drv.get(url + "logout")  # whoever was signed in before (Gradio's route; back to the login page)
    drv.get(url)
    pw = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "input[type='password']"), "the login page")
    name = drv.find_element(By.CSS_SELECTOR, "input:not([type='password'])")
    name.send_keys(user)
    pw.send_keys(password)
    drv.find_element(By.XPATH, "//button[contains(., 'Login')]").click()
    _wait(drv, lambda d: f"Signed in as {user}." in d.find_element(By.ID, "campaign-who").text, f"{user}'s page")


def _click_choice(drv, elem_id: str, label: str) -> None:
    from selenium.webdriver.common.by import By

    box = _wait(drv, lambda d: d.find_element(By.XPATH, f"//*[@id='{elem_id}']//label[normalize-space(.)='{label}']"),
                f"{label!r} in #{elem_id}", 20)
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
    box.click()


def _progress(drv) -> tuple[int, int] | None:
    """(done, total) from the progress bar's "12 / 60 rated"; None while it re-renders."""
    from selenium.webdriver.common.by import By

    found = re.search(r"(\d+) / (\d+) rated", drv.find_element(By.ID, "campaign-progress").text)
    return (int(found[1]), int(found[2])) if found else None


def _rate_queue(drv, name: str) -> int:
    """Answer every item of the signed-in rater's queue through the page; returns the queue length."""
    from selenium.webdriver.common.by import By

    done, total = _wait(drv, _progress, "the progress bar")
    score_a, score_b, preference = CAMPAIGN_ANSWERS[name]
    assert done == 0 and total >= 3
    while done < total:
        links = _wait(drv, lambda d: len(a := d.find_elements(By.CSS_SELECTOR, CLIP_LINKS)) == 2 and a, "the two clips")
        for link in links:  # the player's download link: the clip's URL, a random name
            assert re.search(r"/[0-9a-f]{32}\.wav$", link.get_attribute("href")), link.get_attribute("href")
        _click_choice(drv, "campaign-score-a", score_a)
        _click_choice(drv, "campaign-score-b", score_b)
        if any(e.is_displayed() for e in drv.find_elements(By.ID, "campaign-heard-a")):  # tagged: NoVA's question
            _click_choice(drv, "campaign-heard-a", "laugh")
            _wait(drv, lambda d: d.find_element(By.ID, "campaign-where-a").is_displayed(), "the word choices", 20)
            _click_choice(drv, "campaign-where-a", "“I”")  # just before "I": the requested word
            _click_choice(drv, "campaign-heard-b", "not heard")
        _click_choice(drv, "campaign-preference", preference)
        drv.find_element(By.ID, "campaign-submit").click()
        done = _wait(drv, lambda d, n=done + 1: (_progress(d) or (0,))[0] == n and n, f"item {done + 1} of {total}", 30)
        assert not _errors_shown(drv)
    assert "all done" in drv.find_element(By.ID, "campaign-progress").text
    return total


def test_campaign_two_raters_then_admin_results(driver, campaign_server):
    from selenium.webdriver.common.by import By

    from evaluation import indicemo
    from evaluation.report import read_jsonl
    from webapp.campaign import cli
    from webapp.campaign.reports import results_for

    drv = driver
    demo, url, passwords, data = campaign_server
    totals = {}
    for name in CAMPAIGN_ANSWERS:
        _sign_in(drv, url, name, passwords[name])
        assert not any(e.is_displayed() for e in drv.find_elements(By.ID, "admin-view"))  # hidden views: not rendered
        totals[name] = _rate_queue(drv, name)
        _sign_in(drv, url, name, passwords[name])  # signing in again resumes at the end: nothing left
        _wait(drv, lambda d: "all done" in d.find_element(By.ID, "campaign-progress").text, "the finished queue")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    _sign_in(drv, url, "admin", CAMPAIGN_ADMIN)
    assert not any(e.is_displayed() for e in drv.find_elements(By.ID, "rater-view"))
    drv.find_element(By.ID, "campaign-refresh").click()
    results = _wait(drv, lambda d: (el := d.find_element(By.ID, "campaign-results")).text and
                    "Krippendorff" in el.text and el, "the results")
    table = drv.find_element(By.ID, "campaign-progress-table").text
    assert "asha" in table and "ben" in table
    assert "espeak" in results.text and "tiny" in results.text and "95 % CI" in results.text
    shot = ARTIFACTS / "campaign-admin.png"
    drv.save_screenshot(str(shot))
    print(f"\nscreenshot: {shot}")

    rows = demo.campaign_store.rows("e2e")
    assert len(rows) == sum(totals.values()) and {r["rater"] for r in rows} == set(CAMPAIGN_ANSWERS)
    tagged = [r for r in rows if r["prompt_id"] == "p_tag" and r["repeat_of"] is None]
    assert tagged and all((r["heard_a"], r["where_a"], r["heard_b"]) == ("laugh", 4, "none") for r in tagged)
    res = results_for(demo.campaign, demo.campaign_store)
    by_rater = {r.rater: r for r in res.raters}
    assert by_rater["asha"].chose_a == 1.0 and by_rater["ben"].chose_a == 0.0  # the position bias shows
    assert res.alpha_preferences is not None and res.alpha_scores is not None
    assert {c.condition for c in res.conditions} == {"espeak", "tiny"} and all(c.score.n == 3 for c in res.conditions)
    # The export, aggregated by evaluation.indicemo, gives the results' IndicEmo numbers.
    out = data.parent / "export"
    assert cli.main(["export", "--name", "e2e", "--data-dir", str(data), "--out", str(out)]) == 0
    emo = indicemo.aggregate(read_jsonl(out / "indicemo_judgments.jsonl"))
    assert {s.system: s.all_five for s in emo.systems} == {
        s: v["all_five"] for s, v in res.numbers()["indicemo"].items()}
