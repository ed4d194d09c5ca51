"""The app's "Your voices" tab (`app.py --voices DIR --adapt-voices`, webapp.voices_tab): a voice made
from recordings in the browser, followed to the end, then spoken in Synthesise.

One in-process app of the voice smoke's base with a small adaptation (40 s of espeak-ng recordings,
2 training steps): through its API (gradio_client) a job is started, its progress read until the
voice card shows, and the new voice synthesises, watermarked; a name that is taken and a missing
consent get their messages. In Chromium the tab uploads recordings and a consent clip, the progress
bar moves, the card appears, and the new voice is chosen in Synthesise and plays. Screenshots go to
artifacts/app/.

Run: .venv/bin/python -m pytest -n0 tests/app/test_voices_tab.py -q -s
"""

from __future__ import annotations

import os
import time

import pytest
import soundfile as sf

from tests.app.conftest import ARTIFACTS, free_port, wait_until_up
from tests.app.test_browser import _errors_shown, _set_number, _wait, driver  # noqa: F401 - driver: the Chromium fixture
from training.voice import smoke

pytestmark = pytest.mark.slow

SETTINGS = ["data.min_minutes=0.3", "replay.clips=2", "replay.heldout=1", "train.steps=2", "train.batch=2",
            "train.micro_batch=2", "train.warmup_steps=1", "train.eval_every=2", "train.checkpoint_every=0"]
WAIT_S = 300


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(demo, url, recordings folder, consent file, library folder)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import app
    from rumik_app.voices.makers import load_voice_maker
    from training.voice.create import smoke_config
    from webapp.access import AdminGate

    root = tmp_path_factory.mktemp("your-voices")
    recordings = smoke.make_recordings(root / "recordings", minutes=0.6)
    consent = smoke.make_consent(root / "consent.wav")
    model = smoke_config(SETTINGS, None, root).model
    maker = load_voice_maker("lora", root=root / "data" / "voice-adaptations", voices_dir=root / "voices",
                             model=model, settings=SETTINGS, config=root / "smoke_settings.json")
    demo = app.build_demo(model=model, engine_options={"device": "cpu"}, data_dir=root / "data", admin=AdminGate(),
                          voices=root / "voices", voice_maker=maker)
    _, url, _ = app.launch(demo, "127.0.0.1", free_port(), prevent_thread_lock=True)
    wait_until_up(url)
    yield demo, url, recordings, consent, root / "voices"
    demo.close()
    maker.close()


def follow(client, job: str) -> tuple:
    """/adaptation_progress until the job ends: (status, bar, card)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        status, bar, _, card = client.predict(job, "", api_name="/adaptation_progress")
        if card or any(word in status for word in (": failed", ": cancelled")):
            return status, bar, card
        time.sleep(1)
    raise AssertionError(f"{job} did not end within {WAIT_S} s: {status}")


def test_through_the_api_a_voice_is_made_followed_and_spoken(made):
    from gradio_client import Client, handle_file

    from rumik_app.watermark.marker import shared_watermarker

    demo, url, recordings, consent, voices = made
    client = Client(url, verbose=False)
    files = [handle_file(str(path)) for path in sorted(recordings.iterdir())]
    with pytest.raises(Exception, match="Record or upload the consent statement"):
        client.predict(files, None, "Kabir", smoke.STATEMENT, "", api_name="/start_adaptation")
    with pytest.raises(Exception, match="built-in voice"):
        client.predict(files, handle_file(str(consent)), "Ira", smoke.STATEMENT, "", api_name="/start_adaptation")
    job = client.predict(files, handle_file(str(consent)), "Kabir", smoke.STATEMENT, "",
                         api_name="/start_adaptation")
    assert job.startswith("vjob_")
    status, bar, card = follow(client, job)
    assert "Kabir**: done" in status and 'data-percent="100"' in bar, status
    assert "### Kabir" in card and "held-out loss" in card and "consent checked by: recording" in card
    assert (voices / "Kabir" / "adapter.safetensors").is_file()
    wav = client.predict(text="Hello there.", voice="Kabir", seed=3, max_seconds=1.0, api_name="/synthesize")
    samples, rate = sf.read(wav, dtype="float32")
    assert rate == 24_000 and samples.size > 0 and shared_watermarker().is_watermarked(samples, rate)


@pytest.mark.browser
def test_in_chromium_the_tab_uploads_follows_and_the_new_voice_plays(made, driver):  # noqa: F811
    from selenium.webdriver.common.by import By

    demo, url, recordings, consent, voices = made
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    drv = driver
    drv.get(url)
    _wait(drv, lambda d: d.find_element(By.XPATH, "//button[@role='tab'][contains(., 'Your voices')]"),
          "the Your voices tab").click()
    upload = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#voice-recordings input[type='file']"),
                   "the recordings' file input")
    upload.send_keys("\n".join(str(path) for path in sorted(recordings.iterdir())))
    _wait(drv, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#voice-recordings tr, #voice-recordings .file"))
          >= 2, "the uploaded recordings listed")
    drv.find_element(By.CSS_SELECTOR, "#voice-consent button[aria-label='Upload file']").click()  # not the mic
    clip = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#voice-consent input[type='file']"),
                 "the consent's file input")
    clip.send_keys(str(consent))
    loaded = ("#voice-consent audio, #voice-consent [data-testid='waveform-output'], "
              "#voice-consent .waveform-container")
    _wait(drv, lambda d: d.find_elements(By.CSS_SELECTOR, loaded), "the consent clip loaded")
    name = drv.find_element(By.CSS_SELECTOR, "#voice-name input, #voice-name textarea")
    name.send_keys("Meera")
    statement = drv.find_element(By.CSS_SELECTOR, "#voice-statement textarea")
    statement.clear()
    statement.send_keys(smoke.STATEMENT)
    drv.find_element(By.CSS_SELECTOR, "#voice-start").click()
    _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#voice-job input, #voice-job textarea")
          .get_attribute("value").startswith("vjob_"), "the job id")
    _wait(drv, lambda d: 0 < int(d.find_element(By.CSS_SELECTOR, "#adaptation-progress")
                                 .get_attribute("data-percent")) < 100, "the progress bar to move", WAIT_S)
    moving = ARTIFACTS / "your-voices-progress.png"
    drv.save_screenshot(str(moving))
    _wait(drv, lambda d: "### Meera" in d.find_element(By.CSS_SELECTOR, "#voice-card").get_attribute("innerHTML")
          or "Meera" in d.find_element(By.CSS_SELECTOR, "#voice-card").text, "the voice card", WAIT_S)
    done = ARTIFACTS / "your-voices-done.png"
    drv.save_screenshot(str(done))
    assert not _errors_shown(drv)

    drv.find_element(By.XPATH, "//button[@role='tab'][contains(., 'Synthesise')]").click()
    voice = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#voice input"), "the Voice menu")
    voice.click()  # focus re-reads the library
    _wait(drv, lambda d: d.find_elements(By.XPATH, "//ul[@role='listbox']//li[contains(., 'Meera')]"),
          "Meera in the Voice menu")[0].click()
    drv.find_element(By.XPATH, "//button[contains(., 'Generation')]").click()
    _set_number(drv, "#max-seconds input[type='number']", "1")
    go = drv.find_element(By.CSS_SELECTOR, "#synthesize-button")
    drv.execute_script("arguments[0].scrollIntoView({block: 'center'});", go)
    go.click()
    audio = _wait(drv, lambda d: d.find_element(By.CSS_SELECTOR, "#audio-out audio"), "the new voice's audio",
                  WAIT_S)
    _wait(drv, lambda d: " s of audio · seed " in d.find_element(By.CSS_SELECTOR, "#synth-info").text,
          "synthesis to finish", WAIT_S)
    assert audio.get_attribute("src") and not _errors_shown(drv)
    preview = drv.find_element(By.CSS_SELECTOR, "#prompt-preview textarea").get_attribute("value")
    assert preview.startswith("[BOS]<text>Meera: "), preview  # the new voice is the one that spoke
    spoken = ARTIFACTS / "your-voices-speaks.png"
    drv.save_screenshot(str(spoken))
    print(f"\nscreenshots: {moving} {done} {spoken}")


def test_the_progress_names_every_step_of_the_makers_contract_in_its_order():
    """The tab's labels are for the contract's steps (rumik_app.voices.makers.STEPS), and the bar
    moves through them in that order."""
    from rumik_app.voices.makers import STEPS
    from webapp.voices_tab import STEP_NAMES, _done_fraction

    assert tuple(STEP_NAMES) == STEPS
    shown = [_done_fraction([{"step": step, "status": "started"}], "running") for step in STEPS]
    assert [fraction for fraction, _ in shown] == sorted(fraction for fraction, _ in shown)
    assert 0.0 < shown[0][0] and shown[-1][0] < 1.0 and [label for _, label in shown] == list(STEP_NAMES.values())
