"""RLOO advantages and reward clipping / normalisation, checked by hand."""

from __future__ import annotations

import pytest
import torch

from rlinf.algorithms import AdvantageInputs, get_advantage_estimator
from rlinf.algorithms.reward_shaping import clip_rewards, normalize_rewards


def test_rloo_baseline_is_the_mean_of_the_other_samples():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0])  # two groups of 4
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1], [1, 1], [0, 0], [1, 0], [1, 1]])
    out = get_advantage_estimator("rloo")(AdvantageInputs(rewards, mask, group_size=4, normalize_advantages=False))
    adv, ret = out.advantages, out.returns
    by_hand = [1 - (0 + 0 + 1) / 3, 0 - (1 + 0 + 1) / 3, 0 - (1 + 0 + 1) / 3, 1 - (1 + 0 + 0) / 3,
               2 - (3 + 0 + 0) / 3, 3 - (2 + 0 + 0) / 3, 0 - (2 + 3 + 0) / 3, 0 - (2 + 3 + 0) / 3]
    assert torch.allclose(adv, torch.tensor(by_hand).unsqueeze(1) * mask, atol=1e-6)
    assert torch.equal(adv, ret)
    with pytest.raises(ValueError, match="group_size >= 2"):
        get_advantage_estimator("rloo")(AdvantageInputs(torch.zeros(2), torch.ones(2, 1), group_size=1))


def test_reward_clip_and_norm_by_hand():
    r = torch.tensor([30.0, -25.0, 1.0, 3.0])
    assert clip_rewards(r, 20.0).tolist() == [20.0, -20.0, 1.0, 3.0]
    assert clip_rewards(r, None) is r
    g = normalize_rewards(torch.tensor([1.0, 3.0, 2.0, 6.0]), "group", "group", group_size=2, eps=0.0)
    # group 1: mean 2, unbiased std sqrt(2); group 2: mean 4, std sqrt(8)
    assert torch.allclose(g, torch.tensor([-1 / 2 ** 0.5, 1 / 2 ** 0.5, -2 / 8 ** 0.5, 2 / 8 ** 0.5]))
    b = normalize_rewards(torch.tensor([1.0, 3.0, 2.0, 6.0]), "batch", "batch", std_unbiased=False, eps=0.0)
    mean, std = 3.0, torch.tensor([1.0, 3.0, 2.0, 6.0]).std(unbiased=False)
    assert torch.allclose(b, (torch.tensor([1.0, 3.0, 2.0, 6.0]) - mean) / std)
    with pytest.raises(ValueError, match="do not split into groups of 3"):
        normalize_rewards(torch.zeros(4), "group", None, group_size=3)
