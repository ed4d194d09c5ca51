"""Word timestamps in a real headless Chromium: tick *Word timestamps*, synthesise on
the tiny checkpoint, and the captions (SRT, WebVTT) are offered and the transcript's highlighted
word moves forward while the clip plays. The engine aligns with a fake aligner that spreads the
words evenly (the tiny checkpoint's noise is nothing a real aligner reads). Screenshot:
artifacts/app/timestamps.png.

Run: .venv/bin/python -m pytest -n0 tests/app/test_timestamps_browser.py -q -s
"""

from __future__ import annotations

import time

import pytest

from rumik_app.align import AlignerSet
from tests.app.conftest import ARTIFACTS
from tests.app.test_app_captions import EvenAligner
from tests.app.test_browser import _errors_shown, _set_number, _wait, driver  # noqa: F401 - the Chromium fixture
from webapp.systems import SYSTEM_RUMIK

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WORDS = "one two three four five six seven eight"
SECONDS = "2"  # of audio: 8 words of about 0.25 s each
# The highlighted word and the player's time, read together.
NOW_JS = """
const a = document.querySelector("#audio-out audio");
const spans = [...document.querySelectorAll("#word-transcript span[data-start]")];
const i = spans.findIndex((s) => s.classList.contains("word-now"));
return [i, i >= 0 ? spans[i].textContent : null, a.currentTime, a.paused];
"""


@pytest.fixture
def even_aligner(app_server):
    engine = app_server[0].registry.get(SYSTEM_RUMIK).engine
    before = engine.__dict__.get("_aligners")
    engine._aligners = AlignerSet([EvenAligner()])
    yield
    if before is None:
        del engine._aligners
    else:
        engine._aligners = before


def test_captions_and_the_highlighted_word_follow_the_clip(driver, app_server, even_aligner):  # noqa: F811
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    drv, url = driver, app_server[1]
    drv.get(url)
    text = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#tts-text textarea"), "the text box")
    text.clear()
    text.send_keys(WORDS)
    box = drv.find_element(By.CSS_SELECTOR, "#word-timestamps input[type='checkbox']")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
    # Shown only while the box is ticked (Gradio leaves a hidden column out of the page).
    assert not any(e.is_displayed() for e in drv.find_elements(By.ID, "word-timings"))
    box.click()
    _wait(drv, lambda d: any(e.is_displayed() for e in d.find_elements(By.ID, "word-timings")), "the timings box", 10)
    drv.find_element(By.XPATH, "//button[contains(., 'Generation')]").click()
    _set_number(drv, "#max-seconds input[type='number']", SECONDS)
    go = drv.find_element(By.CSS_SELECTOR, "#synthesize-button")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", go)
    go.click()

    spans = _wait(drv, lambda d: len(found := d.find_elements(By.CSS_SELECTOR, "#word-transcript span[data-start]"))
                  == len(WORDS.split()) and found, "the transcript")
    assert [s.text for s in spans] == WORDS.split()
    links = _wait(drv, lambda d: len(found := d.find_elements(By.CSS_SELECTOR, "#captions a[href]")) >= 2 and found,
                  "the captions download", 20)
    names = {link.get_attribute("href").rsplit("/", 1)[-1] for link in links}
    assert {"captions.srt", "captions.vtt"} <= names, names
    assert "words timed by even" in drv.find_element(By.ID, "timings-note").text

    # Play the clip from the start with the player's own button (native controls: play sits at the left).
    audio = drv.find_element(By.CSS_SELECTOR, "#audio-out audio")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].pause();"
                       "arguments[0].currentTime = 0;", audio)
    ActionChains(drv).move_to_element_with_offset(audio, -audio.size["width"] // 2 + 20, 0).click().perform()
    first = _wait(drv, lambda d: (now := d.execute_script(NOW_JS))[0] >= 0 and not now[3] and now, "playback", 10)
    time.sleep(0.7)
    second = drv.execute_script(NOW_JS)
    assert second[0] > first[0], (first, second)  # the highlight moved forward with the clip
    assert second[2] > first[2]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "timestamps.png"
    drv.execute_script("document.getElementById('word-timings').scrollIntoView({block: 'center'});")
    drv.save_screenshot(str(shot))
    print(f"\nscreenshot: {shot}; highlighted {first[1]!r} at {first[2]:.2f} s, "
          f"then {second[1]!r} at {second[2]:.2f} s")
    assert not _errors_shown(drv)


def test_an_api_caller_still_gets_the_four_stream_outputs(client):
    """The timing job rides along as a gr.State, which gradio_client leaves out."""
    audio, seed, wav, info = client.submit(text="Hello there.", seed=4, max_seconds=0.5,
                                           api_name="/synthesize_stream").result()
    assert seed == "4" and wav.endswith(".wav") and "s of audio" in info
