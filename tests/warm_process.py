"""This project's commands as their own processes, forked from a warm one: each keeps its own
working folder, environment, output, signals and exit status, without paying again for the
imports (about 10 CPU s of torch and transformers per process on this machine, more than what a
tiny checkpoint's command or server then does).

    done = run_rumik(["synthesize", "--model", "tiny", "--text", "Hi.", "--out", "hi.wav"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    server = start_module("rumik_app.serve", ["--model", path, "--port", "8000"], cwd=ROOT, log=log_path)
    app = start_module("app.py", ["--model", "tiny"], cwd=ROOT, log=log_path, env={"SECRET": None})
    server.send_signal(signal.SIGTERM); assert server.wait(timeout=60) == 0    # as subprocess.Popen

multiprocessing's forkserver imports PRELOAD once per test worker, while still single-threaded;
each process is a fork of it, running the module as `python -m` would (runpy, as `__main__`).
What a fork cannot show, a fresh interpreter still does: tests/test_install.py runs `rumik` from
a new install, tests/test_architecture.py checks what light commands import.
"""

from __future__ import annotations

import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PRELOAD = ["rumik_app.cli", "rumik_app.engine.local", "rumik_app.checkpoint.tiny", "rumik_app.serve.app"]
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


def _environment(env: Mapping[str, str | None] | None) -> dict[str, str]:
    """This process's environment now, with `env` over it (a None value unsets): what a subprocess
    started here would get. The forkserver's own is the one it was started with."""
    merged = {**os.environ, **(env or {})}
    return {name: value for name, value in merged.items() if value is not None}


def _enter(cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """In the child: its folder, environment and streams, as a new process would have them."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for stream, path in ((sys.stdout, out), (sys.stderr, err)):
        stream.flush()
        with open(path, "ab") as target:
            os.dup2(target.fileno(), stream.fileno())
    if "OMP_NUM_THREADS" in env:  # read when torch was imported, in the forkserver
        import torch

        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))


def _module(module: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """The child: `python -m MODULE ARGS`, or `python SCRIPT.py ARGS`."""
    _enter(cwd, env, out, err)
    sys.argv = [module, *args]
    try:
        if module.endswith(".py"):
            runpy.run_path(module, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def run_rumik(words: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None,
              timeout_s: float = 300) -> Finished:
    """Run `rumik WORDS` (`python -m rumik_app.cli WORDS`, the console script's body) in `cwd` with `env`
    added to this process's environment; fails on a hang."""
    with tempfile.TemporaryDirectory(prefix="rumik-cli-") as folder:
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        child = _forkserver().Process(target=_module, args=("rumik_app.cli", list(words), str(cwd),
                                                            _environment(env), out, err))
        child.start()
        child.join(timeout_s)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise AssertionError(f"rumik {' '.join(words)} ran past {timeout_s} s")
        read = (Path(path).read_text(encoding="utf-8", errors="replace") if os.path.exists(path) else ""
                for path in (out, err))
        return Finished(child.exitcode, *read)


class WarmProcess:
    """The part of `subprocess.Popen` the tests use, for a process started by start_module."""

    def __init__(self, process, args: list[str], log_path: str):
        self._process, self.args, self.log_path = process, args, log_path

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._process.exitcode

    def send_signal(self, number: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_module(module: str, args: Sequence[str], cwd: Path, log: str | Path,
                 env: Mapping[str, str | None] | None = None) -> WarmProcess:
    """Start `python -m MODULE ARGS` (or `python SCRIPT.py ARGS` for a module ending in .py, relative
    to `cwd`) in `cwd`, with `env` over this process's environment (None unsets), its output appended
    to `log`; returns at once."""
    child = _forkserver().Process(target=_module, args=(module, list(args), str(cwd), _environment(env), str(log),
                                                        str(log)))
    child.start()
    command = ["python", module] if module.endswith(".py") else ["python", "-m", module]
    return WarmProcess(child, [*command, *args], str(log))
