"""Run training commands as two CPU processes (DDP over gloo), for the "two processes match one" tests.

    printed = run_in_one_launch([("training.sft", args_a), Copy(step_4, elsewhere), ("training.sft", args_b)])
    python -m tests.training.distributed PLAN.json     # what run_in_one_launch starts on each process

    @shared_plan                       # a module's share of the session's one launch (below)
    def plan(folder, request):         # "one" in this process; "two" (DDP) in the launch
        return smoke_plan(main, "training.dpo", folder, set_args("phases=2"))

    def test_two_processes_match_one(shared_launch):
        runs = smoke_runs(shared_launch[__name__])    # {"one": (rows, ""), "two": (rows, printed)}

`accelerate launch --cpu --num_processes 2` silently runs ONE process on CPU; plain torchrun (the
command a user types, without ACCELERATE_USE_CPU) starts two gloo ranks that the trainers run as
MULTI_CPU (training.common.cpu_processes).

A launch costs about 26 CPU seconds before the first step (two interpreters importing torch,
transformers and accelerate, and the rendezvous), more than the tiny runs themselves, so a test
that needs several two-process runs makes them in one launch (`run_in_one_launch`): each command
is its wing's `main(args)`, called in turn by both processes, as `python -m MODULE ARGS` would.
Every run seeds its RNGs and builds its own Accelerator, model and optimiser; the process group
and the imports are what the runs share.

Tests in several modules share ONE launch for the whole session the same way: each module registers
a plan (`@shared_plan`: in-process preparation that returns its steps), and the session fixture
`shared_launch` (tests/training/conftest.py) runs every registered plan that the session's tests
ask for in one launch, then hands each module what its steps printed. The tests that use it share
one xdist worker (tests/conftest.py's SHARED_SCOPES "two-process"), so the launch happens once.
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
from typing import Any, Callable

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


def run_in_one_launch(steps: list[Step], timeout_s: float = TIMEOUT_S) -> list[str]:
    """Each step in turn in ONE two-process launch (module docstring): a (module, args) step is
    `python -m MODULE ARGS` on both processes, a Copy copies a folder. Returns what the main
    process printed during each step, in order; fails with the end of stderr if any step fails."""
    plan = [{"copy": [str(step.source), str(step.target)]} if isinstance(step, Copy)
            else {"module": step[0], "args": list(step[1])} for step in steps]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(plan, file)
    try:
        done = run_on_two_cpu_processes("tests.training.distributed", [file.name], timeout_s)
    finally:
        os.unlink(file.name)
    printed = done.stdout.split(RUN_MARK)[1:]
    assert len(printed) == len(steps), done.stdout[-3000:]
    return [text.split("\n", 1)[1] if "\n" in text else "" for text in printed]


@dataclass(frozen=True)
class Launched:
    """One module's share of the session's shared launch: its folder, what the main process printed
    during each of its steps (in order) and what its plan returned beside the steps."""

    folder: Path
    printed: list[str]
    info: dict


Plan = Callable[[Path, Any], tuple[list[Step], dict]]  # (folder, pytest request) -> (steps, info)
PLANS: dict[str, Plan] = {}  # module name -> its plan, registered at import (collection)


def shared_plan(plan: Plan) -> Plan:
    """Register `plan(folder, request) -> (steps, info)` as its module's share of the session's one
    launch (module docstring). It runs in the test process before the launch (the one-process
    reference runs, data, copies) and returns the launch's steps; `request.getfixturevalue` gives
    it fixtures. The module's tests read `shared_launch[__name__]`, a `Launched`."""
    PLANS[plan.__module__] = plan
    return plan


def launch_plans(plans: dict[str, Plan], folders: Callable[[str], Path], request) -> dict[str, Launched]:
    """Prepare every plan in turn, then run all their steps in ONE launch (TIMEOUT_S per plan)."""
    prepared = {}
    for name, plan in plans.items():
        folder = folders(name)
        steps, info = plan(folder, request)
        prepared[name] = (folder, steps, info)
    printed = run_in_one_launch([step for _, steps, _ in prepared.values() for step in steps],
                                timeout_s=TIMEOUT_S * len(plans))
    launched, start = {}, 0
    for name, (folder, steps, info) in prepared.items():
        launched[name] = Launched(folder, printed[start:start + len(steps)], info)
        start += len(steps)
    return launched


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


def smoke_plan(main: Callable, module: str, folder: Path, sets: list[str],
               variants: dict[str, list[str]] | None = None) -> tuple[list[Step], dict]:
    """A `shared_plan` body: `MODULE --smoke` with `sets` in this process (`main`, into folder/one),
    and the launch's steps: "two" (DDP) and one per entry of `variants` (name: more args, into
    folder/NAME). Read back with `smoke_runs`."""
    main(["--smoke", "--out", str(folder / "one"), *sets])
    extra = {"two": [], **(variants or {})}
    steps = [(module, ["--smoke", "--out", str(folder / name), *sets, *args]) for name, args in extra.items()]
    return steps, {"names": list(extra)}


def smoke_runs(launched: Launched) -> dict[str, tuple[list, str]]:
    """{name: (step rows, what the main process printed)} of a `smoke_plan`; "one" printed nothing here."""
    names = launched.info["names"]
    return {"one": (step_rows(launched.folder / "one"), ""),
            **{name: (step_rows(launched.folder / name), text)
               for name, text in zip(names, launched.printed, strict=True)}}


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
