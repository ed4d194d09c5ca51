"""Training sequences: the loss mask, stop targets, padding, and agreement with the engine."""

import numpy as np
import pytest
import torch

from rumik_app import SynthesisRequest
from tests.conftest import stop_head_bias
from training.sft.objective import SFTObjective
from training.sft.sequences import IGNORE_INDEX, build_sequence, collate

STOP_BIAS = -2.0


def _codes(frames: int, seed: int = 0, q: int = 8) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2048, size=(q, frames))


def _is_acoustic(layout, ids):
    ids = np.asarray(ids)
    return ((ids >= layout.first_unit_id) & (ids <= layout.last_unit_id)) | (ids == layout.audio_end_token_id)


def test_mask_covers_exactly_unit_tokens_and_audio_end(tiny_engine):
    lay = tiny_engine.layout
    req = SynthesisRequest("नमस्ते <laugh> hello", voice="Aisha", tone="happy", accent="Hindi", pace="fast")
    prompt = tiny_engine.prompt_ids(req)
    codes = _codes(5)
    ex = build_sequence(prompt, codes, lay)
    full = np.concatenate([prompt, lay.codes_to_ids(codes), [lay.audio_end_token_id]])
    assert np.array_equal(ex.input_ids, full[:-1]) and np.array_equal(ex.targets, full[1:])
    assert np.array_equal(ex.loss_mask, _is_acoustic(lay, ex.targets))
    assert ex.num_targets == 5 * 8 + 1
    assert not ex.loss_mask[: len(prompt) - 1].any()  # text and condition targets are never trained
    assert ex.loss_mask[len(prompt) - 1 :].all()  # from the `<audio>` input on, every target counts
    assert ex.targets[ex.loss_mask][-1] == lay.audio_end_token_id
    assert np.array_equal(lay.parse(ex.targets[ex.loss_mask])[0], codes)


def test_stop_targets_are_one_only_at_the_final_boundary(tiny_engine):
    lay = tiny_engine.layout
    prompt = tiny_engine.prompt_ids(SynthesisRequest("stop"))
    ex = build_sequence(prompt, _codes(4), lay)
    assert ex.stop_target.tolist() == [0.0, 0.0, 0.0, 1.0]
    # Each boundary position holds the last codebook of its frame and predicts the next q0 or </audio>.
    assert [lay.split(int(ex.input_ids[i]))[1] for i in ex.stop_index] == [7, 7, 7, 7]
    nxt = ex.targets[ex.stop_index]
    assert [lay.split(int(t))[1] for t in nxt[:-1]] == [0, 0, 0] and nxt[-1] == lay.audio_end_token_id
    assert ex.stop_index[-1] == len(ex.input_ids) - 1
    single = build_sequence(prompt, _codes(1), lay)
    assert single.stop_target.tolist() == [1.0]


def test_bad_inputs_are_rejected(tiny_engine):
    lay = tiny_engine.layout
    prompt = tiny_engine.prompt_ids(SynthesisRequest("x"))
    with pytest.raises(ValueError, match="T >= 1"):
        build_sequence(prompt, np.zeros((8, 0), dtype=int), lay)
    with pytest.raises(ValueError, match="<audio>"):
        build_sequence(prompt[:-1], _codes(2), lay)


def test_stop_positions_match_the_engine_boundaries(tiny_engine):
    """Teacher-forcing the engine's own greedy output gives the stop logits the engine saw."""
    req = SynthesisRequest("boundary check", temperature=0.0, max_new_tokens=40)
    with stop_head_bias(tiny_engine, STOP_BIAS):  # p(stop) ~ 0.12: never stops, well-conditioned
        rollouts = tiny_engine.generate_batch([req])
        ex = build_sequence(tiny_engine.prompt_ids(req), rollouts.codes[0].numpy(), tiny_engine.layout)
        batch = collate([ex], tiny_engine.pad_id)
        with torch.no_grad():
            hidden = tiny_engine.model.body(input_ids=batch["input_ids"]).last_hidden_state[0]
            logits = tiny_engine.model.stop_logits(hidden)  # at every position
    seen = rollouts.stop_log_probs[0][rollouts.stop_mask[0]].double()  # log sigmoid(-logit), boundaries 1..4
    assert len(seen) == 4
    engine_logits = (torch.log1p(-seen.exp()) - seen).float()  # invert log sigmoid(-x)
    index = batch["stop_index"][0][:4]
    torch.testing.assert_close(logits[index], engine_logits, rtol=0, atol=2e-5)
    assert (logits[index - 1] - engine_logits).abs().max() > 1e-4  # one position off would be caught


def test_collate_pads_with_masks_so_batch_sums_equal_single_sums(tiny_engine):
    lay, model = tiny_engine.layout, tiny_engine.model
    a = build_sequence(tiny_engine.prompt_ids(SynthesisRequest("a short one")), _codes(2, 1), lay)
    b = build_sequence(tiny_engine.prompt_ids(SynthesisRequest("a longer prompt here", tone="sad")),
                       _codes(6, 2), lay)
    batch = collate([a, b], tiny_engine.pad_id)
    assert batch["input_ids"].shape == (2, len(b.input_ids)) and batch["stop_mask"].sum() == 8
    assert batch["attention_mask"][0].sum() == len(a.input_ids)
    pad = batch["attention_mask"][0] == 0
    assert not batch["loss_mask"][0][pad].any() and (batch["targets"][0][pad] == IGNORE_INDEX).all()
    assert batch["audio_len"].tolist() == [17, 49]
    for head in ("full", "audio"):
        objective = SFTObjective(model, lay, head=head)
        with torch.no_grad():
            both = objective(**batch)
            singles = [objective(**collate([e], tiny_engine.pad_id)) for e in (a, b)]
        for key in ("acoustic_sum", "stop_sum"):
            torch.testing.assert_close(both[key], singles[0][key] + singles[1][key], rtol=1e-4, atol=1e-4)
