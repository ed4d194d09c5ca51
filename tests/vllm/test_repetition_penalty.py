"""The repetition penalty on vLLM: the engine's rule, applied by the rumik logits processor.

vLLM's own `repetition_penalty` would act after the processor has normalised each row to
log-probs (all <= 0), where CTRL's rule no longer divides the positive logits, so the
processor applies `rumik_app.decode.sampling.penalize_repeats` itself (rumik_vllm.rules).
"""

from __future__ import annotations

import pytest
import torch

from rumik_app import SynthesisRequest
from rumik_app.decode.sampling import penalize_repeats
from rumik_vllm.rules import AudioColumns, apply_rules, seen_units
from tests.vllm.calibrated import MAX_NEW_TOKENS

pytestmark = pytest.mark.slow


def test_the_processors_rule_is_the_engines_on_the_phases_columns():
    cols = AudioColumns(first_unit_id=10, num_quantizers=2, codebook_size=4, audio_end_token_id=18, vocab_size=20)
    gen = torch.Generator().manual_seed(0)
    logits = torch.full((1, 20), float("-inf"))
    logits[0, 10:19] = torch.randn(9, generator=gen) * 3
    produced = torch.tensor([[10 + 2 * 1 + 0, 10 + 2 * 3 + 1, 10 + 2 * 2 + 0]])  # codes 1, 3 (q1), 2 (q0)
    seen = seen_units(produced, torch.ones_like(produced, dtype=torch.bool), cols)
    out = logits.clone()
    apply_rules(out, torch.tensor([0]), position=torch.tensor([4]), floor=torch.tensor([100]),
                temperature=torch.tensor([1.0]), stop_uniform=torch.tensor([float("nan")]), cols=cols,
                penalty=torch.tensor([1.7]), seen=seen)
    units = logits[0, [10, 12, 14, 16]]  # codebook 0's rows; </audio> is not allowed before the floor
    mask = torch.tensor([False, True, True, False])  # codes 1 and 2 were produced in codebook 0
    expected = torch.log_softmax(penalize_repeats(units[None], mask[None], torch.tensor([1.7]))[0], 0)
    torch.testing.assert_close(out[0, [10, 12, 14, 16]], expected)


def test_penalised_greedy_tokens_equal_the_engine(engine64, vllm_engine):
    reqs = [SynthesisRequest("Good morning, everyone.", seed=1, temperature=0, repetition_penalty=1.6,
                             max_new_tokens=MAX_NEW_TOKENS),
            SynthesisRequest("कल मिलते हैं।", voice="Zoya", seed=2, temperature=0, repetition_penalty=1.2,
                             max_new_tokens=MAX_NEW_TOKENS),
            SynthesisRequest("Good morning, everyone.", seed=1, temperature=0, max_new_tokens=MAX_NEW_TOKENS)]
    ours, theirs = vllm_engine.generate_batch(reqs), engine64.generate_batch(reqs)
    assert torch.equal(ours.token_ids, theirs.token_ids) and ours.finish_reasons == theirs.finish_reasons
    torch.testing.assert_close(ours.log_probs, theirs.log_probs, atol=1e-4, rtol=0)
    assert not torch.equal(ours.token_ids[0], ours.token_ids[2])  # the penalty changed the greedy path
