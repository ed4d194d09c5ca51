"""`python -m rumik_app.synthesize` and `python -m rumik_app.tiny` as a user runs them.

One run of each command is a fresh process, as typed in a shell; the other checks call the same
`main(argv)` in this process (a fresh interpreter costs ~10 s of imports here, and the error and
stream paths do not depend on it; tests/test_cli_errors.py runs every command's error in a fresh
process). The terminal check gives `main` a pseudo-terminal as its stderr.
"""

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
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
    # stderr is a pipe, not a terminal: no progress bar; the random model ran into the cap, which is said
    assert "generating" not in proc.stderr and "\r" not in proc.stderr, proc.stderr
    assert "warning: generation stopped at the length cap (--max-seconds 0.5)" in proc.stderr


def _main_on_terminal(argv: list[str], capsys) -> tuple[int, str, str]:
    """`rumik_app.synthesize.main(argv)` with stderr on a pseudo-terminal (100 columns), as in an
    interactive shell: (status, stdout, stderr)."""
    import fcntl
    import pty
    import struct
    import termios

    from rumik_app.synthesize import main

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    terminal = os.fdopen(slave, "w", encoding="utf-8", buffering=1)
    chunks = []
    try:
        with _swapped_stderr(terminal):
            status = main(argv)
            terminal.flush()
        os.set_blocking(master, False)
        while True:
            try:
                data = os.read(master, 4096)
            except (BlockingIOError, OSError):
                break
            if not data:
                break
            chunks.append(data)
    finally:
        terminal.close()
        os.close(master)
    return status, capsys.readouterr().out, b"".join(chunks).decode(errors="replace")


@contextlib.contextmanager
def _swapped_stderr(stream):
    saved, sys.stderr = sys.stderr, stream
    try:
        yield
    finally:
        sys.stderr = saved


@pytest.mark.slow
def test_progress_bar_on_a_terminal_only_and_never_with_quiet(tiny_checkpoint, tmp_path, capsys):
    args = ["--model", str(tiny_checkpoint), "--text", "hello there", "--seed", "2", "--max-seconds", "2",
            "--out", str(tmp_path / "a.wav")]
    code, out, err = _main_on_terminal(args, capsys)
    assert code == 0, err
    assert "generating:" in err and "/2.0 s of audio" in err, err  # seconds of audio out of the budget
    assert "wrote" in out
    code, out, err = _main_on_terminal([*args, "--quiet"], capsys)
    assert code == 0, err
    assert "generating" not in err and out == ""  # --quiet: no bar, no summary; the warning still shows
    assert "warning: generation stopped at the length cap" in err


def test_unknown_voice_is_reported_before_the_weights_load(tiny_checkpoint, tmp_path, capsys):
    from rumik_app.synthesize import main

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")  # loading them would fail
    status = main(["--model", str(broken), "--text", "hi", "--voice", "Rahul", "--out", str(tmp_path / "x.wav")])
    err = capsys.readouterr().err
    assert status == 2 and err.strip().splitlines() == [
        "error: Unknown voice 'Rahul'. Choose one of: Ira, Aisha, Siya, Zoya."], err
    status = main(["--model", str(broken), "--text", "hi", "--out", str(tmp_path / "x.wav")])
    err = capsys.readouterr().err
    assert status == 2 and "Could not load weights" in err  # the check above came first


def test_cli_stream_reports_first_audio(tiny_checkpoint, tmp_path, capsys):
    from rumik_app.synthesize import main

    out = tmp_path / "s.wav"
    status = main(["--model", str(tiny_checkpoint), "--text", "hello", "--stream", "--seed", "1",
                   "--max-seconds", "0.4", "--out", str(out)])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    assert "first audio after" in printed.out and sf.info(out).samplerate == 24_000


def test_cli_errors_are_one_clear_line(tmp_path, capsys):
    """In-process (tests/test_cli_errors.py runs every command's error in a fresh process)."""
    from rumik_app.synthesize import main

    status = main(["--model", str(tmp_path / "missing"), "--text", "hi", "--out", str(tmp_path / "x.wav")])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and err.startswith("error: No checkpoint folder")
    status = main(["--model", "tiny", "--text", "hi <boom>", "--out", str(tmp_path / "x.wav")])
    err = capsys.readouterr().err
    assert status == 2 and "Unknown tag <boom>" in err and "Traceback" not in err


def test_tiny_builder_cli(tmp_path):
    proc = _run(["rumik_app.tiny", str(tmp_path / "t"), "--layers", "1", "--hidden", "32", "--heads", "2",
                 "--kv-heads", "1", "--ffn", "64"])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "t" / "codec" / "model.safetensors").exists() and "1 layers" in proc.stdout


@pytest.mark.slow
def test_cli_writes_timestamps_and_captions_from_the_stream(tiny_checkpoint, tmp_path, capsys):
    """The whole CLI path with the default aligner (pocketsphinx) on the tiny model's noise: the chunks'
    exact spans come from the stream, and whatever words the aligner finds or misses are said."""
    import json

    from rumik_app.synthesize import main

    out, words, captions = tmp_path / "s.wav", tmp_path / "w.json", tmp_path / "c.srt"
    status = main(["--model", str(tiny_checkpoint), "--text", "Pay ₹250 now <laugh> please.", "--stream",
                   "--seed", "1", "--max-seconds", "0.8", "--out", str(out), "--timestamps", str(words),
                   "--captions", str(captions)])
    printed = capsys.readouterr()
    assert status == 0, printed.err
    timings = json.loads(words.read_text())
    duration = sf.info(out).duration
    assert timings["segments"] == [{"text": "Pay ₹250 now <laugh> please.", "start": 0.0,
                                    "end": pytest.approx(duration, abs=1e-3)}]
    assert {w["word"] for w in timings["words"]} <= {"Pay", "₹250", "now", "<laugh>", "please."}
    assert timings["words"] or timings["missing"]  # noise: found words, or the reason none were
    assert all(0 <= w["start"] <= w["end"] <= duration + 1e-3 for w in timings["words"])
    assert captions.exists() and "timestamps:" in printed.out


def test_cli_refuses_bad_timestamp_flags_before_loading(tmp_path, capsys):
    from rumik_app.synthesize import main

    with pytest.raises(SystemExit) as exited:
        main(["--model", "tiny", "--text", "hi", "--out", str(tmp_path / "x.wav"), "--captions",
              str(tmp_path / "c.txt")])
    assert exited.value.code == 2 and "--captions names a .srt or .vtt file" in capsys.readouterr().err
    status = main(["--model", "tiny", "--text", "hi", "--out", str(tmp_path / "x.wav"), "--timestamps",
                   str(tmp_path / "w.json"), "--aligner", "nosuch"])
    err = capsys.readouterr().err
    assert status == 2 and "unknown aligner 'nosuch'" in err and "Traceback" not in err
    assert not (tmp_path / "x.wav").exists()  # refused before the model loaded, nothing written
