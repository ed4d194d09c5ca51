"""Where long jobs live: one SQLite database and one folder of chunk files per job, under `--data-dir`.

    store = JobStore(Path(data_dir) / "jobs")                      # jobs.sqlite3 + <owner>/<job id>/
    record = store.create(owner, spec, chunks_total=12, reserved_bytes=9_000_000, limits=JobLimits())
    store.save_chunk(record, 3, samples)       # float32 [n]: the file atomically, then its row (False: job ended)
    store.verified_chunks(record)              # {index: samples} of the chunks whose files are intact
    store.finish(record.id, "done")            # or "failed" / "cancelled" (their chunk files are removed)
    store.sweep(retention_s=86_400)            # finished jobs older than that, and orphaned folders

Durability: `rumik_app.sqlite.SQLiteStore`'s rules, as every store of the project (SQLite in WAL
mode with `synchronous=FULL`, a fresh connection per call, `BEGIN IMMEDIATE` transactions, the
file owner-only: jobs hold people's texts). A finished chunk's samples are written
first, atomically (`rumik_app.files.atomic_write`: fsync'ed, renamed, folder fsync'ed), as raw
little-endian float32 (`chunk_00003.f32`), and only then its row, with the file's sha256: a
crash (SIGKILL, power cut) between the two leaves a file without a row, which is simply made
again; a row whose file is missing or does not match its hash is dropped on resume and its
chunk made again. So what a row says is done is on disk, whole.

A job's `spec` (JSON) holds everything needed to finish it after a restart without the request
that made it: the planned chunk requests (spoken text, voice, condition, settings, seed + i),
the output format and rate, the model name. Bounds (`JobLimits`) are checked in the same
transaction that inserts the job: unfinished jobs per owner, and the owner's disk: every
unfinished job counts its upper bound (`reserved_bytes`, its chunks' whole token budgets), a
finished one what it holds. Owner ids are `gate.owner_id`'s (a hash of the API key, or "open").
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rumik_app.files import atomic_write
from rumik_app.request import RequestLimits
from rumik_app.serve.errors import ApiError
from rumik_app.sqlite import SQLiteStore

DB_NAME = "jobs.sqlite3"
SCHEMA_VERSION = 1
SAMPLE_DTYPE = "<f4"  # chunk files: raw little-endian float32 at the engine's rate
SAMPLE_BYTES = 4
JOB_ID = re.compile(r"^job_[0-9a-f]{24}$")
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
ACTIVE = (QUEUED, RUNNING)
FINAL = (DONE, FAILED, CANCELLED)
MB = 1_000_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    spec TEXT NOT NULL,
    chunks_total INTEGER NOT NULL,
    reserved_bytes INTEGER NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, status);
CREATE TABLE IF NOT EXISTS chunks (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    PRIMARY KEY (job_id, idx)
);
"""


@dataclass(frozen=True)
class JobLimits:
    """The bounds of long jobs. max_active: queued or running jobs one API key may have; max_jobs:
    jobs it may keep in all (finished ones until they expire or are deleted); max_chars /
    max_spoken_chars / max_audio_seconds: one job's text as typed, as read, and the audio its
    chunks may make at most (an audiobook chapter of 25,000 characters is ~30 min);
    disk_bytes: what one key's jobs may hold on disk (unfinished ones at their upper bound);
    retention_s: how long a finished job (done, failed or cancelled) is kept; sweep_every_s: how
    often old ones are removed (and once at start); rows: engine batch rows jobs take at most
    together (None: half the server's --max-batch, at least 1), so interactive requests keep rows."""

    max_active: int = 4
    max_jobs: int = 1_000
    max_chars: int = 50_000
    max_spoken_chars: int = 100_000
    max_audio_seconds: float = 4 * 3600.0
    disk_bytes: int = 2 * 1024**3
    retention_s: float = 24 * 3600.0
    sweep_every_s: float = 600.0
    rows: int | None = None

    @property
    def request_limits(self) -> RequestLimits:
        """One job's text and audio bounds, as the planner checks them."""
        return RequestLimits(self.max_chars, self.max_spoken_chars, self.max_audio_seconds)


@dataclass
class JobRecord:
    """One job as stored. spec: see the module docstring; done: {chunk index: samples} of the
    chunks stored so far (filled by `get` / `verified_chunks`); error: {"message", "code"} or None."""

    id: str
    owner: str
    status: str
    created_at: float
    finished_at: float | None
    spec: dict
    chunks_total: int
    reserved_bytes: int
    error: dict | None = None
    done: dict[int, int] = field(default_factory=dict)

    @property
    def stored_bytes(self) -> int:
        return sum(self.done.values()) * SAMPLE_BYTES


def _record(row: tuple) -> JobRecord:
    return JobRecord(row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6], row[7],
                     json.loads(row[8]) if row[8] else None)


JOB_COLUMNS = "id, owner, status, created_at, finished_at, spec, chunks_total, reserved_bytes, error"


class JobStore(SQLiteStore):
    """The jobs database and chunk files under `root` (see the module docstring); every method
    is blocking (the runner calls them off the event loop) and safe from several threads."""

    SCHEMA = SCHEMA
    SCHEMA_VERSION = SCHEMA_VERSION

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        super().__init__(self.root / DB_NAME)

    def folder(self, record: JobRecord) -> Path:
        return self.root / record.owner / record.id

    def chunk_path(self, record: JobRecord, index: int) -> Path:
        return self.folder(record) / f"chunk_{index:05d}.f32"

    # ------------------------------------------------------------------ jobs

    def create(self, owner: str, job_id: str, spec: dict, chunks_total: int, reserved_bytes: int,
               limits: JobLimits) -> JobRecord:
        """Insert a queued job after checking `owner`'s bounds in the same transaction (ApiError
        400 naming the bound and the fix; nothing is stored then)."""
        now = time.time()
        with self._transaction() as con:
            active, kept = con.execute(f"SELECT COALESCE(SUM(status IN {ACTIVE}), 0), COUNT(*) FROM jobs "
                                       "WHERE owner = ?", (owner,)).fetchone()
            if active >= limits.max_active:
                raise ApiError(400, f"This API key already has {active} unfinished jobs, the most it may have at "
                                    "once; wait for one to finish (GET /v1/audio/jobs/{id}) or cancel one "
                                    "(DELETE /v1/audio/jobs/{id}).", code="job_quota")
            if kept >= limits.max_jobs:
                raise ApiError(400, f"This API key keeps {kept} jobs, the most it may; delete finished ones "
                                    "(DELETE /v1/audio/jobs/{id}) or wait for them to expire "
                                    f"({limits.retention_s / 3600:g} h after they finish).", code="job_quota")
            used = self._usage(con, owner)
            if used + reserved_bytes > limits.disk_bytes:
                raise ApiError(400, f"This job may need up to {reserved_bytes / MB:,.0f} MB of storage and this API "
                                    f"key's jobs hold {used / MB:,.0f} MB of its {limits.disk_bytes / MB:,.0f} MB. "
                                    "Delete finished jobs (DELETE /v1/audio/jobs/{id}), wait for them to expire "
                                    f"({limits.retention_s / 3600:g} h after they finish), or send a shorter text "
                                    "or a lower max_seconds.", param="input", code="job_disk_quota")
            con.execute(f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES (?, ?, ?, ?, NULL, ?, ?, ?, NULL)",
                        (job_id, owner, QUEUED, now, json.dumps(spec, ensure_ascii=False), chunks_total,
                         reserved_bytes))
        return JobRecord(job_id, owner, QUEUED, now, None, spec, chunks_total, reserved_bytes)

    def _usage(self, con: sqlite3.Connection, owner: str) -> int:
        """Bytes `owner`'s jobs count against its disk bound (see the module docstring)."""
        rows = con.execute("SELECT j.status, j.reserved_bytes, COALESCE(SUM(c.samples), 0) FROM jobs j "
                           "LEFT JOIN chunks c ON c.job_id = j.id WHERE j.owner = ? GROUP BY j.id", (owner,))
        return sum(max(reserved, samples * SAMPLE_BYTES) if status in ACTIVE else samples * SAMPLE_BYTES
                   for status, reserved, samples in rows)

    def usage(self, owner: str) -> int:
        with self._connect() as con:
            return self._usage(con, owner)

    def get(self, owner: str, job_id: str) -> JobRecord | None:
        """`owner`'s job `job_id` with its stored chunks, or None (another owner's job is None too)."""
        if not JOB_ID.match(job_id):
            return None
        with self._connect() as con:
            row = con.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ? AND owner = ?", (job_id, owner)).fetchone()
            if row is None:
                return None
            record = _record(row)
            record.done = dict(con.execute("SELECT idx, samples FROM chunks WHERE job_id = ?", (job_id,)))
        return record

    def list(self, owner: str) -> list[JobRecord]:
        """`owner`'s jobs, newest first, with their stored chunks."""
        with self._connect() as con:
            rows = con.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE owner = ? ORDER BY created_at DESC",
                               (owner,)).fetchall()
            chunks = con.execute("SELECT c.job_id, c.idx, c.samples FROM chunks c JOIN jobs j ON j.id = c.job_id "
                                 "WHERE j.owner = ?", (owner,)).fetchall()
        records = {row[0]: _record(row) for row in rows}
        for job_id, index, samples in chunks:
            records[job_id].done[index] = samples
        return list(records.values())

    def unfinished(self) -> list[JobRecord]:
        """Every queued or running job, oldest first, with its intact chunks (`verified_chunks`)."""
        with self._connect() as con:
            rows = con.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE status IN {ACTIVE} "
                               "ORDER BY created_at").fetchall()
        records = [_record(row) for row in rows]
        for record in records:
            record.done = self.verified_chunks(record)
        return records

    def finish(self, job_id: str, status: str, error: dict | None = None) -> bool:
        """End an unfinished job as `status` (done, failed, cancelled); False if it had ended already.
        A failed or cancelled job's chunks are removed (rows, then files): only done jobs keep audio."""
        with self._transaction() as con:
            row = con.execute("SELECT owner, status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row[1] not in ACTIVE:
                return False
            con.execute("UPDATE jobs SET status = ?, finished_at = ?, error = ? WHERE id = ?",
                        (status, time.time(), json.dumps(error) if error else None, job_id))
            if status != DONE:
                con.execute("DELETE FROM chunks WHERE job_id = ?", (job_id,))
        if status != DONE:
            self._remove_files(self.root / row[0] / job_id)
        return True

    def delete(self, owner: str, job_id: str) -> bool:
        """Forget a job and its files (False: no such job of `owner`)."""
        with self._transaction() as con:
            gone = con.execute("DELETE FROM jobs WHERE id = ? AND owner = ?", (job_id, owner)).rowcount
        if gone:
            self._remove_files(self.root / owner / job_id)
        return bool(gone)

    def sweep(self, retention_s: float, now: float | None = None) -> int:
        """Remove finished jobs that ended more than `retention_s` ago, and folders no job owns
        (left by a crash between a row's delete and its folder's); returns the jobs removed."""
        cutoff = (time.time() if now is None else now) - retention_s
        # Folders are listed before the jobs are read: a job made meanwhile has a row but was not
        # listed, so its folder is never taken for an orphan.
        listed = [f for f in self.root.glob("*/job_*") if f.is_dir()]
        with self._transaction() as con:
            old = con.execute(f"SELECT owner, id FROM jobs WHERE status IN {FINAL} AND finished_at < ?",
                              (cutoff,)).fetchall()
            con.executemany("DELETE FROM jobs WHERE id = ?", [(job_id,) for _, job_id in old])
            known = {job_id for (job_id,) in con.execute("SELECT id FROM jobs")}
        for owner, job_id in old:
            self._remove_files(self.root / owner / job_id)
        for folder in listed:
            if folder.name not in known and folder.exists():
                self._remove_files(folder)
        return len(old)

    def _remove_files(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # the owner's folder, once empty

    # ------------------------------------------------------------------ chunks

    def save_chunk(self, record: JobRecord, index: int, samples: np.ndarray) -> bool:
        """Store chunk `index`'s samples (float32 [n]): the file atomically, then its row, and the
        job becomes running. False (and no file kept) when the job is no longer unfinished."""
        data = np.ascontiguousarray(samples, dtype=SAMPLE_DTYPE).tobytes()
        path = atomic_write(self.chunk_path(record, index), data)
        with self._transaction() as con:
            row = con.execute("SELECT status FROM jobs WHERE id = ?", (record.id,)).fetchone()
            if row is not None and row[0] in ACTIVE:
                con.execute("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?)",
                            (record.id, index, len(data) // SAMPLE_BYTES, hashlib.sha256(data).hexdigest()))
                con.execute("UPDATE jobs SET status = ? WHERE id = ?", (RUNNING, record.id))
                return True
        path.unlink(missing_ok=True)
        return False

    def verified_chunks(self, record: JobRecord) -> dict[int, int]:
        """{index: samples} of `record`'s stored chunks whose files are whole (their sha256
        matches); the rows of any others are dropped, so those chunks are made again."""
        with self._connect() as con:
            rows = con.execute("SELECT idx, samples, sha256 FROM chunks WHERE job_id = ? ORDER BY idx",
                               (record.id,)).fetchall()
        good, bad = {}, []
        for index, samples, digest in rows:
            path = self.chunk_path(record, index)
            try:
                intact = hashlib.sha256(path.read_bytes()).hexdigest() == digest
            except OSError:
                intact = False
            if intact:
                good[index] = samples
            else:
                bad.append((record.id, index))
        if bad:
            with self._transaction() as con:
                con.executemany("DELETE FROM chunks WHERE job_id = ? AND idx = ?", bad)
        return good

    def read_chunk(self, record: JobRecord, index: int) -> np.ndarray:
        """Chunk `index`'s samples (float32 [n]); OSError if its file is gone."""
        return np.fromfile(self.chunk_path(record, index), dtype=SAMPLE_DTYPE).astype(np.float32, copy=False)
