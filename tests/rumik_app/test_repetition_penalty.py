"""The repetition penalty: transformers' rule, applied alike by the reference and the fast path.

Run: .venv/bin/python -m pytest tests/rumik_app/test_repetition_penalty.py -q
"""

from __future__ import annotations

import pytest
import torch
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

from rumik_app import SynthesisRequest
from rumik_app.decode.reference import ReferenceDecoder
from rumik_app.decode.sampling import penalize_repeats
from rumik_app.decode.slots import BatchDecoder
from rumik_app.prompt import PromptError
from tests.rumik_app.test_fast_decode import _assert_same, _run, likely_end_and_stop


def test_the_rule_is_transformers_repetition_penalty():
    """Same logits as transformers' RepetitionPenaltyLogitsProcessor for the same history."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 50, generator=gen) * 4
    logits[1, 7] = float("-inf")
    history = torch.randint(0, 50, (3, 12), generator=gen)
    history[1, 0] = 7
    seen = torch.zeros(3, 50, dtype=torch.bool).scatter_(1, history, True)
    for p in (1.3, 0.7):
        expected = RepetitionPenaltyLogitsProcessor(p)(history, logits.clone())
        got = penalize_repeats(logits, seen, torch.full((3,), p))
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert torch.equal(penalize_repeats(logits, seen, torch.ones(3)), logits)  # 1 = off, bit for bit


PENALISED = [
    SynthesisRequest("penalised", seed=31, max_new_tokens=160, repetition_penalty=1.8),
    SynthesisRequest("greedy and penalised", seed=32, temperature=0.0, max_new_tokens=120, repetition_penalty=1.5),
    SynthesisRequest("off", seed=33, max_new_tokens=96),
    SynthesisRequest("below one", seed=34, max_new_tokens=80, repetition_penalty=0.8, top_k=8),
]


@pytest.fixture(scope="module")
def engine(tiny_engine):
    return tiny_engine


def test_fast_path_gives_the_reference_tokens_with_penalties(engine):
    """Rows with and without a penalty, sampled and greedy, in one batch: the same rollouts."""
    with likely_end_and_stop(engine, stop_bias=-1e4):
        _assert_same(_run(ReferenceDecoder, engine, PENALISED), _run(BatchDecoder, engine, PENALISED))


def test_a_penalised_greedy_row_takes_the_argmax_of_the_penalised_logits(engine):
    """Oracle by teacher forcing: at every step the greedy token is the argmax of the head's
    logits after dividing (multiplying) the codes this row already produced by the penalty."""
    req = PENALISED[1]
    out = _run(BatchDecoder, engine, [req])
    n = int(out.lengths[0])
    tokens = out.token_ids[0, :n]
    prompt = engine.prompt_ids(req)
    ids = torch.tensor([prompt + tokens.tolist()])
    with torch.no_grad():
        hidden = engine.model.body(input_ids=ids).last_hidden_state[0, len(prompt) - 1:]
    lay, head = engine.layout, engine.head
    seen = torch.zeros(1, lay.num_units, dtype=torch.bool)
    plain_choice_differs = 0
    for t in range(n):
        allow = head.allows_end(t, req.min_new_tokens)
        with torch.no_grad():
            logits = head.logits(hidden[t : t + 1], t % lay.num_quantizers, allow)
        penalised = penalize_repeats(logits, head.seen_columns(seen, t % lay.num_quantizers), torch.tensor([1.5]))
        choice = head.index_to_token(penalised.argmax(-1), t % lay.num_quantizers)
        assert int(choice) == int(tokens[t]), f"step {t}"
        plain_choice_differs += int(head.index_to_token(logits.argmax(-1), t % lay.num_quantizers)) != int(tokens[t])
        if int(tokens[t]) != lay.audio_end_token_id:
            seen[0, int(tokens[t]) - lay.first_unit_id] = True
    assert plain_choice_differs > 0  # the penalty changed some choices: the test can fail


def test_penalty_one_is_the_sampler_without_a_penalty(engine, monkeypatch):
    """The default is off bit for bit: the fast path at penalty 1 gives the tokens and
    log-probs of a reference decoder whose penalty step is removed altogether."""
    import rumik_app.decode.reference as reference

    reqs = [PENALISED[2], PENALISED[2].with_(seed=40, temperature=0.0)]
    fast = _run(BatchDecoder, engine, reqs)
    monkeypatch.setattr(reference, "penalize_repeats", lambda logits, seen, penalty: logits)
    _assert_same(_run(ReferenceDecoder, engine, reqs), fast)


@pytest.mark.parametrize("value", [0, -1, 2.5, float("nan"), "1.2"])
def test_out_of_range_penalties_name_the_range(value):
    with pytest.raises(PromptError, match="Repetition penalty .* out of range: use a value above 0 and at most 2|"
                                          "Repetition penalty must be a number") as info:
        SynthesisRequest("hi", repetition_penalty=value)
    assert info.value.field == "repetition_penalty"
