"""DPO math (training.dpo.loss) against a hand-built computation: the routing masks, the loss
and its gradient, for TRL's sigmoid, IPO and hinge losses, routed and flat."""

import math

import pytest
import torch

from rumik_app.model.tokens import TokenLayout
from training.dpo.loss import action_weights, dpo_losses, pair_objective, pair_routing_matrix, routed_logps
from training.dpo.pairs import TOTAL
from training.grpo.loss import action_columns

Q = 8
LAYOUT = TokenLayout(first_unit_id=100, num_quantizers=Q, codebook_size=16, text_start_token_id=228,
                     audio_start_token_id=229, audio_end_token_id=230)
KINDS = ["content", "duration", "speaker"]  # "speaker": an acoustic reward, routed by a hand-made row
ACOUSTIC_ROW = [0.0] + [1.0] * (Q - 1) + [0.0]  # codebooks 1..Q-1, not codebook 0, not the stop slot
NAMED = {0: {0, Q}, 1: {Q}, 2: set(range(1, Q))}  # the columns each stream's pairs compare
BETA = 0.2


def _rows():
    """Four samples: 2 frames + `</audio>`; 3 frames (stopped by the head); 1 frame + 3 tokens; 2 frames."""
    unit = LAYOUT.unit_id
    rows = [[unit(t % 5, t % Q) for t in range(16)] + [LAYOUT.audio_end_token_id],
            [unit(3, t % Q) for t in range(24)],
            [unit(7, t % Q) for t in range(11)],
            [unit(t % 9, t % Q) for t in range(16)]]
    n = max(map(len, rows))
    ids = torch.full((len(rows), n), -1)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    stop_mask = torch.zeros(len(rows), n // Q + 1, dtype=torch.bool)
    stop_mask[0, 1:3] = stop_mask[1, 1:4] = stop_mask[2, 1] = stop_mask[3, 1:3] = True
    return ids, ids >= 0, stop_mask


def _column(ids, i, t):
    return Q if int(ids[i, t]) == LAYOUT.audio_end_token_id else t % Q


def _hand_sum(values_tok, values_stop, ids, mask, stop_mask, i, named):
    """sum of row i's action values whose column is in `named` (None: every action), and how many."""
    total, count = 0.0, 0
    for t in range(ids.shape[1]):
        if mask[i, t] and (named is None or _column(ids, i, t) in named):
            total, count = total + float(values_tok[i, t]), count + 1
    for j in range(stop_mask.shape[1]):
        if stop_mask[i, j] and (named is None or Q in named):
            total, count = total + float(values_stop[i, j]), count + 1
    return total, count


def test_routing_masks_touch_only_the_columns_they_name():
    ids, mask, stop_mask = _rows()
    W = pair_routing_matrix(KINDS, {2: ACOUSTIC_ROW}, Q)
    assert W[0].tolist() == [1.0] + [0.0] * (Q - 1) + [1.0]  # content: codebook 0 and the stop slot
    assert W[1].tolist() == [0.0] * Q + [1.0]                # duration: the stop slot only
    assert W[2].tolist() == ACOUSTIC_ROW                      # the config's row, as written
    cols = action_columns(ids, mask, LAYOUT, restrict_phase=True)
    for s, named in NAMED.items():
        streams = torch.full((len(ids),), s)
        tok_w, stop_w = action_weights(streams, W, cols, stop_mask)
        for i in range(len(ids)):
            for t in range(ids.shape[1]):
                want = 1.0 if mask[i, t] and _column(ids, i, t) in named else 0.0
                assert tok_w[i, t].item() == want, (s, i, t)
        assert torch.equal(stop_w, stop_mask.float() * (Q in named))
    tok_w, stop_w = action_weights(torch.full((len(ids),), TOTAL), W, cols, stop_mask, flat=True)
    assert torch.equal(tok_w, mask.float()) and torch.equal(stop_w, stop_mask.float())
    with pytest.raises(ValueError, match="flat"):
        action_weights(torch.tensor([TOTAL, 0, 0, 0]), W, cols, stop_mask)


def _hand_loss_and_grads(pairs, tok, stop, ref_tok, ref_stop, ids, mask, stop_mask, loss_type, flat):
    """The loss and d loss / d (policy log-probs), by hand: sums over the named actions, TRL's
    formula for the loss and its derivative in h, the chain rule by counting."""
    grad_tok, grad_stop = torch.zeros_like(tok), torch.zeros_like(stop)
    total = 0.0
    for c, r, s in pairs:
        named = None if flat else NAMED[s]
        lc, nc = _hand_sum(tok, stop, ids, mask, stop_mask, c, named)
        lr, nr = _hand_sum(tok, stop, ids, mask, stop_mask, r, named)
        rc, _ = _hand_sum(ref_tok, ref_stop, ids, mask, stop_mask, c, named)
        rr, _ = _hand_sum(ref_tok, ref_stop, ids, mask, stop_mask, r, named)
        scale_c, scale_r = (1.0 / nc, 1.0 / nr) if loss_type == "ipo" else (1.0, 1.0)
        h = (lc - rc) * scale_c - (lr - rr) * scale_r
        if loss_type == "sigmoid":
            loss, dh = math.log1p(math.exp(-BETA * h)), -BETA / (1.0 + math.exp(BETA * h))
        elif loss_type == "hinge":
            loss, dh = max(0.0, 1.0 - BETA * h), (-BETA if 1.0 - BETA * h > 0 else 0.0)
        else:
            loss, dh = (h - 1.0 / (2 * BETA)) ** 2, 2.0 * (h - 1.0 / (2 * BETA))
        total += loss / len(pairs)
        for row, sign, scale in ((c, 1.0, scale_c), (r, -1.0, scale_r)):
            for t in range(ids.shape[1]):
                if mask[row, t] and (named is None or _column(ids, row, t) in named):
                    grad_tok[row, t] += sign * scale * dh / len(pairs)
            for j in range(stop_mask.shape[1]):
                if stop_mask[row, j] and (named is None or Q in named):
                    grad_stop[row, j] += sign * scale * dh / len(pairs)
    return total, grad_tok, grad_stop


@pytest.mark.parametrize("flat", [False, True], ids=["routed", "flat"])
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_loss_and_gradient_equal_the_hand_built_computation(loss_type, flat):
    ids, mask, stop_mask = _rows()
    g = torch.Generator().manual_seed(1)
    tok = (-torch.rand(ids.shape, generator=g) * 3 * mask).requires_grad_()
    stop = (-torch.rand(stop_mask.shape, generator=g) * stop_mask).requires_grad_()
    ref_tok = -torch.rand(ids.shape, generator=g) * 3 * mask
    ref_stop = -torch.rand(stop_mask.shape, generator=g) * stop_mask
    # (chosen, rejected, stream): each stream once, a row in several pairs, both orders of one pair
    pairs = [(0, 1, 0), (2, 3, 1), (3, 0, 2), (1, 2, 0), (0, 1, 2)]
    if flat:
        pairs = [(c, r, TOTAL) for c, r, _ in pairs]
    W = pair_routing_matrix(KINDS, {2: ACOUSTIC_ROW}, Q)
    cols = action_columns(ids, mask, LAYOUT, restrict_phase=True)
    side = torch.tensor([c for c, _, _ in pairs] + [r for _, r, _ in pairs])
    streams = torch.tensor([s for _, _, s in pairs]).repeat(2)
    tok_w, stop_w = action_weights(streams, W, cols[side], stop_mask[side], flat=flat)
    average = loss_type == "ipo"
    logp = routed_logps(tok[side], stop[side], tok_w, stop_w, average)
    ref = routed_logps(ref_tok[side], ref_stop[side], tok_w, stop_w, average)
    m = len(pairs)
    out = pair_objective(logp[:m], logp[m:], ref[:m], ref[m:], BETA, loss_type, normaliser=m)
    out.loss.backward()

    want, grad_tok, grad_stop = _hand_loss_and_grads(pairs, tok.detach(), stop.detach(), ref_tok, ref_stop, ids, mask,
                                                     stop_mask, loss_type, flat)
    assert out.loss.item() == pytest.approx(want, rel=1e-5)
    torch.testing.assert_close(tok.grad, grad_tok, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(stop.grad, grad_stop, rtol=1e-5, atol=1e-7)
    assert tok.grad.abs().sum() > 0
    if not flat:  # no pair touches codebooks its stream does not name: content/duration leave 1..7 to acoustic
        acoustic_rows = {c for c, _, s in pairs if s == 2} | {r for _, r, s in pairs if s == 2}
        for i in set(range(len(ids))) - acoustic_rows:
            assert tok.grad[i, 1:Q].eq(0).all() and tok.grad[i, Q + 1 : 2 * Q].eq(0).all()


def test_implicit_rewards_and_statistics_are_trls():
    chosen, rejected = torch.tensor([-3.0, -5.0]), torch.tensor([-4.0, -3.5])
    ref_c, ref_r = torch.tensor([-3.5, -5.0]), torch.tensor([-3.0, -4.0])
    losses, rc, rr = dpo_losses(chosen, rejected, ref_c, ref_r, beta=0.5)
    torch.testing.assert_close(rc, 0.5 * (chosen - ref_c))
    torch.testing.assert_close(rr, 0.5 * (rejected - ref_r))
    torch.testing.assert_close(losses, -torch.nn.functional.logsigmoid(rc - rr))
    out = pair_objective(chosen, rejected, ref_c, ref_r, 0.5, "sigmoid", normaliser=4.0)
    assert out.loss.item() == pytest.approx(float(losses.sum()) / 4.0)
    assert (out.count, out.accuracy_sum) == (2.0, 1.0)  # pair 0: 0.25 > -0.5; pair 1: 0.0 < 0.25
    assert out.chosen_logp_sum == -8.0 and out.rejected_logp_sum == -7.5
    with pytest.raises(ValueError, match="loss_type"):
        dpo_losses(chosen, rejected, ref_c, ref_r, 0.5, "kto")
