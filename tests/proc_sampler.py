"""Every process's CPU during a suite run, read from /proc, for what RUMIK_TEST_CPU_LOG cannot see.

    .venv/bin/python -m tests.proc_sampler /tmp/procs.json &      # sample until SIGTERM or Ctrl-C
    .venv/bin/python -m pytest; kill %1
    .venv/bin/python -m tests.proc_sampler --report /tmp/procs.json --top 25

tests/cpu_report.py counts a test worker's own CPU and its reaped children's; processes that
no worker reaps while a test runs (vLLM's engine core and workers, Ray's actors, servers, the
forkserver's children, kernel threads) are missing there. This samples every process on the
machine every `--interval` seconds and keeps each one's last CPU time (user + system), less what
it had spent when sampling began, so the report adds up to what the cores did during the run;
processes shorter than the interval may be missed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from pathlib import Path

READY = "tests.proc_sampler: sampling"  # on stderr once the first sweep is done: from here on, CPU counts
# Kinds of process, first match wins; anything else is reported by its command's first 60 characters.
KINDS = (
    (r"pytest-xdist|import sys;exec\(eval", "pytest worker (in-process tests)"),
    (r"VLLM::|spawn_main", "vLLM engine core / worker (multiprocessing spawn)"),
    (r"multiprocessing.forkserver", "forkserver (tests/warm_process.py) and its forks"),
    (r"ray[:/]|raylet|gcs_server", "Ray"),
    (r"torch.distributed.run|torchrun|-m training\.|tests.training.distributed", "torchrun and its ranks"),
    (r"rumik serve|rumik_app.serve", "rumik serve (fresh interpreter)"),
    (r"chrom", "Chromium"),
    (r"pip install|pip-runner", "pip (fresh install)"),
    (r"cc1plus|/ld |collect2", "C++ compiler (inductor)"),
    (r"^\[?kdamond|^\[?kworker|^\[?ksoftirq|^\[?rcu_", "kernel threads"),
)
TICKS_PER_S = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's unit of CPU time


def _read(pid: str) -> tuple[str, dict] | None:
    """(key, row) of one process, or None if it is gone; key tells apart a pid used twice."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, ValueError):
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    return f"{pid}:{fields[19]}", {"pid": int(pid), "cmd": cmd[:300] or f"[{comm}]",
                                   "cpu_s": (int(fields[11]) + int(fields[12])) / TICKS_PER_S}


def sample(out: Path, interval: float) -> None:
    """Sample until SIGTERM/SIGINT, then write {key: row} to `out`."""
    seen: dict[str, dict] = {}
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    first_sweep = True
    while not stop:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            found = _read(pid)
            if found:
                key, row = found
                # A process already running at the start counts from there (kernel threads, the VM's agent):
                # what it spent before is not the run's.
                start = {"cpu_start_s": row["cpu_s"]} if first_sweep else {}
                seen[key] = {**seen.get(key, {**row, **start}), "cpu_s": row["cpu_s"]}  # first command, last CPU
        if first_sweep:
            print(f"{READY} every {interval} s into {out} (stop with SIGTERM or Ctrl-C)", file=sys.stderr, flush=True)
            first_sweep = False
        time.sleep(interval)
    out.write_text(json.dumps(seen))


def kind(cmd: str) -> str:
    return next((name for pattern, name in KINDS if re.search(pattern, cmd)), cmd[:60])


def report(path: Path, top: int) -> str:
    """A markdown table: CPU seconds and process count by kind, largest first."""
    rows = json.loads(path.read_text()).values()
    cpu, count = Counter(), Counter()
    for row in rows:
        name = kind(row["cmd"])
        cpu[name] += row["cpu_s"] - row.get("cpu_start_s", 0.0)
        count[name] += 1
    lines = [f"{len(rows)} processes, {sum(cpu.values()):.0f} CPU s in all\n", "| kind | CPU s | processes |",
             "|---|---:|---:|"]
    return "\n".join(lines + [f"| {name} | {seconds:.0f} | {count[name]} |" for name, seconds in cpu.most_common(top)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", type=Path, help="the JSON file to write (or, with --report, to read)")
    parser.add_argument("--report", action="store_true", help="print the table of a finished sampling")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.report:
        print(report(args.path, args.top))
    elif not Path("/proc/self/stat").exists():
        sys.exit("tests.proc_sampler reads /proc: Linux only")
    else:
        sample(args.path, args.interval)


if __name__ == "__main__":
    main()
