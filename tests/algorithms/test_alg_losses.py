"""Hand-checked tests for aggregate_loss, entropy and the clipped value loss."""

import math

import pytest
import torch

from rlinf.algorithms import aggregate_loss, compute_entropy_loss, compute_value_loss, entropy_from_logits
from rlinf.algorithms.utils import masked_mean, masked_sum, masked_whiten


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 50.0, 60.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # third row fully masked


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-sum", ((1 + 2 + 3) + 4) / 2),  # fully masked row left out
        ("seq-mean-token-mean", ((1 + 2 + 3) / 3 + 4) / 2),
    ],
)
def test_aggregate_loss_modes(mode, expected):
    close(aggregate_loss(LOSS, MASK, mode), expected)
    close(aggregate_loss(LOSS, MASK.bool(), mode), expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_aggregate_loss_empty_mask_is_zero_with_zero_grad(mode):
    x = torch.ones(2, 2, requires_grad=True)
    out = aggregate_loss(x, torch.zeros(2, 2), mode)
    out.backward()
    assert out.item() == 0.0 and torch.all(x.grad == 0)


def test_aggregate_loss_token_mean_gradient():
    x = torch.zeros(2, 2, requires_grad=True)
    aggregate_loss(x, torch.tensor([[1, 1], [1, 0]]), "token-mean").backward()
    close(x.grad, [[1 / 3, 1 / 3], [1 / 3, 0]])  # d/dx of (x00 + x01 + x10) / 3


def test_aggregate_loss_errors():
    with pytest.raises(ValueError, match="token-mean, seq-mean-token-sum, seq-mean-token-mean"):
        aggregate_loss(LOSS, MASK, "sum")
    with pytest.raises(ValueError, match="token_loss"):
        aggregate_loss(torch.ones(3, 2), MASK)
    with pytest.raises(ValueError, match="response_mask"):
        aggregate_loss(torch.ones(3), torch.ones(3))


def test_masked_helpers():
    x = torch.tensor([[1.0, 3.0, 100.0]])
    m = torch.tensor([[1, 1, 0]])
    close(masked_sum(x, m), 4.0)
    close(masked_mean(x, m), 2.0)
    close(masked_mean(x, m, dim=-1), [2.0])
    # mean 2, unbiased std sqrt(((1-2)^2 + (3-2)^2) / 1) = sqrt(2)
    close(masked_whiten(x, m, eps=0.0), [[-1 / math.sqrt(2), 1 / math.sqrt(2), 0.0]])
    close(masked_mean(x, torch.zeros(1, 3)), 0.0)


# ---------------------------------------------------------------- entropy


def test_entropy_from_logits_hand_values():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e9, -1e9]]])
    h = entropy_from_logits(logits)
    # uniform over 4: log 4; p = [1/4, 3/4]: -(0.25 log 0.25 + 0.75 log 0.75) = 0.56234
    close(h, [[math.log(4.0), -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))]])


def test_entropy_stable_for_large_and_infinite_logits():
    logits = torch.tensor([[1e4, 0.0], [0.0, 0.0], [0.0, float("-inf")]], requires_grad=True)
    h = entropy_from_logits(logits)
    # near one-hot -> 0; uniform over 2 -> log 2; a -inf logit has p = 0 and adds nothing -> 0
    close(h, [0.0, math.log(2.0), 0.0])
    h.sum().backward()
    assert torch.isfinite(logits.grad).all()
    with pytest.raises(ValueError, match="logits"):
        entropy_from_logits(torch.zeros(2, 0))


def test_entropy_loss_term():
    entropy = torch.tensor([[1.0, 3.0, 9.0]], requires_grad=True)
    loss, m = compute_entropy_loss(entropy, torch.tensor([[1, 1, 0]]), entropy_coef=0.01)
    close(loss, -0.01 * (1 + 3) / 2)
    close(m["entropy"], 2.0)
    loss.backward()
    close(entropy.grad, [[-0.005, -0.005, 0.0]])  # minimising the loss raises entropy
    with pytest.raises(ValueError, match="entropy_coef"):
        compute_entropy_loss(entropy, torch.ones(1, 3), entropy_coef=-1.0)


# ---------------------------------------------------------------- value loss


def test_value_loss_clipped():
    values = torch.tensor([[1.0, 0.1, 0.5]], requires_grad=True)
    old = torch.zeros(1, 3)
    returns = torch.tensor([[2.0, 0.0, 0.5]])
    loss, m = compute_value_loss(values, old, returns, torch.ones(1, 3), value_clip_eps=0.2)
    # token 0: V_clip 0.2: max((1-2)^2 = 1, (0.2-2)^2 = 3.24) -> 0.5 * 3.24 = 1.62 (clipped)
    # token 1: V_clip 0.1: 0.5 * 0.01 = 0.005
    # token 2: V_clip 0.2: max(0, (0.2-0.5)^2 = 0.09) -> 0.045 (clipped)
    close(loss, (1.62 + 0.005 + 0.045) / 3)
    close(m["vf_clip_frac"], 2 / 3)
    close(m["value_mean"], (1.0 + 0.1 + 0.5) / 3)
    loss.backward()
    # clipped tokens get no gradient; token 1: d/dV 0.5 (V - R)^2 / 3 = 0.1 / 3
    close(values.grad, [[0.0, 0.1 / 3, 0.0]])


def test_value_loss_unclipped_and_aggregation():
    values = torch.tensor([[1.0, 0.1], [0.5, 7.0]])
    returns = torch.tensor([[2.0, 0.0], [0.5, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, m = compute_value_loss(values, torch.zeros(2, 2), returns, mask, value_clip_eps=None)
    close(loss, 0.5 * (1 + 0.01 + 0) / 3)  # 0.5 (V - R)^2 over 3 valid tokens
    close(m["vf_clip_frac"], 0.0)
    loss, _ = compute_value_loss(values, torch.zeros(2, 2), returns, mask, None, "seq-mean-token-sum")
    close(loss, (0.5 * (1 + 0.01) + 0.0) / 2)
    with pytest.raises(ValueError, match="value_clip_eps"):
        compute_value_loss(values, values, returns, mask, value_clip_eps=-0.1)
    with pytest.raises(ValueError, match="old_values"):
        compute_value_loss(values, torch.zeros(2, 3), returns, mask)
