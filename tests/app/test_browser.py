"""The app in a real headless Chromium (Debian's chromium + chromedriver, driven by Selenium).

Types Devanagari, inserts a tag at the cursor, synthesises on the tiny checkpoint and waits
for the streamed audio element; rates a blind pair by clicking the word where the sound was
heard. Screenshots go to artifacts/app/ (gitignored) and their paths are printed.

Run: .venv/bin/python -m pytest tests/app/test_browser.py -q -s
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from rumik_app.prompt import VOICE_NOTE
from tests.app.conftest import ARTIFACTS

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
    _wait(drv, lambda d: text.get_attribute("value") == "नमस्ते <laugh> दोस्तों, आज मौसम अच्छा है", "the tag at the cursor", 10)
    preview = drv.find_element(By.CSS_SELECTOR, "#prompt-preview textarea")
    _wait(drv, lambda d: preview.get_attribute("value") == "[BOS]<text>Ira: नमस्ते <laugh> दोस्तों, आज मौसम अच्छा है<audio>",
          "the live prompt preview", 20)

    drv.find_element(By.XPATH, "//button[contains(., 'Generation')]").click()
    _set_number(drv, "#max-seconds input[type='number']", "1")
    go = drv.find_element(By.CSS_SELECTOR, "#synthesize-button")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", go)
    go.click()
    audio = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#audio-out audio"), "the streamed audio element")
    info = _wait(drv, lambda d: (el := d.find_element(By.CSS_SELECTOR, "#synth-info")).text and "s of audio" in el.text
                 and el, "synthesis to finish")
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
