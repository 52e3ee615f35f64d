"""Hand-checked tests for the KL estimators and their reward / loss uses."""

import math

import pytest
import torch

from rlinf.algorithms import apply_kl_penalty_to_rewards, compute_kl, compute_kl_loss


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


LOGP = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-2.0, -1.0]])  # logp - ref = [1, -1]


@pytest.mark.parametrize(
    "names, expected",
    [
        (("kl", "k1"), [[1.0, -1.0]]),
        (("abs",), [[1.0, 1.0]]),
        (("mse", "k2"), [[0.5, 0.5]]),  # 0.5 * (+-1)^2
        # d = ref - logp = [-1, 1]: e^-1 + 1 - 1 = 0.36788; e^1 - 1 - 1 = 0.71828
        (("low_var_kl", "k3"), [[math.exp(-1.0), math.e - 2.0]]),
    ],
)
def test_kl_estimators(names, expected):
    for name in names:
        close(compute_kl(LOGP, REF, name), expected)


def test_k3_clamps():
    logp = torch.tensor([[-30.0, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[0.0, -30.0, -0.5]])
    kl = compute_kl(logp, ref, "k3")
    # d = 30 -> clamped to 20 -> e^20 - 21, clamped to 10
    # d = -30 -> clamped to -20 -> e^-20 + 20 - 1 = 19.0, clamped to 10
    # d = -0.5 -> e^-0.5 + 0.5 - 1 = 0.10653 (inside the range)
    close(kl, [[10.0, 10.0, math.exp(-0.5) - 0.5]])
    kl.sum().backward()
    assert torch.isfinite(logp.grad).all()
    # d k3 / d logp = -(e^d - 1) = 1 - e^-0.5 on the unclamped token; 0 on clamped ones
    close(logp.grad, [[0.0, 0.0, 1 - math.exp(-0.5)]])


def test_kl_unknown_name_lists_registered():
    with pytest.raises(ValueError, match="low_var_kl"):
        compute_kl(LOGP, REF, "kl2")
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_kl(LOGP, torch.zeros(1, 3), "k1")


def test_apply_kl_penalty_to_rewards():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    logp = torch.tensor([[-1.0, -1.0, -1.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -1.5, -3.0]])
    mask = torch.tensor([[1, 1, 0]])
    out, kl = apply_kl_penalty_to_rewards(rewards, logp, ref, mask, kl_coef=0.1, kl_penalty_type="k1")
    # k1 = [1, 0.5, 2]; masked -> [1, 0.5, 0]; rewards - 0.1 * kl = [-0.1, -0.05, 1]
    close(kl, [[1.0, 0.5, 0.0]])
    close(out, [[-0.1, -0.05, 1.0]])
    assert not out.requires_grad
    with pytest.raises(ValueError, match="kl_coef"):
        apply_kl_penalty_to_rewards(rewards, logp, ref, mask, kl_coef=-0.1)


def test_kl_loss_term_value_grad_and_aggregation():
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-2.0, -2.0, 0.0], [-3.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, m = compute_kl_loss(logp, ref, mask, kl_coef=0.5, kl_penalty_type="k1")
    # k1 = [1, 0, -], [2, -, -]; token-mean (1 + 0 + 2) / 3 = 1; times 0.5
    close(loss, 0.5)
    close(m["kl"], 1.0)
    loss.backward()
    close(logp.grad, [[0.5 / 3, 0.5 / 3, 0.0], [0.5 / 3, 0.0, 0.0]])
    loss, _ = compute_kl_loss(logp, ref, mask, 0.5, "k1", "seq-mean-token-mean")
    close(loss, 0.5 * ((1 + 0) / 2 + 2) / 2)  # row means 0.5 and 2
