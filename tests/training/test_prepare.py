"""training.prepare: mono mix, resampling, batched encoding, shards, resume, and the skip report."""

import json
import math

import numpy as np
import pytest
import soundfile as sf
import torch

from rumik_app.resample import resample
from training.prepare import PrepareError, main, prepare

RATE = 24_000


def _tone(seconds: float, rate: int, freq: float = 220.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    wave = (0.3 * np.sin(2 * np.pi * freq * t) + 0.05 * np.sin(2 * np.pi * 3.1 * freq * t)).astype(np.float32)
    return wave if channels == 1 else np.stack([wave, 0.5 * wave], axis=1)


def _manifest(tmp_path):
    """Good rows in several formats plus one of every kind of bad row."""
    wav = tmp_path / "audio"
    wav.mkdir()
    sf.write(wav / "a.wav", _tone(1.0, RATE), RATE)
    sf.write(wav / "b.flac", _tone(0.7, 44_100, 330, channels=2), 44_100)  # stereo, 44.1 kHz
    sf.write(wav / "c.wav", _tone(1.3, 16_000, 180), 16_000)
    sf.write(wav / "long.wav", np.zeros(int(30.5 * 8000), np.float32), 8000)
    sf.write(wav / "short.wav", _tone(0.1, RATE), RATE)
    (wav / "broken.wav").write_bytes(b"RIFF\x00\x00not really a wave file")
    good = {"text": "hello there", "speaker": "Ira", "language": "en"}
    lines = [
        {"audio": "audio/a.wav", **good, "tone": "happy", "pace": "fast"},  # 1
        {"audio": "audio/missing.wav", **good},  # 2 missing file
        {"audio": "audio/b.flac", "text": "नमस्ते <laugh> दोस्त", "speaker": "aisha", "language": "Hindi"},  # 3
        {"audio": "audio/broken.wav", **good},  # 4 unreadable
        {"audio": "audio/a.wav", **good, "text": "   "},  # 5 empty text
        "{not json",  # 6
        {"audio": "audio/long.wav", **good},  # 7 > 30 s
        {"audio": "audio/short.wav", **good},  # 8 < 0.2 s
        {"audio": "audio/a.wav", **good, "text": "what <giggle> now"},  # 9 unknown tag
        {"audio": "audio/a.wav", "text": "no speaker", "language": "en"},  # 10 missing field
        {"audio": "audio/a.wav", **good, "speaker": "Bob"},  # 11 unknown voice
        {"audio": str(wav / "c.wav"), **good, "speaker": "Meera", "description": "calm and warm"},  # 12
        {"audio": "audio/a.wav", **good, "tone": "sleepy"},  # 13 unknown tone
    ]
    path = tmp_path / "clips.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in lines) + "\n")
    return path


EXPECTED_SKIPS = {2: "not found", 4: "unreadable", 5: "missing or empty field 'text'", 6: "invalid JSON",
                  7: "30.50 s", 8: "0.10 s", 9: "Unknown tag <giggle>", 10: "'speaker'", 11: "Unknown voice 'Bob'",
                  13: "Unknown tone 'sleepy'"}


def test_broken_rows_are_skipped_and_reported(tmp_path, tiny_checkpoint, tiny_engine):
    manifest, out = _manifest(tmp_path), tmp_path / "data"
    report = main(["--manifest", str(manifest), "--model", str(tiny_checkpoint), "--out", str(out),
                   "--shard-size", "5", "--batch-size", "2", "--device", "cpu", "--new-speakers", "Meera"])
    assert report == json.loads((out / "report.json").read_text())
    assert report["manifest_lines"] == 13 and report["kept"] == 3 and report["skipped_count"] == 10
    skipped = {s["line"]: s for s in report["skipped"]}
    assert set(skipped) == set(EXPECTED_SKIPS)
    for line, words in EXPECTED_SKIPS.items():
        assert words in skipped[line]["reason"], (line, skipped[line]["reason"])
    assert skipped[2]["audio"] == "audio/missing.wav" and skipped[6]["audio"] is None
    rows = [json.loads(x) for x in (out / "index.jsonl").read_text().splitlines()]
    assert [r["line"] for r in rows] == [1, 3, 12] and [r["shard"] for r in rows] == [0, 0, 2]
    assert rows[0]["tone"] == "happy" and rows[1]["speaker"] == "Aisha" and rows[1]["language"] == "hi"
    assert rows[2]["speaker"] == "Meera" and rows[2]["description"] == "calm and warm"
    assert report["by_language"] == {"en": 2, "hi": 1}

    # Codes equal an encode of the mono, 24 kHz, frame-padded audio (one clip at a time).
    codec = tiny_engine.codec
    for row, (name, _rate) in zip(rows, [("a.wav", RATE), ("b.flac", 44_100), ("c.wav", 16_000)], strict=True):
        data, sr = sf.read(tmp_path / "audio" / name, dtype="float32", always_2d=True)
        mono = resample(data.mean(1), sr, RATE)  # the one resampler, straight from the file's rate
        frames = math.ceil(len(mono) / codec.frame_size)
        padded = np.zeros(frames * codec.frame_size, np.float32)
        padded[: len(mono)] = mono
        expected = codec.encode(torch.from_numpy(padded)[None])[0].numpy()
        shard = np.load(out / "shards" / f"shard_{row['shard']:05d}.npy")
        assert row["frames"] == frames
        assert np.array_equal(shard[row["offset"] : row["offset"] + frames].T, expected), name


def test_resume_keeps_finished_shards(tmp_path, tiny_checkpoint):
    manifest, out = _manifest(tmp_path), tmp_path / "data"
    first = prepare(manifest, str(tiny_checkpoint), out, shard_size=5, device="cpu", new_speakers=("Meera",))
    shards = out / "shards"
    stamps = {p.name: p.stat().st_mtime_ns for p in shards.iterdir()}
    (shards / "shard_00001.json").unlink()  # as if killed while shard 1 was being written
    second = prepare(manifest, str(tiny_checkpoint), out, shard_size=5, device="cpu", new_speakers=("Meera",))
    assert second.pop("run")["reused_shards"] == 2 and first.pop("run")["encoded_shards"] == 3
    assert second == first
    after = {p.name: p.stat().st_mtime_ns for p in shards.iterdir()}
    assert after["shard_00000.json"] == stamps["shard_00000.json"]  # kept, not re-encoded
    assert after["shard_00002.npy"] == stamps["shard_00002.npy"]
    assert after["shard_00001.npy"] != stamps["shard_00001.npy"]  # redone
    with pytest.raises(PrepareError, match="different shard_size"):
        prepare(manifest, str(tiny_checkpoint), out, shard_size=4, device="cpu")


def test_missing_manifest_is_one_clear_error(tmp_path):
    with pytest.raises(PrepareError, match="--manifest"):
        prepare(tmp_path / "nope.jsonl", "tiny", tmp_path / "out")


def test_a_multi_process_launch_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys):
    """Under torchrun each copy would write the same shards: one message, status 2, no folder."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exit_:
        main(["--manifest", str(tmp_path / "m.jsonl"), "--model", "tiny", "--out", str(tmp_path / "data")])
    assert exit_.value.code == 2 and "rumik prepare runs on one process" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()
