"""The phased-DPO loop (training.dpo.trainer) on the tiny checkpoint: the reference is the policy
at the phase start, a step's gradient equals a hand-built DPO gradient, the smoke run learns and
logs every metric, a kill mid-phase resumes exactly, a fresh run repeats, two processes match one."""

import contextlib
import io
import json
import math
import re

import pytest
import torch
from safetensors.torch import load_file

from rumik_app import TTSEngine
from tests.training.distributed import set_args, shared_plan, smoke_plan, smoke_runs
from training.common import TRAINING_STATE, latest_checkpoint, read_metrics
from training.config import load_config
from training.dpo.__main__ import main
from training.dpo.config import SMOKE_CONFIG, DPOConfig
from training.dpo.trainer import DPOTrainer

Q = 8
STEP_METRICS = ("loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen",
                "logps/rejected", "phase", "reward", "pairs", "dropped_groups", "learning_rate", "grad_norm")
TIMING_KEYS = ("time", "time/rollout_s", "time/update_s")
GRAD_OVERRIDES = ("prompts_per_phase=2", "rollout.num_generations=4", "rollout.max_new_tokens=24", "micro_batch_size=4",
                  "optim.max_grad_norm=0", "pairs_per_step=5", "pairs.strategy=all", "pairs.min_margin=0",
                  'rewards=[{"name": "content", "kind": "codebook0_low"}, {"name": "duration", "kind": "duration"}]')


def _metrics(out):
    return [row for row in read_metrics(out) if "event" not in row]


def _results(out):
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in _metrics(out)]


def _hand_loss(trainer, ids, routed: bool):
    """The step's DPO loss written out: per pair, sums of the policy's and the reference's
    log-probs over the actions of the columns its stream names (content: codebook 0 and the
    stop slot; duration: the stop slot), -log sigmoid(beta h), the mean over the pairs."""
    pool, beta = trainer.pool, trainer.cfg.loss.beta
    rows = pool.rows
    tok, stop = trainer.scorer(rows)
    named = {0: {0, Q}, 1: {Q}}
    end = trainer.layout.audio_end_token_id

    def seq(values_tok, values_stop, i, cols):
        terms = [values_tok[i, t] for t in range(rows.tokens.shape[1]) if rows.token_mask[i, t]
                 and (cols is None or (Q if int(rows.tokens[i, t]) == end else t % Q) in cols)]
        terms += [values_stop[i, j] for j in range(rows.stop_mask.shape[1]) if rows.stop_mask[i, j]
                  and (cols is None or Q in cols)]
        return sum(terms)

    total = 0.0
    for p in ids:
        c, r, s = int(pool.chosen[p]), int(pool.rejected[p]), int(pool.stream[p])
        cols = named[s] if routed else None
        h = ((seq(tok, stop, c, cols) - seq(pool.ref_token, pool.ref_stop, c, cols))
             - (seq(tok, stop, r, cols) - seq(pool.ref_token, pool.ref_stop, r, cols)))
        total = total - torch.nn.functional.logsigmoid(beta * h)
    return total / len(ids)


@pytest.mark.parametrize("routing", ["routed", "flat"])
def test_reference_is_the_phase_start_policy_and_the_gradient_is_hand_built(tiny_checkpoint, tmp_path, monkeypatch,
                                                                             routing):
    cfg = load_config(DPOConfig, SMOKE_CONFIG, [f"model={tiny_checkpoint}", f"out_dir={tmp_path}",
                                                f"loss.routing={routing}", *GRAD_OVERRIDES])
    trainer = DPOTrainer(cfg)
    with torch.no_grad():  # stop probability ~0.5 per boundary: varied lengths, real stop decisions
        trainer.model.stop_predictor[3].bias.fill_(0.0)
    pool = trainer.start_phase(1)
    assert len(pool) >= 5 and bool(pool.rows.stop_mask.any())
    assert set(pool.stream.tolist()) == ({0, 1} if routing == "routed" else {-1})
    with torch.no_grad():
        tok, stop = trainer.scorer(pool.rows)
    torch.testing.assert_close(pool.ref_token, tok, rtol=1e-5, atol=1e-5)  # the policy as it is now
    torch.testing.assert_close(pool.ref_stop, stop, rtol=1e-5, atol=1e-5)
    trainer.pool = pool
    first = trainer.update(pool.step_pairs(0, cfg.pairs_per_step, cfg.seed))
    assert first["loss_sum"] / first["count"] == pytest.approx(math.log(2), abs=1e-5)  # policy == reference

    ids = pool.step_pairs(1, cfg.pairs_per_step, cfg.seed)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    want = torch.autograd.grad(_hand_loss(trainer, ids, routing == "routed"), params, allow_unused=True)
    captured = {}
    real_step = trainer.optimizer.step

    def capture(*args, **kwargs):  # the gradients as the optimiser receives them, then its real step
        captured["grads"] = [p.grad.clone() if p.grad is not None else None for p in params]
        return real_step(*args, **kwargs)

    monkeypatch.setattr(trainer.optimizer, "step", capture)
    trainer.optimizer.zero_grad(set_to_none=True)
    stats = trainer.update(ids)
    assert stats["count"] == len(ids) and len(ids) > cfg.micro_batch_size // 2  # several micro-batches
    for got, expected in zip(captured["grads"], want, strict=True):
        if expected is None:
            assert got is None or got.abs().max() == 0
        else:
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)
    assert any(g is not None and float(g.abs().max()) > 0 for g in captured["grads"])


@pytest.fixture(scope="module")
def smoke_run(tiny_checkpoint, tmp_path_factory):
    """`python -m training.dpo --smoke` on the tiny checkpoint: (OUT, its stdout)."""
    out = tmp_path_factory.mktemp("dpo") / "smoke"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(["--smoke", "--out", str(out), "--set", f"model={tiny_checkpoint}"])
    return out, printed.getvalue()


@pytest.mark.slow
def test_smoke_learns_and_every_step_logs_the_metrics(smoke_run, tiny_checkpoint):
    out, printed = smoke_run
    rows = _metrics(out)
    cfg = load_config(DPOConfig, SMOKE_CONFIG)
    assert [row["step"] for row in rows] == list(range(1, cfg.total_steps + 1))
    for row in rows:
        assert all(row.get(key) is not None for key in STEP_METRICS), row
        assert row["phase"] == (row["step"] - 1) // cfg.dpo_steps_per_phase + 1
        starts = (row["step"] - 1) % cfg.dpo_steps_per_phase == 0
        assert ("time/rollout_s" in row) == starts  # a phase rolls out once, at its first step
        if starts:  # the reference is the policy at the start of the phase: nothing to prefer yet
            assert row["loss"] == pytest.approx(math.log(2), abs=1e-5) and abs(row["rewards/margins"]) < 1e-5
    assert rows[-1]["rewards/margins"] > 0 and rows[-1]["rewards/accuracies"] > 0.5
    summary = json.loads((out / "smoke_summary.json").read_text())
    table = summary["phases"]
    assert [p["phase"] for p in table] == list(range(1, cfg.phases + 1))
    assert table[-1]["reward"] >= table[0]["reward"] + 0.1 and summary["verdict"] == "PASS", table
    steps = [line for line in printed.splitlines() if line.startswith("step ")]
    assert len(steps) == cfg.total_steps and all(len(line) < 160 for line in steps), steps
    assert re.fullmatch(r"step  1/24 \(  4%\) \| phase 1/6 \| reward \d\.\d{3} \| pairs \d+ \(\d+ dropped\) \| "
                        r"loss 0\.6931 \| margin [+-]0\.000 \| acc \d\.\d\d \| lr 1\.00e-03 \| \d+:\d\d elapsed, "
                        r"ETA \d+:\d\d", steps[0]), steps[0]
    assert "reward " in printed and "(rollout mean of phase 1 and phase 6)" in printed
    engine = TTSEngine.from_pretrained(str(out), device="cpu")  # OUT is a published checkpoint
    assert engine.layout.num_quantizers == Q
    before, after = load_file(str(tiny_checkpoint / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_a_kill_mid_phase_resumes_exactly_and_a_fresh_run_repeats(smoke_run, tiny_checkpoint, tmp_path, monkeypatch):
    """The second run is fresh (another OUT, the same seed) until it is killed in the middle of
    phase 3, then resumed by the same command: every number and the final weights equal the
    uninterrupted run's, bit for bit."""
    whole, _ = smoke_run
    sets = ["--smoke", "--set", f"model={tiny_checkpoint}"]
    weights = load_file(str(whole / "model.safetensors"))
    part = tmp_path / "part"
    real = DPOTrainer.step

    def killed_at_step_11(self, step):  # after the step-10 checkpoint, in the middle of phase 3 (steps 9-12)
        if step == 11:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(DPOTrainer, "step", killed_at_step_11)
    with pytest.raises(KeyboardInterrupt):
        main([*sets, "--out", str(part)])
    monkeypatch.setattr(DPOTrainer, "step", real)
    ckpt = latest_checkpoint(part)
    state = torch.load(ckpt / TRAINING_STATE, weights_only=False)  # training.common's loader, for the RNG states
    buffer = io.BytesIO()
    torch.save(state["extra_state"]["phase_pool"], buffer)
    buffer.seek(0)
    pool = torch.load(buffer, weights_only=True)  # the phase's pairs are plain tensors and numbers
    assert ckpt.name == "step_00000010" and pool["phase"] == 3 and pool["chosen"].numel() == 16
    main([*sets, "--out", str(part)])  # the same command again: continues phase 3 with its pairs
    rows = _metrics(part)
    assert [row["step"] for row in rows] == list(range(1, 25))
    assert {"step": 10, "event": "resumed from step_00000010"} in [
        {k: row[k] for k in ("step", "event")} for row in read_metrics(part) if "event" in row]
    assert "time/rollout_s" not in rows[10]  # step 11: the pool came from the checkpoint, not new rollouts
    assert _results(part)[:10] == _results(whole)[:10]  # the fresh steps repeat the first run's
    assert _results(part) == _results(whole)            # and the resumed ones continue it
    assert all(torch.equal(weights[k], v) for k, v in load_file(str(part / "model.safetensors")).items())


@shared_plan
def two_process_plan(folder, request):
    """The smoke on one process here, then DDP and FSDP2 in the session's shared launch."""
    sets = set_args(f"model={request.getfixturevalue('tiny_checkpoint')}", "phases=2", "rollout.max_new_tokens=32",
                    "save_every=8")
    return smoke_plan(main, "training.dpo", folder, sets, {"fsdp2": set_args("distributed=fsdp2")})


@pytest.mark.slow
def test_two_processes_match_one(shared_launch):
    """DDP and FSDP2 (gloo, 2 CPU processes, each sampling half the groups, the pool shared) give the
    one-process numbers. FSDP2 trains sharded; the reference and the rollouts use each process's full
    replica, gathered after every step (training.grpo.rollout)."""
    runs = smoke_runs(shared_launch[__name__])
    (one, _), (two, ddp), (sharded, fsdp2) = runs["one"], runs["two"], runs["fsdp2"]
    assert "training.dpo: 2 processes (DDP over CPU processes)" in ddp
    assert "training.dpo: 2 processes (FSDP2 over CPU processes, sharded per decoder layer)" in fsdp2
    assert len(one) == len(two) == len(sharded) == 8
    for run in (two, sharded):
        for key in ("reward", "pairs", "dropped_groups", "num_pairs"):
            assert [row[key] for row in run] == [row[key] for row in one], key
        for key in ("loss", "rewards/margins", "rewards/chosen", "logps/chosen", "logps/rejected", "grad_norm"):
            assert [row[key] for row in run] == pytest.approx([row[key] for row in one], rel=1e-4, abs=1e-6), key


@pytest.mark.slow
def test_lora_reference_is_the_phase_start_policy_not_the_base(tiny_checkpoint, tmp_path):
    """With LoRA the adapters keep training across phases; each phase's reference is the policy
    with its adapters at the phase start (the adapter-disabled model would be the base model)."""
    out = tmp_path / "lora"
    cfg = load_config(DPOConfig, SMOKE_CONFIG, [f"model={tiny_checkpoint}", f"out_dir={out}", "lora.enabled=true",
                                                "lora.r=4", "optim.lr=1e-2", "phases=2", "dpo_steps_per_phase=2",
                                                "save_every=4", "rollout.max_new_tokens=24"])
    trainer = DPOTrainer(cfg)
    trainer.train()
    rows = _metrics(out)
    assert [row["loss"] for row in rows][::2] == pytest.approx([math.log(2)] * 2, abs=1e-5)  # phase starts
    assert rows[1]["rewards/margins"] > 0
    with torch.no_grad(), trainer.peft.disable_adapter():
        base_tok, _ = trainer.scorer(trainer.pool.rows)
    assert not torch.allclose(base_tok, trainer.pool.ref_token, atol=1e-4)  # phase 2's reference is not the base
    extra = torch.load(latest_checkpoint(out) / TRAINING_STATE, weights_only=False)["extra_state"]
    assert "lora" in extra and extra["phase_pool"]["phase"] == 2
    TTSEngine.from_pretrained(str(out), device="cpu")  # merged weights, published format
