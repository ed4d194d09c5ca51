"""Long jobs on the speech server: /v1/audio/jobs survives a SIGKILL, belongs to
its API key, frees its rows when cancelled, and is bounded with one clear message per bound.

Run: .venv/bin/python -m pytest -n0 -q tests/rumik_app/test_serve_jobs.py
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from rumik_app.engine.local import TTSEngine
from rumik_app.engine.scheduler import BatchScheduler
from rumik_app.serve.adapters import SchedulerAdapter
from rumik_app.serve.gate import MAX_BODY_BYTES
from rumik_app.serve.jobs.store import DONE, JobLimits, JobStore
from tests.servers import ServerThread, start_server_process, wait_for

KEY_A, KEY_B = "jobs-key-a-0123456789abcdef", "jobs-key-b-0123456789abcdef"
# ~5 planned chunks of ~16 s of expected speech each; every chunk is cut at max_seconds (tiny's noise never stops)
CHAPTER = " ".join(f"This is sentence number {i} of a chapter that keeps on going." for i in range(18))
JOB = {"model": "tiny", "input": CHAPTER, "voice": "Ira", "response_format": "pcm", "seed": 11, "max_seconds": 0.5}
WAIT_S = 120.0
ABANDONED_DOWNLOADS = 4
FFMPEG_GONE_S = 30.0  # generous: the route kills an abandoned download's ffmpeg at the hang-up


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), device="cpu")


def _server(engine, data_dir, max_batch: int = 4, **options) -> ServerThread:
    adapter = SchedulerAdapter(BatchScheduler(engine, max_batch=max_batch, max_queue=16, max_prompt_tokens=1024))
    return ServerThread(adapter, api_key=(KEY_A, KEY_B), data_dir=data_dir, **options)


@pytest.fixture(scope="module")
def server(engine, tmp_path_factory):
    with _server(engine, tmp_path_factory.mktemp("jobs-data")) as srv:
        yield srv


def runner_of(server: ServerThread):
    return server.server.config.app.state.jobs


def create(url: str, key: str, **changes) -> httpx.Response:
    return httpx.post(url + "/v1/audio/jobs", json={**JOB, **changes}, headers=auth(key), timeout=60)


def status(url: str, key: str, job_id: str) -> dict:
    return httpx.get(f"{url}/v1/audio/jobs/{job_id}", headers=auth(key), timeout=10).json()


def wait_done(url: str, key: str, job_id: str, timeout: float = WAIT_S) -> dict:
    wait_for(lambda: status(url, key, job_id)["status"] not in ("queued", "running"), timeout, f"job {job_id}")
    return status(url, key, job_id)


def audio(url: str, key: str, job_id: str) -> bytes:
    answer = httpx.get(f"{url}/v1/audio/jobs/{job_id}/audio", headers=auth(key), timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.content


def test_a_job_reports_progress_as_events_and_its_audio_equals_the_same_speech_request(server):
    made = create(server.url, KEY_A)
    assert made.status_code == 201, made.text
    job = made.json()
    assert job["status"] == "queued" and job["progress"]["chunks_total"] >= 4 and job["seed"] == 11
    events = []
    with httpx.stream("GET", f"{server.url}/v1/audio/jobs/{job['id']}/events", headers=auth(KEY_A),
                      timeout=WAIT_S) as stream:
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((kind, json.loads(line.removeprefix("data: "))))
    assert events[-1][0] == "done" and events[-1][1]["status"] == DONE
    done = [snapshot["progress"]["chunks_done"] for _, snapshot in events]
    assert done == sorted(done) and done[-1] == job["progress"]["chunks_total"]
    final = status(server.url, KEY_A, job["id"])
    assert final["progress"]["audio_seconds"] > final["duration"] > 0
    speech = httpx.post(server.url + "/v1/audio/speech", json=JOB, headers=auth(KEY_A), timeout=60)
    assert audio(server.url, KEY_A, job["id"]) == speech.content  # chunk by chunk, joined: the same 16-bit samples
    assert len(speech.content) / 2 / 24_000 == pytest.approx(final["duration"], abs=1e-3)


def test_a_job_in_another_format_and_rate_equals_the_speech_route_byte_for_byte(server):
    for changes in ({"response_format": "ulaw"}, {"response_format": "wav", "sample_rate": 16_000}):
        job = create(server.url, KEY_A, seed=15, **changes).json()
        assert wait_done(server.url, KEY_A, job["id"])["sample_rate"] == changes.get("sample_rate", 8_000)
        speech = httpx.post(server.url + "/v1/audio/speech", json={**JOB, "seed": 15, **changes}, headers=auth(KEY_A),
                            timeout=60)
        assert audio(server.url, KEY_A, job["id"]) == speech.content, changes


def ffmpeg_children() -> list:
    """This process's ffmpeg descendants; one that ends between the listing and its name is gone."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.name() == "ffmpeg":
                found.append(proc)
        except psutil.NoSuchProcess:  # ended since the listing (ZombieProcess is one too)
            continue
    return found


def test_aac_downloads_abandoned_after_their_first_bytes_leave_no_ffmpeg(server, monkeypatch):
    job = create(server.url, KEY_A, seed=21, response_format="aac").json()
    assert wait_done(server.url, KEY_A, job["id"])["status"] == "done"
    noise = np.random.default_rng(0).uniform(-0.5, 0.5, 24_000 * 60).astype(np.float32)
    # the stored audio, read as ten minutes of noise: each download outlasts its client's hang-up
    monkeypatch.setattr(runner_of(server), "audio", lambda record: (noise for _ in range(10)))
    for _ in range(ABANDONED_DOWNLOADS):
        with httpx.stream("GET", f"{server.url}/v1/audio/jobs/{job['id']}/audio", headers=auth(KEY_A),
                          timeout=60) as answer:
            assert answer.status_code == 200 and next(answer.iter_raw())  # the first bytes, then a hang-up
    wait_for(lambda: not ffmpeg_children(), FFMPEG_GONE_S, "the abandoned downloads' ffmpeg processes to end")


def test_another_key_cannot_see_list_fetch_or_cancel_a_job(server):
    job_id = create(server.url, KEY_A, seed=12).json()["id"]
    for method, path in (("GET", ""), ("GET", "/events"), ("GET", "/audio"), ("DELETE", "")):
        answer = httpx.request(method, f"{server.url}/v1/audio/jobs/{job_id}{path}", headers=auth(KEY_B), timeout=10)
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "job_not_found", (method, path)
    listed = httpx.get(server.url + "/v1/audio/jobs", headers=auth(KEY_B), timeout=10).json()["data"]
    assert job_id not in [item["id"] for item in listed]
    assert wait_done(server.url, KEY_A, job_id)["status"] == DONE  # untouched by the other key
    assert job_id in [item["id"] for item in httpx.get(server.url + "/v1/audio/jobs", headers=auth(KEY_A),
                                                       timeout=10).json()["data"]]


def test_a_cancelled_job_frees_its_rows_and_files_and_makes_nothing_more(engine, tmp_path):
    with _server(engine, tmp_path, max_batch=2) as srv:  # jobs take 1 row of 2
        job = create(srv.url, KEY_A, max_seconds=3.0, input=CHAPTER * 2).json()
        wait_for(lambda: srv.health()["active"] >= 1, WAIT_S, "the job to take a row")
        wait_for(lambda: status(srv.url, KEY_A, job["id"])["progress"]["chunks_done"] >= 1, WAIT_S, "a chunk")
        cancelled = httpx.delete(f"{srv.url}/v1/audio/jobs/{job['id']}", headers=auth(KEY_A), timeout=30).json()
        assert cancelled["status"] == "cancelled"
        wait_for(lambda: srv.health()["active"] == 0 and srv.health()["queue_depth"] == 0, WAIT_S, "rows freed")
        assert runner_of(srv).busy == 0 and not runner_of(srv).jobs
        assert not list(tmp_path.glob("jobs/*/job_*/*.f32"))  # its chunks are gone
        later = status(srv.url, KEY_A, job["id"])
        assert later["status"] == "cancelled" and later["progress"]["chunks_done"] == 0
        refused = httpx.get(f"{srv.url}/v1/audio/jobs/{job['id']}/audio", headers=auth(KEY_A), timeout=10)
        assert refused.status_code == 409 and "cancelled" in refused.json()["error"]["message"]
        gone = httpx.delete(f"{srv.url}/v1/audio/jobs/{job['id']}", headers=auth(KEY_A), timeout=10).json()
        assert gone["deleted"] is True and status(srv.url, KEY_A, job["id"])["error"]["code"] == "job_not_found"


def test_the_bounds_are_each_one_clear_message_and_nothing_is_lost(engine, tmp_path):
    with _server(engine, tmp_path) as srv:
        runner = runner_of(srv)
        runner.limits = JobLimits(max_active=1, disk_bytes=4_000_000)
        first = create(srv.url, KEY_A)
        assert first.status_code == 201
        busy = create(srv.url, KEY_A, seed=13)
        assert busy.status_code == 400 and busy.json()["error"]["code"] == "job_quota"
        assert "unfinished jobs" in busy.json()["error"]["message"] and "DELETE /v1/audio/jobs" in \
            busy.json()["error"]["message"]
        too_big = create(srv.url, KEY_B, max_seconds=20.0)  # a separate owner, but past its disk bound
        error = too_big.json()["error"]
        assert too_big.status_code == 400 and error["code"] == "job_disk_quota" and "MB" in error["message"]
        runner.limits = JobLimits(max_chars=3_000)
        long = create(srv.url, KEY_B, input="word " * 700)
        assert long.status_code == 400 and long.json()["error"]["param"] == "input"
        assert "3,000" in long.json()["error"]["message"]
        sse = create(srv.url, KEY_B, stream_format="sse")
        assert sse.status_code == 400 and sse.json()["error"]["code"] == "unsupported_job"
        flac = create(srv.url, KEY_B, response_format="flac")  # written whole: hours of it would sit in memory
        assert flac.status_code == 400 and flac.json()["error"]["param"] == "response_format"
        assert "wav, pcm, mp3" in flac.json()["error"]["message"]
        assert wait_done(srv.url, KEY_A, first.json()["id"])["status"] == DONE  # the accepted job is whole
        assert len(audio(srv.url, KEY_A, first.json()["id"])) > 0
        runner.limits = JobLimits(max_jobs=1)  # finished jobs count too, until deleted or expired
        kept = create(srv.url, KEY_A, seed=16)
        assert kept.status_code == 400 and "keeps 1 jobs" in kept.json()["error"]["message"]
        listed = [httpx.get(srv.url + "/v1/audio/jobs", headers=auth(key), timeout=10).json()["data"]
                  for key in (KEY_A, KEY_B)]
        assert [len(jobs) for jobs in listed] == [1, 0]  # refused jobs left nothing behind
        assert len(list(tmp_path.glob("jobs/*/job_*"))) == 1


def test_an_audiobook_chapter_of_25000_characters_is_accepted(server):
    chapter = ("यह एक लंबी कहानी का वाक्य है जो आगे बढ़ता रहता है। " * 600)[:28_000]
    assert len(json.dumps({**JOB, "input": chapter}, ensure_ascii=False).encode()) > MAX_BODY_BYTES  # speech's cap
    made = create(server.url, KEY_B, input=chapter, seed=14)
    assert made.status_code == 201, made.text
    assert made.json()["characters"] >= 25_000 and made.json()["progress"]["chunks_total"] > 50
    cancelled = httpx.delete(f"{server.url}/v1/audio/jobs/{made.json()['id']}", headers=auth(KEY_B), timeout=30)
    assert cancelled.json()["status"] in ("cancelled", "failed")


def test_without_a_data_dir_jobs_are_off_with_the_flag_to_turn_them_on(engine):
    with _server(engine, None) as srv:
        answer = create(srv.url, KEY_A)
        assert answer.status_code == 501 and "--data-dir" in answer.json()["error"]["message"]


@pytest.mark.parametrize("damage", ["garbage", "folder"])
def test_a_damaged_job_store_turns_off_jobs_and_the_server_still_speaks(engine, tmp_path, damage):
    store_path = tmp_path / "jobs" / "jobs.sqlite3"
    store_path.parent.mkdir()
    if damage == "folder":
        store_path.mkdir()
    else:
        store_path.write_bytes(b"this is not a database " * 200)
    with _server(engine, tmp_path) as srv:
        answer = create(srv.url, KEY_A)
        error = answer.json()["error"]
        assert answer.status_code == 503 and error["code"] == "jobs_unavailable"
        assert str(store_path) in error["message"] and "move the file aside" in error["message"]
        speech = httpx.post(srv.url + "/v1/audio/speech", json={**JOB, "max_seconds": 0.3}, headers=auth(KEY_A),
                            timeout=60)
        assert speech.status_code == 200 and len(speech.content) > 0
    assert store_path.exists()  # left as it was, for its owner to look at


def test_the_store_sweeps_old_jobs_and_orphans_and_drops_damaged_chunks(tmp_path):
    store = JobStore(tmp_path)
    spec = {"chunks": [], "rate": 24_000}
    record = store.create("open", "job_" + "a" * 24, spec, 2, 1_000, JobLimits())
    assert store.save_chunk(record, 0, np.ones(10, np.float32)) and store.save_chunk(record, 1, np.ones(5, np.float32))
    store.chunk_path(record, 1).write_bytes(b"damaged")
    assert store.verified_chunks(record) == {0: 10}  # chunk 1 is made again
    assert store.finish(record.id, DONE) and not store.finish(record.id, "cancelled")
    orphan = tmp_path / "open" / ("job_" + "b" * 24)
    orphan.mkdir()
    assert store.sweep(retention_s=3600) == 0 and not orphan.exists() and store.get("open", record.id) is not None
    assert store.sweep(retention_s=3600, now=record.created_at + 7200) == 1
    assert store.get("open", record.id) is None and not (tmp_path / "open").exists()


@pytest.mark.slow
def test_sigkill_mid_job_then_restart_finishes_it_equal_to_an_uninterrupted_run(tiny_checkpoint, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"{KEY_A}\n{KEY_B}\n")
    data = tmp_path / "data"
    args = ("--max-batch", "1", "--served-model-name", "tiny", "--api-keys-file", str(keys), "--data-dir", str(data))
    # 12 chunks, one at a time: killed after 2. With 6, a quiet machine finished the other 4 between the
    # poll that saw 2 and the kill (a clean-clone CI run found all 6 written).
    body = {**JOB, "input": f"{CHAPTER} {CHAPTER}", "max_seconds": 1.0}
    proc, url = start_server_process(tiny_checkpoint, *args)
    try:
        job = create(url, KEY_A, **body).json()
        total = job["progress"]["chunks_total"]
        wait_for(lambda: status(url, KEY_A, job["id"])["progress"]["chunks_done"] >= 2, WAIT_S, "two chunks")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.unlink(proc.log_path)
    stored = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in data.glob("jobs/*/job_*/*.f32")}
    assert 2 <= len(stored) < total  # killed mid-job
    proc, url = start_server_process(tiny_checkpoint, *args)
    try:
        assert status(url, KEY_B, job["id"])["error"]["code"] == "job_not_found"
        resumed = wait_done(url, KEY_A, job["id"])
        assert resumed["status"] == DONE and resumed["progress"]["chunks_done"] == total
        assert {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in stored} == stored  # not made again
        again = create(url, KEY_A, **body).json()  # the same request, uninterrupted
        assert wait_done(url, KEY_A, again["id"])["status"] == DONE
        killed_audio = audio(url, KEY_A, job["id"])
        assert killed_audio == audio(url, KEY_A, again["id"])
        speech = httpx.post(url + "/v1/audio/speech", json=body, headers=auth(KEY_A), timeout=120)
        assert killed_audio == speech.content
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        os.unlink(proc.log_path)
    assert len(np.frombuffer(killed_audio, "<i2")) > 0 and Path(data / "jobs" / "jobs.sqlite3").is_file()
