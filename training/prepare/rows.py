"""The read and decode stages: one manifest line -> its checked fields and its audio at 24 kHz.

    meta, audio_path = parse_row(raw, base_dir, speakers)      # RowError(key, reason) for a bad row
    samples, seconds = load_audio(audio_path, 24000, max_seconds)

A bad row never stops a run: RowError carries the report's key (`bad_row`, `missing_audio`,
`unreadable`, `too_short`, `too_long`, ...) and a reason a person can act on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evaluation import audio_io
from rumik_app.errors import RumikError
from rumik_app.prompt import PromptError, normalize_voice, validate_text
from rumik_app.request import DESCRIPTION_FIELDS, SynthesisRequest
from rumik_app.text.languages import get_language

REQUIRED_FIELDS = ("audio", "text", "speaker", "language")
PLACEHOLDER_TEXT = "text"  # checks an untranscribed row's voice and description with the prompt function
MAX_LINE_BYTES = 1 << 20  # one manifest row; a longer line is a bad row, never read whole
# Clips are read up to this much past the length limit, so a clip slightly too long is reported
# with its length; a much longer one (or a header that lies) stops the decoder there.
READ_MARGIN_S = 1.0


class PrepareError(RumikError, RuntimeError):
    """The whole run cannot proceed (not a bad row); the message names the fix."""


class RowError(ValueError):
    """One row dropped: `key` is the report's counter, the message the reason."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(reason)
        self.key = key


@dataclass
class Clip:
    """One utterance on its way to the shard: its index fields, and audio float32 [N] at 24 kHz mono."""

    line: int
    meta: dict
    samples: np.ndarray
    scores: dict = field(default_factory=dict)  # filter measurements kept in the index (snr_db, dnsmos)


def load_audio(path: Path, sample_rate: int, max_seconds: float) -> tuple[np.ndarray, float]:
    """Read a clip (the evaluation loader: soundfile, then ffmpeg; refused from its header or
    while decoding when longer than `max_seconds`) -> (float32 mono [N] at `sample_rate`, seconds)."""
    samples = audio_io.load_audio(path, sample_rate, max_seconds=max_seconds)
    return np.ascontiguousarray(samples, dtype=np.float32), len(samples) / float(sample_rate)


def parse_row(raw: str, base_dir: Path, speakers: tuple[str, ...], text_optional: bool = False) -> tuple[dict, Path]:
    """Validate one manifest line (fields, prompt, voice) -> (index fields, audio path); RowError otherwise.
    With `text_optional` (an ASR judge is set) a row may leave `text` out: its text is then None."""
    row = _json_object(raw)
    untranscribed = text_optional and row.get("text") in (None, "")
    for key in REQUIRED_FIELDS:
        if not (key == "text" and untranscribed) and (not isinstance(row.get(key), str) or not row[key].strip()):
            hint = " (or set asr: its judge transcribes rows without text)" if key == "text" else ""
            raise RowError("bad_row", f"missing or empty field {key!r}{hint}")
    extras = {k: row[k] for k in DESCRIPTION_FIELDS if row.get(k) not in (None, "")}
    wrong = [k for k, v in extras.items() if not isinstance(v, str)]
    if wrong:
        raise RowError("bad_row", f"field {wrong[0]!r} must be a string")
    try:
        req = SynthesisRequest(PLACEHOLDER_TEXT if untranscribed else row["text"], voice=row["speaker"], **extras)
        req.prompt(voices=speakers)  # the engine's prompt function: tags, voice, description
    except PromptError as exc:
        hint = " (a new voice? pass --new-speakers NAME)" if "Unknown voice" in str(exc) else ""
        raise RowError("bad_row", f"prompt: {exc}{hint}") from exc
    except TypeError as exc:
        raise RowError("bad_row", f"bad optional field ({exc})") from exc
    try:
        language = get_language(row["language"]).code
    except ValueError:
        language = row["language"].strip()  # a language outside the table: kept as given
    meta = {"audio": row["audio"], "text": None if untranscribed else validate_text(row["text"]),
            "speaker": normalize_voice(row["speaker"], speakers), "language": language,
            **{k: extras.get(k) for k in DESCRIPTION_FIELDS}}
    return meta, _audio_path(row["audio"], base_dir)


def _json_object(raw: str) -> dict:
    if len(raw) > MAX_LINE_BYTES // 4 and len(raw.encode("utf-8", "replace")) > MAX_LINE_BYTES:
        raise RowError("bad_row", f"line longer than {MAX_LINE_BYTES} bytes")
    try:
        row = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, a 5,000-digit number, deep nesting
        raise RowError("bad_row", f"invalid JSON ({getattr(exc, 'msg', type(exc).__name__)})") from exc
    if not isinstance(row, dict):
        raise RowError("bad_row", "line is not a JSON object")
    return row


def _audio_path(field: str, base_dir: Path) -> Path:
    """The row's audio file (relative paths from the manifest's folder); RowError missing_audio."""
    try:
        audio = Path(field).expanduser()
        audio = audio if audio.is_absolute() else base_dir / audio
        if audio.is_file():
            return audio
    except (OSError, ValueError, RuntimeError) as exc:  # a name too long, a NUL byte, "~nosuchuser"
        raise RowError("missing_audio", f"audio path unusable: {field[:200]!r} ({type(exc).__name__})") from exc
    raise RowError("missing_audio", f"audio file not found: {audio}")


def decode(path: Path, sample_rate: int, max_seconds: float, min_seconds: float,
           hint: str = "") -> tuple[np.ndarray, float]:
    """The bounded decode stage -> (samples, seconds); RowError unreadable / too_long / too_short
    (`hint` ends a too_long reason)."""
    try:
        samples, seconds = load_audio(path, sample_rate, max_seconds + READ_MARGIN_S)
    except Exception as exc:  # soundfile raises several types for corrupt or unknown files
        if "or longer; the limit" in str(exc):  # refused from its header or while decoding
            raise RowError("too_long", f"audio is longer than {max_seconds:g} s{hint}") from exc
        raise RowError("unreadable", f"unreadable audio ({type(exc).__name__}: {exc})") from exc
    if seconds > max_seconds:
        raise RowError("too_long", f"audio is {seconds:.2f} s; longer than {max_seconds:g} s{hint}")
    if seconds < min_seconds:
        raise RowError("too_short", f"audio is {seconds:.2f} s; shorter than {min_seconds:g} s")
    return samples, seconds


def audio_field(raw: str) -> str | None:
    """The row's `audio` field for the report, or None when the line is not a JSON object."""
    try:
        row = json.loads(raw)
        audio = row.get("audio") if isinstance(row, dict) else None
        return audio[:1000] if isinstance(audio, str) else None
    except (ValueError, RecursionError):
        return None


@dataclass(frozen=True)
class ShardTask:
    """One shard's share of the manifest: lines [first_line, first_line + num_lines) (1-based), found
    at bytes [start, end) of the manifest, and the sha1 of those lines (a finished shard of other
    lines is redone)."""

    shard: int
    first_line: int
    num_lines: int
    start: int
    end: int
    lines_sha1: str

    @property
    def name(self) -> str:
        return f"shard_{self.shard:05d}"


def lines_digest(lines: list[str]) -> str:
    return hashlib.sha1("\n".join(lines).encode("utf-8")).hexdigest()


def _decode_line(raw: bytes) -> str:
    return raw.rstrip(b"\r\n").decode("utf-8", errors="replace")


def plan_shards(manifest: Path, shard_size: int) -> Iterator[ShardTask]:
    """The manifest's shards, read once as a stream (millions of lines, never all in memory; a line
    over MAX_LINE_BYTES is kept as its first bytes, which parse_row refuses)."""
    with open(manifest, "rb") as fh:
        shard, first_line, start, lines, line_no = 0, 1, 0, [], 0
        while True:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            if not raw:
                break
            while not raw.endswith(b"\n") and len(raw) > MAX_LINE_BYTES:  # skip the rest of a huge line
                rest = fh.readline(MAX_LINE_BYTES + 1)
                if not rest or rest.endswith(b"\n"):
                    break
            line_no += 1
            lines.append(_decode_line(raw[: MAX_LINE_BYTES + 1]))
            if len(lines) == shard_size:
                yield ShardTask(shard, first_line, len(lines), start, fh.tell(), lines_digest(lines))
                shard, first_line, start, lines = shard + 1, line_no + 1, fh.tell(), []
        if lines:
            yield ShardTask(shard, first_line, len(lines), start, fh.tell(), lines_digest(lines))


def read_lines(manifest: Path, task: ShardTask) -> list[str]:
    """The task's manifest lines, read from its byte range (a line over MAX_LINE_BYTES is cut there)."""
    lines = []
    with open(manifest, "rb") as fh:
        fh.seek(task.start)
        while fh.tell() < task.end and len(lines) < task.num_lines:
            raw = fh.readline(MAX_LINE_BYTES + 1)
            cut = raw
            while not raw.endswith(b"\n") and len(raw) > MAX_LINE_BYTES:
                raw = fh.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
            lines.append(_decode_line(cut))
    return lines
