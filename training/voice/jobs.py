"""Voice adaptations as background jobs: queued, one at a time per process, progress kept, resumed after a restart.

    jobs = AdaptationJobs(Path(data_dir) / "voice-jobs", Path("voices"), model="rumik-ai/rumik-oss-1",
                          settings=["train.steps=300"], config=None)   # a VoiceConfig file, then --set
    jobs.start()                                   # the worker thread; unfinished jobs are queued again
    job = jobs.submit("Arjun", recordings_dir, consent_file, statement)["id"]   # inputs moved into the job
    jobs.status(job)       # {"id", "name", "state", "step", "error", "created_at", "updated_at"}
    jobs.events(job, after=0)                      # [(seq, event)] since `after` (training.voice.progress)
    jobs.cancel(job)                               # a queued job at once, a running one at its next check
    jobs.close()

States: queued, running, done, failed, cancelled. Each job has a folder ROOT/<id>/ with `inputs/`
(the recordings and the consent, moved in by `submit`) and `work/` (create_voice's WORK); its row
and its events live in ROOT/voice_jobs.sqlite3 (rumik_app.sqlite's rules: a committed event is on
disk). A process killed mid-job leaves the job `running`: the next `start()` queues it again and
create_voice resumes it from its work folder (the clips kept, training from the last state).
A job that ends keeps only its row, its events and `report.json` (its state, the error, the data
report); its inputs and work are removed (a done job's voice is in the library, consent included).
A name that is taken or a built-in voice's, a consent file of the wrong kind and settings a
visitor may not send are refused by `submit` before anything is moved; recordings that are
refused (training.voice.uploads: zips, file counts, headers) leave nothing behind. At most
`max_queued` jobs wait: one more is refused with the fix. A user error (RumikError: too little
audio, a refused consent) fails the job with its message; anything else fails it with
"internal error" and the traceback goes to the log only.
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import threading
import time
from pathlib import Path

from rumik_app.errors import RumikError
from rumik_app.files import atomic_write
from rumik_app.sqlite import SQLiteStore
from rumik_app.voices.makers import AdaptationsFull, MakerError, UnknownAdaptation
from rumik_app.voices.package import consent_record
from training.config import load_config
from training.voice.progress import Cancelled, Progress
from training.voice.uploads import check_upload, check_visitor_settings
from training.voice.voice_config import VoiceConfig

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
UNFINISHED = (QUEUED, RUNNING)
RECORD = ("id", "name", "state", "step", "error", "created_at", "updated_at")  # a job as `status` and `submit` give it
MAX_QUEUED = 4
MAX_EVENTS = 20_000  # per job: a 300-step run gives ~320
POLL_S = 0.5
DB_NAME = "voice_jobs.sqlite3"
UPLOADS = "uploads"
INTERNAL = "internal error while adapting the voice; the server's log has the details"
log = logging.getLogger(__name__)


JobError = MakerError  # the core's errors, so the server's routes map them without importing training


class AdaptationStore(SQLiteStore):
    SCHEMA = """
    CREATE TABLE IF NOT EXISTS voice_jobs (
        id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL, spec TEXT NOT NULL,
        step TEXT, error TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL);
    CREATE TABLE IF NOT EXISTS voice_job_events (
        job_id TEXT NOT NULL REFERENCES voice_jobs(id), seq INTEGER NOT NULL, event TEXT NOT NULL,
        PRIMARY KEY (job_id, seq));
    """
    SCHEMA_KEY = "voice_jobs_schema"


class AdaptationJobs:
    """The queue, its worker thread and its store (module docstring)."""

    def __init__(self, root: Path, voices_dir: Path, model: str, settings: list[str] | None = None,
                 max_queued: int = MAX_QUEUED, config: Path | None = None):
        self.root, self.voices_dir, self.model = Path(root), Path(voices_dir), model
        self.config = Path(config) if config else None  # a VoiceConfig file under every job's settings
        self.settings, self.max_queued = list(settings or []), max_queued
        load_config(VoiceConfig, self.config, self.settings).validate()  # a bad operator setting fails at start
        self.store = AdaptationStore(self.root / DB_NAME)
        self._wake, self._stop = threading.Event(), threading.Event()
        self._cancels: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the API
    def staging(self) -> Path:
        """A new, empty folder under ROOT/uploads for one upload's files (the caller removes it after submit)."""
        folder = self.root / UPLOADS / secrets.token_hex(12)
        folder.mkdir(parents=True)
        return folder

    def submit(self, name: str, recordings: Path, consent: Path, statement: str, document: bool = False,
               settings: list[str] | None = None) -> dict:
        """Check and queue a job (module docstring); the recordings folder and the consent file are moved
        into ROOT/<id>/inputs; returns the job's record as created (`status`'s keys, state "queued").
        AdaptationsFull when full; VoiceError, DataError or ConfigError for a name, consent, recordings or
        settings that are refused (nothing is kept of those)."""
        from training.voice.create import check_new_voice

        settings = self.settings + check_visitor_settings(list(settings or []))
        cfg = load_config(VoiceConfig, self.config, settings)
        check_new_voice(name, self.voices_dir)
        consent_record(statement, consent, document=document)
        self._check_room()
        job_id = "vjob_" + secrets.token_hex(12)
        inputs = self.root / job_id / "inputs"
        inputs.mkdir(parents=True)
        try:
            moved = shutil.move(str(consent), inputs / ("consent" + Path(consent).suffix.lower()))
            shutil.move(str(recordings), inputs / "recordings")
            check_upload(inputs / "recordings", cfg.data)
            spec = {"statement": statement, "consent": Path(moved).name, "document": document, "settings": settings}
            with self.store._transaction() as con:
                self._check_room(con)
                now = time.time()
                con.execute("INSERT INTO voice_jobs VALUES (?, ?, ?, ?, NULL, NULL, ?, ?)",
                            (job_id, name, QUEUED, json.dumps(spec), now, now))
        except BaseException:
            shutil.rmtree(self.root / job_id, ignore_errors=True)
            raise
        self._wake.set()
        return dict(zip(RECORD, (job_id, name, QUEUED, None, None, now, now), strict=True))

    def _check_room(self, con=None) -> None:
        if con is None:
            with self.store._connect() as con:
                return self._check_room(con)
        waiting = con.execute("SELECT COUNT(*) FROM voice_jobs WHERE state IN (?, ?)", UNFINISHED).fetchone()[0]
        if waiting >= self.max_queued:
            raise AdaptationsFull(f"{waiting} voice adaptations are already queued or running (at most "
                                  f"{self.max_queued}); try again when one has finished.")

    def status(self, job_id: str) -> dict:
        with self.store._connect() as con:
            row = con.execute(f"SELECT {', '.join(RECORD)} FROM voice_jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UnknownAdaptation(f"No voice adaptation {job_id[:40]!r}: use the id POST /v1/voices/adaptations "
                                    "answered.")
        return dict(zip(RECORD, row, strict=True))

    def events(self, job_id: str, after: int = 0) -> list[tuple[int, dict]]:
        with self.store._connect() as con:
            rows = con.execute("SELECT seq, event FROM voice_job_events WHERE job_id = ? AND seq > ? ORDER BY seq",
                               (job_id, after)).fetchall()
        return [(seq, json.loads(event)) for seq, event in rows]

    def cancel(self, job_id: str) -> dict:
        """Cancel a queued job now, a running one at its next check; a finished one is left as it is."""
        self.status(job_id)  # JobError for an unknown id
        with self.store._transaction() as con:  # only while still queued: the worker may be taking it now
            taken = con.execute("UPDATE voice_jobs SET state = ?, updated_at = ? WHERE id = ? AND state = ?",
                                (CANCELLED, time.time(), job_id, QUEUED)).rowcount
        if taken:
            self._finish(job_id, CANCELLED, "cancelled before it started")
        elif self.status(job_id)["state"] == RUNNING:
            with self._lock:
                self._cancels.setdefault(job_id, threading.Event()).set()
        return self.status(job_id)

    # ------------------------------------------------------------------ the worker
    def start(self) -> "AdaptationJobs":
        """Queue again what a killed process left running, then start the worker thread."""
        with self.store._transaction() as con:
            con.execute("UPDATE voice_jobs SET state = ? WHERE state = ?", (QUEUED, RUNNING))
        shutil.rmtree(self.root / UPLOADS, ignore_errors=True)  # uploads a killed process was receiving
        self._thread = threading.Thread(target=self._work, name="voice-adaptations", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Stop the worker: a running job is cancelled at its next check (it resumes on the next start)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            for event in self._cancels.values():
                event.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _next(self) -> str | None:
        with self.store._transaction() as con:
            row = con.execute("SELECT id FROM voice_jobs WHERE state = ? ORDER BY created_at LIMIT 1",
                              (QUEUED,)).fetchone()
            if row is not None:
                con.execute("UPDATE voice_jobs SET state = ?, updated_at = ? WHERE id = ?", (RUNNING, time.time(),
                                                                                              row[0]))
        return row[0] if row else None

    def _work(self) -> None:
        while not self._stop.is_set():
            job_id = self._next()
            if job_id is None:
                self._wake.wait(POLL_S)
                self._wake.clear()
                continue
            self._run(job_id)

    def _run(self, job_id: str) -> None:
        with self._lock:
            cancel = self._cancels.setdefault(job_id, threading.Event())
        with self.store._connect() as con:
            name, spec = con.execute("SELECT name, spec FROM voice_jobs WHERE id = ?", (job_id,)).fetchone()
        spec, folder = json.loads(spec), self.root / job_id
        try:
            self._adapt(job_id, name, spec, folder, Progress(lambda event: self._event(job_id, event), cancel))
        except Cancelled:
            if self._stop.is_set():
                return  # the process is stopping: the job stays running and resumes on the next start
            self._finish(job_id, CANCELLED, "cancelled")
        except RumikError as exc:
            self._finish(job_id, FAILED, str(exc))
        except Exception:  # noqa: BLE001 - a bug: the log has the traceback, the job a plain message
            log.exception("voice adaptation %s failed", job_id)
            self._finish(job_id, FAILED, INTERNAL)
        else:
            self._finish(job_id, DONE, None)
        finally:
            with self._lock:
                self._cancels.pop(job_id, None)

    def _adapt(self, job_id: str, name: str, spec: dict, folder: Path, progress: Progress) -> None:
        from training.voice.create import create_voice

        cfg = load_config(VoiceConfig, self.config, spec["settings"])
        cfg.model = self.model
        create_voice(name, folder / "inputs" / "recordings", folder / "inputs" / spec["consent"], spec["statement"],
                     self.voices_dir, cfg, folder / "work", consent_document=spec["document"], progress=progress)

    def _event(self, job_id: str, event: dict) -> None:
        with self.store._transaction() as con:
            seq = con.execute("SELECT COALESCE(MAX(seq), 0) FROM voice_job_events WHERE job_id = ?",
                              (job_id,)).fetchone()[0] + 1
            if seq <= MAX_EVENTS:
                con.execute("INSERT INTO voice_job_events VALUES (?, ?, ?)", (job_id, seq, json.dumps(event)))
            con.execute("UPDATE voice_jobs SET step = ?, updated_at = ? WHERE id = ?",
                        (event["step"], time.time(), job_id))

    def _finish(self, job_id: str, state: str, error: str | None) -> None:
        """The final state; the job's folder keeps only report.json (state, error, data report)."""
        folder = self.root / job_id
        report_file = folder / "work" / "data_report.json"
        data = json.loads(report_file.read_text(encoding="utf-8")) if report_file.exists() else None
        for part in ("inputs", "work"):
            shutil.rmtree(folder / part, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(folder / "report.json", json.dumps({"state": state, "error": error, "data": data},
                                                        indent=1, ensure_ascii=False) + "\n")
        with self.store._transaction() as con:
            con.execute("UPDATE voice_jobs SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                        (state, error, time.time(), job_id))
