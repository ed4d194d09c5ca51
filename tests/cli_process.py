"""`rumik ARGS` as its own process, forked from a warm one: what the console script runs
(`sys.exit(rumik_app.cli.main())`), with its own working folder, environment, output and exit
status, without paying again for the imports (about 10 CPU s of torch and transformers per command
on this machine, more than a tiny checkpoint's synthesis).

    done = run_rumik(["synthesize", "--model", "tiny", "--text", "Hi.", "--out", "hi.wav"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr

multiprocessing's forkserver imports PRELOAD once per test worker, while still single-threaded;
each command is a fork of it. The console script itself is tested as a subprocess elsewhere
(tests/test_install.py runs `rumik` from a fresh install).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PRELOAD = ["rumik_app.cli", "rumik_app.engine.local", "rumik_app.checkpoint.tiny"]
_context = None


@dataclass(frozen=True)
class Finished:
    """What `subprocess.run(..., capture_output=True, text=True)` would give: status and output."""

    returncode: int
    stdout: str
    stderr: str


def _forkserver():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _rumik(words: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """The child: the console script's body, its streams to `out` and `err`."""
    os.chdir(cwd)
    os.environ.update(env)
    for stream, path in ((sys.stdout, out), (sys.stderr, err)):
        stream.flush()
        with open(path, "wb") as target:
            os.dup2(target.fileno(), stream.fileno())
    if "OMP_NUM_THREADS" in env:  # read when torch was imported, in the forkserver
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    sys.argv = ["rumik", *words]
    from rumik_app.cli import main

    try:
        code = main(words)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def run_rumik(words: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None,
              timeout_s: float = 300) -> Finished:
    """Run `rumik WORDS` in `cwd` with `env` added to this process's environment; fails on a hang."""
    context = _forkserver()
    with tempfile.TemporaryDirectory(prefix="rumik-cli-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        child = context.Process(target=_rumik, args=(list(words), str(cwd), dict(env or {}), out, err))
        child.start()
        child.join(timeout_s)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise AssertionError(f"rumik {' '.join(words)} ran past {timeout_s} s")
        read = (Path(path).read_text(encoding="utf-8", errors="replace") if os.path.exists(path) else ""
                for path in (out, err))
        return Finished(child.exitcode, *read)
