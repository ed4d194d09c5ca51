"""The logits processors of both vLLM runner interfaces against a plain reference of the
engine's rules, on a small synthetic vocabulary (no model, no engine start).

CPU vLLM runs the V1 runner, so the V2 processor (the default on GPUs) is checked here
through its interface: slots, the position from `pos + 1 - prompt_len`, staged writes.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

from rumik_app.decode.sampling import RowParams, draw_uniforms
from rumik_vllm.logits import AudioRulesV1, AudioRulesV2
from rumik_vllm.rules import STOP_SEED_OFFSET, AudioColumns, RequestRules, audio_logits

Q, C, FIRST = 4, 8, 10
END = FIRST + Q * C + 2  # after the units: <text>, <audio>, then </audio>
HF_CONFIG = SimpleNamespace(first_unit_id=FIRST, num_quantizers=Q, codebook_size=C, audio_end_token_id=END,
                            vocab_size=END + 3)
VLLM_CONFIG = SimpleNamespace(model_config=SimpleNamespace(hf_config=HF_CONFIG))
COLS = AudioColumns.from_config(HF_CONFIG)


def rules(temperature: float, min_new_tokens: int, stop_mode: str, seed: int) -> RequestRules:
    return RequestRules(RowParams(seed=seed, temperature=temperature, min_new_tokens=min_new_tokens), stop_mode)


# (generated position n, rules, stop logit): every branch of the rules.
ROWS = [
    (0, rules(0.0, 4, "threshold", 1), 5.0),  # boundary, but before the floor
    (4, rules(0.5, 4, "threshold", 2), 2.0),  # eligible, stop head fires
    (5, rules(1.2, 0, "threshold", 3), 9.0),  # not a boundary: the stop head is not asked
    (8, rules(0.8, 12, "threshold", 4), 9.0),  # boundary below min_new_tokens
    (8, rules(1.0, 4, "threshold", 5), -0.5),  # eligible, continues, `</audio>` allowed
    (12, rules(0.7, 0, "sample", 6), 0.3),  # Bernoulli decision from the seed's uniforms
    (16, rules(0.7, 0, "sample", 3), 0.3),  # (seed 6 continues, seed 3 stops)
]


def _reference(raw: torch.Tensor, n: int, request: RequestRules) -> torch.Tensor:
    """The engine's rule for one row, written out plainly (rumik_app.decode.reference / model)."""
    out = torch.full_like(raw, -math.inf)
    phase, stop_logit = n % Q, raw[COLS.stop_column]
    eligible = phase == 0 and n >= max(request.row.min_new_tokens, Q)
    if eligible:
        p = torch.sigmoid(stop_logit)
        u = draw_uniforms(request.row.seed + STOP_SEED_OFFSET, COLS.stop_slots)[n // Q]
        if (p > 0.5) if request.stop_mode == "threshold" else (u < p):
            out[COLS.stop_column] = F.logsigmoid(stop_logit)
            return out
    ids = [FIRST + c * Q + phase for c in range(C)] + ([END] if eligible else [])
    temperature = request.row.temperature if request.row.temperature > 0 else 1.0
    out[ids] = torch.log_softmax(raw[ids] / temperature, dim=0)
    return out


def _logits(seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    full = torch.randn(len(ROWS), COLS.vocab_size, generator=generator)
    return audio_logits(full, torch.tensor([s for _, _, s in ROWS]), COLS)


def _params(request: RequestRules) -> SamplingParams:
    return SamplingParams(temperature=0.0 if request.row.temperature <= 0 else 1.0, extra_args=request.to_extra_args())


def test_audio_logits_keep_units_and_end_and_carry_the_stop_logit():
    logits = _logits()
    kept = logits[0] > -math.inf
    assert kept.sum() == Q * C + 2  # units, `</audio>`, stop column
    assert kept[FIRST : FIRST + Q * C].all() and kept[END] and kept[COLS.stop_column]
    assert torch.equal(logits[:, COLS.stop_column], torch.tensor([s for _, _, s in ROWS]))


def test_v1_processor_matches_the_reference_and_follows_moves():
    raw = _logits()
    expected = torch.stack([_reference(raw[i], n, request) for i, (n, request, _) in enumerate(ROWS)])
    assert (expected[:, COLS.stop_column] > -math.inf).sum() >= 2  # both stop branches are exercised
    proc = AudioRulesV1(VLLM_CONFIG, torch.device("cpu"), False)
    added = [(i, _params(request), [5, 6], [0] * n) for i, (n, request, _) in enumerate(ROWS)]
    proc.update_state(BatchUpdate(batch_size=len(ROWS), removed=[], added=added, moved=[]))
    torch.testing.assert_close(proc.apply(raw.clone()), expected)
    # vLLM swaps rows 0 and 1 of its persistent batch, then condenses row 6 into slot 2.
    proc.update_state(BatchUpdate(batch_size=len(ROWS) - 1, removed=[2], added=[],
                                  moved=[(0, 1, MoveDirectionality.SWAP), (6, 2, MoveDirectionality.UNIDIRECTIONAL)]))
    order = [1, 0, 6, 3, 4, 5]
    torch.testing.assert_close(proc.apply(raw[order].clone()), expected[order])


def test_v2_processor_matches_the_reference_through_slots_and_positions():
    raw = _logits(seed=1)
    expected = torch.stack([_reference(raw[i], n, request) for i, (n, request, _) in enumerate(ROWS)])
    slots = [5, 2, 7, 0, 3, 9, 1]
    prompt_len = torch.zeros(12, dtype=torch.int32)
    prompt_len[slots] = torch.tensor([3, 7, 11, 4, 6, 5, 9], dtype=torch.int32)
    req_states = SimpleNamespace(max_num_reqs=12, device=torch.device("cpu"),
                                 prompt_len=SimpleNamespace(gpu=prompt_len))
    proc = AudioRulesV2(VLLM_CONFIG, req_states)
    for slot, (_, request, _) in zip(slots, ROWS, strict=True):
        assert proc.add_request(slot, _params(request))
    proc.apply_staged_writes()
    mapping = torch.tensor(slots)
    # pos is the position of the token fed at each row: the last one before the sampled position.
    pos = prompt_len[mapping].long() + torch.tensor([n for n, _, _ in ROWS]) - 1
    ctx = LogitsContext(expanded_idx_mapping=mapping, idx_mapping=mapping, idx_mapping_np=np.array(slots),
                        expanded_local_pos=torch.zeros(len(ROWS), dtype=torch.long),
                        input_ids=torch.zeros_like(mapping),
                        pos=pos, seq_lens_upper_bound_np=(pos + 1).numpy())
    torch.testing.assert_close(proc.apply(raw.clone(), ctx), expected)


def test_requests_without_rumik_arguments_are_rejected_with_the_fix():
    with pytest.raises(ValueError, match="backend='vllm'"):
        AudioRulesV1.validate_params(SamplingParams(temperature=1.0))
    with pytest.raises(ValueError, match="stop_mode"):
        AudioRulesV2.validate_params(SamplingParams(extra_args=rules(1.0, 8, "maybe", 1).to_extra_args()))
