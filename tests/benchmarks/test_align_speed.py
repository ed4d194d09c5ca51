"""benchmarks/align_speed.py runs end to end on the tiny checkpoint (it measures nothing here; the
real-width run is the benchmark): every row of its table is filled.

Run: .venv/bin/python -m pytest tests/benchmarks/test_align_speed.py -q
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_align_speed_fills_every_row(tiny_checkpoint, capsys):
    from benchmarks import align_speed

    result = align_speed.main(["--checkpoint", str(tiny_checkpoint), "--sentences", "1", "--seconds", "1.5",
                               "--repeats", "1"])
    assert result["audio_s"] > 1.0 and result["synthesis_s_per_audio_s"] > 0
    assert set(result["aligners"]) == {"pocketsphinx + refine", "pocketsphinx + refine (espeak-ng speech)",
                                       "IndicConformer stand-in + refine"}
    assert all(row["s_per_audio_s"] > 0 and row["share_of_synthesis"] > 0 for row in result["aligners"].values())
    assert result["aligners"]["IndicConformer stand-in + refine"]["error"] is None
    assert result["aligners"]["pocketsphinx + refine (espeak-ng speech)"]["error"] is None
    assert "| pocketsphinx + refine |" in capsys.readouterr().out
