"""Voice makers: what trains a new voice from a visitor's recordings, for the speech server and the app.

    maker = load_voice_maker("lora", root=data_dir / "voice-adaptations", voices_dir=Path("voices"),
                             model="rumik-ai/rumik-oss-1", settings=["train.steps=300"], config=None)
    maker.start()
    upload = maker.staging()                        # a new folder for one upload's files
    job = maker.submit("Arjun", upload / "recordings", upload / "consent.wav", statement)["id"]   # queued
    maker.status(job); maker.events(job, after=0); maker.cancel(job); maker.close()

    add_adaptation_arguments(parser)                # --adapt-voices --adapt-config --adapt-set (server and app)
    maker = maker_from_args(args, data_dir)         # None without --adapt-voices

A maker is found by name through the `rumik_app.voice_makers` entry points (`training.voice.jobs`
registers "lora"), so the core imports no training code; `VoiceMaker` is the contract the
server's routes (`rumik_app.serve.adaptations`) and the app hold it to. The errors a visitor can
cause are the core's, so a route maps them without knowing the maker: `VoiceError` (a name, a
consent or recordings that are refused: 400), `UnknownAdaptation` (404), `AdaptationsFull` (429).
"""

from __future__ import annotations

import argparse
import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from rumik_app.errors import ConfigError, RumikError
from rumik_app.voices.package import VoiceError

VOICE_MAKER_GROUP = "rumik_app.voice_makers"
# One upload (recordings, transcripts, zips and the consent): 20 h of 16 kHz 16-bit audio is 2.3 GB,
# so long sets come compressed (FLAC, MP3, a zip of them).
MAX_UPLOAD_BYTES = 2 * 2**30
MAX_UPLOAD_FILES = 2_000  # audio files and transcripts, zips unpacked
UPLOAD_TOO_LARGE = (f"An adaptation's upload is at most {MAX_UPLOAD_BYTES // 2**30} GB; send FLAC or MP3, or fewer "
                    "recordings.")  # the gate's answer to a declared length, the route's to a counted one
PLAIN_NAME = re.compile(r"[^/\\\x00-\x1f]{1,200}")  # an uploaded file's own name: no folders, no control characters
JOBS_FOLDER = "voice-adaptations"  # under the server's --data-dir and the app's data dir
STATES = ("queued", "running", "done", "failed", "cancelled")
FINAL_STATES = ("done", "failed", "cancelled")
# The steps of an adaptation, in order: each maker's progress events name them (training.voice.progress).
STEPS = ("data", "consent", "load", "encode", "replay", "train", "evaluate", "package")


class MakerError(RumikError, ValueError):
    """A voice adaptation that cannot be queued or found; the message names the fix."""


class UnknownAdaptation(MakerError):
    """No job with that id (HTTP 404)."""


class AdaptationsFull(MakerError):
    """The queue is full (HTTP 429)."""


class VoiceMaker(Protocol):
    """Adaptations as jobs: queued, run one at a time, with progress events and a cancel."""

    def start(self) -> VoiceMaker: ...

    def close(self, timeout: float = 30.0) -> None: ...

    def staging(self) -> Path:
        """A new, empty folder on the maker's disk for one upload (removed by the caller after submit)."""
        ...

    def submit(self, name: str, recordings: Path, consent: Path, statement: str, document: bool = False,
               settings: list[str] | None = None) -> dict:
        """Check and queue one adaptation; the recordings folder and the consent file are moved into the job.
        Returns the job as created (`status`'s record, "queued"): the worker may take it at once, so a
        `status` read after this can already say "running"."""
        ...

    def status(self, job_id: str) -> dict:
        """{"id", "name", "state" (one of STATES), "step", "error", "created_at", "updated_at"}."""
        ...

    def events(self, job_id: str, after: int = 0) -> list[tuple[int, dict]]:
        """[(seq, event)] after `after`: training.voice.progress's events as JSON objects."""
        ...

    def cancel(self, job_id: str) -> dict: ...


def load_voice_maker(name: str = "lora", **options) -> VoiceMaker:
    """The maker registered as `name`, built with `options`; ConfigError naming what is installed."""
    found = {entry.name: entry for entry in entry_points(group=VOICE_MAKER_GROUP)}
    if name not in found:
        known = ", ".join(sorted(found)) or "none (pip install -e . installs training's)"
        raise ConfigError(f"No voice maker {name!r} in {VOICE_MAKER_GROUP}; installed: {known}.")
    return found[name].load()(**options)


def add_adaptation_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that turn voice adaptation on, declared once for the speech server and the app."""
    parser.add_argument("--adapt-voices", action="store_true",
                        help="make voices from uploaded recordings (server: POST /v1/voices/adaptations with the admin "
                             "key; app: the 'Your voices' tab): needs --voices DIR, trains from --model "
                             "(docs/voices.md)")
    parser.add_argument("--adapt-config", metavar="FILE", help="a VoiceConfig file (JSON/TOML) for every adaptation")
    parser.add_argument("--adapt-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a VoiceConfig setting for every adaptation, repeatable (e.g. train.steps=200)")


def maker_from_args(args: argparse.Namespace, data_dir: str | Path | None) -> VoiceMaker | None:
    """The maker for --adapt-voices (jobs under DATA_DIR/voice-adaptations), else None; ConfigError
    naming the missing flag."""
    if not args.adapt_voices:
        return None
    if not args.voices or not data_dir:
        raise ConfigError("--adapt-voices needs --voices DIR (where new voices go) and a data folder (--data-dir DIR, "
                          "where the jobs are kept).")
    return load_voice_maker("lora", root=Path(data_dir) / JOBS_FOLDER, voices_dir=Path(args.voices), model=args.model,
                            settings=args.adapt_set, config=args.adapt_config)


def check_upload_name(name: str | None) -> str:
    """An uploaded file's own name, if it is a plain file name; VoiceError naming the fix."""
    name = name or ""
    if not PLAIN_NAME.fullmatch(name) or name.strip() in ("", ".", "..") or name != name.strip():
        raise VoiceError(f"Upload name {name[:80]!r} is not a plain file name (no folders, '..' or control "
                         "characters); rename the file.")
    return name
