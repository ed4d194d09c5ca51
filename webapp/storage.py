"""Where `app.py` keeps its files, and the one folder it lets Gradio serve (docs/ARCHITECTURE.md §13).

Library module (no command line)::

    layout = DataLayout("outputs/app")          # private: database, rated clips, exports, campaigns
    served = ServedFolder()                     # a fresh temp folder: visitor-facing copies only
    check_not_served(layout, served_roots(served))   # refuse to start if Gradio could serve a private file
    wav = served.write_wav(samples)             # <served>/<32 hex>.wav
    files = served.publish([zip_path, csv_path])     # <served>/<32 hex>/ratings_export.zip, ...
    pending = PendingClips(layout.pending_clips)     # unrated pairs, bounded (PendingQuota)
    folder = pending.start(trial_id)                 # write the pair's clips here, then:
    dropped = pending.admit(trial_id, address)       # the trial ids pruned to make room (oldest first)
    pending.archive(trial_id, layout.rated_clips / trial_id)   # once rated: moved, atomically

Data dir (`--data-dir`, $RUMIK_APP_DATA), never served:

    ratings.sqlite, ratings.sqlite-wal, ratings.sqlite-shm   the ratings database (WAL mode)
    clips/<trial id>/clip-1.wav, clip-2.wav                  every rated clip, as rated
    pending/<trial id>/clip-1.wav, clip-2.wav, pending.json  pairs generated but not rated yet
                                                             (PendingClips: bounded, oldest first)
    exports/<UTC time>-<token>/                              every export an admin made
    campaigns/                                               annotation campaigns: definitions, clips,
                                                             manifests, raters file (webapp.campaign)

Served: the ServedFolder (the only `allowed_paths` entry) holds copies of what a visitor's own
page needs (their synthesised clips, their blind pair, their downloads) under random names of
128 bits from `secrets`, with nothing about the system, seed or rater in them; it is pruned to
the newest `keep` entries and to `max_age_s`. Gradio copies every returned file into its own
cache (GRADIO_TEMP_DIR, default /tmp/gradio) under a keyed hash of the content and serves it
from there; `app.py` has Gradio delete those copies after a day.

Unrated pairs (`PendingClips`): a generated A/B pair waits in pending/ until it is rated, then
its clips move (renamed, so atomically) to clips/<trial id>/. Pending pairs are bounded per
client address (a hash of it is kept, never the address) and overall, in bytes and in pairs,
and by age (`PendingQuota`); the oldest go first, so generating without rating cannot fill
the disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import struct
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from rumik_app.audio import SAMPLE_RATE, write_wav
from rumik_app.errors import RumikError
from rumik_app.files import atomic_write, fsync_dir

DEFAULT_DATA_DIR = "outputs/app"  # app.py's --data-dir and the campaign CLI's (both also read $RUMIK_APP_DATA)
DATABASE_NAME = "ratings.sqlite"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")  # WAL index and log, rollback journal
TOKEN_BYTES = 16  # 128 bits: not guessable, not enumerable
MAX_SERVED_ENTRIES = 500  # files / download folders kept in the served folder before the oldest go
SERVED_MAX_AGE_S = 3600.0  # Gradio copies a returned file into its cache at once; ours is only the source


class UnsafeLayoutError(RumikError, ValueError):
    """A private file would lie in a folder Gradio serves; the message says what to change."""


class DataLayout:
    """The app's private data dir: what lives where. Nothing here is ever served."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()

    @property
    def database(self) -> Path:
        return self.root / DATABASE_NAME

    @property
    def rated_clips(self) -> Path:
        return self.root / "clips"

    @property
    def pending_clips(self) -> Path:
        """Generated pairs not rated yet (`PendingClips`)."""
        return self.root / "pending"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def campaigns(self) -> Path:
        """Annotation campaigns (`webapp.campaign.definition` has the layout) and the raters file."""
        return self.root / "campaigns"

    def rated_clip(self, trial_id: str, label: str) -> Path:
        return self.rated_clips / trial_id / f"{label.lower().replace(' ', '-')}.wav"

    def new_export_dir(self) -> Path:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        return self.exports / f"{stamp}-{secrets.token_hex(3)}"

    def private_paths(self) -> list[Path]:
        """Everything that must stay outside every served folder."""
        db = self.database
        return [db, *(db.with_name(db.name + s) for s in SQLITE_SIDE_FILES), self.rated_clips, self.pending_clips,
                self.exports, self.root / "export", self.campaigns]  # export/: where exports went before this layout

    def __repr__(self) -> str:
        return f"DataLayout({str(self.root)!r})"


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


class ServedFolder:
    """Visitor-facing files under random names, pruned by count and age.

    `root` defaults to a fresh temp folder of this process (removed when the app exits); it
    must hold nothing but what this class writes, since the app passes it to Gradio's
    `allowed_paths`.
    """

    def __init__(self, root: str | os.PathLike | None = None, keep: int = MAX_SERVED_ENTRIES,
                 max_age_s: float = SERVED_MAX_AGE_S):
        if root is None:
            self.root = Path(tempfile.mkdtemp(prefix="rumik-app-served-")).resolve()
            self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        else:
            self.root = Path(root).resolve()
            self.root.mkdir(parents=True, exist_ok=True)
        self.keep, self.max_age_s = keep, max_age_s
        self._lock = threading.Lock()

    def write_wav(self, samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> Path:
        """A 16-bit WAV (written atomically) at <root>/<token>.wav."""
        path = write_wav(self.root / f"{new_token()}.wav", samples, sample_rate)
        self.prune()
        return path

    def copy(self, src: str | os.PathLike) -> Path:
        """A copy of `src` at <root>/<token><suffix> (the name says nothing about `src`). A WAV
        copy also carries a random chunk that players skip: Gradio names the files it serves by
        their content's hash, so two copies of one clip (a campaign's repeated item) would
        otherwise share a URL, and a blind rater could spot the repeat."""
        src = Path(src)
        path = self.root / f"{new_token()}{src.suffix.lower()}"
        if src.suffix.lower() == ".wav":
            atomic_write(path, with_random_chunk(src.read_bytes()))
        else:
            _copy_atomic(src, path)
        self.prune()
        return path

    def publish(self, files: Iterable[str | os.PathLike]) -> list[Path]:
        """Copies of `files` for one download, at <root>/<token>/<original name> (names must differ)."""
        folder = self.root / new_token()
        folder.mkdir()
        out = []
        for f in map(Path, files):
            target = folder / f.name
            if target.exists():
                raise ValueError(f"two files named {f.name!r} in one download")
            _copy_atomic(f, target)
            out.append(target)
        self.prune()
        return out

    def reserve(self, name: str) -> Path:
        """A fresh path <root>/<token>/<name> for a file the caller writes (pruned like the rest)."""
        folder = self.root / new_token()
        folder.mkdir()
        self.prune()
        return folder / name

    def entries(self) -> list[Path]:
        """Files and download folders, oldest first (temp files being written are skipped)."""
        items = []
        for p in self.root.iterdir():
            if p.name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                items.append((p.stat().st_mtime, p))
        return [p for _, p in sorted(items)]

    def prune(self) -> None:
        """Drop entries older than `max_age_s`, then the oldest beyond `keep`."""
        with self._lock:
            items = self.entries()
            cutoff = time.time() - self.max_age_s
            old = [p for p in items if _mtime(p) < cutoff]
            fresh = [p for p in items if _mtime(p) >= cutoff]
            for p in old + fresh[: max(0, len(fresh) - self.keep)]:
                _remove(p)


@dataclass(frozen=True)
class PendingQuota:
    """What unrated pairs may hold in pending/: per client address and overall, in bytes of
    clips and in pairs, each for at most `max_age_s` seconds."""

    client_bytes: int = 100 * 2**20  # ~35 pairs of two 30 s clips (24 kHz, 16-bit)
    client_pairs: int = 20  # a rater rarely keeps more than a few pairs waiting
    total_bytes: int = 2 * 2**30
    total_pairs: int = 1000
    max_age_s: float = 24 * 3600.0


DEFAULT_PENDING_QUOTA = PendingQuota()
PENDING_META = "pending.json"
PENDING_KEY = re.compile(r"[0-9A-Za-z_-]{1,64}")  # a trial id: one folder name, nothing else


@dataclass(frozen=True)
class _Pending:
    trial_id: str
    client: str  # client_key() of the address that generated it
    created: float  # time.time()
    nbytes: int


def client_key(address: str) -> str:
    """What pending/ keeps of a client address: 64 bits of its sha256."""
    return hashlib.sha256(address.encode("utf-8")).hexdigest()[:16]


class PendingClips:
    """Generated pairs that wait to be rated: <root>/<trial id>/ holds the clips and
    PENDING_META (the client's key and the time). Bounded by `quota` (default:
    DEFAULT_PENDING_QUOTA): admitting a pair removes the oldest pairs over its client's quota,
    then over the overall one, and any past the age limit; a pair being written is never
    removed. `archive` moves a rated pair's clips into the rated-clip store. One process
    owns the folder (the app); a folder left half-written by a crash is removed on start."""

    def __init__(self, root: str | os.PathLike, quota: PendingQuota | None = None, clock=time.time):
        self.root = Path(root)
        self.quota = quota if quota is not None else DEFAULT_PENDING_QUOTA
        self.clock = clock
        self._lock = threading.Lock()
        self._writing: set[str] = set()
        self.removed_on_start: list[str] = []  # half-written pairs of a stopped app: their trials can go too
        self._index: OrderedDict[str, _Pending] = self._scan()

    def start(self, trial_id: str) -> Path:
        """A new, empty folder for a pair about to be written (kept until `admit` or `abandon`)."""
        _check_key(trial_id)
        folder = self.root / trial_id
        with self._lock:
            self._writing.add(trial_id)
        folder.mkdir(parents=True)
        return folder

    def abandon(self, trial_id: str) -> None:
        """Remove a pair that was started but will not be admitted (its generation failed)."""
        with self._lock:
            self._writing.discard(trial_id)
            _remove(self.root / trial_id)

    def admit(self, trial_id: str, address: str) -> list[str]:
        """Count a written pair against `address` and overall; remove the oldest pairs over the
        quota (never this one) and those past its age. Returns the trial ids removed."""
        folder = self.root / trial_id
        entry = _Pending(trial_id, client_key(address), self.clock(), _clip_bytes(folder))
        atomic_write(folder / PENDING_META, json.dumps({"client": entry.client, "created": entry.created}))
        with self._lock:
            self._writing.discard(trial_id)
            self._index[trial_id] = entry
            dropped = self._over_quota(entry)
            for t in dropped:
                del self._index[t]
                _remove(self.root / t)
        return dropped

    def is_pending(self, trial_id: str) -> bool:
        with self._lock:
            return trial_id in self._index

    def archive(self, trial_id: str, dest: str | os.PathLike) -> bool:
        """Move a pending pair's clips into `dest` (each renamed into place, or copied
        atomically across file systems); False if it is not pending (unknown, removed, or
        archived already)."""
        dest = Path(dest)
        with self._lock:
            if self._index.pop(trial_id, None) is None:
                return False
            folder = self.root / trial_id
            dest.mkdir(parents=True, exist_ok=True)
            for clip in sorted(folder.glob("*.wav")):
                _move_atomic(clip, dest / clip.name)
            fsync_dir(dest)
            _remove(folder)
        return True

    def usage(self, address: str | None = None) -> tuple[int, int]:
        """(bytes, pairs) pending for `address`, or for everyone."""
        key = None if address is None else client_key(address)
        with self._lock:
            mine = [e for e in self._index.values() if key is None or e.client == key]
        return sum(e.nbytes for e in mine), len(mine)

    def _over_quota(self, new: _Pending) -> list[str]:
        """Trial ids to remove, oldest first: past the age limit, then over `new`'s client's
        quota, then over the overall one."""
        q, now = self.quota, self.clock()
        others = [e for t, e in self._index.items() if t != new.trial_id]  # oldest first
        drop = [e for e in others if now - e.created > q.max_age_s]
        gone = {e.trial_id for e in drop}
        mine = [e for e in others if e.trial_id not in gone and e.client == new.client]
        drop += _oldest_over(mine, new, q.client_bytes, q.client_pairs)
        gone = {e.trial_id for e in drop}
        drop += _oldest_over([e for e in others if e.trial_id not in gone], new, q.total_bytes, q.total_pairs)
        return [e.trial_id for e in drop]

    def _scan(self) -> OrderedDict[str, _Pending]:
        """The pending pairs on disk, oldest first; folders without their metadata are removed."""
        found = []
        for folder in self.root.iterdir() if self.root.is_dir() else ():
            try:
                meta = json.loads((folder / PENDING_META).read_text(encoding="utf-8"))
                found.append(_Pending(folder.name, str(meta["client"]), float(meta["created"]), _clip_bytes(folder)))
            except (OSError, ValueError, KeyError, TypeError):
                _remove(folder)  # written halfway when the app stopped
                self.removed_on_start.append(folder.name)
        return OrderedDict((e.trial_id, e) for e in sorted(found, key=lambda e: e.created))


def _oldest_over(entries: list[_Pending], new: _Pending, max_bytes: int, max_pairs: int) -> list[_Pending]:
    """The oldest of `entries` (oldest first) to remove so that the rest and `new` fit."""
    nbytes, count, out = sum(e.nbytes for e in entries) + new.nbytes, len(entries) + 1, []
    for e in entries:
        if nbytes <= max_bytes and count <= max_pairs:
            break
        out.append(e)
        nbytes, count = nbytes - e.nbytes, count - 1
    return out


def _check_key(trial_id: str) -> None:
    if not PENDING_KEY.fullmatch(trial_id):
        raise ValueError(f"not a trial id: {trial_id[:80]!r}")


def _clip_bytes(folder: Path) -> int:
    """Bytes of a pending pair's clips (its metadata is a few dozen bytes more)."""
    return sum(p.stat().st_size for p in folder.glob("*.wav"))


def _move_atomic(src: Path, dst: Path) -> None:
    """Rename `src` to `dst` (atomic); across file systems, an atomic copy, then `src` removed."""
    try:
        os.replace(src, dst)
    except OSError:
        _copy_atomic(src, dst)
        src.unlink()


def served_roots(served: ServedFolder | None = None) -> list[Path]:
    """Every folder Gradio serves files from: the app's served folder, Gradio's upload/cache
    folder (GRADIO_TEMP_DIR), its examples cache, and any `gr.set_static_paths` entries."""
    from gradio import utils as gr_utils

    roots = [Path(gr_utils.get_upload_folder()), Path(gr_utils.get_cache_folder())]
    with contextlib.suppress(ImportError, AttributeError):
        from gradio.data_classes import _StaticFiles

        roots += [Path(p) for p in _StaticFiles.all_paths]
    if served is not None:
        roots.insert(0, served.root)
    return [Path(os.path.abspath(r)).resolve() for r in roots]


def check_not_served(layout: DataLayout, roots: Iterable[Path]) -> None:
    """Raise UnsafeLayoutError if any private path is inside a served folder (or holds one)."""
    for root in roots:
        for private in layout.private_paths():
            if _inside(private, root) or _inside(root, private):
                raise UnsafeLayoutError(
                    f"{private} would be downloadable: it lies in {root}, a folder the web server serves "
                    f"(the app's served folder, GRADIO_TEMP_DIR or Gradio's cache). Use a --data-dir "
                    f"(or $RUMIK_APP_DATA) outside {root}, or point GRADIO_TEMP_DIR elsewhere.")


def _inside(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.abspath(path)).resolve(), Path(os.path.abspath(folder)).resolve()
    return path == folder or folder in path.parents


def with_random_chunk(wav: bytes) -> bytes:
    """A RIFF/WAVE file with a `JUNK` chunk of random bytes appended (RIFF size updated): the
    same audio for every reader, different bytes every time. Other files come back unchanged."""
    if len(wav) < 12 or wav[:4] != b"RIFF" or wav[8:12] != b"WAVE":
        return wav
    junk = b"JUNK" + struct.pack("<I", TOKEN_BYTES) + secrets.token_bytes(TOKEN_BYTES)
    return b"RIFF" + struct.pack("<I", len(wav) - 8 + len(junk)) + wav[8:] + junk


def without_random_chunk(wav: bytes) -> bytes:
    """The file `with_random_chunk` was given (what a served copy is a copy of)."""
    size = 8 + TOKEN_BYTES
    if len(wav) < 12 + size or wav[:4] != b"RIFF" or wav[-size:-size + 4] != b"JUNK":
        return wav
    return b"RIFF" + struct.pack("<I", len(wav) - size - 8) + wav[8:-size]


def _copy_atomic(src: Path, dst: Path) -> None:
    def copy(fh) -> None:
        with open(src, "rb") as source:
            shutil.copyfileobj(source, fh)

    atomic_write(dst, copy)


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


def _remove(p: Path) -> None:
    with contextlib.suppress(OSError):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
