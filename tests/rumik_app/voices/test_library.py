"""The voice library: served packages, problems, reload on change, and hostile archives refused.

Run: .venv/bin/python -m pytest -n0 tests/rumik_app/voices/test_library.py -q
"""

from __future__ import annotations

import io
import json
import pickle
import stat
import struct
import threading
import warnings
import zipfile
from pathlib import Path

import pytest

from rumik_app.voices import archive as archive_module
from rumik_app.voices.archive import ArchiveTooLarge
from rumik_app.voices.library import (
    UnknownVoice,
    VoiceExists,
    VoiceLibrary,
    catalog,
    describe,
    use_library,
)
from rumik_app.voices.package import ADAPTER_FILE, VOICE_FILE, VoiceError, base_fingerprint
from tests.rumik_app.voices.packages import archive_of, checkpoint_shapes, write_voice, zip_bytes

BASE = "sha256:" + "a" * 64
OTHER = "sha256:" + "b" * 64


@pytest.fixture
def folder(tmp_path) -> Path:
    return tmp_path / "voices"


@pytest.fixture
def source(tmp_path) -> Path:
    """A package made elsewhere (not in any library): Meera."""
    return write_voice(tmp_path / "made", "Meera", BASE, seed=3)


def test_serves_packages_by_name_and_lists_the_others_with_their_fix(folder):
    write_voice(folder, "Arjun", BASE)
    write_voice(folder, "Old", OTHER, seed=1)
    write_voice(folder, "Kabir", BASE, seed=2, folder="Misnamed")
    library = VoiceLibrary(folder, BASE)
    assert library.names() == ("Arjun",)
    assert library.get("arjun").name == "Arjun" and library.path("ARJUN") == folder / "Arjun"
    assert set(library.problems) == {"Old", "Misnamed"}
    assert library.problems["Old"].startswith("voice 'Old' was trained on another checkpoint (fingerprint sha256:bbb")
    assert "re-train it on this one or serve the checkpoint it was made for" in library.problems["Old"]
    assert "rename the folder to 'Kabir'" in library.problems["Misnamed"]
    with pytest.raises(UnknownVoice, match="'Old' is not served: voice 'Old' was trained on another checkpoint"):
        library.get("Old")
    with pytest.raises(UnknownVoice, match="No library voice 'Nova'. Library voices: Arjun."):
        library.get("Nova")
    assert VoiceLibrary(folder).names() == ("Arjun", "Old")  # no base given: any base is served


def test_describe_shows_figures_and_a_consent_summary_never_the_evidence(folder):
    write_voice(folder, "Arjun", BASE)
    library = VoiceLibrary(folder, BASE)
    summary = describe(library.get("Arjun"))
    assert summary["kind"] == "library" and summary["languages"] == ["en", "hi"] and summary["data_hours"] == 1.5
    assert summary["evaluation"] == {"wer": 0.04} and summary["created_at"].startswith("2026-01-02")
    assert set(summary["consent"]) == {"sha256", "recorded_at", "checked_by"}
    assert summary["consent"]["checked_by"] == "none"  # a stand-in's .txt, recorded without training.voice's checks
    assert "agree" not in json.dumps(summary)  # neither the statement nor the evidence
    assert "agree" in describe(library.get("Arjun"), full=True)["consent"]["statement"]  # `voice show`
    voices = catalog(("Ira", "Aisha"), library)
    assert [(v["name"], v["kind"]) for v in voices] == [("Ira", "builtin"), ("Aisha", "builtin"), ("Arjun", "library")]
    assert "hi" in voices[0]["languages"] and "en" in voices[0]["languages"]


def test_a_package_made_before_the_consent_checks_still_opens(folder):
    package = write_voice(folder, "Arjun", BASE)
    record = json.loads((package / VOICE_FILE).read_text())
    assert record["consent"].pop("verification") == {}
    (package / VOICE_FILE).write_text(json.dumps(record))
    assert describe(VoiceLibrary(folder, BASE).get("Arjun"))["consent"]["checked_by"] == "none"


def test_a_pickle_named_adapter_safetensors_is_not_served(folder):
    package = write_voice(folder, "Arjun", BASE)
    (package / ADAPTER_FILE).write_bytes(pickle.dumps({"lora_A": [1.0] * 64}))
    library = VoiceLibrary(folder, BASE)
    assert library.names() == ()
    assert "is not a safetensors file" in library.problems["Arjun"]


def test_a_record_pointing_outside_its_folder_is_not_read(folder, tmp_path):
    package = write_voice(folder, "Arjun", BASE)
    record = json.loads((package / VOICE_FILE).read_text())
    record["consent"]["evidence_file"] = "../../secret.txt"
    (tmp_path / "secret.txt").write_text("not yours")
    (package / VOICE_FILE).write_text(json.dumps(record))
    library = VoiceLibrary(folder, BASE)
    assert "must be consent.<ext> (.wav" in library.problems["Arjun"] and library.names() == ()


def test_reloads_when_the_folder_changes_and_only_then(folder):
    library = VoiceLibrary(folder, BASE)
    assert library.names() == () and library.refresh() is False
    write_voice(folder, "Arjun", BASE)
    assert library.names() == ("Arjun",)
    assert library.refresh() is False  # nothing changed since
    write_voice(folder, "Arjun", OTHER, seed=4)  # replaced (one rename) by a package of another base
    assert library.names() == () and "another checkpoint" in library.problems["Arjun"]
    (folder / ".import-x").mkdir()  # staging of an atomic write: never read
    write_voice(folder, "Dev", BASE, folder=".import-x/Dev")
    assert library.names() == ()


def test_delete_while_listed_is_one_rename(folder):
    write_voice(folder, "Arjun", BASE)
    write_voice(folder, "Old", OTHER, seed=1)
    library = VoiceLibrary(folder, BASE)
    assert library.names() == ("Arjun",)
    assert library.delete("ARJUN") == "Arjun"
    assert library.names() == () and sorted(p.name for p in folder.iterdir()) == ["Old"]  # no trash left
    library.delete("old")  # a package that is not served can be deleted too
    assert library.problems == {}
    with pytest.raises(UnknownVoice, match="No library voice 'Arjun' to delete"):
        library.delete("Arjun")
    with pytest.raises(UnknownVoice):
        library.delete("../voices")


def test_import_export_round_trip_and_replace(folder, source, tmp_path):
    library = VoiceLibrary(folder, BASE)
    package = library.import_archive(archive_of(source))
    assert package.name == "Meera" and library.names() == ("Meera",)
    assert sorted(p.name for p in folder.iterdir()) == ["Meera"]  # the staging folder is gone
    with pytest.raises(VoiceExists, match="has a voice 'Meera' already; import with replace"):
        library.import_archive(archive_of(source))
    out = library.export_archive("meera", tmp_path)
    assert out == tmp_path / "Meera.zip"
    assert sorted(zipfile.ZipFile(out).namelist()) == sorted(p.name for p in source.iterdir())
    again = write_voice(tmp_path / "v2", "Meera", BASE, seed=9)
    assert library.import_archive(out, replace=True).name == "Meera"  # from a path
    library.import_archive(archive_of(again), replace=True)
    assert (folder / "Meera" / ADAPTER_FILE).read_bytes() == (again / ADAPTER_FILE).read_bytes()
    other = VoiceLibrary(tmp_path / "second", BASE)
    assert other.import_archive(archive_of(source, skip=("adapter_config.json",))).name == "Meera"
    assert json.loads((tmp_path / "second" / "Meera" / "adapter_config.json").read_text())["r"] == 2  # written


def test_import_refuses_another_base_a_builtin_name_and_a_full_library(folder, source, tmp_path):
    with pytest.raises(VoiceError, match="voice 'Meera' was trained on another checkpoint"):
        VoiceLibrary(folder, OTHER).import_archive(archive_of(source))
    with pytest.raises(VoiceError, match="'Meera' is a built-in voice"):  # a checkpoint fine-tuned with Meera
        VoiceLibrary(folder, BASE, builtin=("Ira", "Meera")).import_archive(archive_of(source))
    full = VoiceLibrary(folder, BASE, max_packages=1)
    write_voice(folder, "Arjun", BASE)
    with pytest.raises(VoiceError, match="holds at most 1 voices"):
        full.import_archive(archive_of(source))
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # staging removed after a refusal


def _symlink_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        info = zipfile.ZipInfo("adapter.safetensors")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _duplicate_zip(source: Path) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buffer, "w") as archive:
        warnings.simplefilter("ignore")
        archive.writestr(VOICE_FILE, (source / VOICE_FILE).read_bytes())
        archive.writestr(VOICE_FILE, b"{}")
    return buffer.getvalue()


def _lying_sizes(data: bytes, name: str, size: int) -> bytes:
    """`data` (a zip) with `name`'s uncompressed size declared as `size` in both of its headers."""
    out = bytearray(data)
    for signature, offset, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        start = out.find(signature)
        while start != -1:
            if out[start + name_at:start + name_at + len(name)] == name.encode():
                out[start + offset:start + offset + 4] = struct.pack("<I", size)
            start = out.find(signature, start + 4)
    return bytes(out)


HOSTILE = {
    "not a zip": (lambda s: b"PK\x03\x04 not really a zip", "is not a zip archive"),
    "a pickled adapter": (lambda s: zip_bytes({"adapter.bin": pickle.dumps([1, 2])}), "adapters are safetensors only"),
    "path traversal": (lambda s: zip_bytes({"../voice.json": b"{}"}), "top level, no folders"),
    "an absolute path": (lambda s: zip_bytes({"/etc/voice.json": b"{}"}), "top level, no folders"),
    "a folder": (lambda s: zip_bytes({"Meera/voice.json": b"{}"}), "top level, no folders"),
    "a stranger": (lambda s: zip_bytes({"run.sh": b"rm -rf /"}), "holds only voice.json"),
    "a link": (lambda s: _symlink_zip(), "is a symbolic link"),
    "a duplicate": (lambda s: _duplicate_zip(s), "holds 'voice.json' twice"),
    "too many files": (lambda s: zip_bytes({VOICE_FILE: b"{}", ADAPTER_FILE: b"", "adapter_config.json": b"{}",
                                            "consent.txt": b"x", "consent.wav": b"x"}), "holds 5 entries"),
    "no consent": (lambda s: archive_of(s, skip=("consent.txt",)), "missing: consent.<ext>"),
    "a bomb": (lambda s: zip_bytes({VOICE_FILE: b" " * (20 * 2**20)}), "unpacks to 20,971,520 bytes"),
    "a bomb that lies": (lambda s: _lying_sizes(zip_bytes({**{p.name: p.read_bytes() for p in s.iterdir()},
                                                          "consent.txt": b"0" * (8 * 2**20)}), "consent.txt", 100),
                         "cannot be unpacked"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused_with_a_reason(folder, source, case):
    make, message = HOSTILE[case]
    library = VoiceLibrary(folder, BASE)
    with pytest.raises(VoiceError, match=message):
        library.import_archive(make(source))
    assert library.names() == () and list(folder.iterdir()) == []  # nothing kept, not even staging


def test_an_oversized_archive_is_refused_before_it_is_read(folder, source, tmp_path, monkeypatch):
    data = archive_of(source)
    monkeypatch.setattr(archive_module, "MAX_ARCHIVE_BYTES", len(data) - 1)
    library = VoiceLibrary(folder, BASE)
    with pytest.raises(ArchiveTooLarge, match="A voice archive is at most"):
        library.import_archive(data)
    path = tmp_path / "big.zip"
    path.write_bytes(data)
    with pytest.raises(ArchiveTooLarge):
        library.import_archive(path)


def test_reads_and_changes_from_several_threads(folder, source):
    library = VoiceLibrary(folder, BASE)
    data, errors, done = archive_of(source), [], threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                assert library.names() in ((), ("Meera",))
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for thread in readers:
        thread.start()
    for _ in range(5):
        library.import_archive(data, replace=True)
        library.delete("Meera")
    done.set()
    for thread in readers:
        thread.join()
    assert errors == []


def test_use_library_attaches_it_for_the_checkpoint(tiny_checkpoint, tmp_path):
    fingerprint = base_fingerprint(tiny_checkpoint)
    write_voice(tmp_path / "voices", "Arjun", fingerprint, shapes=checkpoint_shapes(tiny_checkpoint))
    write_voice(tmp_path / "voices", "Old", BASE, seed=1)

    class Engine:  # what use_library needs of an engine
        backend = "engine"
        checkpoint_dir = Path(tiny_checkpoint)
        config = type("Config", (), {"speakers": ("Ira", "Aisha", "Siya", "Zoya")})()
        library = None

        def use_voices(self, library, **bank) -> None:
            self.library, self.bank = library, bank

    engine = Engine()
    assert use_library(engine, None) is None and engine.library is None
    library = use_library(engine, tmp_path / "voices")
    assert engine.library is library and library.names() == ("Arjun",) and "Old" in library.problems
    use_library(engine, tmp_path / "voices", max_adapters=4)  # the engine backend's bank: only what is given
    assert engine.bank == {"capacity": 4}


def test_the_synthesizer_takes_library_voices(tiny_checkpoint, tmp_path, capsys):
    from rumik_app.synthesize import main

    write_voice(tmp_path / "voices", "Arjun", base_fingerprint(tiny_checkpoint),
                shapes=checkpoint_shapes(tiny_checkpoint))
    args = ["--model", str(tiny_checkpoint), "--text", "Hello.", "--print-prompt", "--voices", str(tmp_path / "voices")]
    assert main([*args, "--voice", "arjun"]) == 0
    assert capsys.readouterr().out.strip() == "[BOS]<text>Arjun: Hello.<audio>"
    assert main([*args, "--voice", "Meera"]) == 2
    assert "Unknown voice 'Meera'. Choose one of: Ira, Aisha, Siya, Zoya, Arjun." in capsys.readouterr().err
