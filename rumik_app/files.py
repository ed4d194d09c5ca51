"""Crash-safe file writes: every file and folder the project saves goes through here.

    atomic_write(out / "report.json", json.dumps(report))            # str (UTF-8) or bytes
    atomic_write(out / "codes.npy", lambda fh: np.save(fh, codes))     # or a writer of a binary file
    replace_dir(tmp_folder, out / "checkpoint")                        # a finished folder, moved in place

A reader, or a crash or power cut at any moment, sees the old file or the new one, never a
part of one: the data goes to a temporary file in the same folder (so the rename cannot cross
file systems), is flushed and fsync'ed, renamed over the target with `os.replace` (atomic on
POSIX and Windows), and then the folder itself is fsync'ed so the rename is on disk too. If
the writer raises, the temporary file is removed and the old file is left as it was.

Temporary names start with a dot and end in `.tmp` (`.report.json.k3j2x.tmp`), so folder
scans that skip hidden files never see a write in progress.

Torch-free and light: `evaluation`, `training` and the app import it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Union

Writer = Callable[[BinaryIO], object]
Data = Union[bytes, str, Writer]


def fsync_dir(folder: str | os.PathLike) -> None:
    """Flush a folder's entries (new names, renames) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows: folders cannot be opened; NTFS journals renames itself
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems (and /proc-like mounts) refuse fsync on folders
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: Data, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` atomically and durably; creates parent folders; returns the path.

    data: bytes; str (encoded with `encoding`); or a function that writes into the binary file
    object it is given (`lambda fh: np.save(fh, array)`, `lambda fh: torch.save(obj, fh)`,
    `lambda fh: sf.write(fh, samples, rate, format="WAV")`).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if isinstance(data, str):
                fh.write(data.encode(encoding))
            elif isinstance(data, (bytes, bytearray, memoryview)):
                fh.write(data)
            else:
                data(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return path


def fsync_tree(folder: str | os.PathLike) -> None:
    """fsync every file and folder below `folder` (before it is renamed into place)."""
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                os.fsync(fh.fileno())
        fsync_dir(root)


def replace_dir(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Move the finished folder `src` to `dst` (same file system), replacing an existing `dst`.

    The files of `src` are fsync'ed first. An existing `dst` is first renamed aside and removed
    after the swap, so at every moment `dst` is either the complete old folder or the complete
    new one, except for the instant between the two renames (folders cannot be swapped in
    one rename on Linux).
    """
    src, dst = Path(src), Path(dst)
    fsync_tree(src)
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(dst, old)
        os.replace(src, dst)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(src, dst)
    fsync_dir(dst.parent)
    return dst


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 hex digest of a file's bytes, read a MiB at a time (any size, bounded memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(2**20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = ["atomic_write", "replace_dir", "fsync_dir", "fsync_tree", "sha256_file"]
