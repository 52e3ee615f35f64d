"""Hand-checked tests for GRPO, REINFORCE++ and REINFORCE++-baseline advantages."""

import math

import pytest
import torch

from rlinf.algorithms import (
    compute_grpo_advantages,
    compute_reinpp_advantages,
    compute_reinpp_baseline_advantages,
    discounted_returns,
    group_mean_baseline,
    rewards_to_last_token,
)


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ---------------------------------------------------------------- GRPO


def test_grpo_unbiased_std_and_broadcast():
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0, 2.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 0, 0]])
    adv, ret = compute_grpo_advantages(rewards, mask, group_size=3, eps=0.0)
    # group 1: mean 1/3, deviations 2/3, -1/3, -1/3; sum of squares 4/9 + 1/9 + 1/9 = 2/3
    # unbiased var (2/3) / (3 - 1) = 1/3, std = sqrt(1/3) = 0.57735
    std = math.sqrt(1 / 3)
    hi, lo = (2 / 3) / std, (-1 / 3) / std  # 1.1547, -0.57735
    # group 2: all rewards equal -> 0
    close(adv, [[hi, hi, 0], [lo, 0, 0], [lo, lo, lo], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    close(ret, adv)
    # the biased std would be sqrt(2/9) = 0.4714 and give 1.4142 for the first sample
    assert abs(adv[0, 0].item() - (2 / 3) / math.sqrt(2 / 9)) > 0.2


def test_grpo_without_normalisation_is_centred_reward():
    adv, _ = compute_grpo_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.ones(3, 2), 3, normalize_advantages=False)
    # mean 1/3: 1 - 1/3 = 2/3, 0 - 1/3 = -1/3
    close(adv, [[2 / 3, 2 / 3], [-1 / 3, -1 / 3], [-1 / 3, -1 / 3]])


def test_grpo_eps_is_added_to_std():
    adv, _ = compute_grpo_advantages(torch.tensor([1.0, 0.0]), torch.ones(2, 1), 2, eps=0.5)
    # mean 0.5, unbiased std sqrt((0.25 + 0.25) / 1) = 0.70711; 0.5 / (0.70711 + 0.5) = 0.41421
    close(adv, [[0.5 / (math.sqrt(0.5) + 0.5)], [-0.5 / (math.sqrt(0.5) + 0.5)]])


def test_grpo_equal_rewards_are_exactly_zero_even_with_rounding():
    # the float mean of [0.1] * 3 is not exactly 0.1; the all-equal rule still gives exact 0
    adv, _ = compute_grpo_advantages(torch.tensor([0.1, 0.1, 0.1]), torch.ones(3, 2), 3, eps=1e-12)
    assert torch.equal(adv, torch.zeros(3, 2))


def test_grpo_group_size_one_gives_zero_and_int_rewards_become_float():
    adv, _ = compute_grpo_advantages(torch.tensor([3, 5]), torch.ones(2, 2), 1)
    assert adv.dtype == torch.float32
    assert torch.equal(adv, torch.zeros(2, 2))


def test_grpo_bool_and_float_masks_agree():
    rewards = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[True, False], [True, True]])
    a_bool, _ = compute_grpo_advantages(rewards, mask, 2)
    a_float, _ = compute_grpo_advantages(rewards, mask.float(), 2)
    torch.testing.assert_close(a_bool, a_float)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"rewards": torch.ones(3), "group_size": 2}, "group_size"),
        ({"rewards": torch.ones(4), "group_size": 0}, "group_size"),
        ({"rewards": torch.ones(4, 1), "group_size": 2}, "rewards"),
        ({"rewards": torch.ones(4), "group_size": 2, "eps": -1.0}, "eps"),
    ],
)
def test_grpo_invalid_arguments(kwargs, match):
    rewards = kwargs.pop("rewards")
    mask = torch.ones(rewards.shape[0], 2)
    with pytest.raises(ValueError, match=match):
        compute_grpo_advantages(rewards, mask, **kwargs)


def test_grpo_mask_must_match_batch():
    with pytest.raises(ValueError, match="rewards"):
        compute_grpo_advantages(torch.ones(4), torch.ones(3, 2), 2)
    with pytest.raises(ValueError, match="response_mask"):
        compute_grpo_advantages(torch.ones(4), torch.ones(4), 2)


# ---------------------------------------------------------------- helpers


def test_group_mean_baseline():
    # groups [1, 2, 6] (mean 3) and [0, 0, 3] (mean 1)
    close(group_mean_baseline(torch.tensor([1.0, 2.0, 6.0, 0.0, 0.0, 3.0]), 3), [-2, -1, 3, -1, -1, 2])


def test_rewards_to_last_token_with_middle_hole_and_empty_row():
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]])
    out = rewards_to_last_token(torch.tensor([2.0, 3.0, 4.0]), mask)
    # last valid index: row 0 -> 3, row 1 -> none, row 2 -> 0
    close(out, [[0, 0, 0, 2, 0], [0, 0, 0, 0, 0], [4, 0, 0, 0, 0]])


def test_discounted_returns_skip_masked_positions():
    r = torch.tensor([[1.0, 9.0, 2.0, 4.0]])
    m = torch.tensor([[1, 0, 1, 1]])
    # gamma 1: G3 = 4, G2 = 2 + 4 = 6, G1 masked -> 0, G0 = 1 + 6 = 7 (the 9 is ignored)
    close(discounted_returns(r, m, 1.0), [[7, 0, 6, 4]])
    # gamma 0.5: G3 = 4, G2 = 2 + 2 = 4, G0 = 1 + 0.5 * 4 = 3 (one discount step over the hole)
    close(discounted_returns(r, m, 0.5), [[3, 0, 4, 4]])
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns(r, m, 1.5)


# ---------------------------------------------------------------- REINFORCE++


def test_reinpp_batch_whitening_over_valid_tokens():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv, ret = compute_reinpp_advantages(torch.tensor([1.0, 0.0]), mask, eps=0.0)
    # returns (gamma 1): row 0 [1, 1, -], row 1 [0, 0, 0]
    close(ret, [[1, 1, 0], [0, 0, 0]])
    # 5 valid tokens: mean 0.4; squares 2 * 0.36 + 3 * 0.16 = 1.2; unbiased var 1.2 / 4 = 0.3
    std = math.sqrt(0.3)
    close(adv, [[0.6 / std, 0.6 / std, 0], [-0.4 / std, -0.4 / std, -0.4 / std]])


def test_reinpp_gamma_and_kl_penalty():
    adv, ret = compute_reinpp_advantages(
        torch.tensor([2.0]), torch.ones(1, 3), gamma=0.5,
        kl_penalty=torch.tensor([[0.2, 0.4, 0.0]]), normalize_advantages=False,
    )
    # token rewards [-0.2, -0.4, 2 - 0]; G2 = 2; G1 = -0.4 + 0.5 * 2 = 0.6; G0 = -0.2 + 0.5 * 0.6 = 0.1
    close(ret, [[0.1, 0.6, 2.0]])
    close(adv, ret)


def test_reinpp_middle_hole_ignores_kl_at_masked_positions():
    mask = torch.tensor([[1, 0, 1, 0]])
    kl = torch.tensor([[0.0, 5.0, 0.0, 5.0]])
    _, ret = compute_reinpp_advantages(torch.tensor([1.0]), mask, gamma=0.5, kl_penalty=kl, normalize_advantages=False)
    # reward at t=2; G2 = 1; G0 = 0 + 0.5 * 1 = 0.5; masked KL values are not used
    close(ret, [[0.5, 0, 1, 0]])


def test_reinpp_single_token_responses():
    adv, _ = compute_reinpp_advantages(torch.tensor([1.0, -1.0]), torch.tensor([[1, 0], [1, 0]]), eps=0.0)
    # returns 1 and -1: mean 0, unbiased std sqrt(2 / 1); 1 / 1.41421 = 0.70711
    close(adv, [[1 / math.sqrt(2), 0], [-1 / math.sqrt(2), 0]])


def test_reinpp_fully_masked_row_and_single_valid_token():
    adv, ret = compute_reinpp_advantages(torch.tensor([3.0, 7.0]), torch.tensor([[1], [0]]))
    # the masked row gets no reward; one valid token: std taken as 0, (3 - 3) / (0 + eps) = 0
    close(ret, [[3], [0]])
    close(adv, [[0], [0]])


def test_reinpp_kl_penalty_shape_checked():
    with pytest.raises(ValueError, match="kl_penalty"):
        compute_reinpp_advantages(torch.ones(2), torch.ones(2, 3), kl_penalty=torch.ones(2, 2))


def test_reinpp_baseline():
    adv, ret = compute_reinpp_baseline_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.ones(4, 2), 2, eps=0.0)
    # centred rewards [0.5, -0.5, 0, 0]; each token's return equals its row's value (gamma 1)
    close(ret, [[0.5, 0.5], [-0.5, -0.5], [0, 0], [0, 0]])
    # 8 tokens, mean 0, squares 4 * 0.25 = 1, unbiased var 1 / 7
    std = math.sqrt(1 / 7)
    close(adv, [[0.5 / std] * 2, [-0.5 / std] * 2, [0, 0], [0, 0]])
    with pytest.raises(ValueError, match="group_size"):
        compute_reinpp_baseline_advantages(torch.ones(3), torch.ones(3, 1), 2)
