"""Embodied advantages and shaping against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from rlinf.algorithms.embodied import (
    aggregate_logprobs,
    chunk_rewards,
    compute_embodied_gae,
    compute_embodied_grpo,
    episode_mask,
    expand_like,
    flatten_actions,
)


def test_gae_two_envs_with_an_episode_boundary_by_hand():
    # env 0: steps 0,1 then done at 1, step 2 is a new episode; env 1: no done.
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 1.0]])
    values = torch.tensor([[0.5, 1.0], [1.0, 1.0], [0.0, 0.5], [3.0, 2.0]])
    dones = torch.tensor([[False, False], [True, False], [False, False]])
    g, lam = 0.9, 0.8
    adv, ret = compute_embodied_gae(rewards, values, dones, gamma=g, lam=lam, normalize_advantages=False)
    # env 0, t=2: delta = 2 + .9*3 - 0 = 4.7 ; A2 = 4.7
    # env 0, t=1: done -> delta = 0 - 1 = -1 ; A1 = -1
    # env 0, t=0: delta = 1 + .9*1 - .5 = 1.4 ; A0 = 1.4 + .72*(-1) = 0.68
    # env 1, t=2: delta = 1 + .9*2 - .5 = 2.3 ; A2 = 2.3
    # env 1, t=1: delta = 0 + .9*.5 - 1 = -.55 ; A1 = -.55 + .72*2.3 = 1.106
    # env 1, t=0: delta = 0 + .9*1 - 1 = -.1 ; A0 = -.1 + .72*1.106 = 0.69632
    expected = torch.tensor([[0.68, 0.69632], [-1.0, 1.106], [4.7, 2.3]])
    assert torch.allclose(adv, expected, atol=1e-6)
    assert torch.allclose(ret, expected + values[:3], atol=1e-6)


def test_gae_whitening_and_shape_errors():
    adv, _ = compute_embodied_gae(torch.randn(5, 3), torch.randn(6, 3), torch.zeros(5, 3, dtype=torch.bool))
    assert abs(float(adv.mean())) < 1e-6 and abs(float(adv.std()) - 1) < 1e-5
    with pytest.raises(ValueError, match=r"values \[T\+1, N\]"):
        compute_embodied_gae(torch.zeros(5, 3), torch.zeros(5, 3), torch.zeros(5, 3))


def test_action_level_gae_equals_gae_on_the_flattened_time_axis():
    rewards = torch.tensor([[[1.0, 0.0]], [[0.0, 2.0]]])          # T=2, N=1, K=2
    dones = torch.tensor([[True], [False]])
    flat_r, flat_d = flatten_actions(rewards, dones)
    assert flat_r.squeeze(1).tolist() == [1.0, 0.0, 0.0, 2.0]
    assert flat_d.squeeze(1).tolist() == [False, True, False, False]
    values = torch.zeros(5, 1)
    adv, _ = compute_embodied_gae(flat_r, values, flat_d, gamma=0.5, lam=1.0, normalize_advantages=False)
    # episode 1: rewards 1, 0 -> A = 1 + .5*0 = 1, 0 ; episode 2: 0, 2 -> A = .5*2 = 1, 2
    assert adv.squeeze(1).tolist() == [1.0, 0.0, 1.0, 2.0]


def test_grpo_groups_by_hand():
    adv = compute_embodied_grpo(torch.tensor([1.0, 3.0, 5.0, 5.0]), group_size=2)
    # group 0: mean 2, std sqrt(2) -> -1/1.41421, 1/1.41421 ; group 1: all equal -> 0
    assert torch.allclose(adv, torch.tensor([-0.707106, 0.707106, 0.0, 0.0]), atol=1e-5)
    with pytest.raises(ValueError):
        compute_embodied_grpo(torch.zeros(3), group_size=2)


def test_episode_mask_and_reward_levels():
    dones = torch.tensor([[False], [True], [True]])
    assert episode_mask(dones).squeeze(1).tolist() == [True, True, False]
    r = torch.tensor([[[0.5, 0.25, 0.25]]])
    assert chunk_rewards(r, "chunk_level").tolist() == [[1.0]]
    assert torch.equal(chunk_rewards(r, "action_level"), r)
    with pytest.raises(ValueError, match="reward_type"):
        chunk_rewards(r, "episode_level")


def test_logprob_levels_and_broadcast():
    lp = torch.arange(12.0).view(1, 2, 3, 2)                      # [B, K=... ] any leading dims
    assert torch.equal(aggregate_logprobs(lp, "token_level"), lp)
    assert aggregate_logprobs(lp, "action_level").shape == (1, 2, 3)
    assert aggregate_logprobs(lp, "chunk_level").tolist() == [[15.0, 51.0]]
    adv = torch.tensor([[1.0, -1.0]])
    assert expand_like(adv, lp).shape == lp.shape and float(expand_like(adv, lp)[0, 1].sum()) == -6.0
    with pytest.raises(ValueError, match="logprob_type"):
        aggregate_logprobs(lp, "sequence_level")
