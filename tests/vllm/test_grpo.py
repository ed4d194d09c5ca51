"""GRPO (and DPO) with `rollout.backend = "vllm"` on the calibrated tiny float32 checkpoint (CPU).

The oracle of the weight sync: after an optimiser step and a sync, the log-probs vLLM reports
for the tokens it samples equal the trainer's recomputation with its own weights to 1e-4; with
the sync switched off (the source's test-only `sync`), they differ by more than 1e-2. Then: the
smoke run with the vLLM backend learns and logs TRL's mismatch metrics every step (below 1e-3
in float32), LoRA's merged weights reach vLLM, and a resumed run puts the checkpoint's weights
into vLLM before its first rollout; DPO's phases roll out on vLLM through the same table.
FSDP2 on two processes, each with its own vLLM engine: test_grpo_fsdp2.py.

The trainers here share the session's vLLM engine (an engine start costs ~30 s on 2 cores):
`VLLMRollouts.build(trainer, engine=...)` pushes every weight of the trainer into it first,
and the fixture puts the checkpoint's weights back afterwards for the other vLLM tests.
Run: .venv/bin/python -m pytest tests/vllm/test_grpo.py -q
"""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file

from rumik_app import SynthesisRequest
from training.common import read_metrics
from training.config import load_config
from training.dpo.config import SMOKE_CONFIG as DPO_SMOKE
from training.dpo.config import DPOConfig
from training.dpo.trainer import DPOTrainer
from training.grpo.config import SMOKE_CONFIG, GRPOConfig
from training.grpo.mismatch import METRIC_NAMES, sampler_logps
from training.grpo.policy import ScoringBatch
from training.grpo.trainer import GRPOTrainer
from training.grpo.vllm_rollouts import VLLMRollouts

pytestmark = pytest.mark.slow
SYNCED_ATOL = 1e-4  # vLLM's float32 CPU kernels against the trainer's, same weights
STALE_MIN = 1e-2  # one unsynced optimiser step at ORACLE_LR moves log-probs by more than this
SMOKE_GAP_MAX = 1e-3
ORACLE_LR = "optim.lr=1e-2"
PROBE = [SynthesisRequest("Probe one, fixed seeds.", seed=500, min_new_tokens=24, max_new_tokens=48),
         SynthesisRequest("दूसरा नमूना।", voice="Zoya", seed=600, min_new_tokens=24, max_new_tokens=48)]


@pytest.fixture
def shared(vllm_engine, calibrated):
    """`source=` for a trainer: the session's vLLM engine; its checkpoint weights come back after."""
    yield lambda trainer: VLLMRollouts.build(trainer, engine=vllm_engine)
    vllm_engine.load_weights(load_file(calibrated[0] / "model.safetensors"))


def _cfg(calibrated, out, *overrides) -> GRPOConfig:
    return load_config(GRPOConfig, SMOKE_CONFIG, [f"model={calibrated[0]}", f"out_dir={out}", "rollout.backend=vllm",
                                                  *overrides])


@torch.no_grad()
def _gap(trainer: GRPOTrainer) -> float:
    """max |log pi_trainer - log pi_vLLM| over the known actions of fixed-seed rollouts sampled now."""
    r = trainer.source.generate(PROBE, 4, "sample")
    batch = ScoringBatch.from_rollouts(r, trainer.layout.num_quantizers, pad_id=trainer.engine.pad_id)
    tok, stop = trainer.acc.unwrap_model(trainer.scorer)(batch)
    sampled, known = sampler_logps(r, list(range(len(r))), tok.shape[1], stop.shape[1])
    return float((torch.cat([tok, stop], 1) - sampled).abs()[known].max())


def _synced_then_stale(trainer: GRPOTrainer) -> tuple[dict, float, float]:
    """A step with its sync, the gap; a step without (the test-only switch), the gap again."""
    assert _gap(trainer) < SYNCED_ATOL  # the same weights on both sides to begin with
    stats = trainer.update(trainer.make_batch(1))
    synced = _gap(trainer)
    trainer.source.sync = False
    trainer.update(trainer.make_batch(2))
    stale = _gap(trainer)
    print(f"log-prob gap after a synced step {synced:.2e}, after an unsynced one {stale:.2e}")
    assert synced < SYNCED_ATOL and stale > STALE_MIN
    return stats, synced, stale


def test_after_a_step_and_a_sync_vllm_log_probs_equal_the_trainers_and_without_the_sync_they_do_not(
        calibrated, shared, tmp_path):
    stats, _, _ = _synced_then_stale(GRPOTrainer(_cfg(calibrated, tmp_path, ORACLE_LR), source=shared))
    assert stats["sync_tensors"] == 24 and stats["sync_seconds"] > 0  # full weights: every tensor moved


def test_smoke_with_vllm_rollouts_learns_and_logs_the_mismatch_every_step(calibrated, shared, tmp_path):
    out = tmp_path / "smoke"
    trainer = GRPOTrainer(_cfg(calibrated, out), source=shared)
    trainer.train()
    rows = [r for r in read_metrics(out) if "event" not in r]
    summary = GRPOTrainer.smoke_report(out, {})
    passed, criteria = GRPOTrainer.smoke_verdict(summary)
    print(criteria, [round(r["sampling/sampling_logp_difference/max"], 7) for r in rows])
    assert passed and len(rows) == 20, criteria
    for row in rows:
        assert all(row[key] is not None for key in METRIC_NAMES), row
        assert row["sampling/sampling_logp_difference/max"] < SMOKE_GAP_MAX
        assert 1 - SMOKE_GAP_MAX < row["sampling/importance_sampling_ratio/min"] <= 1
        assert row["sampling/importance_sampling_ratio/max"] < 1 + SMOKE_GAP_MAX and row["sync_seconds"] > 0


def test_lora_merged_weights_reach_vllm(calibrated, shared, tmp_path):
    trainer = GRPOTrainer(_cfg(calibrated, tmp_path, ORACLE_LR, "lora.enabled=true", "lora.r=8"), source=shared)
    stats, _, _ = _synced_then_stale(trainer)
    # the adapted projections (7 per layer, 2 layers) and the trained stop head (6), not the embedding or norms
    assert stats["sync_tensors"] == 7 * 2 + 6


def test_a_resumed_run_samples_with_the_checkpoints_weights(calibrated, shared, tmp_path):
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    GRPOTrainer(_cfg(calibrated, whole, "steps=4", "save_every=2"), source=shared).train()
    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "checkpoints" / "step_00000004")
    (resumed / "checkpoints" / "latest").write_text("step_00000002\n")
    lines = (resumed / "metrics.jsonl").read_text().splitlines()
    (resumed / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")
    # vLLM now holds the whole run's step-4 weights; the resumed trainer must push step 2's
    GRPOTrainer(_cfg(calibrated, resumed, "steps=4", "save_every=2"), source=shared).train()
    first, second = ([r for r in read_metrics(p) if "event" not in r] for p in (whole, resumed))
    assert [r["step"] for r in second] == [1, 2, 3, 4]
    for a, b in zip(first[2:], second[2:], strict=True):
        assert b["sampling/sampling_logp_difference/max"] < SMOKE_GAP_MAX, b
        assert b["learning_rate"] == a["learning_rate"]
        assert b["reward"] == pytest.approx(a["reward"], abs=1e-6) and b["loss"] == pytest.approx(a["loss"], abs=1e-6)


def test_dpo_phases_roll_out_on_vllm_with_the_weights_of_the_phase_start(calibrated, shared, tmp_path):
    out = tmp_path / "dpo"
    cfg = load_config(DPOConfig, DPO_SMOKE, [f"model={calibrated[0]}", f"out_dir={out}", "rollout.backend=vllm",
                                             "phases=2", "dpo_steps_per_phase=2", "save_every=100"])
    trainer = DPOTrainer(cfg, source=shared)
    trainer.train()
    rows = [r for r in read_metrics(out) if "event" not in r]
    assert [r["phase"] for r in rows] == [1, 1, 2, 2] and all(r["sync_seconds"] > 0 for r in rows)
    assert _gap(trainer) < SYNCED_ATOL  # after the last step's sync: vLLM samples with the final weights


def test_the_rollout_benchmark_fills_its_table_and_leaves_vllm_as_it_was(engine64, vllm_engine):
    """benchmarks/grpo_rollouts.py's code path on the shared engines (a GPU run that crashes
    halfway costs scarce device time); vLLM gets the checkpoint's weights back at the end."""
    from benchmarks import grpo_rollouts

    rows = grpo_rollouts.run(engine64, vllm_engine, prompts=2, generations=2, new_tokens=16, steps=1)
    assert [r["backend"] for r in rows] == ["engine", "vllm"]
    assert all(r["tokens_per_step"] == 2 * 2 * 16 and r["tokens_per_s"] > 0 for r in rows)
    assert rows[1]["sync_s_per_step"] > 0 and rows[1]["sync_mb_per_step"] > 0
    assert "| vllm | 4 | 64 |" in grpo_rollouts.table(rows)
    greedy = [SynthesisRequest("Back as it was.", seed=3, temperature=0.0, max_new_tokens=24)]
    ours, theirs = vllm_engine.generate_batch(greedy), engine64.generate_batch(greedy)
    assert torch.equal(ours.token_ids, theirs.token_ids)
