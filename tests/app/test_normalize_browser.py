"""The normalisation checkbox in a real headless Chromium: the live prompt preview shows the
spoken form, and unticking the box shows the text as typed. Screenshot in artifacts/app/.

Run: .venv/bin/python -m pytest tests/app/test_normalize_browser.py -q -s
"""

from __future__ import annotations

import pytest

from tests.app.conftest import ARTIFACTS
from tests.app.test_browser import _wait, driver  # noqa: F401 - the module-scoped Chromium fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_checkbox_switches_the_live_preview(driver, app_server):  # noqa: F811
    from selenium.webdriver.common.by import By

    drv, url = driver, app_server[1]
    drv.get(url)
    text = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#tts-text textarea"), "the text box")
    text.clear()
    text.send_keys("कल 3 बजे ₹500 लाना")
    preview = drv.find_element(By.CSS_SELECTOR, "#prompt-preview textarea")
    _wait(drv, lambda d: preview.get_attribute("value") == "[BOS]<text>Ira: कल तीन बजे पाँच सौ रुपए लाना<audio>",
          "the normalised preview", 20)
    box = drv.find_element(By.CSS_SELECTOR, "#normalize input[type='checkbox']")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
    box.click()
    _wait(drv, lambda d: preview.get_attribute("value") == "[BOS]<text>Ira: कल 3 बजे ₹500 लाना<audio>",
          "the preview as typed", 20)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "normalize-preview.png"
    drv.save_screenshot(str(shot))
    print(f"\nscreenshot: {shot}")
