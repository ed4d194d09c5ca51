"""The GRPO loop (training.grpo.trainer) on the tiny checkpoint: gradient = plain policy gradient,
the normaliser, the smoke run's rising reward, zero learning rate, resume, LoRA."""

import json
import math
import re
import warnings

import pytest
import torch
from safetensors.torch import load_file

import training.grpo.trainer as grpo
from rumik_app import TTSEngine
from rumik_app.errors import ConfigError
from tests.training.distributed import set_args, shared_plan, smoke_plan, smoke_runs
from training.common import latest_checkpoint, read_metrics, wsd_lambda
from training.config import load_config
from training.grpo.__main__ import main
from training.grpo.config import SMOKE_CONFIG, GRPOConfig
from training.grpo.policy import ScoringBatch
from training.grpo.trainer import GRPOTrainer


def _cfg(tiny_checkpoint, out, *overrides) -> GRPOConfig:
    return load_config(GRPOConfig, SMOKE_CONFIG, [f"model={tiny_checkpoint}", f"out_dir={out}", *overrides])


def _metrics(out):
    """The step rows of OUT/metrics.jsonl (resume events left out)."""
    return [row for row in read_metrics(out) if "event" not in row]


def _mean(xs):
    return sum(xs) / len(xs)


GRAD_OVERRIDES = (
    "rollout.prompts_per_step=2", "rollout.num_generations=3", "rollout.max_new_tokens=24",
    "micro_batch_size=4", "optim.max_grad_norm=0",
    'rewards=[{"name": "content", "kind": "codebook0_low"}, {"name": "duration", "kind": "duration"}]',
)


@pytest.mark.filterwarnings(r"error:Detected call of `lr_scheduler\.step\(\)`")  # the real step still runs
@pytest.mark.parametrize("checkpointing", [False, True])
def test_one_step_gradient_is_the_plain_policy_gradient(tiny_checkpoint, tmp_path, monkeypatch, checkpointing):
    trainer = GRPOTrainer(_cfg(tiny_checkpoint, tmp_path, *GRAD_OVERRIDES,
                               f"activation_checkpointing={str(checkpointing).lower()}"))
    with torch.no_grad():  # stop probability ~0.5 per boundary: varied lengths, real stop decisions
        trainer.model.stop_predictor[3].bias.fill_(0.0)
    rb = trainer.make_batch(1)
    r = rb.rollouts
    assert r.stop_mask.any() and rb.stop_adv.ne(0).any() and rb.token_adv.ne(0).any()
    n_actions = int(r.token_mask.sum() + r.stop_mask.sum())

    # Hand-built: sum over actions of A * grad log pi, divided by the batch's action count.
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    tok, stop = trainer.scorer(ScoringBatch.from_rollouts(r, 8, pad_id=trainer.engine.pad_id))
    expected = [torch.zeros_like(p) for p in params]
    n = tok.shape[1]
    actions = [(tok[i, t], rb.token_adv[i, t]) for i in range(len(r)) for t in range(n) if r.token_mask[i, t]]
    actions += [(stop[i, j], rb.stop_adv[i, j]) for i in range(len(r)) for j in range(stop.shape[1])
                if r.stop_mask[i, j]]
    for logp, adv in actions:
        if adv != 0:
            grads = torch.autograd.grad(logp, params, retain_graph=True, allow_unused=True)
            for e, g in zip(expected, grads, strict=True):
                if g is not None:
                    e.add_(adv * g / n_actions)

    seen, captured = [], {}
    real_objective = grpo.clipped_objective

    def spy(*args, **kwargs):
        seen.append(args[5])  # the normaliser
        return real_objective(*args, **kwargs)

    real_step = trainer.optimizer.step

    def capture(*args, **kwargs):  # the gradients as the optimiser receives them, then its real step
        captured["grads"] = [p.grad.clone() for p in params]
        return real_step(*args, **kwargs)

    monkeypatch.setattr(grpo, "clipped_objective", spy)
    monkeypatch.setattr(trainer.optimizer, "step", capture)
    trainer.optimizer.zero_grad(set_to_none=True)
    stats = trainer.update(rb)
    assert seen == [float(n_actions)] * 2  # two micro-batches, one global normaliser
    assert stats["count"] == n_actions
    for got, want in zip(captured["grads"], expected, strict=True):
        torch.testing.assert_close(got, -want, rtol=1e-4, atol=1e-7)  # loss = -objective
    assert any(float(g.abs().max()) > 0 for g in captured["grads"])


ACOUSTIC_OVERRIDES = (
    "rollout.prompts_per_step=2", "rollout.num_generations=3", "rollout.max_new_tokens=24",
    "micro_batch_size=6", "optim.max_grad_norm=0",
    # one DNSMOS window per rollout: the tiny model's 0.24 s clips would be tiled into seven
    'rewards=[{"name": "quality", "kind": "quality", "kwargs": {"max_windows": 1, "threads": 1}}]',
)


def _update_grads(trainer, rb, monkeypatch) -> list[torch.Tensor]:
    """The gradients the optimiser receives from `trainer.update(rb)` (its real step still runs)."""
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    captured, real_step = {}, trainer.optimizer.step

    def capture(*args, **kwargs):
        captured["grads"] = [p.grad.clone() for p in params]
        return real_step(*args, **kwargs)

    monkeypatch.setattr(trainer.optimizer, "step", capture)
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.update(rb)
    return captured["grads"]


@pytest.mark.filterwarnings(r"error:Detected call of `lr_scheduler\.step\(\)`")
def test_acoustic_target_is_the_policy_gradient_on_codebooks_1_to_7(tiny_checkpoint, tmp_path, monkeypatch):
    """The quality reward routes to codebooks 1..7 by default (`acoustic`): the update's gradient
    is sum over those tokens of A_i * grad log pi / N, built here from the stream advantages and
    each token's position in its frame; codebook 0, `</audio>` and the stop decisions get nothing."""
    trainer = GRPOTrainer(_cfg(tiny_checkpoint, tmp_path, *ACOUSTIC_OVERRIDES))
    with torch.no_grad():
        trainer.model.stop_predictor[3].bias.fill_(0.0)  # real stop decisions, varied lengths
    rb = trainer.make_batch(1)
    r, q, end = rb.rollouts, trainer.layout.num_quantizers, trainer.layout.audio_end_token_id
    assert r.stop_mask.any() and rb.advantages[:, 0].ne(0).any()
    assert torch.equal(trainer.W, torch.tensor([[0.0] + [1.0] * (q - 1) + [0.0]]))
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    tok, _ = trainer.scorer(ScoringBatch.from_rollouts(r, q, pad_id=trainer.engine.pad_id))
    n_actions = int(r.token_mask.sum() + r.stop_mask.sum())
    expected = [torch.zeros_like(p) for p in params]
    acoustic = 0
    for i in range(len(r)):
        for t in range(tok.shape[1]):
            if not r.token_mask[i, t]:
                continue
            if r.token_ids[i, t] == end or t % q == 0:  # the stop slot and codebook 0: no advantage
                assert rb.token_adv[i, t] == 0
                continue
            adv = rb.advantages[i, 0]
            assert rb.token_adv[i, t] == pytest.approx(float(adv))
            acoustic += 1
            grads = torch.autograd.grad(tok[i, t], params, retain_graph=True, allow_unused=True)
            for e, g in zip(expected, grads, strict=True):
                if g is not None:
                    e.add_(adv * g / n_actions)
    assert acoustic and rb.stop_adv.eq(0).all()
    for got, want in zip(_update_grads(trainer, rb, monkeypatch), expected, strict=True):
        torch.testing.assert_close(got, -want, rtol=1e-4, atol=1e-7)  # loss = -objective
    assert rb.rewards[:, 0].ge(0).all() and rb.rewards[:, 0].le(1).all()  # OVRL scaled to 0-1


@pytest.mark.slow
def test_smoke_run_with_the_speaker_reward_logs_it(tiny_checkpoint, tmp_path):
    """The speaker reward against the voices of the starting checkpoint (synthesised once and
    cached), beside the smoke reward: its stream is logged every step."""
    out = tmp_path / "speaker"
    rewards = ('rewards=[{"name": "codebook0_low", "kind": "codebook0_low"}, '
               '{"name": "speaker", "kind": "speaker", "weight": 0.5}]')
    sets = sum((["--set", o] for o in (f"model={tiny_checkpoint}", "steps=2", "rollout.num_generations=2",
                                       "rollout.max_new_tokens=32", rewards)), [])
    main(["--smoke", "--out", str(out), *sets])
    rows = _metrics(out)
    assert len(rows) == 2 and all(0.0 <= row["rewards/speaker/mean"] <= 1.0 for row in rows)
    assert all(row["rewards/speaker/abstained"] == 0.0 for row in rows)
    saved = json.loads((out / "train_config.json").read_text())
    assert saved["rewards"][1]["kind"] == "speaker" and saved["rewards"][1]["weight"] == 0.5


def test_schedule_starts_at_its_first_value_and_the_log_is_compact(tiny_checkpoint, tmp_path, capsys):
    """The first step trains at the schedule's first learning rate (warmup 1/2 here), with no
    "lr_scheduler.step() before optimizer.step()" warning; stdout has one short line per step
    and a closing summary, metrics.jsonl every metric."""
    out = tmp_path / "run"
    cfg = _cfg(tiny_checkpoint, out, "steps=3", "optim.warmup_steps=2", "rollout.max_new_tokens=16", "save_every=2")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*lr_scheduler")
        GRPOTrainer(cfg).train()
    rows = _metrics(out)
    factor = wsd_lambda(*cfg.optim.phases(cfg.total_steps), cfg.optim.min_lr_ratio)
    assert [row["learning_rate"] for row in rows] == [cfg.optim.lr * factor(i) for i in range(3)]
    assert rows[0]["learning_rate"] == cfg.optim.lr / 2 and rows[1]["learning_rate"] == cfg.optim.lr
    for key in ("reward", "kl", "clip_ratio/high_max", "completions/mean_length", "grad_norm",
                "sampling/sampling_logp_difference/mean", "time/rollout_s"):
        assert all(key in row for row in rows), key  # the full metrics go to the file
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("training.grpo: 1 process (not distributed), cpu, float32 weights, no mixed precision, ")
    assert lines[0].endswith(f" MiB of weights, grads and AdamW state per process; 3 steps -> {out}")
    steps = [line for line in lines if line.startswith("step ")]
    assert len(steps) == 3 and all(len(line) < 160 for line in steps), steps
    assert re.fullmatch(r"step 1/3 \( 33%\) \| reward \d\.\d{3} ±\d\.\d{3} \| kl \S+ \| loss \S+ \| lr 5\.00e-04 \| "
                        r"len \d\.\d\d s \| [\d,]+ tok/s \| \d+:\d\d elapsed, ETA \d+:\d\d", steps[0]), steps[0]
    assert f"  saved {out / 'checkpoints' / 'step_00000002'}" in lines
    end = "\n".join(lines[lines.index(steps[-1]) + 1:])
    assert "training.grpo: finished step 3/3 in " in end and "reward " in end
    assert f"checkpoints: {out / 'checkpoints' / 'step_00000003'} (latest; also step_00000002)" in end
    assert f"final weights: {out} (published format" in end and f"metrics: {out / 'metrics.jsonl'}" in end


def test_config_validation(tiny_checkpoint, tmp_path):
    cfg = _cfg(tiny_checkpoint, tmp_path)
    cfg.validate(1)
    for override, message in (("rollout.num_generations=1", "num_generations"),
                              ("rollout.prompts_per_step=3", "multiple"),
                              ("rollout.temperature=0", "temperature"),
                              ("loss.routing=diagonal", "routing"),
                              ("rollout.stop_mode=maybe", "stop_mode"),
                              ("rollout.importance_sampling_cap=0.5", "importance_sampling_cap must be >= 1"),
                              ("rollout.backend=sglang", "rollout.backend must be one of")):
        bad = _cfg(tiny_checkpoint, tmp_path, override)
        with pytest.raises(ConfigError, match=message):
            bad.validate(2)


@pytest.mark.slow
def test_smoke_reward_rises_and_stays_put_without_learning_rate(tiny_checkpoint, tmp_path):
    out = tmp_path / "smoke"
    main(["--smoke", "--out", str(out), "--set", f"model={tiny_checkpoint}"])
    rows = _metrics(out)
    rewards = [row["reward"] for row in rows]
    assert [row["step"] for row in rows] == list(range(1, 21))
    assert _mean(rewards[-5:]) >= _mean(rewards[:5]) + 0.1, rewards
    assert rows[-1]["kl"] > 0 and all(row["rewards/codebook0_low/mean"] == row["reward"] for row in rows)
    assert json.loads((out / "smoke_summary.json").read_text())["verdict"] == "PASS"
    ckpt = latest_checkpoint(out)
    assert ckpt is not None and ckpt.name == "step_00000020"
    engine = TTSEngine.from_pretrained(str(ckpt), device="cpu")  # the published format loads
    assert engine.layout.num_quantizers == 8

    frozen = tmp_path / "frozen"
    main(["--smoke", "--out", str(frozen), "--set", f"model={tiny_checkpoint}", "--set", "optim.lr=0",
          "--set", "steps=10"])
    still = _metrics(frozen)
    flat = [row["reward"] for row in still]
    assert flat[0] == rewards[0]  # same seeds, same starting weights
    assert abs(_mean(flat[-5:]) - _mean(flat[:5])) < 0.1, flat
    assert all(row["kl"] == 0.0 for row in still)  # policy == reference throughout
    summary = json.loads((frozen / "smoke_summary.json").read_text())  # no rise: the check fails, and says so
    assert summary["verdict"] == "FAIL" and "needs a rise of at least 0.1" in summary["criteria"]
    before = load_file(str(tiny_checkpoint / "model.safetensors"))
    after = load_file(str(latest_checkpoint(frozen) / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_resume_continues_exactly(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    sets = sum((["--set", o] for o in (f"model={tiny_checkpoint}", "rollout.max_new_tokens=32", "save_every=2",
                                       "steps=4")), [])
    whole = tmp_path / "whole"
    main(["--smoke", "--out", str(whole), *sets])
    part = tmp_path / "part"
    real = GRPOTrainer.make_batch

    def crash_at_step_3(self, step):
        if step == 3:
            raise KeyboardInterrupt  # killed after the step-2 checkpoint
        return real(self, step)

    monkeypatch.setattr(GRPOTrainer, "make_batch", crash_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        main(["--smoke", "--out", str(part), *sets])
    monkeypatch.setattr(GRPOTrainer, "make_batch", real)
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:  # other settings: refused, naming the key and --resume
        main(["--smoke", "--out", str(part), *sets, "--set", "optim.lr=5e-4"])
    assert refused.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "optim.lr: 0.001 -> 0.0005" in err[0] and "--resume" in err[0]
    main(["--smoke", "--out", str(part), *sets])  # the same command again: resumes by itself
    a, b = _metrics(whole), _metrics(part)
    assert [row["step"] for row in b] == [1, 2, 3, 4]
    assert {"step": 2, "event": "resumed from step_00000002"} in [
        {k: row[k] for k in ("step", "event")} for row in read_metrics(part) if "event" in row]
    for key in ("reward", "loss", "kl", "completions/mean_length", "learning_rate"):
        assert [row[key] for row in b] == pytest.approx([row[key] for row in a], rel=1e-5, abs=1e-8), key


@pytest.mark.slow
def test_lora_reference_is_the_adapter_disabled_model(tiny_checkpoint, tmp_path):
    out = tmp_path / "lora"
    overrides = [f"model={tiny_checkpoint}", "lora.enabled=true", "lora.r=4", "optim.lr=1e-2", "steps=3",
                 "save_every=3", "rollout.max_new_tokens=32", "loss.routing=flat", "loss.num_iterations=2",
                 "loss.beta=0.04", "activation_checkpointing=true"]
    trainer = GRPOTrainer(_cfg(tiny_checkpoint, out, *overrides[1:]))
    batch = ScoringBatch.from_rollouts(trainer.make_batch(1).rollouts, 8, pad_id=trainer.engine.pad_id)
    with torch.no_grad():
        ref_before, policy_before = trainer._reference_logps(batch), trainer.scorer(batch)
    for a, b in zip(ref_before, policy_before, strict=True):  # LoRA B starts at zero: policy == reference
        torch.testing.assert_close(a, b)
    trainer.train()
    with torch.no_grad():
        ref_after, policy_after = trainer._reference_logps(batch), trainer.scorer(batch)
    for a, b in zip(ref_before, ref_after, strict=True):  # the reference stays frozen
        torch.testing.assert_close(a, b)
    assert not torch.allclose(policy_after[0], ref_after[0])
    rows = _metrics(out)
    assert rows[-1]["kl"] > 0 and all(row["loss"] is not None for row in rows)
    ckpt = latest_checkpoint(out)
    state = torch.load(ckpt / "training_state.pt", weights_only=False)
    assert "lora" in state["extra_state"] and "model" not in state
    merged = load_file(str(ckpt / "model.safetensors"))
    base = load_file(str(tiny_checkpoint / "model.safetensors"))
    assert set(merged) == set(base)
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base["model.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(merged["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    main(["--smoke", "--out", str(out), "--resume", *sum((["--set", o] for o in overrides + ["steps=4"]), [])])
    assert [row["step"] for row in _metrics(out)] == [1, 2, 3, 4]


@pytest.mark.slow
def test_real_reward_streams_run_in_the_loop(tiny_checkpoint, tmp_path):
    """Content (decoded audio -> pocketsphinx) and duration streams through make_batch and update."""
    rewards = ('rewards=[{"name": "content", "kind": "content", "kwargs": {"asr": "pocketsphinx"}}, '
               '{"name": "duration", "kind": "duration"}]')
    trainer = GRPOTrainer(_cfg(tiny_checkpoint, tmp_path, "rollout.prompts_per_step=2", "rollout.num_generations=2",
                               "rollout.max_new_tokens=24", rewards))
    step = next(s for s in range(1, 50)
                if {item["language"] for item, _ in trainer.sampler.sample(s, 2, 2)} == {"en", "hi"})
    with torch.no_grad():
        trainer.model.stop_predictor[3].bias.fill_(0.0)
    rb = trainer.make_batch(step)
    langs = [req.language for req in rb.requests]
    assert len(rb.columns["audio"]) == 4 and rb.columns["sample_rate"] == 24_000
    assert [len(a) for a in rb.columns["audio"]] == [int(n) * 1920 for n in rb.rollouts.num_frames]
    content, duration = rb.rewards[:, 0], rb.rewards[:, 1]
    for lang, c in zip(langs, content.tolist(), strict=True):
        assert (0.0 <= c <= 1.0) if lang == "en" else math.isnan(c)  # pocketsphinx: English only
    assert not torch.isnan(duration).any() and (duration <= 0).all()
    stats = trainer.update(rb)
    assert stats["count"] == int(rb.rollouts.token_mask.sum() + rb.rollouts.stop_mask.sum())
    row = trainer.metrics(rb, stats, {})
    assert row["rewards/content/abstained"] == 0.5 and row["rewards/duration/std"] is not None


@shared_plan
def two_process_plan(folder, request):
    """The smoke on one process here, then on two (DDP) in the session's shared launch."""
    sets = set_args(f"model={request.getfixturevalue('tiny_checkpoint')}", "steps=2", "rollout.max_new_tokens=16",
                    "save_every=2")
    return smoke_plan(main, "training.grpo", folder, sets)


@pytest.mark.slow
def test_two_processes_match_one(shared_launch):
    """DDP (gloo, 2 CPU processes, each with half the prompts) gives the single-process run's numbers."""
    runs = smoke_runs(shared_launch[__name__])
    (one, _), (two, printed) = runs["one"], runs["two"]
    assert "training.grpo: 2 processes (DDP over CPU processes)" in printed
    assert len(one) == len(two) == 2
    for key in ("reward", "reward_std", "kl", "loss", "grad_norm", "num_actions"):
        # loss is a sum of +-A terms that cancel to ~1e-9 at rho = 1: compare it absolutely
        assert [row[key] for row in two] == pytest.approx([row[key] for row in one], rel=1e-4, abs=1e-7), key
