"""The rating pages of the MOS, CMOS, SMOS and MUSHRA designs in a real headless Chromium (Debian's
chromium + chromedriver, driven by Selenium), on campaigns made in the test (tone `folder:`
systems, as tests/app/test_campaign_designs.py makes them).

MUSHRA end to end through the page: a rater signs in on Gradio's login page, sees the reference
and one player and one slider per stimulus, is refused at Submit before playing every clip,
plays each clip with the player's own Play button (the server records each play), sets the
sliders and submits; the stored rows carry the slider values and the progress moves on.
MOS (hearing check first, answered through the page), CMOS and SMOS: the page and its scale.
Screenshots go to artifacts/app/ (gitignored) and their paths are printed.

Run: .venv/bin/python -m pytest tests/app/test_browser_designs.py -q -s
"""

from __future__ import annotations

import re

import pytest

from tests.app.test_browser import _errors_shown, _set_number, _wait, driver  # noqa: F401 - Chromium fixture
from tests.app.test_browser_results import _shot
from tests.app.test_campaign_designs import clock, create, serve  # noqa: F401 - clock: a fixture
from webapp.campaign.data.definition import raters_path
from webapp.campaign.data.raters import RatersFile
from webapp.campaign.data.store import CampaignStore
from webapp.campaign.designs import plan_of
from webapp.campaign.designs.mushra import MAX_STIMULI

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RATER = "asha"
SCALE_TEXT = {"mos": ("Excellent", "Bad"), "cmos": ("Much Better", "Much Worse"), "smos": ("Same speaker",)}
CLIP_LINK = "a[data-testid='download-link']"  # the player's download link: the clip's URL


def _shown(drv, elem_id: str) -> bool:
    from selenium.webdriver.common.by import By

    return any(e.is_displayed() for e in drv.find_elements(By.ID, elem_id))


def _sign_in(drv, url: str, user: str, password: str, view: str) -> None:
    """Sign in on Gradio's login page and wait for `view` (#trial-view or #qualify-view)."""
    from selenium.webdriver.common.by import By

    drv.get(url + "logout")  # whoever was signed in before (Gradio's route; back to the login page)
    drv.get(url)
    pw = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "input[type='password']"), "the login page")
    drv.find_element(By.CSS_SELECTOR, "input:not([type='password'])").send_keys(user)
    pw.send_keys(password)
    drv.find_element(By.XPATH, "//button[contains(., 'Login')]").click()
    _wait(drv, lambda d: _shown(d, view), f"#{view} for {user}")


def _progress(drv) -> tuple[int, int] | None:
    """(done, total) from the trial page's "1 / 3 rated"; None while it re-renders."""
    from selenium.webdriver.common.by import By

    found = re.search(r"(\d+) / (\d+) rated", drv.find_element(By.ID, "campaign-progress").text)
    return (int(found[1]), int(found[2])) if found else None


def _click(drv, element) -> None:
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()


def _clip_url(drv, elem_id: str) -> str:
    from selenium.webdriver.common.by import By

    link = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, f"#{elem_id} {CLIP_LINK}"), f"the audio of #{elem_id}")
    href = link.get_attribute("href")
    assert re.search(r"/[0-9a-f]{32}\.wav$", href), href  # a served copy under a random name
    return href


def test_mushra_page_plays_every_clip_then_stores_the_sliders(driver, tmp_path, clock):  # noqa: F811
    from selenium.webdriver.common.by import By

    layout, campaign = create(tmp_path, "mushra", slots=1)
    password = RatersFile(raters_path(layout)).add(RATER)
    trial = plan_of(campaign).slots[0][0]  # the only rater's first trial
    n = len(trial.stimuli)
    store = CampaignStore(layout.database)
    demo, url = serve(layout, campaign)
    drv = driver
    try:
        _sign_in(drv, url, RATER, password, "trial-view")
        done, total = _wait(drv, _progress, "the progress bar")
        assert done == 0 and total == len(plan_of(campaign).slots[0]) > 1
        assert _shown(drv, "campaign-reference")
        urls = {_clip_url(drv, "campaign-reference")}
        for i in range(1, n + 1):
            assert _shown(drv, f"campaign-clip-{i}") and _shown(drv, f"campaign-score-{i}"), i
            urls.add(_clip_url(drv, f"campaign-clip-{i}"))
        assert len(urls) == n + 1  # the open reference is another copy than the hidden one
        for i in range(n + 1, MAX_STIMULI + 1):
            assert not _shown(drv, f"campaign-clip-{i}") and not _shown(drv, f"campaign-score-{i}"), i

        submit = drv.find_element(By.ID, "campaign-submit")
        _click(drv, submit)  # nothing played yet: refused, and nothing stored
        _wait(drv, lambda d: any("Play every clip" in e for e in _errors_shown(d)), "the 'Play every clip' toast", 30)
        assert store.rows(campaign.name) == [] and store.played(campaign.name, trial.entry_id) == set()
        # ...and the players stay usable: no "Error" box over every output of the refused submit
        assert not any(e.is_displayed() for e in drv.find_elements(By.CSS_SELECTOR, "#trial-view .error"))

        for i in range(n):  # the player's own Play button: Gradio's `play` event reaches the server
            _click(drv, drv.find_element(By.CSS_SELECTOR, f"#campaign-clip-{i + 1} button[aria-label='Play']"))
            _wait(drv, lambda d, i=i: i in store.played(campaign.name, trial.entry_id), f"the play of clip {i + 1}", 30)
        assert store.played(campaign.name, trial.entry_id) == set(range(n))

        scores = [{"reference": 100, "anchor": 15}.get(role, 41 + 17 * i) for i, role in enumerate(trial.roles)]
        for i, score in enumerate(scores):
            _set_number(drv, f"#campaign-score-{i + 1} input[type='number']", str(score))
        for i, score in enumerate(scores):  # the range follows the number box: the value reached the component
            rng = drv.find_element(By.CSS_SELECTOR, f"#campaign-score-{i + 1} input[type='range']")
            _wait(drv, lambda d, r=rng, s=score: r.get_attribute("value") == str(s), f"slider {i + 1} at {score}", 10)
        for close in drv.find_elements(By.CSS_SELECTOR, "[data-testid='toast-close']"):  # the refusal's toast, if left
            drv.execute_script("arguments[0].click();", close)
        _wait(drv, lambda d: not d.find_elements(By.CSS_SELECTOR, "[data-testid='toast-body']"), "the toast gone", 20)
        drv.execute_script("window.scrollTo(0, 0);")
        _shot(drv, "campaign-mushra.png")

        _click(drv, submit)
        _wait(drv, lambda d: (_progress(d) or (0,))[0] == 1, "the progress to move to 1", 30)
        assert _progress(drv) == (1, total)
        assert f"1 / {total}" in drv.find_element(By.ID, "campaign-progress").text
    finally:
        demo.close()
    rows = store.rows(campaign.name)
    assert [(r["entry_id"], r["stimulus"], r["rater"]) for r in rows] == [(trial.entry_id, i, RATER) for i in range(n)]
    assert [r["score"] for r in rows] == scores
    assert [r["role"] for r in rows] == list(trial.roles)


@pytest.mark.parametrize("design", ["mos", "cmos", "smos"])
def test_rating_page_of_each_design(design, driver, tmp_path, clock):  # noqa: F811
    from selenium.webdriver.common.by import By

    layout, campaign = create(tmp_path, design, slots=1)
    password = RatersFile(raters_path(layout)).add(RATER)
    store = CampaignStore(layout.database)
    demo, url = serve(layout, campaign)
    drv = driver
    try:
        if design == "mos":  # the hearing check comes first, answered through the page
            _sign_in(drv, url, RATER, password, "qualify-view")
            assert not _shown(drv, "trial-view")
            extras = campaign.extra_clips()  # the rater's own clips, dealt from the pool when the page showed
            digits = [extras[key]["answer"] for key in store.hearing_draws(campaign.name)[RATER]]
            assert len(digits) == 3
            for k, answer in enumerate(digits):
                _clip_url(drv, f"qualify-clip-{k}")
                box = drv.find_element(By.CSS_SELECTOR, f"#qualify-digits-{k} input, #qualify-digits-{k} textarea")
                drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
                box.send_keys(answer)
            drv.execute_script("window.scrollTo(0, 0);")
            _shot(drv, "campaign-mos-qualify.png")
            _click(drv, drv.find_element(By.ID, "qualify-submit"))
            _wait(drv, lambda d: _shown(d, "trial-view"), "the first trial after the hearing check", 30)
            assert store.qualifications(campaign.name) == {RATER: True}
            assert not _shown(drv, "qualify-view")
        else:
            _sign_in(drv, url, RATER, password, "trial-view")
        done, total = _wait(drv, _progress, "the progress bar")
        assert done == 0 and total == len(plan_of(campaign).slots[0])
        clips = 2 if design == "cmos" else 1
        for i in range(1, clips + 1):
            _clip_url(drv, f"campaign-clip-{i}")
        assert not _shown(drv, f"campaign-clip-{clips + 1}")
        assert not any(_shown(drv, f"campaign-score-{i}") for i in range(1, MAX_STIMULI + 1))
        assert _shown(drv, "campaign-reference") == (design == "smos")
        if design == "smos":
            _clip_url(drv, "campaign-reference")
        scale = drv.find_element(By.ID, "campaign-score")
        for label in SCALE_TEXT[design]:
            assert label in scale.text, (label, scale.text)
        assert not _errors_shown(drv)
        drv.execute_script("window.scrollTo(0, 0);")
        _shot(drv, f"campaign-{design}.png")
    finally:
        demo.close()
