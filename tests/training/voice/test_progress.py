"""A voice adaptation reports every step in order, can be cancelled mid-training, and resumes from its
work folder to the very adapter an uninterrupted run makes (same seed).

One small configuration of the smoke (90 s of espeak-ng recordings, 6 training steps of 2 clips,
a training state every 2 steps) keeps the three runs cheap: uninterrupted, cancelled at step 5
(after the state of step 4), and resumed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from training.voice import smoke
from training.voice.create import create_voice, smoke_config
from training.voice.progress import STEPS, Cancelled, Progress
from training.voice.train_state import STATE_FILE

pytestmark = pytest.mark.slow

SETTINGS = ["data.min_minutes=0.5", "replay.clips=6", "replay.heldout=2", "train.steps=6", "train.batch=2",
            "train.micro_batch=2", "train.warmup_steps=1", "train.eval_every=3", "train.checkpoint_every=2"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("voice-inputs")
    return smoke.make_recordings(folder / "recordings", minutes=1.5), smoke.make_consent(folder / "consent.wav")


def adapt(inputs, root: Path, progress: Progress) -> dict:
    recordings, consent = inputs
    cfg = smoke_config(SETTINGS, None, root)
    return create_voice("Kabir", recordings, consent, smoke.STATEMENT, root / "voices", cfg, root / "work",
                        progress=progress)


@pytest.fixture(scope="module")
def uninterrupted(inputs, tmp_path_factory) -> tuple[Path, list[dict]]:
    root, events = tmp_path_factory.mktemp("whole"), []
    adapt(inputs, root, Progress(events.append))
    return root, events


def test_every_step_is_reported_in_order_with_its_figures(uninterrupted):
    root, events = uninterrupted
    steps = [(event["step"], event["status"]) for event in events if event["status"] != "running"]
    assert steps == [(step, status) for step in STEPS for status in ("started", "done")]
    training = [event for event in events if event["status"] == "running"]
    assert [event["train_step"] for event in training] == list(range(1, 7))
    assert all(event["train_steps"] == 6 and event["loss"] > 0 and event["seconds_left"] >= 0 for event in training)
    assert [event["train_step"] for event in training if "heldout_loss" in event] == [3, 6]
    done = {event["step"]: event for event in events if event["status"] == "done"}
    assert done["data"]["kept_minutes"] > 0.5 and "low_dnsmos" in done["data"]["dropped"]
    assert done["consent"]["method"] == "recording" and done["consent"]["speaker"]["passed"]
    assert done["package"]["package"].endswith("Kabir") and not (root / "work" / STATE_FILE).exists()


def test_a_cancelled_run_resumes_to_the_adapter_of_an_uninterrupted_one(inputs, uninterrupted, tmp_path):
    whole, _ = uninterrupted
    progress = Progress()

    def cancel_at_step_5(event: dict) -> None:
        if event.get("train_step") == 5:
            progress.cancel.set()

    progress.on_event = cancel_at_step_5
    with pytest.raises(Cancelled, match="cancelled; nothing was added to the library"):
        adapt(inputs, tmp_path, progress)
    assert not (tmp_path / "voices" / "Kabir").exists() and (tmp_path / "work" / STATE_FILE).exists()

    events: list[dict] = []
    adapt(inputs, tmp_path, Progress(events.append))
    data = next(event for event in events if event["step"] == "data" and event["status"] == "done")
    assert data["resumed"] is True  # the clips were kept
    assert [event["train_step"] for event in events if event["status"] == "running"] == [5, 6]  # from step 4's state
    adapter = "Kabir/adapter.safetensors"
    resumed, reference = load_file(tmp_path / "voices" / adapter), load_file(whole / "voices" / adapter)
    assert resumed.keys() == reference.keys() and all(np.array_equal(resumed[k], reference[k]) for k in reference)
    metrics = (tmp_path / "work" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 6 and [m.split('"time"')[0] for m in metrics] == [
        m.split('"time"')[0] for m in (whole / "work" / "metrics.jsonl").read_text().splitlines()]
