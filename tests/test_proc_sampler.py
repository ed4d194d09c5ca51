"""tests/proc_sampler.py: a process that burns CPU while the sampler runs is in its file and its report."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from tests.proc_sampler import kind, report

BURN = "import time\nstart = time.process_time()\nwhile time.process_time() - start < 0.5: pass\ntime.sleep(0.5)"


def test_the_sampler_sees_a_process_that_no_test_worker_reaps(tmp_path):
    out = tmp_path / "procs.json"
    sampler = subprocess.Popen([sys.executable, "-m", "tests.proc_sampler", str(out), "--interval", "0.05"])
    time.sleep(0.5)  # the sampler's own start
    subprocess.run([sys.executable, "-c", BURN, "burner"], check=True, timeout=60)
    sampler.send_signal(signal.SIGTERM)
    assert sampler.wait(timeout=30) == 0
    rows = json.loads(out.read_text()).values()
    [burner] = [row for row in rows if row["cmd"].endswith(" burner")]
    assert 0.4 <= burner["cpu_s"] < 5.0, burner
    table = report(out, top=1000)
    assert table.splitlines()[0].startswith(f"{len(rows)} processes") and f"| {kind(burner['cmd'])} |" in table
    assert kind("[kdamond.0]") == "kernel threads" and kind("VLLM::EngineCore").startswith("vLLM")
