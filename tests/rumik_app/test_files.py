"""rumik_app.files: atomic writes keep the old file on failure and leave no temporary files."""

import os

import numpy as np
import pytest

import rumik_app.files as files
from rumik_app.files import atomic_write, replace_dir


def test_atomic_write_text_bytes_and_writer(tmp_path):
    target = tmp_path / "sub" / "a.json"
    assert atomic_write(target, "नमस्ते\n") == target  # parent folders are created
    assert target.read_text(encoding="utf-8") == "नमस्ते\n"
    atomic_write(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    codes = np.arange(12, dtype=np.int16).reshape(3, 4)
    atomic_write(tmp_path / "codes.npy", lambda fh: np.save(fh, codes))
    assert np.array_equal(np.load(tmp_path / "codes.npy"), codes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npy", "sub"]


def test_a_failing_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "manifest.jsonl"
    atomic_write(target, "old\n")

    def crash(fh):
        fh.write(b"half of the new conte")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError, match="killed"):
        atomic_write(target, crash)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.jsonl"]


def test_data_and_folder_are_fsynced_before_and_after_the_rename(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(files.os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}"))
                        or real_fsync(fd))
    target = tmp_path / "a.txt"
    atomic_write(target, "x")
    assert synced[0].startswith(str(tmp_path / ".a.txt.")) and synced[0].endswith(".tmp")  # the data
    assert synced[-1] == str(tmp_path)  # then the folder that holds the new name


def test_replace_dir_swaps_a_finished_folder_in(tmp_path):
    old, new = tmp_path / "ckpt", tmp_path / ".ckpt.partial"
    old.mkdir()
    (old / "weights").write_text("old")
    new.mkdir()
    (new / "weights").write_text("new")
    replace_dir(new, old)
    assert (old / "weights").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
