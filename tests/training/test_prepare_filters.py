"""training.prepare's filters, each alone on planted clips (silent, clipped, noisy, low SNR, wrong
transcript, too short), all of them together, and the segmentation of a recording's edge cases.

The transcript check runs the real `supplied:` ASR judge of evaluation.asr on the true words
(a stand-in: no ASR model that hears espeak-ng well ships offline); DNSMOS is the real judge.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from benchmarks.espeak_corpus import make_planted
from rumik_app.errors import ConfigError
from training.prepare import PrepareConfig, PrepareError, prepare

pytestmark = pytest.mark.slow

OFF = PrepareConfig(min_level_db=0.0, max_clipped_fraction=0.0)  # every filter off; duration 0.2-30 s
GOOD = {f"audio/en_{k}.wav" for k in range(8)}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    manifest, expected = make_planted(root)
    on = {"silent": {"min_level_db": -50.0}, "clipped": {"max_clipped_fraction": 0.05},
          "low_snr": {"min_snr_db": 15.0}, "low_dnsmos": {"min_dnsmos": 1.5},
          "high_cer": {"asr": f"supplied:{root / 'transcripts.json'}", "max_cer": 0.5},
          "too_short": {"min_seconds": 1.0}}
    return manifest, expected, on


def _dropped(report: dict) -> dict[str, str]:
    return {item["audio"]: item["key"] for item in report["skipped"]}


@pytest.mark.parametrize("key", ["silent", "clipped", "low_snr", "low_dnsmos", "high_cer", "too_short"])
def test_each_filter_alone_drops_its_planted_clip_and_keeps_the_good_ones(planted, tiny_checkpoint, tmp_path, key):
    manifest, expected, on = planted
    report = prepare(manifest, str(tiny_checkpoint), tmp_path / "out", config=replace(OFF, **on[key]), device="cpu")
    dropped = _dropped(report)
    target = next(audio for audio, reason in expected.items() if reason == key)
    assert dropped[target] == key
    assert not GOOD & set(dropped) and set(dropped.values()) == {key}
    assert report["dropped"] == {key: len(dropped)} and report["kept"] == 14 - len(dropped)


def test_all_filters_together_drop_every_planted_clip(planted, tiny_checkpoint, tmp_path):
    manifest, expected, on = planted
    settings = {name: value for group in on.values() for name, value in group.items()}
    report = prepare(manifest, str(tiny_checkpoint), tmp_path / "out", config=replace(OFF, **settings), device="cpu",
                     shard_size=5)
    assert set(_dropped(report)) == set(expected)
    assert sum(report["dropped"].values()) == report["skipped_count"] == 6 and report["kept"] == 8
    rows = [json.loads(line) for line in (tmp_path / "out" / "index.jsonl").read_text().splitlines()]
    assert {row["audio"] for row in rows} == GOOD
    assert all(row["dnsmos"] >= 1.5 and row["snr_db"] >= 15.0 and row["cer"] <= 0.5 for row in rows)
    again = prepare(manifest, str(tiny_checkpoint), tmp_path / "out", config=replace(OFF, **settings), device="cpu",
                    shard_size=5)
    assert again["run"]["reused_shards"] == 3
    changed = prepare(manifest, str(tiny_checkpoint), tmp_path / "out", device="cpu", shard_size=5,
                      config=replace(OFF, **{**settings, "min_snr_db": 5.0}))
    assert changed["run"]["encoded_shards"] == 3 and "audio/lownsr.wav" not in _dropped(changed)


def test_a_recording_needs_an_asr_judge_and_speech(tmp_path, tiny_checkpoint):
    rate = 16_000
    sf.write(tmp_path / "quiet.wav", np.zeros(25 * rate, np.float32), rate)
    row = {"audio": "quiet.wav", "text": "a long session", "speaker": "Ira", "language": "en"}
    (tmp_path / "m.jsonl").write_text(json.dumps(row) + "\n")
    report = prepare(tmp_path / "m.jsonl", str(tiny_checkpoint), tmp_path / "a", max_seconds=20.0, device="cpu")
    assert report["dropped"] == {"too_long": 1} and "with asr set" in report["skipped"][0]["reason"]
    report = prepare(tmp_path / "m.jsonl", str(tiny_checkpoint), tmp_path / "b", device="cpu",
                     config=PrepareConfig(max_seconds=20.0, asr="pocketsphinx", vad="energy"))
    assert report["dropped"] == {"no_speech": 1}


@pytest.mark.parametrize("settings, message", [
    ({"max_cer": 0.3}, "set asr"), ({"vad": "webrtc"}, "vad must be"), ({"clip_max_seconds": 40.0}, "clip_max"),
    ({"min_dnsmos": 7.0}, "min_dnsmos"), ({"shard_size": 0}, "shard_size")])
def test_config_errors_name_the_key(settings, message):
    with pytest.raises(ConfigError, match=message):
        PrepareConfig(**settings).validate()


def test_a_row_without_text_takes_the_asr_judges_text(planted, tiny_checkpoint, tmp_path):
    manifest = planted[0]
    truth = json.loads((manifest.parent / "transcripts.json").read_text())
    row = {"audio": str(manifest.parent / "audio/en_0.wav"), "speaker": "Ira", "language": "en"}
    (tmp_path / "m.jsonl").write_text(json.dumps(row) + "\n")
    report = prepare(tmp_path / "m.jsonl", str(tiny_checkpoint), tmp_path / "no-asr", device="cpu")
    assert report["dropped"] == {"bad_row": 1} and "set asr" in report["skipped"][0]["reason"]
    # the stand-in judge's transcripts are keyed by clip id: the row's audio field as written
    (tmp_path / "heard.json").write_text(json.dumps({row["audio"]: truth["audio/en_0.wav"]}))
    report = prepare(tmp_path / "m.jsonl", str(tiny_checkpoint), tmp_path / "asr", device="cpu",
                     config=PrepareConfig(asr=f"supplied:{tmp_path / 'heard.json'}"))
    assert report["kept"] == 1
    kept = json.loads((tmp_path / "asr" / "index.jsonl").read_text())
    assert kept["transcribed"] is True and kept["text"] == truth["audio/en_0.wav"]


def test_a_folder_is_a_manifest_of_its_audio_files(planted, tiny_checkpoint, tmp_path):
    source = planted[0].parent / "audio"
    folder = tmp_path / "voices"
    for speaker, names in (("Ira", ["en_0", "en_1"]), ("Siya", ["en_2"])):
        (folder / speaker).mkdir(parents=True)
        for name in names:
            shutil.copy(source / f"{name}.wav", folder / speaker / f"{name}.wav")
    (folder / "Ira" / "en_0.txt").write_text("a known  transcript\n")
    (folder / "Siya" / "en_2.txt").write_text("another one")
    with pytest.raises(PrepareError, match="--speaker NAME"):
        prepare(folder, str(tiny_checkpoint), tmp_path / "out", device="cpu")
    report = prepare(folder, str(tiny_checkpoint), tmp_path / "out", device="cpu", speaker="{folder}", language="en")
    rows = [json.loads(line) for line in (tmp_path / "out" / "index.jsonl").read_text().splitlines()]
    assert [(Path(r["audio"]).name, r["speaker"], r["text"]) for r in rows] == [
        ("en_0.wav", "Ira", "a known transcript"), ("en_2.wav", "Siya", "another one")]
    assert report["dropped"] == {"bad_row": 1} and "set asr" in report["skipped"][0]["reason"]  # en_1: no .txt


def test_hostile_rows_are_dropped_and_counted_and_the_run_goes_on(planted, tiny_checkpoint, tmp_path):
    good = {"audio": str(planted[0].parent / "audio/en_0.wav"), "text": "fine words", "speaker": "Ira",
            "language": "en"}
    lines = ["[" * 100_000 + "]" * 100_000,  # deep nesting: RecursionError in json
             '{"audio": "x.wav", "n": ' + "9" * 5000 + "}",  # int too long to convert: ValueError
             json.dumps({**good, "tone": 5}), json.dumps({**good, "pace": ["fast"]}),
             json.dumps({**good, "audio": "~nosuchuser_xyz/a.wav"}), json.dumps({**good, "audio": "a" * 5000}),
             json.dumps({**good, "audio": "bad\u0000name.wav"}), json.dumps(good)]
    (tmp_path / "m.jsonl").write_text("\n".join(lines) + "\n")
    report = prepare(tmp_path / "m.jsonl", str(tiny_checkpoint), tmp_path / "out", device="cpu")
    assert report["kept"] == 1 and report["dropped"] == {"bad_row": 4, "missing_audio": 3}
    assert all(len(item["reason"]) < 400 for item in report["skipped"])
