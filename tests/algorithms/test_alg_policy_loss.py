"""Hand-checked tests for the PPO and decoupled PPO losses, with gradient checks."""

import math

import pytest
import torch

from rlinf.algorithms import compute_decoupled_ppo_loss, compute_ppo_loss


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def logs(*ratios):
    """Log-probs giving the ratios against old log-probs of 0."""
    return torch.log(torch.tensor([list(ratios)], dtype=torch.float64))


def test_ppo_clipped_surrogate_and_metrics():
    lp = logs(1.5, 0.5, 1.1, 0.7)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    loss, m = compute_ppo_loss(lp, torch.zeros_like(lp), adv, torch.ones(1, 4), ratio_clip_eps=0.2)
    # r=1.5, A=1: max(-1.5, -1.2) = -1.2 (clipped)   r=0.5, A=1: max(-0.5, -0.8) = -0.5
    # r=1.1, A=-1: max(1.1, 1.1) = 1.1               r=0.7, A=-1: max(0.7, 0.8) = 0.8 (clipped)
    close(loss, (-1.2 - 0.5 + 1.1 + 0.8) / 4)  # 0.05
    close(m["clip_frac"], 0.5)
    close(m["dual_clip_frac"], 0.0)
    close(m["ratio_mean"], (1.5 + 0.5 + 1.1 + 0.7) / 4)
    close(m["ratio_max"], 1.5)
    close(m["ratio_min"], 0.5)
    # approx KL: mean of (r - 1) - log r
    k3 = [(r - 1) - math.log(r) for r in (1.5, 0.5, 1.1, 0.7)]
    close(m["approx_kl"], sum(k3) / 4)
    close(m["early_stop_count"], 0.0)


def test_ppo_clip_higher_is_asymmetric():
    lp = logs(1.25, 1.3, 0.75)
    adv = torch.tensor([[1.0, 1.0, -1.0]], dtype=torch.float64)
    old = torch.zeros_like(lp)
    loss, m = compute_ppo_loss(lp, old, adv, torch.ones(1, 3), clip_eps_low=0.2, clip_eps_high=0.28)
    # r=1.25 inside [0.8, 1.28]: -1.25; r=1.3 -> clipped to 1.28: -1.28; r=0.75, A=-1 -> max(0.75, 0.8) = 0.8
    close(loss, (-1.25 - 1.28 + 0.8) / 3)
    close(m["clip_frac"], 2 / 3)
    # ratio_clip_eps is the default of both sides: with 0.1, r=1.25 -> -1.1, r=1.3 -> -1.1, r=0.75 -> 0.9
    loss, _ = compute_ppo_loss(lp, old, adv, torch.ones(1, 3), ratio_clip_eps=0.1)
    close(loss, (-1.1 - 1.1 + 0.9) / 3)


def test_ppo_dual_clip_only_for_negative_advantages():
    lp = logs(5.0, 2.0, 5.0)
    adv = torch.tensor([[-1.0, -1.0, 1.0]], dtype=torch.float64)
    loss, m = compute_ppo_loss(lp, torch.zeros_like(lp), adv, torch.ones(1, 3), clip_ratio_c=3.0)
    # r=5, A=-1: max(5, 1.2) = 5, min(5, -3*-1 = 3) = 3 (dual clip)
    # r=2, A=-1: max(2, 1.2) = 2, min(2, 3) = 2
    # r=5, A=+1: max(-5, -1.2) = -1.2 (dual clip does not apply)
    close(loss, (3 + 2 - 1.2) / 3)
    close(m["dual_clip_frac"], 1 / 3)
    close(m["clip_frac"], 1 / 3)  # only the third token; the first counts as dual-clipped
    # without dual clip the first token costs 5
    loss, _ = compute_ppo_loss(lp, torch.zeros_like(lp), adv, torch.ones(1, 3))
    close(loss, (5 + 2 - 1.2) / 3)


def test_ppo_early_stop_imp_ratio_drops_tokens_both_sides():
    lp = logs(3.0, 0.3, 1.0, 2.0, 9.0)
    adv = torch.ones(1, 5, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss, m = compute_ppo_loss(lp, torch.zeros_like(lp), adv, mask, early_stop_imp_ratio=2.5)
    # T = 2.5: r=3 > 2.5 dropped, r=0.3 < 1/2.5 = 0.4 dropped, r=9 is masked anyway
    # kept: r=1 -> -1, r=2 -> max(-2, -1.2) = -1.2; token-mean over the 2 kept tokens
    close(loss, (-1.0 - 1.2) / 2)
    close(m["early_stop_count"], 2.0)
    close(m["early_stop_frac"], 2 / 4)
    close(m["clip_frac"], 1 / 2)  # among kept tokens only r=2 is clipped
    close(m["ratio_max"], 3.0)  # ratio stats use all valid tokens, before dropping


def test_ppo_loss_aggregation_modes():
    lp = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    expected = {
        "token-mean": -(1 + 2 + 4) / 3,  # ratio 1: token loss -A
        "seq-mean-token-sum": -((1 + 2) + 4) / 2,
        "seq-mean-token-mean": -((1 + 2) / 2 + 4) / 2,
    }
    for mode, value in expected.items():
        loss, _ = compute_ppo_loss(lp, lp, adv, mask, loss_agg_func=mode)
        close(loss, value)


def test_ppo_gradient_direction():
    lp = torch.zeros(1, 6, requires_grad=True)
    old = torch.tensor([[0.0, 0.0, -math.log(1.5), -math.log(5.0), 0.0, -math.log(6.0)]])
    adv = torch.tensor([[2.0, -1.0, 1.0, -1.0, 3.0, 1.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0, 1]])
    loss, _ = compute_ppo_loss(lp, old, adv, mask, clip_ratio_c=3.0, early_stop_imp_ratio=5.5)
    loss.backward()
    # kept tokens: 0, 1, 2, 3 (token 4 masked, token 5 has r=6 > 5.5 and is dropped) -> N = 4
    # token 0: r=1, A=2: loss -2r, d/dlogp = -2 * r / 4 = -0.5 (descent raises logp)
    # token 1: r=1, A=-1: loss r, d/dlogp = 1 / 4 = 0.25 (descent lowers logp)
    # token 2: r=1.5, A=1: clipped -> 0; token 3: r=5, A=-1: dual-clipped -> 0
    close(lp.grad, [[-0.5, 0.25, 0.0, 0.0, 0.0, 0.0]])
    assert adv.grad is None or torch.all(adv.grad == 0)


def test_ppo_fully_masked_batch_is_zero_with_finite_grads():
    lp = torch.zeros(2, 2, requires_grad=True)
    loss, m = compute_ppo_loss(lp, torch.zeros(2, 2), torch.ones(2, 2), torch.zeros(2, 2))
    loss.backward()
    assert loss.item() == 0.0 and torch.all(lp.grad == 0)
    assert all(torch.isfinite(v) for v in m.values())


def test_ppo_huge_log_ratio_stays_finite():
    lp = torch.tensor([[0.0]], requires_grad=True)
    loss, _ = compute_ppo_loss(lp, torch.tensor([[-100.0]]), torch.tensor([[-1.0]]), torch.ones(1, 1))
    loss.backward()
    # log-ratio clamped to 20: loss = -A * exp(20) is finite
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"clip_eps_low": 1.0}, "clip_eps_low"),
        ({"ratio_clip_eps": -0.1}, "ratio_clip_eps"),
        ({"clip_eps_high": -0.1}, "clip_eps_high"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c"),
        ({"early_stop_imp_ratio": 0.5}, "early_stop_imp_ratio"),
        ({"loss_agg_func": "mean"}, "token-mean"),
    ],
)
def test_ppo_invalid_arguments(kwargs, match):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=match):
        compute_ppo_loss(x, x, x, torch.ones(1, 2), **kwargs)


def test_ppo_shape_mismatch_names_argument():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="advantages"):
        compute_ppo_loss(x, x, torch.zeros(1, 3), torch.ones(1, 2))


# ---------------------------------------------------------------- decoupled PPO


def decoupled_inputs():
    lp = logs(1.0, 1.5)  # current / proximal ratios 1 and 1.5 (proximal log-probs 0)
    prox = torch.zeros_like(lp)
    behav = -torch.log(torch.tensor([[2.0, 0.5]], dtype=torch.float64))  # w = prox / behav = [2, 0.5]
    adv = torch.ones(1, 2, dtype=torch.float64)
    return lp, prox, behav, adv


def test_decoupled_ppo_weights_the_clipped_surrogate():
    lp, prox, behav, adv = decoupled_inputs()
    loss, m = compute_decoupled_ppo_loss(lp, prox, behav, adv, torch.ones(1, 2))
    # token 0: 2 * max(-1, -1) = -2; token 1: 0.5 * max(-1.5, -1.2) = -0.6
    close(loss, (-2 - 0.6) / 2)
    close(m["behav_imp_weight_mean"], (2 + 0.5) / 2)
    close(m["behav_imp_weight_max"], 2.0)
    close(m["clip_frac"], 0.5)


def test_decoupled_ppo_weight_cap_modes():
    lp, prox, behav, adv = decoupled_inputs()
    loss, m = compute_decoupled_ppo_loss(lp, prox, behav, adv, torch.ones(1, 2), behav_imp_weight_cap=1.5)
    # truncate: w = [min(2, 1.5), 0.5]: (-1.5 - 0.6) / 2
    close(loss, (-1.5 - 0.6) / 2)
    close(m["behav_cap_frac"], 0.5)
    loss, _ = compute_decoupled_ppo_loss(
        lp, prox, behav, adv, torch.ones(1, 2), behav_imp_weight_cap=1.5, behav_imp_weight_cap_mode="mask"
    )
    # mask: token 0 (w = 2 > 1.5) leaves the loss and the count: -0.6 / 1
    close(loss, -0.6)


def test_decoupled_equals_ppo_when_behaviour_is_proximal():
    lp = logs(1.5, 0.5, 1.1)
    old = torch.log(torch.tensor([[1.2, 0.9, 1.0]], dtype=torch.float64))
    adv = torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    a, _ = compute_decoupled_ppo_loss(lp, old, old, adv, mask, clip_eps_high=0.3, clip_ratio_c=3.0)
    b, _ = compute_ppo_loss(lp, old, adv, mask, clip_eps_high=0.3, clip_ratio_c=3.0)
    torch.testing.assert_close(a, b)


def test_decoupled_gradient_scaled_by_weight_and_only_through_current():
    _, prox, behav, adv = decoupled_inputs()
    lp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)  # ratios 1, 1
    prox = prox.clone().requires_grad_(True)
    behav = behav.clone().requires_grad_(True)
    loss, _ = compute_decoupled_ppo_loss(lp, prox, behav, adv, torch.ones(1, 2))
    loss.backward()
    # loss = (w0 * -r0 + w1 * -r1) / 2 with w = [2, 0.5]: grads -2/2 = -1 and -0.5/2 = -0.25
    close(lp.grad, [[-1.0, -0.25]])
    assert prox.grad is None and behav.grad is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"behav_imp_weight_cap": 1.0}, "behav_imp_weight_cap"),
        ({"behav_imp_weight_cap_mode": "clip"}, "behav_imp_weight_cap_mode"),
        ({"clip_ratio_c": 0.5}, "clip_ratio_c"),
    ],
)
def test_decoupled_invalid_arguments(kwargs, match):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=match):
        compute_decoupled_ppo_loss(x, x, x, x, torch.ones(1, 2), **kwargs)


def test_decoupled_shape_mismatch_names_argument():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="behavior_logprobs"):
        compute_decoupled_ppo_loss(x, x, torch.zeros(2, 2), x, torch.ones(1, 2))
