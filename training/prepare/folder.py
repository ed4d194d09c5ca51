"""A folder of audio files as a manifest: each file under it (sorted, sub-folders included) is a
row (its absolute path), with its same-stem .txt as the transcript where there is one.

    path = folder_manifest(Path("recordings"), out / "manifest.jsonl", speaker="{folder}", language="hi")

`speaker` names every row's voice, or is "{folder}" for each file's parent folder's name
(recordings/Arjun/001.wav -> Arjun). A row without a transcript leaves `text` out: the ASR
judge transcribes it (training.prepare.config.PrepareConfig.asr).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from rumik_app.files import atomic_write

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".webm", ".aac")
MAX_TRANSCRIPT_BYTES = 64 * 1024
FOLDER_SPEAKER = "{folder}"


def read_transcript(path: Path, error: type[Exception] = ValueError) -> str | None:
    """The whitespace-normalised text of a transcript file; None when there is none; `error` when
    it is over MAX_TRANSCRIPT_BYTES (a transcript belongs to one recording)."""
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_TRANSCRIPT_BYTES:
        raise error(f"{path} is over {MAX_TRANSCRIPT_BYTES // 1024} KB: a transcript belongs to one recording "
                    f"of at most a few minutes.")
    return " ".join(path.read_text(encoding="utf-8", errors="replace").split()) or None


def audio_files(folder: Path):
    """Every audio file under `folder`, in a fixed order (sorted names at every level)."""
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if Path(name).suffix.lower() in AUDIO_SUFFIXES:
                yield Path(root) / name


def folder_manifest(folder: Path, out_path: Path, speaker: str, language: str) -> Path:
    """Write the folder's manifest (module docstring) to `out_path`, atomically; returns it."""
    def write(fh) -> None:
        for path in audio_files(folder):
            row = {"audio": str(path.resolve()),
                   "speaker": path.parent.name if speaker == FOLDER_SPEAKER else speaker, "language": language}
            text = read_transcript(path.with_suffix(".txt"))
            if text is not None:
                row["text"] = text
            fh.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))

    return atomic_write(out_path, write)
