"""Run training commands as two CPU processes (DDP over gloo), for the "two processes match one" tests.

    one, two = smoke_on_one_and_two_processes(main, "training.dpo", tmp_path, set_args("phases=2"))
    printed = run_in_one_launch([("training.sft", args_a), Copy(step_4, elsewhere), ("training.sft", args_b)])
    python -m tests.training.distributed PLAN.json     # what run_in_one_launch starts on each process

`accelerate launch --cpu --num_processes 2` silently runs ONE process on CPU; plain torchrun (the
command a user types, without ACCELERATE_USE_CPU) starts two gloo ranks that the trainers run as
MULTI_CPU (training.common.cpu_processes).

A launch costs about 26 CPU seconds before the first step (two interpreters importing torch,
transformers and accelerate, and the rendezvous), more than the tiny runs themselves, so a test
that needs several two-process runs makes them in one launch (`run_in_one_launch`): each command
is its wing's `main(args)`, called in turn by both processes, as `python -m MODULE ARGS` would.
Every run seeds its RNGs and builds its own Accelerator, model and optimiser; the process group
and the imports are what the runs share.
"""

import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from training.common import read_metrics

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300
RUN_MARK = "=== tests.training.distributed: run "  # the main process prints it before each step of a plan


@dataclass(frozen=True)
class Copy:
    """A step of `run_in_one_launch` between two runs: the main process copies the folder `source`
    to `target` (a checkpoint, say), and both processes wait for it."""

    source: Path
    target: Path


Step = tuple[str, list[str]] | Copy  # (module, its args) or a copy


def set_args(*overrides: str) -> list[str]:
    """`--set KEY=VALUE` for each override."""
    return [arg for override in overrides for arg in ("--set", override)]


def _launch(module: str, args: list[str]) -> tuple[list[str], dict]:
    env = {**{k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", module,
            *args], env


def run_on_two_cpu_processes(module: str, args: list[str], timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run --standalone --nproc_per_node 2 -m MODULE ARGS` from the
    repository root, one thread per process; fails with the end of its stderr if it fails."""
    command, env = _launch(module, args)
    done = subprocess.run(command, env=env, cwd=REPO, timeout=timeout_s, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def run_in_one_launch(steps: list[Step]) -> list[str]:
    """Each step in turn in ONE two-process launch (module docstring): a (module, args) step is
    `python -m MODULE ARGS` on both processes, a Copy copies a folder. Returns what the main
    process printed during each step, in order; fails with the end of stderr if any step fails."""
    plan = [{"copy": [str(step.source), str(step.target)]} if isinstance(step, Copy)
            else {"module": step[0], "args": list(step[1])} for step in steps]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(plan, file)
    try:
        done = run_on_two_cpu_processes("tests.training.distributed", [file.name])
    finally:
        os.unlink(file.name)
    printed = done.stdout.split(RUN_MARK)[1:]
    assert len(printed) == len(steps), done.stdout[-3000:]
    return [text.split("\n", 1)[1] if "\n" in text else "" for text in printed]


def kill_on_two_cpu_processes_when(module: str, args: list[str], path: Path, log: Path) -> None:
    """The same launch, SIGKILLed (every process: launcher and ranks) as soon as `path` exists;
    its output goes to `log`. Fails if the run ends, or TIMEOUT_S passes, first."""
    command, env = _launch(module, args)
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        deadline = time.monotonic() + TIMEOUT_S
        while not path.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert path.exists() and process.returncode == -signal.SIGKILL, log.read_text(errors="replace")[-3000:]


def step_rows(out: Path) -> list[dict]:
    """The step rows of OUT/metrics.jsonl (events such as a resume left out)."""
    return [row for row in read_metrics(out) if "event" not in row]


def smoke_on_one_and_two_processes(main: Callable, module: str, tmp: Path, sets: list[str],
                                   variants: dict[str, list[str]] | None = None) -> dict[str, tuple[list, str]]:
    """`MODULE --smoke` with `sets` in this process (`main`, into tmp/one), then, in one two-process
    launch, as "two" (DDP) and once per entry of `variants` (name: more args, into tmp/NAME).
    Returns {name: (step rows, what the main process printed)}; "one" printed nothing here."""
    main(["--smoke", "--out", str(tmp / "one"), *sets])
    names = ["two", *(variants or {})]
    extra = {"two": [], **(variants or {})}
    printed = run_in_one_launch([(module, ["--smoke", "--out", str(tmp / name), *sets, *extra[name]])
                                 for name in names])
    return {"one": (step_rows(tmp / "one"), ""),
            **{name: (step_rows(tmp / name), text) for name, text in zip(names, printed, strict=True)}}


def _run_plan(path: str) -> None:
    """Every step of a plan written by `run_in_one_launch`, on this process."""
    import torch.distributed as dist

    main_process = os.environ.get("RANK", "0") == "0"
    for number, step in enumerate(json.loads(Path(path).read_text(encoding="utf-8"))):
        if main_process:
            print(f"{RUN_MARK}{number}", flush=True)
        if "copy" in step:
            if not dist.is_initialized():
                raise RuntimeError("a Copy step must follow a run (which starts the process group)")
            if main_process:
                shutil.copytree(*step["copy"])
            dist.barrier()
        else:
            importlib.import_module(f"{step['module']}.__main__").main(step["args"])
        sys.stdout.flush()


if __name__ == "__main__":
    _run_plan(sys.argv[1])
