"""`python -m rumik_app.synthesize` and `python -m rumik_app.tiny` as a user runs them."""

import os
import subprocess
import sys
from pathlib import Path

import soundfile as sf

ROOT = Path(__file__).resolve().parents[2]


def _run(args, **env):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env}, timeout=300)


def test_cli_writes_valid_wav_and_prints_speed(tiny_checkpoint, tmp_path):
    out = tmp_path / "out.wav"
    proc = _run(["rumik_app.synthesize", "--model", str(tiny_checkpoint), "--text", "नमस्ते <laugh> दोस्तों",
                 "--tone", "happy", "--seed", "3", "--max-seconds", "0.5", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    data, rate = sf.read(out)
    info = sf.info(out)
    assert rate == 24_000 and info.channels == 1 and data.ndim == 1 and len(data) == 6 * 1920
    assert "tokens/s" in proc.stdout and "real-time factor" in proc.stdout and "seed 3" in proc.stdout


def test_cli_stream_reports_first_audio(tiny_checkpoint, tmp_path):
    out = tmp_path / "s.wav"
    proc = _run(["rumik_app.synthesize", "--model", str(tiny_checkpoint), "--text", "hello", "--stream",
                 "--seed", "1", "--max-seconds", "0.4", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert "first audio after" in proc.stdout and sf.info(out).samplerate == 24_000


def test_cli_errors_are_one_clear_line(tmp_path):
    proc = _run(["rumik_app.synthesize", "--model", str(tmp_path / "missing"), "--text", "hi",
                 "--out", str(tmp_path / "x.wav")])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: No checkpoint folder")
    proc = _run(["rumik_app.synthesize", "--model", "tiny", "--text", "hi <boom>", "--out", str(tmp_path / "x.wav")])
    assert proc.returncode == 2 and "Unknown tag <boom>" in proc.stderr and "Traceback" not in proc.stderr


def test_tiny_builder_cli(tmp_path):
    proc = _run(["rumik_app.tiny", str(tmp_path / "t"), "--layers", "1", "--hidden", "32", "--heads", "2",
                 "--kv-heads", "1", "--ffn", "64"])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "t" / "codec" / "model.safetensors").exists() and "1 layers" in proc.stdout
