"""Voice makers: what trains a new voice from a visitor's recordings, for the speech server and the app.

    maker = load_voice_maker("lora", root=data_dir / "voice-adaptations", voices_dir=Path("voices"),
                             model="rumik-ai/rumik-oss-1", settings=["train.steps=300"], config=None)
    maker.start()
    upload = maker.staging()                        # a new folder for one upload's files
    job = maker.submit("Arjun", upload / "recordings", upload / "consent.wav", statement)
    maker.status(job); maker.events(job, after=0); maker.cancel(job); maker.close()

A maker is found by name through the `rumik_app.voice_makers` entry points (`training.voice.jobs`
registers "lora"), so the core imports no training code; `VoiceMaker` is the contract the
server's routes (`rumik_app.serve.adaptations`) and the app hold it to. The errors a visitor can
cause are the core's, so a route maps them without knowing the maker: `VoiceError` (a name, a
consent or recordings that are refused: 400), `UnknownAdaptation` (404), `AdaptationsFull` (429).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from rumik_app.errors import ConfigError, RumikError

VOICE_MAKER_GROUP = "rumik_app.voice_makers"
# One upload (recordings, transcripts, zips and the consent): 20 h of 16 kHz 16-bit audio is 2.3 GB,
# so long sets come compressed (FLAC, MP3, a zip of them).
MAX_UPLOAD_BYTES = 2 * 2**30
MAX_UPLOAD_FILES = 2_000  # audio files and transcripts, zips unpacked
STATES = ("queued", "running", "done", "failed", "cancelled")
FINAL_STATES = ("done", "failed", "cancelled")


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
               settings: list[str] | None = None) -> str:
        """Check and queue one adaptation; the recordings folder and the consent file are moved into the job."""
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
