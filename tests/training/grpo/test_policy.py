"""Teacher-forced GRPO log-probs (training.grpo.policy) against what the sampler recorded, and LoRA merging."""

import copy

import torch

from rumik_app import SynthesisRequest
from rumik_app.decode.sampling import RowParams
from rumik_app.decode.slots import BatchDecoder
from rumik_app.model.lm import AudioHead
from tests.conftest import stop_head_bias
from training.grpo.policy import PolicyScorer, ScoringBatch, apply_lora, merged_state_dict

REQUESTS = [
    SynthesisRequest("short", seed=3, max_new_tokens=48, temperature=0.9),
    SynthesisRequest("a much longer prompt, so the rows have different prompt lengths", seed=5, max_new_tokens=48,
                     min_new_tokens=16, temperature=1.0),
]


def _sampled(engine):
    with stop_head_bias(engine, -0.5):  # stop probability ~0.4 per boundary: varied lengths
        return engine.generate_batch(REQUESTS, num_samples=3, stop_mode="sample")



def _same(a: ScoringBatch, b: ScoringBatch) -> None:
    for name in ScoringBatch.fills():
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_select_and_cat_give_the_layout_of_the_rows_alone(tiny_engine):
    """select(rows) of a batch, and of batches concatenated, lays rows out as from_rollouts of those rows."""
    r = _sampled(tiny_engine)
    pad = tiny_engine.pad_id
    full = ScoringBatch.from_rollouts(r, 8, pad_id=pad)
    for rows in ([4, 1], [0], [5, 5, 2], list(range(6))):
        _same(full.select(rows, 8), ScoringBatch.from_rollouts(r, 8, rows=rows, pad_id=pad))
    parts = [ScoringBatch.from_rollouts(r, 8, rows=rows, pad_id=pad) for rows in ([3], [0, 5], [1])]
    both = ScoringBatch.cat(parts, pad)
    assert both.input_ids.shape[0] == 4 and both.tokens.shape[1] == max(p.tokens.shape[1] for p in parts)
    _same(both.select([1, 3], 8), ScoringBatch.from_rollouts(r, 8, rows=[0, 1], pad_id=pad))
    _same(both.select([0], 8), parts[0])

def test_scorer_reproduces_sampled_token_and_stop_log_probs(tiny_engine):
    r = _sampled(tiny_engine)
    assert len(set(r.lengths.tolist())) > 1 and r.stop_decisions.any()
    with stop_head_bias(tiny_engine, -0.5), torch.no_grad():
        scorer = PolicyScorer(tiny_engine.model, tiny_engine.layout)
        full = ScoringBatch.from_rollouts(r, 8, pad_id=tiny_engine.pad_id)
        tok, stop = scorer(full)
        part = ScoringBatch.from_rollouts(r, 8, rows=[4, 1], pad_id=tiny_engine.pad_id)
        tok_part, stop_part = scorer(part)
    n, f = tok.shape[1], stop.shape[1]
    torch.testing.assert_close(tok, r.log_probs[:, :n] * r.token_mask[:, :n], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stop, r.stop_log_probs[:, :f], rtol=1e-4, atol=1e-4)
    assert full.num_actions == int(r.token_mask.sum() + r.stop_mask.sum())
    m = tok_part.shape[1]
    torch.testing.assert_close(tok_part, tok[[4, 1], :m], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stop_part, stop[[4, 1], : stop_part.shape[1]], rtol=1e-4, atol=1e-4)


def test_scorer_unrestricted_head(tiny_engine):
    head = AudioHead(tiny_engine.model, tiny_engine.layout, restrict_phase=False)
    prompt = tiny_engine.prompt_ids(SynthesisRequest("free"))
    dec = BatchDecoder(tiny_engine.model, head, [prompt, prompt], [RowParams(seed=3, max_new_tokens=40),
                                                                   RowParams(seed=4, max_new_tokens=40)],
                       pad_id=tiny_engine.pad_id)
    for _ in dec.steps():
        pass
    r = dec.rollouts()
    with torch.no_grad():
        tok, _ = PolicyScorer(tiny_engine.model, tiny_engine.layout, restrict_phase=False)(
            ScoringBatch.from_rollouts(r, 8, pad_id=tiny_engine.pad_id))
    torch.testing.assert_close(tok, r.log_probs[:, : tok.shape[1]] * r.token_mask, rtol=1e-4, atol=1e-4)


def test_merged_state_dict_equals_peft_merge_and_unload(tiny_engine):
    model = copy.deepcopy(tiny_engine.model)
    peft_model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "down_proj"])
    with torch.no_grad():
        for _name, p in peft_model.named_parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))  # nonzero B and a changed stop head
    merged = merged_state_dict(peft_model)
    reference = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    assert set(merged) == set(reference) == set(tiny_engine.model.state_dict())
    for key, value in reference.items():
        torch.testing.assert_close(merged[key], value, rtol=1e-6, atol=1e-6)
    base = tiny_engine.model.state_dict()
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base["model.layers.0.self_attn.q_proj.weight"])
    assert not torch.equal(merged["stop_predictor.3.bias"], base["stop_predictor.3.bias"])
    assert torch.equal(merged["model.layers.0.self_attn.k_proj.weight"], base["model.layers.0.self_attn.k_proj.weight"])
