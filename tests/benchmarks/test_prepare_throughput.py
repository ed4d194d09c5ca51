"""benchmarks/prepare_throughput.py runs end to end on the tiny checkpoint and a tiny corpus (it
measures nothing here; the 100-row run with the published-size Mimi is the benchmark): both engines
run, every stage is timed, every row of its tables is filled.

Run: .venv/bin/python -m pytest tests/benchmarks/test_prepare_throughput.py -q
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_prepare_throughput_fills_every_row(tiny_checkpoint, capsys):
    from benchmarks import prepare_throughput
    from training.prepare.clean import STAGES

    result = prepare_throughput.main(["--checkpoint", str(tiny_checkpoint), "--clips", "8", "--long-recordings", "1",
                                      "--long-seconds", "22", "--shard-size", "4", "--workers", "2"])
    assert set(result["engines"]) == {"local", "ray"}
    assert "shrunk" in result["codec"]  # the tiny checkpoint's Mimi, named as such
    for row in result["engines"].values():
        assert row["manifest_lines"] == 8 and row["shards"] == 2
        assert row["kept"] > 8  # the recording is cut into several utterances
        assert row["wall_s"] > 0 and row["lines_per_s"] > 0 and row["hours"] > 0
        assert set(row["stage_seconds"]) == set(STAGES)
        assert all(row["stage_seconds"][stage] > 0 for stage in ("decode", "segment", "filter", "embed", "encode"))
        assert row["encode_audio_s_per_s"] > 0
    assert result["engines"]["local"]["kept"] == result["engines"]["ray"]["kept"]
    assert result["speedup"] > 0
    out = capsys.readouterr().out
    assert "| local (1 process) |" in out and "| ray (2 cleaners + Mimi) |" in out
    assert all(f"| {stage} |" in out for stage in STAGES)
    assert "Ray/local speed-up" in out
