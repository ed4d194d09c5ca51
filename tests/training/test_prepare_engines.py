"""training.prepare on Ray Data: a local Ray run with 2 workers writes what the single-process run
writes, and a Ray run killed mid-way resumes to the same files without redoing finished shards.

The corpus: 60 espeak-ng rows in English, Hindi and Tamil, two of them 25 s English recordings
that the VAD cuts into utterances (benchmarks/espeak_corpus.py). Every stage runs: silero VAD,
pocketsphinx transcribing the utterances, the silent, clipping and SNR filters, resemblyzer
embeddings and the tiny checkpoint's Mimi. DNSMOS is left to tests/training/test_prepare_filters.py
(0.4 s a clip on one core here).

One Ray run makes the files both Ray tests read (`killed_and_resumed`): a command with 2 workers,
joined to the module's Ray, is SIGKILLed once its first shard is written, and the same run started
again resumes it. Every shard is then written by a Ray run with 2 workers (the killed one or the
resumed one) and compared with the local run's, so one Ray pass over the corpus serves both claims;
a Ray run costs its actors' start (each loads torch and every judge) and Ray Data's polling for its
whole length, more than the shards' own work.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.espeak_corpus import make_corpus
from training.prepare import PrepareConfig, prepare

pytestmark = pytest.mark.slow

SETTINGS = {"max_seconds": 20.0, "asr": "pocketsphinx", "min_snr_db": 15.0, "speaker_encoder": "resemblyzer",
            "shard_size": 12}
KILL_TIMEOUT_S = 600  # until the first shard: the actors' start (~36 CPU s each) and 12 rows, on a loaded machine
CLIPS = 60  # every claim holds at 100 and 200 too; each row costs every stage twice (local and Ray)
SHARDS = 5  # CLIPS rows of 12: the kill still lands with some shards finished and some not


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("corpus"), clips=CLIPS, long_recordings=2, long_seconds=25.0)


@pytest.fixture(scope="module")
def ray_cluster() -> str:
    """One local Ray instance for the module (2 CPUs for cleaners + 1 for Mimi); its GCS address, which a
    run in another process joins with --address (prepare leaves a Ray it did not start running)."""
    import ray

    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def local_run(corpus, tiny_checkpoint, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("local") / "data"
    return out, prepare(corpus, str(tiny_checkpoint), out, config=PrepareConfig(**SETTINGS), device="cpu")


def assert_same_output(one: Path, other: Path) -> None:
    """Same index (byte for byte), codes and embeddings (float16, to 1e-2) in every shard, same report."""
    assert (one / "index.jsonl").read_text(encoding="utf-8") == (other / "index.jsonl").read_text(encoding="utf-8")
    names = sorted(p.name for p in (other / "shards").glob("*.npy"))
    assert names == sorted(p.name for p in (one / "shards").glob("*.npy"))
    for name in names:
        first, second = np.load(one / "shards" / name), np.load(other / "shards" / name)
        if name.endswith(".emb.npy"):
            np.testing.assert_allclose(first.astype(np.float32), second.astype(np.float32), atol=1e-2)
        else:
            assert np.array_equal(first, second), name
    reports = [json.loads((folder / "report.json").read_text(encoding="utf-8")) for folder in (one, other)]
    for report in reports:
        report.pop("run")
    assert reports[0] == reports[1]


@pytest.fixture(scope="module")
def killed_and_resumed(corpus, tiny_checkpoint, tmp_path_factory, ray_cluster) -> dict:
    """A Ray run with 2 workers as a command that joins the module's Ray (--address, as on a cluster),
    SIGKILLed (its job ends there) once its first shard is written; then the same run in this
    process, which resumes. Returns its folder, the shards finished before the kill with their
    files' mtimes, the resumed run's report and the killed command's log."""
    out = tmp_path_factory.mktemp("ray") / "data"
    command = [sys.executable, "-m", "training.prepare", "--manifest", str(corpus), "--model", str(tiny_checkpoint),
               "--out", str(out), "--engine", "ray", "--workers", "2", "--address", ray_cluster,
               *[arg for key, value in SETTINGS.items() for arg in ("--set", f"{key}={value}")]]
    log = out.with_name("killed.log")
    with open(log, "wb") as sink:  # a file, not a pipe: Ray's logs must never block the run
        process = subprocess.Popen(command, start_new_session=True, stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while not list((out / "shards").glob("shard_*.json")) and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    finished = sorted((out / "shards").glob("shard_*.json"))
    stamps = {p: p.stat().st_mtime_ns for base in finished for p in (base, base.with_suffix(".npy"))}
    report = prepare(corpus, str(tiny_checkpoint), out, config=PrepareConfig(**SETTINGS), engine="ray", workers=2)
    return {"out": out, "finished": finished, "stamps": stamps, "report": report, "log": log}


def test_local_run_segments_recordings_and_counts_every_stage(local_run):
    out, report = local_run
    rows = [json.loads(line) for line in (out / "index.jsonl").read_text(encoding="utf-8").splitlines()]
    pieces = [row for row in rows if "segment" in row]
    assert len({row["line"] for row in pieces}) == 2 and len(pieces) >= 3  # both recordings, cut
    for row in pieces:
        assert 2.0 <= row["seconds"] <= 20.0 and row["transcribed"] and row["text"]
        assert row["source_end"] - row["source_start"] == pytest.approx(row["seconds"], abs=2e-3)
    assert set(report["by_language"]) == {"en", "hi", "ta"}
    assert report["counts"]["lines"] == CLIPS and report["counts"]["rows"] == CLIPS
    assert report["kept"] == len(rows) == report["counts"]["kept"]
    filtered = sum(report["dropped"].get(key, 0) for key in ("silent", "clipped", "low_snr"))
    assert report["kept"] == report["counts"]["utterances"] - filtered
    assert set(report["speakers"]["mean_cosine"]) == {"Aisha", "Ira", "Siya"}
    assert all(report["run"]["stage_seconds"][stage] > 0 for stage in ("decode", "segment", "embed", "encode"))
    assert report["run"] | {"stage_seconds": None} == {"engine": "local", "shards": SHARDS, "encoded_shards": SHARDS,
                                                       "reused_shards": 0, "stage_seconds": None}


def test_ray_with_two_workers_writes_what_one_process_writes(local_run, killed_and_resumed):
    """Every shard, the index and the report of the Ray runs with 2 workers (the killed one's finished
    shards, the resumed one's others) equal the single-process run's."""
    report = killed_and_resumed["report"]
    assert report["run"]["engine"] == "ray" and report["run"]["shards"] == SHARDS
    assert report["run"]["encoded_shards"] + report["run"]["reused_shards"] == SHARDS
    assert_same_output(local_run[0], killed_and_resumed["out"])


def test_a_killed_ray_run_resumes_without_redoing_finished_shards(local_run, killed_and_resumed):
    """The kill came mid-way (some shards finished, not all); the resumed run reused every finished
    shard without writing it again, prepared only the others, and ends with the local run's files."""
    out, finished, stamps = (killed_and_resumed[key] for key in ("out", "finished", "stamps"))
    assert 1 <= len(finished) < SHARDS, killed_and_resumed["log"].read_text(errors="replace")[-2000:]
    report = killed_and_resumed["report"]
    assert report["run"]["reused_shards"] >= len(finished)
    assert report["run"]["encoded_shards"] == SHARDS - report["run"]["reused_shards"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # finished shards were not written again
    assert any("segment" in json.loads(row) for row in (out / "index.jsonl").read_text().splitlines())
    assert_same_output(local_run[0], out)
