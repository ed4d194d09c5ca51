"""tests/proc_sampler.py: a process that burns CPU while the sampler runs is in its file and its report."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from tests.proc_sampler import READY, kind, report

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5: pass\ntime.sleep(0.5)"
# Burns 0.5 CPU s, says so, then idles (a process that was busy before the sampler started).
EARLY = BURN.replace("time.sleep(0.5)", "print('burnt', flush=True)\ntime.sleep(60)")


def start_sampler(out):
    """The sampler, once its first sweep is done (its READY line)."""
    sampler = subprocess.Popen([sys.executable, "-m", "tests.proc_sampler", str(out), "--interval", "0.05"],
                               stderr=subprocess.PIPE, text=True)
    assert sampler.stderr.readline().startswith(READY)
    return sampler


def test_the_sampler_sees_a_process_that_no_test_worker_reaps(tmp_path):
    out = tmp_path / "procs.json"
    sampler = start_sampler(out)
    subprocess.run([sys.executable, "-c", BURN, "burner"], check=True, timeout=60)
    sampler.send_signal(signal.SIGTERM)
    assert sampler.wait(timeout=30) == 0
    rows = json.loads(out.read_text()).values()
    [burner] = [row for row in rows if row["cmd"].endswith(" burner")]
    assert 0.4 <= burner["cpu_s"] < 5.0, burner
    table = report(out, top=1000)
    assert table.splitlines()[0].startswith(f"{len(rows)} processes") and f"| {kind(burner['cmd'])} |" in table
    assert kind("[kdamond.0]") == "kernel threads" and kind("VLLM::EngineCore").startswith("vLLM")


def test_a_process_running_before_the_sampler_counts_only_what_it_spends_after(tmp_path):
    """Kernel threads and agents that run all day would otherwise add their whole past to the run."""
    early = subprocess.Popen([sys.executable, "-c", EARLY, "early"], stdout=subprocess.PIPE, text=True)
    try:
        assert early.stdout.readline().strip() == "burnt"
        out = tmp_path / "procs.json"
        sampler = start_sampler(out)
        time.sleep(0.5)
        sampler.send_signal(signal.SIGTERM)
        assert sampler.wait(timeout=30) == 0
    finally:
        early.kill()
        early.wait()
    [row] = [row for row in json.loads(out.read_text()).values() if row["cmd"].endswith(" early")]
    assert row["cpu_s"] >= 0.4 and row["cpu_s"] - row["cpu_start_s"] < 0.1, row
    assert f"| {kind(row['cmd'])} | 0 | 1 |" in report(out, top=1000)
