"""Recordings a visitor uploads (the server's /v1/voices/adaptations, the app's "Your voices" tab) ->
a folder `create_voice` reads, checked before anything is decoded.

    settings = check_visitor_settings(["train.steps=200"])   # ConfigError outside VISITOR_PREFIXES
    seconds = check_upload(job / "inputs" / "recordings", cfg.data)   # VoiceError / DataError naming the fix

The folder holds audio files, same-stem .txt transcripts and .zip archives of both. Each zip is
unpacked in place and removed: members under folders are flattened (`a/b.wav` -> `a__b.wav`);
links, absolute or `..` paths, encrypted members and other kinds of file are refused, as is a
member that declares more than `MAX_ZIP_RATIO` times its compressed size (audio barely
compresses; a zip bomb does by 1000x), more than the upload's byte budget in all, or that unpacks
to more than it declared (counted while written). Then at most `MAX_UPLOAD_FILES` files, and the
recordings' headers against `data.max_recording_minutes`, `data.max_hours` and the sample rates
the decoder accepts (8-192 kHz: a 1 Hz WAV declaring hours is refused from its header).
"""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path, PurePosixPath

from rumik_app.errors import ConfigError
from rumik_app.voices.archive import extract_member
from rumik_app.voices.makers import MAX_UPLOAD_BYTES, MAX_UPLOAD_FILES
from rumik_app.voices.package import VoiceError
from training.prepare.folder import AUDIO_SUFFIXES
from training.voice.data import check_budget, find_recordings

TRANSCRIPT_SUFFIX = ".txt"
ZIP_SUFFIX = ".zip"
UPLOAD_SUFFIXES = (*AUDIO_SUFFIXES, TRANSCRIPT_SUFFIX, ZIP_SUFFIX)
MAX_ZIP_RATIO = 20
SMALL_MEMBER_BYTES = 1 << 20  # below this a high ratio is harmless (a transcript, a silent clip)
SKIPPED_PREFIXES = ("__MACOSX/",)  # what macOS's Finder adds to a zip
# What a visitor's settings may change: how the data is cut and filtered, the adapter and its training.
# Not the model, the judges (eval, consent: a spec names a model to load) or the replay's voices.
VISITOR_PREFIXES = ("data.", "train.", "lora.rank", "lora.alpha")


def check_visitor_settings(settings: list[str]) -> list[str]:
    """`settings` (KEY=VALUE), each under VISITOR_PREFIXES; ConfigError naming the first that is not."""
    for setting in settings:
        key = setting.partition("=")[0].strip()
        if not key.startswith(VISITOR_PREFIXES) or "=" not in setting:
            raise ConfigError(f"Setting {setting[:60]!r} cannot be sent with an adaptation: send KEY=VALUE for keys "
                              f"under {', '.join(VISITOR_PREFIXES)}; the model and the judges are the server's.")
    return settings


def check_upload(folder: Path, data) -> float:
    """Unpack the zips in `folder`, bound its files and check the recordings' headers (module
    docstring); returns the seconds of audio the headers declare."""
    budget = MAX_UPLOAD_BYTES - sum(path.stat().st_size for path in folder.iterdir() if path.suffix != ZIP_SUFFIX)
    for archive in sorted(folder.glob("*" + ZIP_SUFFIX)):
        budget -= unpack_zip(archive, folder, budget)
        archive.unlink()
    files = [path for path in folder.rglob("*") if path.is_file()]
    if len(files) > MAX_UPLOAD_FILES:
        raise VoiceError(f"The upload holds {len(files):,} files; at most {MAX_UPLOAD_FILES:,} (recordings and their "
                         "transcripts) are read. Join short recordings into longer ones (a few minutes each).")
    for path in files:
        if path.suffix.lower() not in UPLOAD_SUFFIXES:
            raise VoiceError(f"{path.name[:80]!r} is not a recording ({', '.join(AUDIO_SUFFIXES)}), a .txt transcript "
                             "or a .zip of them; leave it out.")
    return check_budget(find_recordings(folder, data.language), data)


def unpack_zip(archive: Path, folder: Path, budget: int) -> int:
    """Unpack one zip into `folder` (flat), at most `budget` bytes; returns the bytes written."""
    try:
        with zipfile.ZipFile(archive) as opened:
            members = [info for info in opened.infolist() if not skipped(info)]
            if len(members) > MAX_UPLOAD_FILES:
                raise VoiceError(f"{archive.name[:80]!r} holds {len(members):,} entries; at most {MAX_UPLOAD_FILES:,} "
                                 "files are read. Join short recordings into longer ones.")
            declared = sum(info.file_size for info in members)
            if declared > budget:
                raise VoiceError(f"{archive.name[:80]!r} unpacks to {declared / 2**20:,.0f} MB; an upload is at most "
                                 f"{MAX_UPLOAD_BYTES // 2**30} GB unpacked. Send FLAC or MP3, or fewer recordings.")
            written = 0
            for info in members:
                name = member_name(archive, info)
                try:
                    written += extract_member(opened, info, folder / name, limit=info.file_size)
                except FileExistsError:
                    raise VoiceError(f"{name[:80]!r} is in the upload twice; send each recording once.") from None
            return written
    except zipfile.BadZipFile as exc:
        raise VoiceError(f"{archive.name[:80]!r} is not a zip archive ({exc}); zip the recordings again.") from None


def skipped(info: zipfile.ZipInfo) -> bool:
    """Folders and what an archiver adds on its own (macOS's __MACOSX/, dot-files)."""
    name = info.filename
    return info.is_dir() or name.startswith(SKIPPED_PREFIXES) or PurePosixPath(name).name.startswith(".")


def member_name(archive: Path, info: zipfile.ZipInfo) -> str:
    """The flat file name of a checked member (module docstring); VoiceError naming what is wrong."""
    where = f"{archive.name[:60]!r} holds {info.filename[:80]!r}"
    parts = PurePosixPath(info.filename.replace("\\", "/")).parts
    if not parts or info.filename.startswith(("/", "\\")) or ".." in parts or ":" in parts[0]:
        raise VoiceError(f"{where}: a path outside the archive. Zip the recordings' folder itself.")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise VoiceError(f"{where}: a link. Zip the recordings themselves.")
    if info.flag_bits & 0x1:
        raise VoiceError(f"{where}: an encrypted member. Zip the recordings without a password.")
    if PurePosixPath(parts[-1]).suffix.lower() not in (*AUDIO_SUFFIXES, TRANSCRIPT_SUFFIX):
        raise VoiceError(f"{where}: not a recording ({', '.join(AUDIO_SUFFIXES)}) or a .txt transcript. Leave it out.")
    if info.file_size > SMALL_MEMBER_BYTES and info.file_size > MAX_ZIP_RATIO * max(info.compress_size, 1):
        raise VoiceError(f"{where}: it declares {info.file_size:,} bytes from {info.compress_size:,} "
                         f"(over {MAX_ZIP_RATIO}x; recordings barely compress). Zip the recordings again.")
    return "__".join(parts)
