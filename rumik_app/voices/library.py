"""A voice library: a folder of voice packages, served by name and reloaded when it changes.

    library = VoiceLibrary("voices/", base_fingerprint(checkpoint_dir))   # or use_library(engine, "voices/")
    library.names()                       # ("Arjun", "Meera"): refreshed first (cheap when nothing changed)
    package = library.get("arjun")        # case-insensitive; UnknownVoice names the available voices
    library.problems                      # {"Old": "voice 'Old' was trained on another checkpoint ..."}
    library.import_archive(zip_bytes, replace=False)     # a .zip of a package's files (bytes or a path)
    library.export_archive("Arjun", "out/")              # -> out/Arjun.zip
    library.delete("Arjun")
    catalog(engine.config.speakers, library)             # what `GET /v1/voices` and `voice list` show

Layout (docs/voices.md): one subfolder per voice, named as the voice (`voices/Arjun/voice.json`,
`adapter.safetensors`, `adapter_config.json`, `consent.<ext>`; rumik_app.voices.package). Folders
whose names start with a dot are the staging and trash of atomic writes and are never read.

A package that fails `read_package`, is named unlike its folder, or was trained on another
checkpoint (its `base_fingerprint` differs from the library's) is not served: it is listed in
`problems` with the fix. `refresh()` rescans only when the folder's signature changes (the
folder's mtime and each package's voice.json mtime and size), so calling it per request is
cheap; replace a package as a whole (`import_archive(..., replace=True)`), not file by file.

Archives are hostile input (rumik_app.voices.archive: bounded, only a package's file names at
the top level, sizes counted while unpacked); the package is checked in a staging dot-folder
before one rename puts it in place. Nothing is unpickled; adapters are safetensors only.
Thread-safe (one lock per library); torch-free.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from rumik_app.files import atomic_write, fsync_dir, replace_dir
from rumik_app.prompt import VOICES
from rumik_app.text.languages import LANGUAGES
from rumik_app.voices.archive import (
    MAX_ARCHIVE_BYTES,
    ArchiveTooLarge,
    check_members,
    extract_member,
    open_archive,
    write_peft_config,
)
from rumik_app.voices.package import (
    ADAPTER_FILE,
    PEFT_CONFIG_FILE,
    VOICE_FILE,
    BaseShapes,
    VoiceError,
    VoicePackage,
    base_fingerprint,
    base_shapes,
    check_voice_name,
    read_package,
)

log = logging.getLogger(__name__)

MAX_PACKAGES = 256
MAX_PACKAGES_MESSAGE = ("The voice library holds at most {max} voices; delete one (`python -m training.voice delete "
                        "NAME`, or DELETE /v1/voices/NAME) or start a second library folder.")
STAGING_PREFIX, TRASH_PREFIX, UPLOAD_PREFIX = ".import-", ".trash-", ".upload-"
STALE_STAGING_S = 24 * 3600  # a staging folder this old was left by a crash: removed at start


class UnknownVoice(VoiceError):
    """No voice of that name in the library (HTTP 404)."""


class VoiceExists(VoiceError):
    """An import whose voice is in the library already, without replace (HTTP 409)."""


def other_base_message(name: str, fingerprint: str, expected: str) -> str:
    return (f"voice {name!r} was trained on another checkpoint (fingerprint {fingerprint[:19]}..., this one is "
            f"{expected[:19]}...); re-train it on this one or serve the checkpoint it was made for.")


class VoiceLibrary:
    """The voice packages in `folder` (created if missing); see the module docstring.

    base_fingerprint: the served checkpoint's (`package.base_fingerprint`); None serves packages
    of any base (tools that only list or move packages). base: its layers and module shapes
    (`package.base_shapes`), which every adapter must fit (a fingerprint alone can be copied into
    any voice.json); None checks only the adapter's own consistency. builtin: the checkpoint's
    own voices, which no library voice may be named."""

    def __init__(self, folder: str | os.PathLike, base_fingerprint: str | None = None,
                 max_packages: int = MAX_PACKAGES, builtin: Sequence[str] = VOICES, base: BaseShapes | None = None):
        self.folder = Path(folder)
        self.base_fingerprint = base_fingerprint
        self.base = base
        self.max_packages = max_packages
        self.builtin = tuple(builtin)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VoiceError(f"Cannot use {str(self.folder)!r} as the voice library ({exc.strerror}); pass a "
                             "folder you can write with --voices.") from None
        self._lock = threading.RLock()
        self._seen: tuple | None = None
        self._entries: dict[str, tuple] = {}  # folder name -> (its signature, VoicePackage or problem text)
        self._served: dict[str, VoicePackage] = {}  # lower-case name -> package
        self._problems: dict[str, str] = {}
        self._sweep_staging()
        self.refresh()

    # ------------------------------------------------------------------ reading

    def refresh(self) -> bool:
        """Rescan if the folder changed since the last scan; True when it had."""
        with self._lock:
            signature = self._signature()
            if signature == self._seen:
                return False
            self._seen = signature
            self._scan(signature[1])
            return True

    def names(self) -> tuple[str, ...]:
        """The served voices' names, sorted (refreshed first)."""
        self.refresh()
        with self._lock:
            return tuple(package.name for _, package in sorted(self._served.items()))

    def packages(self) -> tuple[VoicePackage, ...]:
        """The served packages, sorted by name (refreshed first)."""
        self.refresh()
        with self._lock:
            return tuple(package for _, package in sorted(self._served.items()))

    @property
    def problems(self) -> dict[str, str]:
        """{folder name: why it is not served} as of the last refresh."""
        with self._lock:
            return dict(self._problems)

    def get(self, name: str) -> VoicePackage:
        """The served package named `name` (case-insensitive); UnknownVoice naming the available voices."""
        self.refresh()
        with self._lock:
            package = self._served.get(str(name).lower())
            if package is not None:
                return package
            problem = next((text for folder, text in self._problems.items() if folder.lower() == str(name).lower()),
                           None)
            available = ", ".join(p.name for _, p in sorted(self._served.items()))
        if problem is not None:
            raise UnknownVoice(f"Library voice {str(name)[:40]!r} is not served: {problem}")
        raise UnknownVoice(f"No library voice {str(name)[:40]!r}. Library voices: "
                           f"{available or 'none yet (import one with `python -m training.voice import`)'}.")

    def path(self, name: str) -> Path:
        """The folder of the served voice `name` (case-insensitive)."""
        return self.folder / self.get(name).name

    # ------------------------------------------------------------------ changing

    def delete(self, name: str) -> str:
        """Remove the package `name` (served or listed in problems, case-insensitive): one rename
        to a dot-trash folder, then its removal. Returns the folder name removed."""
        with self._lock:
            found = self._folder_named(name)
            if found is None:
                raise UnknownVoice(f"No library voice {str(name)[:40]!r} to delete; library voices: "
                                   f"{', '.join(self.names()) or 'none'}.")
            self._remove(found)
            self._seen = None
        self.refresh()
        return found

    def import_archive(self, source: bytes | str | os.PathLike, replace: bool = False) -> VoicePackage:
        """Check and add the package a .zip holds (see the module docstring); VoiceExists when a
        voice of its name is in the library and not `replace`; ArchiveTooLarge; VoiceError."""
        with open_archive(source) as archive:
            members = check_members(archive)
            self.folder.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.folder))
            try:
                for name, info in members.items():
                    extract_member(archive, info, staging / name)
                package = self._check_staged(staging)
                with self._lock:
                    found = self._folder_named(package.name)
                    if found is not None and not replace:
                        raise VoiceExists(f"The library has a voice {found!r} already; import with replace "
                                          "(--replace, or ?replace=true) to overwrite it, or rename the voice.")
                    if found is None and self._count() >= self.max_packages:
                        raise VoiceError(MAX_PACKAGES_MESSAGE.format(max=self.max_packages))
                    if found is not None and found != package.name:
                        self._remove(found)  # the same voice under another case: one folder per voice
                    replace_dir(staging, self.folder / package.name)
                    self._seen = None
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        self.refresh()
        log.info("imported voice %s into %s", package.name, self.folder)
        return package

    def export_archive(self, name: str, out: str | os.PathLike) -> Path:
        """Write the package `name` as a .zip (its files at the top level) to `out`, or to
        `out/<name>.zip` when `out` is a folder; atomically. Returns the path."""
        folder = self.path(name)
        package = read_package(folder)  # checked again: the files on disk, not the cached record
        out = Path(out)
        if out.is_dir():
            out = out / f"{package.name}.zip"
        files = [VOICE_FILE, ADAPTER_FILE, PEFT_CONFIG_FILE, package.consent.evidence_file]

        def write(handle) -> None:
            with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                for file in files:
                    if (folder / file).is_file():
                        archive.write(folder / file, arcname=file)

        return atomic_write(out, write)

    def upload_path(self) -> Path:
        """A fresh dot-file in the library folder for an archive being received (same file
        system as the packages; swept at start if a crash leaves it). The caller removes it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(prefix=UPLOAD_PREFIX, suffix=".zip", dir=self.folder)
        os.close(handle)
        return Path(name)

    # ------------------------------------------------------------------ inside

    def _signature(self) -> tuple:
        """(the folder's mtime, {name: (inode, voice.json's mtime, size, inode)}) for the first
        max_packages non-dot entries; more names are kept without a stat."""
        try:
            folder_mtime = self.folder.stat().st_mtime_ns
            with os.scandir(self.folder) as scan:
                entries = sorted((entry.name, entry) for entry in scan if not entry.name.startswith("."))
        except OSError:
            return (None, ())
        marks = []
        for index, (name, entry) in enumerate(entries):
            if index >= self.max_packages:
                marks.append((name, "over"))
                continue
            try:
                record = os.stat(os.path.join(entry.path, VOICE_FILE), follow_symlinks=False)
                mark = (entry.inode(), entry.is_symlink(), record.st_mtime_ns, record.st_size, record.st_ino)
            except OSError:
                mark = (entry.inode(), entry.is_symlink(), None)
            marks.append((name, mark))
        return (folder_mtime, tuple(marks))

    def _scan(self, marks: tuple) -> None:
        entries, served, problems = {}, {}, {}
        for name, mark in marks:
            cached = self._entries.get(name)
            found = cached[1] if cached is not None and cached[0] == mark else self._read(name, mark)
            entries[name] = (mark, found)
            if isinstance(found, VoicePackage) and found.name.lower() in served:
                found = f"voice {name!r}: another folder holds the same name in another case; delete one of them."
            if isinstance(found, str):
                problems[name] = found
            else:
                served[found.name.lower()] = found
        for name in sorted(set(problems) - set(self._problems)):
            log.warning("voice library %s: not serving %s: %s", self.folder, name, problems[name])
        self._entries, self._served, self._problems = entries, served, problems

    def _read(self, name: str, mark) -> VoicePackage | str:
        """The package in folder `name`, or why it cannot be served."""
        if mark == "over":
            return f"voice {name!r}: " + MAX_PACKAGES_MESSAGE.format(max=self.max_packages)
        path = self.folder / name
        if mark[1] or not path.is_dir():
            return f"{name!r} is not a package folder (a file or a link); put each voice in a folder of its own."
        try:
            check_voice_name(name, self.builtin)
            package = read_package(path, self.base)
        except VoiceError as exc:
            return f"voice {name!r}: {exc}"
        except OSError as exc:
            return f"voice {name!r}: cannot read its files ({exc.strerror or exc}); re-import it."
        except Exception as exc:  # noqa: BLE001 - one bad package must never stop the library (or every request)
            return f"voice {name!r}: its package cannot be read ({type(exc).__name__}); re-import it."
        if package.name != name:
            return (f"folder {name!r} holds voice {package.name!r}; rename the folder to {package.name!r} (the "
                    "folder names the voice).")
        if self.base_fingerprint is not None and package.base_fingerprint != self.base_fingerprint:
            return other_base_message(name, package.base_fingerprint, self.base_fingerprint)
        return package

    def _check_staged(self, staging: Path) -> VoicePackage:
        package = read_package(staging, self.base)
        check_voice_name(package.name, self.builtin)
        if self.base_fingerprint is not None and package.base_fingerprint != self.base_fingerprint:
            raise VoiceError(other_base_message(package.name, package.base_fingerprint, self.base_fingerprint))
        write_peft_config(staging, package)
        return package

    def _folder_named(self, name: str) -> str | None:
        """The non-dot entry of the folder whose name is `name` case-insensitively, or None."""
        wanted = str(name).lower()
        if not wanted or wanted.startswith(".") or "/" in wanted or "\\" in wanted:
            return None
        with os.scandir(self.folder) as scan:
            return next((e.name for e in scan if not e.name.startswith(".") and e.name.lower() == wanted), None)

    def _count(self) -> int:
        with os.scandir(self.folder) as scan:
            return sum(1 for entry in scan if not entry.name.startswith("."))

    def _remove(self, name: str) -> None:
        trash = self.folder / f"{TRASH_PREFIX}{name}.{secrets.token_hex(4)}"
        os.replace(self.folder / name, trash)
        fsync_dir(self.folder)
        if trash.is_dir() and not trash.is_symlink():
            shutil.rmtree(trash, ignore_errors=True)
        else:
            trash.unlink(missing_ok=True)

    def _sweep_staging(self) -> None:
        """Remove trash, and staging or uploads a crash left (older than STALE_STAGING_S)."""
        now = time.time()
        for path in self.folder.glob(".*"):
            with contextlib.suppress(OSError):
                stale = now - path.lstat().st_mtime > STALE_STAGING_S
                if not (path.name.startswith(TRASH_PREFIX) or (stale and path.name.startswith((STAGING_PREFIX,
                                                                                              UPLOAD_PREFIX)))):
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    def __repr__(self) -> str:
        return f"VoiceLibrary({str(self.folder)!r}, {len(self._served)} voices, {len(self._problems)} problems)"


# ---------------------------------------------------------------------- what front ends show and do


def describe(package: VoicePackage, full: bool = False) -> dict:
    """A library voice as `GET /v1/voices` and `voice list` show it: never the consent evidence,
    only its sha256, date and how it was checked ("recording", "document"; "none" in packages made
    before the checks). full (`voice show`): also the statement, file, the checks' figures and the
    training config."""
    verification = json.loads(json.dumps(dict(package.consent.verification)))
    consent = {"sha256": package.consent.evidence_sha256, "recorded_at": package.consent.recorded_at,
               "checked_by": verification.get("method", "none")}
    out = {"name": package.name, "kind": "library", "languages": list(package.languages),
           "created_at": package.created_at, "data_hours": package.data_hours,
           "evaluation": json.loads(json.dumps(dict(package.evaluation))),
           "lora": {"rank": package.lora.rank, "alpha": package.lora.alpha,
                    "target_modules": list(package.lora.target_modules)},
           "base_fingerprint": package.base_fingerprint, "consent": consent}
    if full:
        consent.update(statement=package.consent.statement, evidence_file=package.consent.evidence_file,
                       evidence_bytes=package.consent.evidence_bytes, verification=verification)
        out["training"] = json.loads(json.dumps(dict(package.training)))
    return out


def describe_builtin(name: str) -> dict:
    """A checkpoint's own voice: it speaks every language the model reads."""
    return {"name": name, "kind": "builtin", "languages": [language.code for language in LANGUAGES]}


def catalog(builtin: Sequence[str], library: VoiceLibrary | None) -> list[dict]:
    """Every voice, the checkpoint's first, then the library's (`describe`)."""
    voices = [describe_builtin(name) for name in builtin]
    return voices + ([describe(package) for package in library.packages()] if library is not None else [])


def open_library(folder: str | os.PathLike, checkpoint_dir: str | os.PathLike,
                 builtin: Sequence[str] = VOICES) -> VoiceLibrary:
    """The library at `folder` for the checkpoint in `checkpoint_dir` (its fingerprint), logging
    what it serves and what it does not."""
    library = VoiceLibrary(folder, base_fingerprint(checkpoint_dir), builtin=builtin, base=base_shapes(checkpoint_dir))
    log.info("voice library %s: %d voices%s", library.folder, len(library.names()),
             f", {len(library.problems)} not served (see above)" if library.problems else "")
    return library


def use_library(engine, folder: str | os.PathLike | None, max_adapters: int | None = None,
                adapter_rank: int | None = None) -> VoiceLibrary | None:
    """`--voices DIR` for every front end: open the library for the engine's checkpoint and
    attach it (`engine.use_voices`); None when no folder is given. max_adapters, adapter_rank:
    the engine backend's AdapterBank (None: its defaults); vLLM takes its own at start-up
    (rumik_app.cli_args.lora_options)."""
    if folder is None:
        return None
    library = open_library(folder, engine.checkpoint_dir, builtin=tuple(engine.config.speakers))
    attach_library(engine, library, max_adapters, adapter_rank)
    return library


def attach_library(engine, library: VoiceLibrary, max_adapters: int | None = None,
                   adapter_rank: int | None = None) -> None:
    """`engine.use_voices(library)`, with the engine backend's bank sizes when given (vLLM takes
    its own at start-up: rumik_app.cli_args.lora_options)."""
    bank = {"capacity": max_adapters, "rank": adapter_rank} if engine.backend == "engine" else {}
    engine.use_voices(library, **{name: value for name, value in bank.items() if value is not None})


__all__ = [
    "VoiceLibrary", "UnknownVoice", "VoiceExists", "ArchiveTooLarge", "MAX_PACKAGES", "MAX_ARCHIVE_BYTES",
    "describe", "describe_builtin", "catalog", "open_library", "use_library", "attach_library",
]
