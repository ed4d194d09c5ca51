"""A voice adaptation reports every step in order, can be cancelled mid-training, and resumes from its
work folder to the very adapter an uninterrupted run makes (same seed); as a job (training.voice.jobs),
killed mid-training, it resumes after a restart to that adapter too; and through the speech server
(POST /v1/voices/adaptations, progress as server-sent events), to that adapter again, the voice then
listed and speaking (watermarked) without a restart, while hostile uploads are refused with their reason.

One small configuration of the smoke (90 s of espeak-ng recordings, 6 training steps of 2 clips,
a training state every 2 steps) keeps the three runs cheap: uninterrupted, cancelled at step 5
(after the state of step 4), and resumed.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
import pytest
from safetensors.numpy import load_file

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.voices.library import use_library
from rumik_app.voices.makers import load_voice_maker
from rumik_app.voices.package import VoiceError
from rumik_app.watermark.marker import shared_watermarker
from tests.servers import ServerThread, wait_for
from training.voice import smoke
from training.voice.create import create_voice, smoke_config
from training.voice.jobs import AdaptationJobs, JobError
from training.voice.progress import STEPS, Cancelled, Progress
from training.voice.train_state import STATE_FILE

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]

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


# ---------------------------------------------------------------------------- the same run as a job

# The child's worker pauses when training step 5 is reported (after step 4's state), so the parent's
# SIGKILL lands mid-training, every time, on a loaded machine too.
JOB_CHILD = """
import sys, time
from pathlib import Path
import torch
torch.set_num_threads(1)  # as the test process (conftest): the same sums in the same order
from training.voice.jobs import AdaptationJobs
from training.voice.progress import Progress
report = Progress.training
def slow(self, step, total, metrics):
    report(self, step, total, metrics)
    if step == 5:
        time.sleep(600)
Progress.training = slow
AdaptationJobs(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[5:], config=Path(sys.argv[4])).start()
time.sleep(900)
"""


def job_inputs(inputs, folder: Path) -> tuple[Path, Path]:
    """Copies of the recordings and the consent (submit moves them into the job)."""
    recordings, consent = inputs
    shutil.copytree(recordings, folder / "recordings")
    return folder / "recordings", Path(shutil.copy(consent, folder / "consent.wav"))


def wait_state(jobs: AdaptationJobs, job: str, states: tuple[str, ...], timeout: float = 600.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = jobs.status(job)
        if status["state"] in states:
            return status
        time.sleep(0.2)
    raise AssertionError(f"{job} stayed {jobs.status(job)} for {timeout} s")


def test_a_job_killed_mid_training_resumes_after_a_restart_to_the_same_adapter(inputs, uninterrupted, tmp_path):
    whole, _ = uninterrupted
    root, voices = tmp_path / "jobs", tmp_path / "voices"
    model = smoke_config(SETTINGS, None, tmp_path).model  # the smoke's settings file, as `adapt` uses it
    config = tmp_path / "smoke_settings.json"
    jobs = AdaptationJobs(root, voices, model, SETTINGS, config=config)
    job = jobs.submit("Kabir", *job_inputs(inputs, tmp_path), smoke.STATEMENT)["id"]
    child = subprocess.Popen([sys.executable, "-c", JOB_CHILD, str(root), str(voices), model, str(config), *SETTINGS],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(event.get("train_step") == 5 for _, event in jobs.events(job)), timeout=600,
                 what="training step 5 in the child")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert jobs.status(job)["state"] == "running" and not (voices / "Kabir").exists()

    jobs.start()  # the restart: the killed job is queued again and resumes from its work folder
    try:
        status = wait_state(jobs, job, ("done", "failed", "cancelled"))
    finally:
        jobs.close()
    assert status["state"] == "done" and status["error"] is None, status
    resumed = [event["train_step"] for _, event in jobs.events(job) if event["status"] == "running"]
    assert resumed == [1, 2, 3, 4, 5, 5, 6]  # the child's five, then the restart's from step 4's state
    adapter = "Kabir/adapter.safetensors"
    made, reference = load_file(voices / adapter), load_file(whole / "voices" / adapter)
    assert all(np.array_equal(made[k], reference[k]) for k in reference)
    assert sorted(p.name for p in (root / job).iterdir()) == ["report.json"]  # inputs and work removed


def test_the_queue_refuses_what_create_would_and_cancels_a_queued_job(inputs, tmp_path):
    jobs = AdaptationJobs(tmp_path / "jobs", tmp_path / "voices", "unused", max_queued=1)
    with pytest.raises(VoiceError, match="built-in voice"):
        jobs.submit("Ira", *job_inputs(inputs, tmp_path / "a"), smoke.STATEMENT)
    assert (tmp_path / "a" / "recordings").is_dir()  # nothing was moved
    created = jobs.submit("Kabir", *job_inputs(inputs, tmp_path / "b"), smoke.STATEMENT)
    assert created["state"] == "queued" and created == jobs.status(created["id"])  # not started: no worker
    job = created["id"]
    with pytest.raises(JobError, match="at most 1"):
        jobs.submit("Meera", *job_inputs(inputs, tmp_path / "c"), smoke.STATEMENT)
    assert jobs.cancel(job)["state"] == "cancelled"
    assert sorted(p.name for p in (tmp_path / "jobs" / job).iterdir()) == ["report.json"]
    with pytest.raises(JobError, match="No voice adaptation"):
        jobs.status("vjob_nothing")


# ---------------------------------------------------------------------------- the same run through the server

KEY, ADMIN = "adapt-api-key-0123456789", "adapt-admin-key-0123456789"
ADAPTATIONS = "/v1/voices/adaptations"


def admin(**headers) -> dict:
    return {"Authorization": f"Bearer {ADMIN}", **headers}


def zipped(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A speech server of the smoke's base with a voice library and adaptations (what --adapt-voices builds)."""
    root = tmp_path_factory.mktemp("adapting")
    model = smoke_config(SETTINGS, None, root).model
    engine = TTSEngine.from_pretrained(model, device="cpu")
    use_library(engine, root / "voices")
    maker = load_voice_maker("lora", root=root / "data" / "voice-adaptations", voices_dir=root / "voices",
                             model=model, settings=SETTINGS, config=root / "smoke_settings.json")
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=2, max_queue=8, max_prompt_tokens=256))
    with ServerThread(adapter, api_key=KEY, admin_key=ADMIN, data_dir=root / "data", voice_maker=maker) as srv:
        yield srv, root


def upload(inputs, name: str = "Kabir", recordings: list[tuple] | None = None, **fields) -> dict:
    """The multipart form of an adaptation: the recordings zipped (as a phone would send a folder)."""
    folder, consent = inputs
    if recordings is None:
        archive = zipped({path.name: path.read_bytes() for path in sorted(folder.iterdir())}, zipfile.ZIP_STORED)
        recordings = [("recordings", ("kabir.zip", archive, "application/zip"))]
    files = [*recordings, ("consent", ("consent.wav", consent.read_bytes(), "audio/wav"))]
    return {"files": files, "data": {"name": name, "statement": smoke.STATEMENT, **fields}}


def sse_events(server_url: str, job: str) -> list[tuple[str, dict]]:
    events, kind = [], None
    with httpx.stream("GET", server_url + f"{ADAPTATIONS}/{job}", headers=admin(Accept="text/event-stream"),
                      timeout=httpx.Timeout(30, read=120)) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[len("event: "):]
            elif line.startswith("data: "):
                events.append((kind, json.loads(line[len("data: "):])))
    return events


def test_through_the_server_an_adaptation_streams_its_progress_and_its_voice_speaks_without_a_restart(
        inputs, uninterrupted, server):
    srv, root = server
    refused = httpx.post(srv.url + ADAPTATIONS, headers={"Authorization": f"Bearer {KEY}"}, timeout=10,
                         **upload(inputs))
    assert refused.status_code == 401 and "--admin-key" in refused.json()["error"]["message"]  # not an API key
    posted = httpx.post(srv.url + ADAPTATIONS, headers=admin(), timeout=60, **upload(inputs))
    # The job as created, whatever the worker has done since (CI saw it "running" its data step already).
    assert posted.status_code == 202 and posted.json()["state"] == "queued", posted.text
    assert posted.json()["step"] is None and posted.json()["events"] == [], posted.text
    job = posted.json()["id"]
    events = sse_events(srv.url, job)
    assert events[-1][0] == "done" and events[-1][1]["state"] == "done", events[-1]
    progress = [event for kind, event in events if kind == "progress"]
    steps = [(event["step"], event["status"]) for event in progress if event["status"] != "running"]
    assert steps == [(step, status) for step in STEPS for status in ("started", "done")]
    assert [event["train_step"] for event in progress if event["status"] == "running"] == list(range(1, 7))
    polled = httpx.get(srv.url + f"{ADAPTATIONS}/{job}?after=3", headers=admin(), timeout=10).json()
    assert polled["state"] == "done" and polled["events"][0]["seq"] == 4 and len(polled["events"]) == len(events) - 4

    listed = httpx.get(srv.url + "/v1/voices", headers={"Authorization": f"Bearer {KEY}"}, timeout=10).json()["data"]
    kabir = next(voice for voice in listed if voice["name"] == "Kabir")
    assert kabir["kind"] == "library" and kabir["consent"]["checked_by"] == "recording"
    adapter = "Kabir/adapter.safetensors"  # the server's run is the uninterrupted run: same data, seed, settings
    made, reference = load_file(root / "voices" / adapter), load_file(uninterrupted[0] / "voices" / adapter)
    assert all(np.array_equal(made[k], reference[k]) for k in reference)
    spoken = httpx.post(srv.url + "/v1/audio/speech", headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
                        json={"model": "tiny", "input": "Hello there.", "voice": "Kabir", "response_format": "pcm",
                              "seed": 5, "max_seconds": 1.0})
    assert spoken.status_code == 200, spoken.text
    wave = np.frombuffer(spoken.content, "<i2").astype(np.float32) / 32768
    assert shared_watermarker().is_watermarked(wave, 24_000)
    assert sorted(p.name for p in (root / "data" / "voice-adaptations" / job).iterdir()) == ["report.json"]


def one_hertz_wav(seconds: int = 36_000) -> bytes:
    """A WAV header declaring `seconds` of 1 Hz 16-bit mono, and 64 bytes of it."""
    data = seconds * 2
    return (b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 1, 2, 2, 16)
            + b"data" + struct.pack("<I", data) + bytes(64))


# Each made when its test runs (not at import, in every worker): the file fields and the reason the refusal names.
HOSTILE = {
    "a zip bomb": lambda: ([("recordings", ("r.zip", zipped({"a.wav": bytes(32 * 2**20)}), "application/zip"))],
                           "recordings barely compress"),
    "a 1 Hz WAV declaring hours": lambda: ([("recordings", ("long.wav", one_hertz_wav(), "audio/wav"))], "1 Hz"),
    "10,000 tiny files": lambda: ([("recordings", ("many.zip", zipped({f"{k:05d}.wav": b"RIFF" for k in range(10_000)}),
                                                   "application/zip"))], "at most 2,000"),
    "a name with ../": lambda: ([("recordings", ("../evil.wav", b"RIFF", "audio/wav"))], "not a plain file name"),
    "a zip member with ../": lambda: ([("recordings", ("r.zip", zipped({"../evil.wav": b"RIFF"}), "application/zip"))],
                                      "a path outside the archive"),
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_a_hostile_upload_is_refused_with_its_reason_and_leaves_nothing(inputs, server, what):
    srv, root = server
    recordings, reason = HOSTILE[what]()
    refused = httpx.post(srv.url + ADAPTATIONS, headers=admin(), timeout=60,
                         **upload(inputs, name="Hostile", recordings=recordings))
    assert refused.status_code in (400, 413) and reason in refused.json()["error"]["message"], refused.text
    assert "Traceback" not in refused.text
    jobs = root / "data" / "voice-adaptations"
    assert not (jobs / "uploads").exists() or not any((jobs / "uploads").iterdir())
    assert not list(jobs.glob("vjob_*/inputs")) and not list(root.rglob("evil.wav"))
    assert not (root / "voices" / "Hostile").exists()


def test_a_taken_name_visitor_settings_and_an_unknown_job_get_their_errors(inputs, server):
    srv, _ = server
    builtin = httpx.post(srv.url + ADAPTATIONS, headers=admin(), timeout=60, **upload(inputs, name="Ira"))
    assert builtin.status_code == 400 and "built-in voice" in builtin.json()["error"]["message"]
    settings = httpx.post(srv.url + ADAPTATIONS, headers=admin(), timeout=60,
                          **upload(inputs, name="Dev", settings="model=/elsewhere"))
    assert settings.status_code == 400 and "the model and the judges" in settings.json()["error"]["message"]
    unknown = httpx.get(srv.url + f"{ADAPTATIONS}/vjob_nothing", headers=admin(), timeout=10)
    assert unknown.status_code == 404 and "POST /v1/voices/adaptations" in unknown.json()["error"]["message"]
    assert httpx.delete(srv.url + f"{ADAPTATIONS}/vjob_nothing", headers=admin(), timeout=10).status_code == 404


def test_a_server_killed_mid_adaptation_resumes_it_when_it_starts_again(inputs, uninterrupted, tmp_path):
    """`rumik serve --adapt-voices` SIGKILLed during training; started again on the same --data-dir, it finishes
    the job to the uninterrupted run's adapter (the job store and the work folder are the server's)."""
    import sqlite3

    from tests.servers import start_server_process

    model = smoke_config(SETTINGS, None, tmp_path).model
    args = ["--voices", str(tmp_path / "voices"), "--data-dir", str(tmp_path / "data"), "--admin-key", ADMIN,
            "--adapt-voices", "--adapt-config", str(tmp_path / "smoke_settings.json"),
            *(word for setting in SETTINGS for word in ("--adapt-set", setting))]
    database = tmp_path / "data" / "voice-adaptations" / "voice_jobs.sqlite3"

    def trained_steps() -> int:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)) as con:
            rows = con.execute("SELECT event FROM voice_job_events").fetchall()
        return max((json.loads(event).get("train_step") or 0 for (event,) in rows), default=0)

    proc, url = start_server_process(model, *args)
    try:
        job = httpx.post(url + ADAPTATIONS, headers=admin(), timeout=60, **upload(inputs)).json()["id"]
        deadline = time.monotonic() + 600
        while trained_steps() < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert trained_steps() >= 3 and not (tmp_path / "voices" / "Kabir").exists()  # killed mid-training

    proc, url = start_server_process(model, *args)
    try:
        events = sse_events(url, job)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert events[-1][0] == "done", events[-1]
    adapter = "Kabir/adapter.safetensors"
    made, reference = load_file(tmp_path / "voices" / adapter), load_file(uninterrupted[0] / "voices" / adapter)
    assert all(np.array_equal(made[k], reference[k]) for k in reference)
