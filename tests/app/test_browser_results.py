"""What a visitor sees around a result, in a real headless Chromium: no seed before anything
was generated, progress while audio streams, and an error that clears the previous result
(Synthesise and Evaluate tabs) instead of leaving it on screen under the message.
Screenshots in artifacts/app/.

Run: .venv/bin/python -m pytest tests/app/test_browser_results.py -q -s
"""

from __future__ import annotations

import pytest

from tests.app.conftest import ARTIFACTS
from tests.app.test_browser import _errors_shown, _set_number, _wait, driver  # noqa: F401 - Chromium fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _shot(drv, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / name
    drv.save_screenshot(str(shot))
    print(f"\nscreenshot: {shot}")


def _click(drv, css: str) -> None:
    from selenium.webdriver.common.by import By

    button = drv.find_element(By.CSS_SELECTOR, css)
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
    button.click()


INFO_HISTORY_JS = """
const node = arguments[0];
window.infoHistory = [];
new MutationObserver(() => window.infoHistory.push(node.innerText))
    .observe(node, {subtree: true, childList: true, characterData: true});
"""


def test_synthesis_error_clears_the_previous_clip(driver, app_server):  # noqa: F811
    from selenium.webdriver.common.by import By

    drv, url = driver, app_server[1]
    drv.get(url)
    text = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#tts-text textarea"), "the text box")
    seed = drv.find_element(By.CSS_SELECTOR, "#seed-used input, #seed-used textarea")
    assert seed.get_attribute("value") == ""  # nothing generated yet: no seed shown (not 0)...
    assert not drv.find_element(By.CSS_SELECTOR, "#download").is_enabled()  # ...and nothing to download
    text.clear()
    text.send_keys("Progress shows while the audio streams.")
    drv.find_element(By.XPATH, "//button[contains(., 'Generation')]").click()
    _set_number(drv, "#max-seconds input[type='number']", "2")
    info = drv.find_element(By.CSS_SELECTOR, "#synth-info")
    # Every text the info line shows is recorded as it changes: the progress line lasts as long as
    # the tiny model streams, often less than one poll, so the test reads the page's history.
    drv.execute_script(INFO_HISTORY_JS, info)
    _click(drv, "#synthesize-button")
    # while pieces stream, the info line counts the audio against the budget
    _wait(drv, lambda d: any("s of audio of at most 2.0 s" in shown for shown in d.execute_script(
        "return window.infoHistory")), "the progress line")
    _wait(drv, lambda d: " s of audio · seed " in info.text, "synthesis to finish")
    assert seed.get_attribute("value").isdigit()
    _wait(drv, lambda d: d.find_elements(By.CSS_SELECTOR, "#audio-out audio"), "the audio player")
    _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#download").is_enabled(), "the download button", 20)

    text.clear()
    text.send_keys("this tag is wrong <giggle>")
    _click(drv, "#synthesize-button")
    _wait(drv, lambda d: "⚠ Not synthesised: Unknown tag <giggle>" in info.text, "the error in the info line")
    # the toast renders HTML: the tag the error is about must still show there (API callers get it as written)
    _wait(drv, lambda d: any("Unknown tag <giggle>" in e for e in _errors_shown(d)), "the error toast", 20)
    assert seed.get_attribute("value") == ""  # the old seed is gone...
    assert not drv.find_elements(By.CSS_SELECTOR, "#audio-out audio")  # ...and so are its audio
    _wait(drv, lambda d: not d.find_element(By.CSS_SELECTOR, "#download").is_enabled(), "the download greyed out", 20)
    _shot(drv, "synthesise-error-clears.png")


def test_evaluation_error_clears_the_previous_scores(driver, app_server, tmp_path):  # noqa: F811
    import numpy as np
    import soundfile as sf
    from selenium.webdriver.common.by import By

    clip = tmp_path / "hello.wav"
    t = np.arange(24_000) / 24_000
    sf.write(clip, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 24_000)
    drv, url = driver, app_server[1]
    drv.get(url)
    tab = _wait(drv, lambda d: d.find_element(By.XPATH, "//button[@role='tab' and contains(., 'Evaluate')]"), "tabs")
    tab.click()
    upload = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#eval-files input[type='file']"), "the upload")
    upload.send_keys(str(clip))
    boxes = drv.find_elements(By.XPATH, "//label[contains(., 'References')]//textarea")
    boxes[0].send_keys("hello.wav | hello big world")
    pasted = drv.find_element(By.XPATH, "//label[contains(., 'Pasted transcripts (for')]//textarea")
    pasted.send_keys("hello.wav | hello world")
    uploaded = drv.find_element(By.ID, "eval-files")  # shows the name (stem and extension apart) and size
    _wait(drv, lambda d: "hello" in uploaded.get_attribute("innerText") and "KB" in uploaded.get_attribute("innerText"),
          "the uploaded file", 30)
    _click(drv, "#eval-score")
    summary = drv.find_element(By.ID, "eval-summary")
    _wait(drv, lambda d: "1 of 1 clip(s) scored" in summary.text, "the scores")
    table = drv.find_element(By.ID, "eval-table")
    # WER 1/3 and CER 4/15, rounded for reading (the CSV keeps every digit)
    assert "0.333" in table.text and "0.267" in table.text and "0.3333" not in table.text
    _shot(drv, "evaluate-scores.png")

    drv.find_element(By.CSS_SELECTOR, "#eval-files button[aria-label='Clear']").click()  # no clips: an error
    _click(drv, "#eval-score")
    _wait(drv, lambda d: "⚠ Not scored: Upload at least one clip" in summary.text, "the error summary")
    assert "hello.wav" not in table.text and "0.333" not in table.text  # the old scores are gone
    _shot(drv, "evaluate-error-clears.png")
