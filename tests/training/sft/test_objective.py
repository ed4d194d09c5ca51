"""The SFT objective against independent computations from transformers' full-vocabulary logits."""

import numpy as np
import torch
import torch.nn.functional as F

from rumik_app import SynthesisRequest
from training.sft.objective import SFTObjective
from training.sft.sequences import build_sequence, collate


def _batch(engine):
    rng = np.random.default_rng(3)
    exs = [build_sequence(engine.prompt_ids(SynthesisRequest(text)), rng.integers(0, 2048, (8, frames)),
                          engine.layout) for text, frames in (("one", 3), ("second text", 5))]
    return collate(exs, engine.pad_id)


def test_full_head_equals_transformers_logits_cross_entropy(tiny_engine):
    batch = _batch(tiny_engine)
    with torch.no_grad():
        out = SFTObjective(tiny_engine.model, tiny_engine.layout, head="full", ce_chunk_tokens=7)(**batch)
        logits = tiny_engine.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    mask = batch["loss_mask"]
    expected = F.cross_entropy(logits[mask].float(), batch["targets"][mask], reduction="sum")
    torch.testing.assert_close(out["acoustic_sum"], expected, rtol=1e-5, atol=1e-3)


def test_audio_head_is_the_engine_distribution(tiny_engine):
    """Softmax over the position's codebook rows (+ `</audio>` at frame boundaries) of the full logits."""
    batch, lay = _batch(tiny_engine), tiny_engine.layout
    with torch.no_grad():
        out = SFTObjective(tiny_engine.model, lay, head="audio")(**batch)
        logits = tiny_engine.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    expected = 0.0
    for row in range(2):
        start, count = int(batch["audio_start"][row]), int(batch["audio_len"][row])
        for k in range(count):
            phase = k % lay.num_quantizers
            allowed = [lay.unit_id(c, phase) for c in range(lay.codebook_size)]
            if phase == 0 and k >= lay.num_quantizers:
                allowed.append(lay.audio_end_token_id)
            target = int(batch["targets"][row, start + k])
            logp = torch.log_softmax(logits[row, start + k, allowed].float(), -1)
            expected -= float(logp[allowed.index(target)])
    torch.testing.assert_close(float(out["acoustic_sum"]), expected, rtol=1e-5, atol=1e-3)


def test_stop_loss_and_gradients_reach_body_and_stop_head(tiny_engine):
    batch = _batch(tiny_engine)
    model = tiny_engine.model
    out = SFTObjective(model, tiny_engine.layout)(**batch)
    with torch.no_grad():
        hidden = model.body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        logits = model.stop_logits(hidden.gather(1, batch["stop_index"][..., None].expand(-1, -1, hidden.shape[-1])))
    m = batch["stop_mask"]
    expected = F.binary_cross_entropy_with_logits(logits[m], batch["stop_target"][m], reduction="sum")
    torch.testing.assert_close(out["stop_sum"].detach(), expected)
    model.zero_grad()
    (out["acoustic_sum"] + out["stop_sum"]).backward()
    assert model.stop_predictor[1].weight.grad.abs().sum() > 0
    assert model.model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0
    model.zero_grad(set_to_none=True)
