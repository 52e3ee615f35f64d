"""The SAC actor behind the embodied policy interface."""

from __future__ import annotations

import pytest
import torch

from rlinf.algorithms.sac import squashed_gaussian_logprob
from rlinf.models.embodied.sac_policy import SACActorPolicy


def test_act_and_evaluate_agree_and_actions_fit_the_bounds():
    torch.manual_seed(0)
    policy = SACActorPolicy(4, 2, (16,), action_low=[-0.5, 0.0], action_high=[0.5, 2.0])
    states = torch.randn(6, 4)
    out = policy.act(states=states, generator=torch.Generator().manual_seed(1))
    assert out.actions.shape == (6, 1, 2) and out.values is None
    assert (out.actions[..., 0].abs() <= 0.5).all() and ((out.actions[..., 1] >= 0) & (out.actions[..., 1] <= 2)).all()
    again = policy.evaluate(out.raw_actions, states=states)
    assert torch.allclose(again.logprobs, out.logprobs, atol=1e-6)
    mean, log_std = policy.actor.distribution(states)
    total = squashed_gaussian_logprob(out.raw_actions[:, 0], mean, log_std)
    assert torch.allclose(out.logprobs.sum(-1)[:, 0], total, atol=1e-5)
    greedy = policy.act(states=states, deterministic=True)
    assert torch.allclose(greedy.raw_actions[:, 0], mean)


def test_no_value_head_and_no_states_are_refused():
    policy = SACActorPolicy(4, 2, (8,))
    with pytest.raises(RuntimeError, match="no state-value head"):
        policy.value(states=torch.zeros(1, 4))
    with pytest.raises(ValueError, match="state observations"):
        policy.act(images=torch.zeros(1, 8, 8, 3, dtype=torch.uint8))
