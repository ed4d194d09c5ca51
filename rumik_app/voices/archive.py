"""Voice archives: a package's files in one .zip, read as hostile input (rumik_app.voices.library).

    with open_archive(zip_bytes_or_path) as archive:       # size checked before anything is read
        members = check_members(archive)                    # {name: ZipInfo}: names, kinds, declared sizes
        for name, info in members.items():
            extract_member(archive, info, staging / name)   # bytes counted while written (zip bombs)
    package = read_package(staging); write_peft_config(staging, package)

An archive holds at its top level `voice.json`, `adapter.safetensors`, one `consent.<ext>` and
optionally `adapter_config.json` (written from voice.json when absent), nothing else: no
folders, `..`, links, duplicates, encryption or pickles (`.bin`, `.pt`, ...: adapters are
safetensors only). Its size is bounded before it is read (`MAX_ARCHIVE_BYTES`), and each
member's by `MEMBER_LIMITS`, as declared and again as unpacked. Torch-free.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from rumik_app.files import atomic_write
from rumik_app.voices.package import (
    ADAPTER_FILE,
    CONSENT_STEM,
    CONSENT_SUFFIXES,
    MAX_ADAPTER_BYTES,
    MAX_CONSENT_BYTES,
    MAX_VOICE_JSON_BYTES,
    PEFT_CONFIG_FILE,
    VOICE_FILE,
    VoiceError,
    VoicePackage,
    peft_config,
)

MAX_ARCHIVE_BYTES = 600 * 2**20  # a whole .zip; its members are bounded by MEMBER_LIMITS (563 MB together)
MAX_PEFT_CONFIG_BYTES = 64 * 1024
MAX_MEMBERS = 4
CONSENT_MEMBERS = tuple(CONSENT_STEM + suffix for suffix in CONSENT_SUFFIXES)
MEMBER_LIMITS = {VOICE_FILE: MAX_VOICE_JSON_BYTES, ADAPTER_FILE: MAX_ADAPTER_BYTES,
                 PEFT_CONFIG_FILE: MAX_PEFT_CONFIG_BYTES, **{name: MAX_CONSENT_BYTES for name in CONSENT_MEMBERS}}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".npy", ".npz")
COPY_BLOCK = 1 << 20


class ArchiveTooLarge(VoiceError):
    """An archive over MAX_ARCHIVE_BYTES (HTTP 413)."""


def archive_too_large(size: int | None = None) -> ArchiveTooLarge:
    """The one error for an archive (or an upload) over MAX_ARCHIVE_BYTES."""
    what = f"is {size / 2**20:.0f} MB" if size is not None else "is larger than that"
    return ArchiveTooLarge(f"A voice archive is at most {MAX_ARCHIVE_BYTES // 2**20} MB; this one {what}. "
                           "Lower the LoRA rank, or keep the consent evidence under "
                           f"{MAX_CONSENT_BYTES // 2**20} MB.")


@contextlib.contextmanager
def open_archive(source: bytes | str | os.PathLike) -> Iterator[zipfile.ZipFile]:
    """A zip archive from bytes or a path, its size checked before it is read."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) > MAX_ARCHIVE_BYTES:
            raise archive_too_large(len(source))
        handle = io.BytesIO(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise VoiceError(f"{str(path)!r} is not a file: pass a voice archive (.zip, `voice export` makes one).")
        if path.stat().st_size > MAX_ARCHIVE_BYTES:
            raise archive_too_large(path.stat().st_size)
        handle = path.open("rb")
    try:
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
            raise VoiceError("This is not a zip archive; a voice archive is a .zip of a package's files "
                             "(`python -m training.voice export` makes one).") from None
        with archive:
            yield archive
    finally:
        handle.close()


def check_members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """{name: ZipInfo} of a voice archive's members, each checked (name, kind, declared size)."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise VoiceError(f"A voice archive holds {len(infos)} entries; a package is at most 4 files: {VOICE_FILE}, "
                         f"{ADAPTER_FILE}, {PEFT_CONFIG_FILE} and consent.<ext>.")
    members: dict[str, zipfile.ZipInfo] = {}
    for info in infos:
        name = info.filename
        check_member_name(name)
        if name in members:
            raise VoiceError(f"The archive holds {name!r} twice; make it again with `python -m training.voice export`.")
        if stat.S_ISLNK(info.external_attr >> 16):
            raise VoiceError(f"{name!r} in the archive is a symbolic link; an archive holds the files themselves.")
        if info.flag_bits & 0x1:
            raise VoiceError("The archive is encrypted; export the voice without a password.")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise VoiceError(f"{name!r} is compressed with method {info.compress_type}; voice archives are stored or "
                             "deflated (any zip tool's default).")
        if info.file_size > MEMBER_LIMITS[name]:
            raise VoiceError(f"{name!r} unpacks to {info.file_size:,} bytes; it may be at most "
                             f"{MEMBER_LIMITS[name]:,}.")
        members[name] = info
    consents = [name for name in members if name in CONSENT_MEMBERS]
    missing = [name for name in (VOICE_FILE, ADAPTER_FILE) if name not in members] + ([] if consents else
                                                                                   ["consent.<ext>"])
    if missing or len(consents) > 1:
        raise VoiceError(f"A voice archive holds {VOICE_FILE}, {ADAPTER_FILE}, one consent.<ext> and optionally "
                         f"{PEFT_CONFIG_FILE}; {'missing: ' + ', '.join(missing) if missing else 'two consent files'}.")
    return members


def check_member_name(name: str) -> None:
    """VoiceError unless `name` is one of a package's file names, at the top level."""
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise VoiceError(f"The archive holds {name[:80]!r}: a voice archive has the package's files at its top "
                         "level, no folders (zip -j, or `python -m training.voice export`).")
    if name.lower().endswith(PICKLE_SUFFIXES):
        raise VoiceError(f"The archive holds {name[:80]!r}: adapters are safetensors only ({ADAPTER_FILE}); pickled "
                         "weights (.bin, .pt, ...) can run code when loaded and are never read. Save the adapter "
                         "with safetensors (PEFT's save_pretrained does by default).")
    if name not in MEMBER_LIMITS:
        raise VoiceError(f"The archive holds {name[:80]!r}; a voice archive holds only {VOICE_FILE}, {ADAPTER_FILE}, "
                         f"{PEFT_CONFIG_FILE} and consent.<ext> ({', '.join(CONSENT_SUFFIXES)}).")


def extract_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, limit: int | None = None) -> int:
    """Copy one member to `dest` (a new file), counting bytes against its declared size and its
    limit (a package member's MEMBER_LIMITS entry unless given) while they are written (a zip bomb
    stops there). Returns the bytes written."""
    limit = min(info.file_size, MEMBER_LIMITS[info.filename] if limit is None else limit)
    written = 0
    try:
        with archive.open(info) as source, open(dest, "xb") as out:
            while block := source.read(COPY_BLOCK):
                written += len(block)
                if written > limit:
                    raise VoiceError(f"{info.filename!r} unpacks to more than its declared {info.file_size:,} bytes "
                                     "(a damaged or hostile archive); make it again.")
                out.write(block)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        raise VoiceError(f"{info.filename!r} cannot be unpacked ({exc}); the archive is damaged: make it "
                         "again.") from None
    return written


def write_peft_config(folder: Path, package: VoicePackage) -> None:
    """Write adapter_config.json from voice.json's LoRA spec, whatever the archive held: peft and
    vLLM read it, and a key the engine does not read (use_rslora, rank_pattern, ...) would make
    the voice sound different there."""
    atomic_write(folder / PEFT_CONFIG_FILE, json.dumps(peft_config(package), indent=2))
