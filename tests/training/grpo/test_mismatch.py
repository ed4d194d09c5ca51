"""Truncated importance sampling (training.grpo.mismatch) against its equation
(docs/ARCHITECTURE.md §7): on a hand-built batch, and in the trainer's update on a real one
whose sampler log-probs were moved by known amounts."""

import math

import pytest
import torch

from training.config import load_config
from training.grpo.config import SMOKE_CONFIG, GRPOConfig
from training.grpo.loss import clipped_objective
from training.grpo.mismatch import mismatch_metrics, mismatch_sums, sampler_logps, truncated_is_weights
from training.grpo.policy import ScoringBatch
from training.grpo.trainer import GRPOTrainer

CAP = 2.0
EPS = 0.2


def test_the_cap_weights_each_clipped_term_as_the_equation_says():
    # one row of five actions: three tokens, a reported stop decision, an unreported one (vLLM's "continue")
    old = torch.tensor([[-1.0, -2.0, -0.5, -0.3, -0.7]])
    sampled = torch.tensor([[-1.0, -2.5, -2.0, -0.1, 0.0]])  # ratios 1, e^0.5, e^1.5 (> CAP), e^-0.2, unknown
    known = torch.tensor([[True, True, True, True, False]])
    logp = (old + torch.tensor([[0.0, 0.3, 0.3, 0.05, -0.4]])).requires_grad_()  # rho = exp(logp - old)
    adv = torch.tensor([[1.0, -1.0, 2.0, 0.5, 1.0]])
    mask = torch.ones_like(known)
    w = truncated_is_weights(old, sampled, known, CAP)
    out = clipped_objective(logp, old, None, adv * w, mask, 5.0, EPS, EPS)

    # L = -(1/N) sum_k w_k min(rho_k A_k, clip(rho_k, 1 - eps, 1 + eps) A_k), w_k = min(pi_old / pi_sampler, C)
    weights = [1.0, math.exp(0.5), CAP, math.exp(-0.2), 1.0]
    rhos = [math.exp(d) for d in (0.0, 0.3, 0.3, 0.05, -0.4)]
    terms = [wk * min(r * a, min(max(r, 1 - EPS), 1 + EPS) * a)
             for wk, r, a in zip(weights, rhos, adv[0].tolist(), strict=True)]
    assert w[0].tolist() == pytest.approx(weights, rel=1e-6)
    assert float(out.loss.detach()) == pytest.approx(-sum(terms) / 5, rel=1e-6)
    out.loss.backward()  # d/d logp: -(w A rho) / N where the term is not clipped, 0 where it is
    clipped = [min(r * a, min(max(r, 1 - EPS), 1 + EPS) * a) != r * a
               for r, a in zip(rhos, adv[0].tolist(), strict=True)]
    assert clipped == [False, False, True, False, False]  # the third: rho > 1 + eps with A > 0
    grads = [0.0 if c else -wk * a * r / 5 for wk, a, r, c in zip(weights, adv[0].tolist(), rhos, clipped, strict=True)]
    assert logp.grad[0].tolist() == pytest.approx(grads, rel=1e-5, abs=1e-9)
    metrics = mismatch_metrics(mismatch_sums(old, sampled, known, w))
    assert metrics["sampling/sampling_logp_difference/mean"] == pytest.approx((0 + 0.5 + 1.5 + 0.2) / 4)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(1.5)
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(math.exp(-0.2), rel=1e-6)
    assert metrics["sampling/importance_sampling_ratio/max"] == CAP
    assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(sum(weights[:4]) / 4, rel=1e-6)


def test_the_update_weights_every_action_by_its_truncated_ratio(tiny_checkpoint, tmp_path):
    """The trainer's loss on a real batch whose sampler log-probs were moved by known amounts
    (one stop decision left unreported, as vLLM does) is -(1/N) sum w A (one iteration: rho = 1)."""
    cfg = load_config(GRPOConfig, SMOKE_CONFIG, [f"model={tiny_checkpoint}", f"out_dir={tmp_path}",
                                                 "rollout.max_new_tokens=24", "micro_batch_size=5"])
    trainer = GRPOTrainer(cfg)
    with torch.no_grad():
        trainer.model.stop_predictor[3].bias.fill_(0.0)  # real stop decisions
    rb = trainer.make_batch(1)
    r = rb.rollouts
    with torch.no_grad():
        tok, stop = trainer.scorer(ScoringBatch.from_rollouts(r, 8, pad_id=trainer.engine.pad_id))
    shifts = torch.tensor([0.5, 1.5, -0.3, 0.0])  # ratios e^0.5, e^1.5 -> CAP, e^-0.3, 1
    tok_shift = shifts[torch.arange(tok.shape[1]) % 4].expand_as(tok)
    r.log_probs[:, : tok.shape[1]] = torch.where(r.token_mask[:, : tok.shape[1]], tok - tok_shift, 0.0)
    r.stop_log_probs[:, : stop.shape[1]] = stop - 0.5
    unreported = r.stop_mask.nonzero()[0]
    r.stop_log_probs[unreported[0], unreported[1]] = math.nan
    sampled, known = sampler_logps(r, list(range(len(r))), tok.shape[1], stop.shape[1])
    old = torch.cat([tok, stop], 1)
    w = torch.where(known, torch.exp(old - sampled).clamp(max=CAP), torch.ones_like(old))
    adv = torch.cat([rb.token_adv[:, : tok.shape[1]], rb.stop_adv[:, : stop.shape[1]]], 1)
    n_actions = int(r.token_mask.sum() + r.stop_mask.sum())
    expected = -float((w * adv).sum()) / n_actions
    assert not known[unreported[0], tok.shape[1] + unreported[1]] and (w == CAP).any()
    stats = trainer.update(rb)
    assert stats["loss"] == pytest.approx(expected, rel=1e-5)
    metrics = mismatch_metrics(stats["mismatch"])
    assert metrics["sampling/importance_sampling_ratio/max"] == pytest.approx(CAP)
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(math.exp(-0.3), rel=1e-4)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(1.5, rel=1e-4)
