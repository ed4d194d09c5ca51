"""benchmarks/prepare_throughput.py runs end to end on the tiny checkpoint (it measures nothing here;
the 100-row run with the published-size Mimi is the benchmark): both engines run, every stage is
timed, every row of its tables is filled.

The corpus is the smallest that runs every stage: one row, an English recording of about 22 s
(longer than max_seconds, so the VAD cuts it into utterances that are transcribed, filtered,
embedded and encoded), one shard, one Ray cleaner. That Ray writes what one process writes is
tests/training/test_prepare_engines.py's check, on 60 rows.

Run: .venv/bin/python -m pytest tests/benchmarks/test_prepare_throughput.py -q
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_prepare_throughput_fills_every_row(tiny_checkpoint, capsys):
    from benchmarks import prepare_throughput
    from training.prepare.clean import STAGES

    result = prepare_throughput.main(["--checkpoint", str(tiny_checkpoint), "--clips", "1", "--long-recordings", "1",
                                      "--long-seconds", "22", "--shard-size", "1", "--workers", "1"])
    assert set(result["engines"]) == {"local", "ray"}
    assert "shrunk" in result["codec"]  # the tiny checkpoint's Mimi, named as such
    for row in result["engines"].values():
        assert row["manifest_lines"] == 1 and row["shards"] == 1
        assert row["kept"] > 1  # the recording is cut into several utterances
        assert row["wall_s"] > 0 and row["lines_per_s"] > 0 and row["hours"] > 0
        assert set(row["stage_seconds"]) == set(STAGES)
        assert all(row["stage_seconds"][stage] > 0 for stage in ("decode", "segment", "filter", "embed", "encode"))
        assert row["encode_audio_s_per_s"] > 0
    assert result["engines"]["local"]["kept"] == result["engines"]["ray"]["kept"]
    assert result["speedup"] > 0
    out = capsys.readouterr().out
    assert "| local (1 process) |" in out and "| ray (1 cleaner + Mimi) |" in out
    assert all(f"| {stage} |" in out for stage in STAGES)
    assert "Ray/local speed-up" in out
