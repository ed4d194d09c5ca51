"""GRPO with `distributed = "fsdp2"` and vLLM rollouts, as two CPU processes over gloo (each starts its own
vLLM engine, so this module shares no engine with the rest of tests/vllm and runs on any xdist worker).

Run: .venv/bin/python -m pytest tests/vllm/test_grpo_fsdp2.py -q
"""

from __future__ import annotations

import pytest

from tests.training.distributed import run_on_two_cpu_processes, set_args
from tests.vllm.conftest import KV_CACHE_BYTES
from tests.vllm.test_grpo import SMOKE_GAP_MAX
from training.common import read_metrics

# Two vLLM engines start (one per rank) beside the suite's other workers: 242-300 s on 2 busy cores
# (a clean-clone CI run on 2026-12-03 passed TIMEOUT_S' 300 s), ~100 CPU s alone. A deadline for a
# hang, not a speed check.
LAUNCH_TIMEOUT_S = 900


@pytest.mark.slow
def test_fsdp2_on_two_processes_pushes_the_gathered_weights_into_each_vllm_engine(calibrated, tmp_path):
    """The shards are gathered into each process's replica and pushed into its vLLM engine after every
    step, so the sampler's log-probs stay within SMOKE_GAP_MAX of the trainer's at every step (2 steps)."""
    sets = set_args(f"model={calibrated[0]}", "steps=2", "rollout.max_new_tokens=16", "save_every=2",
                    "rollout.backend=vllm", "distributed=fsdp2", f"rollout.vllm_kv_cache_memory_bytes={KV_CACHE_BYTES}")
    done = run_on_two_cpu_processes("training.grpo", ["--smoke", "--out", str(tmp_path / "run"), *sets],
                                    timeout_s=LAUNCH_TIMEOUT_S)
    assert "2 processes (FSDP2 over CPU processes, sharded per decoder layer)" in done.stdout
    rows = [r for r in read_metrics(tmp_path / "run") if "event" not in r]
    assert len(rows) == 2
    for row in rows:
        assert row["sampling/sampling_logp_difference/max"] < SMOKE_GAP_MAX, row
        assert row["sync_seconds"] > 0 and row["sync_megabytes"] > 0
