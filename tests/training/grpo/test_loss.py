"""GRPO math (training.grpo.loss): group advantages, routing, k3 KL, the clipped objective."""

import math

import pytest
import torch

from rumik_app.model.tokens import TokenLayout
from training.grpo.loss import (
    PAD_COLUMN,
    action_columns,
    clipped_objective,
    concat_actions,
    group_advantages,
    k3_kl,
    route_advantages,
    routing_matrix,
)

NAN = math.nan
LAYOUT = TokenLayout(first_unit_id=100, num_quantizers=8, codebook_size=16, text_start_token_id=228,
                     audio_start_token_id=229, audio_end_token_id=230)


def test_advantages_have_zero_group_mean_and_unit_scale():
    rewards = torch.tensor([[0.1, 1.0], [0.5, 2.0], [0.9, 0.0], [0.2, 5.0], [0.4, 1.0], [0.3, 3.0]])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    adv = group_advantages(rewards, groups, eps=0.0)
    for g in (0, 1):
        block = adv[groups == g]
        torch.testing.assert_close(block.mean(0), torch.zeros(2), atol=1e-6, rtol=0)
        torch.testing.assert_close(block.std(0), torch.ones(2), atol=1e-5, rtol=0)  # unbiased std, as TRL
    # (r - mean) / (std + eps) by hand for one entry
    r = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    assert adv[0, 0].item() == pytest.approx(float((r[0] - r.mean()) / (r.std() + 0.0)), rel=1e-6)
    assert not torch.equal(group_advantages(rewards, groups, eps=0.5), adv)


def test_zero_variance_group_gets_exactly_zero():
    rewards = torch.tensor([[0.3], [0.3], [0.3], [0.1], [0.7], [0.2]])
    adv = group_advantages(rewards, torch.tensor([4, 4, 4, 9, 9, 9]))
    assert adv[:3].eq(0).all() and adv[3:].ne(0).all()


def test_abstentions_get_zero_and_the_rest_is_centred_on_scorers():
    rewards = torch.tensor([[1.0, NAN], [0.0, NAN], [0.5, 2.0], [NAN, NAN], [0.2, 1.0], [0.8, NAN]])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(rewards, groups)
    assert adv[3].eq(0).all()                 # abstained in both streams
    assert adv[[0, 1, 5], 1].eq(0).all()      # abstained in stream 1
    assert adv[2, 1].item() == 0.0            # the only scorer of its group in stream 1
    assert adv[4, 1].item() == 0.0            # the only scorer of its group in stream 1
    torch.testing.assert_close(adv[[0, 1, 2], 0].sum(), torch.tensor(0.0), atol=1e-6, rtol=0)
    assert not torch.isnan(adv).any()


def test_unscaled_advantages_are_centred_rewards():
    rewards = torch.tensor([[1.0], [3.0]])
    adv = group_advantages(rewards, torch.tensor([0, 0]), scale=False)
    assert adv.flatten().tolist() == [-1.0, 1.0]


def _stream_rows():
    """Three rows: 2 full frames + `</audio>`; 3 frames (stop head); 1 frame + 3 tokens of a frame."""
    unit = LAYOUT.unit_id
    row0 = [unit(t % 5, t % 8) for t in range(16)] + [LAYOUT.audio_end_token_id]
    row1 = [unit(3, t % 8) for t in range(24)]
    row2 = [unit(7, t % 8) for t in range(11)]
    n = max(map(len, (row0, row1, row2)))
    ids = torch.full((3, n), -1)
    for i, row in enumerate((row0, row1, row2)):
        ids[i, : len(row)] = torch.tensor(row)
    stop_mask = torch.zeros(3, n // 8 + 1, dtype=torch.bool)
    stop_mask[0, 1:3] = True   # decisions after frames 1 and 2 ("continue"), then </audio> was sampled
    stop_mask[1, 1:4] = True   # the stop head ended row 1 after 3 frames
    stop_mask[2, 1] = True
    return ids, ids >= 0, stop_mask


def test_default_routing_only_touches_codebook0_and_stop_decisions():
    ids, mask, stop_mask = _stream_rows()
    W = routing_matrix(["content", "duration"], {}, 8)
    assert W[0].tolist() == [1.0] + [0.0] * 8 and W[1].tolist() == [0.0] * 8 + [1.0]
    stream_adv = torch.tensor([[0.7, -1.3], [-0.4, 0.9], [1.1, 0.25]])
    cols = action_columns(ids, mask, LAYOUT, restrict_phase=True)
    tok, stop = route_advantages(stream_adv, W, cols, stop_mask)
    for i in range(3):
        for t in range(ids.shape[1]):
            if not mask[i, t]:
                expected = 0.0
            elif ids[i, t] == LAYOUT.audio_end_token_id:
                expected = stream_adv[i, 1].item()  # duration -> </audio>
            elif t % 8 == 0:
                expected = stream_adv[i, 0].item()  # content -> codebook 0
            else:
                expected = 0.0                       # codebooks 1..7 get nothing
            assert tok[i, t].item() == pytest.approx(expected), (i, t)
    assert torch.equal(stop, stream_adv[:, 1:2].expand_as(stop) * stop_mask)
    # unrestricted mode reads the codebook from the id: same routing for these well-formed rows
    free = action_columns(ids, mask, LAYOUT, restrict_phase=False)
    assert torch.equal(free, cols)


def test_unrestricted_columns_follow_the_token_id():
    ids = torch.tensor([[LAYOUT.unit_id(2, 3), LAYOUT.unit_id(9, 0), LAYOUT.audio_end_token_id, -1]])
    cols = action_columns(ids, ids >= 0, LAYOUT, restrict_phase=False)
    assert cols.tolist() == [[3, 0, 8, PAD_COLUMN]]


def test_flat_mode_gives_every_action_the_sum_of_stream_advantages():
    ids, mask, stop_mask = _stream_rows()
    W = routing_matrix(["content", "duration"], {}, 8)
    stream_adv = torch.tensor([[0.7, -1.3], [-0.4, 0.9], [1.1, 0.25]])
    cols = action_columns(ids, mask, LAYOUT, restrict_phase=True)
    tok, stop = route_advantages(stream_adv, W, cols, stop_mask, flat=True)
    total = stream_adv.sum(1, keepdim=True)
    assert torch.equal(tok, total.expand_as(tok) * mask)
    assert torch.equal(stop, total.expand_as(stop) * stop_mask)
    routed, _ = route_advantages(stream_adv, W, cols, stop_mask)
    assert (routed[:, 1:8] == 0).all() and (tok[:, 1:8][mask[:, 1:8]] != 0).all()


def test_routing_overrides_and_bad_rows():
    W = routing_matrix(["content", "mine"], {1: [0.5] * 4 + [0.0] * 4 + [2.0]}, 8)
    assert W[1].tolist() == [0.5] * 4 + [0.0] * 4 + [2.0]
    assert routing_matrix(["mine"], {}, 8).eq(1).all()  # kinds without a default broadcast
    with pytest.raises(ValueError, match="needs 9"):
        routing_matrix(["content"], {0: [1.0] * 8}, 8)


def test_k3_is_nonnegative_and_zero_at_the_reference():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(1000, generator=g) * 8
    ref = -torch.rand(1000, generator=g) * 8
    kl = k3_kl(logp, ref)
    assert (kl >= 0).all() and kl.max() > 0.1
    assert k3_kl(logp, logp).eq(0).all()
    # unbiased: E_pi[k3] = KL(pi || ref) for a categorical
    p = torch.softmax(torch.randn(5, generator=g), 0)
    q = torch.softmax(torch.randn(5, generator=g), 0)
    expected = (p * (p.log() - q.log())).sum()
    torch.testing.assert_close((p * k3_kl(p.log(), q.log())).sum(), expected, rtol=1e-5, atol=1e-6)


def test_objective_value_normaliser_and_clip_counts():
    logp = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.5, -0.1, -3.0]])  # ratios 1, e^0.5 (>1.2), e^-0.4 (<0.8), 1
    adv = torch.tensor([[0.5, 2.0, -1.0, 7.0]])
    mask = torch.tensor([[True, True, True, False]])
    out = clipped_objective(logp, old, old, adv, mask, normaliser=10.0, eps_low=0.2, eps_high=0.2)
    ratio = torch.exp(logp - old).detach()
    terms = torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)[0, :3]
    assert out.loss.item() == pytest.approx(-terms.sum().item() / 10.0)
    out2 = clipped_objective(logp, old, old, adv, mask, normaliser=20.0)
    assert out2.loss.item() == pytest.approx(out.loss.item() / 2)
    assert (out.count, out.high_clip_sum, out.low_clip_sum, out.region_clip_sum) == (3.0, 1.0, 1.0, 2.0)
    with pytest.raises(ValueError):
        clipped_objective(logp, old, None, adv, mask, 10.0, beta=0.1)


def test_beta_adds_the_k3_penalty():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]])
    adv = torch.zeros(1, 2)
    mask = torch.ones(1, 2, dtype=torch.bool)
    out = clipped_objective(logp, logp.detach(), ref, adv, mask, normaliser=2.0, beta=0.3)
    assert out.loss.item() == pytest.approx(0.3 * k3_kl(logp, ref).sum().item() / 2.0)
    assert out.kl_sum == pytest.approx(k3_kl(logp, ref).sum().item())


def test_concat_actions_layout():
    a, b = torch.zeros(2, 5), torch.ones(2, 3, dtype=torch.bool)
    out = concat_actions(a, b)
    assert out.shape == (2, 8) and out[:, 5:].eq(1).all() and out.dtype == a.dtype


def test_acoustic_target_and_per_stream_weights_combine_with_content_and_duration():
    ids, mask, stop_mask = _stream_rows()
    W = routing_matrix(["content", "duration", "speaker", "quality"], {}, 8, weights=[1.0, 2.0, 0.5, 0.25])
    assert W[2].tolist() == [0.0] + [0.5] * 7 + [0.0] and W[3].tolist() == [0.0] + [0.25] * 7 + [0.0]
    assert W[1].tolist() == [0.0] * 8 + [2.0]
    stream_adv = torch.tensor([[0.7, -1.3, 0.4, 1.0], [-0.4, 0.9, -2.0, 0.5], [1.1, 0.25, 0.3, -0.6]])
    cols = action_columns(ids, mask, LAYOUT, restrict_phase=True)
    tok, stop = route_advantages(stream_adv, W, cols, stop_mask)
    for i in range(3):
        c, d, spk, qual = stream_adv[i].tolist()
        for t in range(ids.shape[1]):
            if not mask[i, t]:
                expected = 0.0
            elif ids[i, t] == LAYOUT.audio_end_token_id:
                expected = 2.0 * d                      # duration -> the stop slot, weight 2
            elif t % 8 == 0:
                expected = c                            # content -> codebook 0
            else:
                expected = 0.5 * spk + 0.25 * qual      # speaker and quality -> codebooks 1..7
            assert tok[i, t].item() == pytest.approx(expected), (i, t)
    assert torch.allclose(stop, 2.0 * stream_adv[:, 1:2].expand_as(stop) * stop_mask)
    weights = torch.tensor([1.0, 2.0, 0.5, 0.25])
    flat, flat_stop = route_advantages(stream_adv, W, cols, stop_mask, flat=True, stream_weights=weights)
    total = (stream_adv * weights).sum(1, keepdim=True)
    assert torch.allclose(flat, total.expand_as(flat) * mask)
    assert torch.allclose(flat_stop, total.expand_as(flat_stop) * stop_mask)


def test_routing_targets_by_name():
    assert routing_matrix(["mine"], {0: "acoustic"}, 8)[0].tolist() == [0.0] + [1.0] * 7 + [0.0]
    assert routing_matrix(["speaker"], {0: "codebook0"}, 8)[0].tolist() == [1.0] + [0.0] * 8
    assert routing_matrix(["content"], {0: "stop"}, 4)[0].tolist() == [0.0] * 4 + [1.0]
    assert routing_matrix(["quality"], {}, 4)[0].tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="unknown routing target 'timbre'"):
        routing_matrix(["speaker"], {0: "timbre"}, 8)
