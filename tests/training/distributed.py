"""Run a training command as two CPU processes (DDP over gloo), for the "two processes match one" tests.

    one, two = smoke_on_one_and_two_processes(main, "training.dpo", tmp_path, set_args("phases=2"))

`accelerate launch --cpu --num_processes 2` silently runs ONE process on CPU; torchrun with
ACCELERATE_USE_CPU starts two gloo ranks that Accelerator picks up as MULTI_CPU.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from training.common import read_metrics

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def set_args(*overrides: str) -> list[str]:
    """`--set KEY=VALUE` for each override."""
    return [arg for override in overrides for arg in ("--set", override)]


def _launch(module: str, args: list[str]) -> tuple[list[str], dict]:
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", module,
            *args], env


def run_on_two_cpu_processes(module: str, args: list[str]) -> subprocess.CompletedProcess:
    """`python -m torch.distributed.run --standalone --nproc_per_node 2 -m MODULE ARGS` from the
    repository root, one thread per process; fails with the end of its stderr if it fails."""
    command, env = _launch(module, args)
    done = subprocess.run(command, env=env, cwd=REPO, timeout=TIMEOUT_S, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


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


def smoke_on_one_and_two_processes(main: Callable, module: str, tmp: Path, sets: list[str]) -> tuple[list, list]:
    """`MODULE --smoke` with `sets` in this process (`main`, into tmp/one) and as two processes
    (into tmp/two); checks the two-process header and returns both runs' step rows."""
    main(["--smoke", "--out", str(tmp / "one"), *sets])
    done = run_on_two_cpu_processes(module, ["--smoke", "--out", str(tmp / "two"), *sets])
    assert f"{module}: 2 processes (DDP over CPU processes)" in done.stdout
    return tuple([row for row in read_metrics(tmp / name) if "event" not in row] for name in ("one", "two"))
