"""Advantages and loss from the algorithm config: the pieces compose as the formulas say."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.llm import add_advantages, make_loss_fn


def batch_of(rewards, group_size=2):
    n = len(rewards)
    b = RolloutBatch.from_token_lists([[1]] * n, [[2, 3]] * n, pad_token_id=0, group_size=group_size)
    b.rewards = torch.tensor(rewards, dtype=torch.float32)
    return b


def test_grpo_advantages_normalised_per_group():
    b = batch_of([1.0, 0.0, 5.0, 5.0])
    add_advantages(b, AlgorithmConfig(group_size=2))
    # group 0: mean 0.5, unbiased std sqrt(0.5) -> +-0.5/0.7071 = +-0.7071; group 1: all equal -> 0
    expected = 0.5 / math.sqrt(0.5)
    assert torch.allclose(b.advantages[:, 0], torch.tensor([expected, -expected, 0.0, 0.0]), atol=1e-5)
    assert torch.equal(b.advantages[:, 0], b.advantages[:, 1])  # broadcast over the response


def test_ppo_loss_at_ratio_one_is_minus_mean_advantage_plus_kl():
    b = batch_of([1.0, 0.0])
    add_advantages(b, AlgorithmConfig(group_size=2, normalize_advantages=False))  # +0.5, -0.5
    b.old_logprobs = torch.full((2, 2), -1.0)
    b.ref_logprobs = torch.full((2, 2), -1.0)
    logprobs = torch.full((2, 2), -1.0, requires_grad=True)
    loss, metrics = make_loss_fn(AlgorithmConfig(group_size=2, kl_beta=0.1))(logprobs, None, b)
    # ratio 1 everywhere: surrogate = -mean(A) = -(0.5*2 - 0.5*2)/4 = 0; KL(k3) = 0 at equal log-probs
    assert loss.item() == pytest.approx(0.0, abs=1e-7) and metrics["kl"] == pytest.approx(0.0)
    loss.backward()
    # d(-A*ratio)/d logprob = -A/4 per token (token-mean over 4 tokens): -0.125 and +0.125
    assert torch.allclose(logprobs.grad, torch.tensor([[-0.125, -0.125], [0.125, 0.125]]))


def test_entropy_bonus_lowers_the_loss_by_coef_times_entropy():
    b = batch_of([1.0, 0.0])
    add_advantages(b, AlgorithmConfig(group_size=2))
    b.old_logprobs = torch.zeros(2, 2)
    entropy = torch.full((2, 2), 2.0)
    base, _ = make_loss_fn(AlgorithmConfig(group_size=2))(torch.zeros(2, 2), entropy, b)
    bonus, metrics = make_loss_fn(AlgorithmConfig(group_size=2, entropy_bonus=0.01))(torch.zeros(2, 2), entropy, b)
    assert bonus.item() == pytest.approx(base.item() - 0.01 * 2.0) and metrics["entropy"] == pytest.approx(2.0)


def test_missing_inputs_are_reported():
    b = batch_of([1.0, 0.0])
    b.rewards = None
    with pytest.raises(ValueError, match="no rewards yet"):
        add_advantages(b, AlgorithmConfig(group_size=2))
    b = batch_of([1.0, 0.0])
    add_advantages(b, AlgorithmConfig(group_size=2))
    b.old_logprobs = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="needs reference log-probs"):
        make_loss_fn(AlgorithmConfig(group_size=2, kl_beta=0.1))(torch.zeros(2, 2), None, b)


def test_llm_gae_advantages_match_a_hand_computation():
    """Token-level GAE of the LLM critic path: the reward sits on the last response token, the
    value after the last token is 0; gamma 0.9, lambda 0.8, no whitening."""
    import torch

    from rlinf.config.algorithm import AlgorithmConfig
    from rlinf.data.rollout_batch import RolloutBatch
    from rlinf.objectives.llm import add_advantages

    batch = RolloutBatch.from_token_lists([[1], [1]], [[5, 6, 7], [8, 9]], pad_token_id=0)
    batch.rewards = torch.tensor([1.0, -1.0])
    batch.values = torch.tensor([[0.5, 0.2, -0.1], [0.3, 0.4, 0.0]])
    add_advantages(batch, AlgorithmConfig(adv_type="gae", gamma=0.9, lam=0.8, normalize_advantages=False))
    g, lam = 0.9, 0.8

    def by_hand(rewards, values):
        adv, nxt_adv, nxt_v = [0.0] * len(values), 0.0, 0.0
        for t in reversed(range(len(values))):
            delta = rewards[t] + g * nxt_v - values[t]
            nxt_adv = delta + g * lam * nxt_adv
            adv[t], nxt_v = nxt_adv, values[t]
        return adv

    a0 = by_hand([0.0, 0.0, 1.0], [0.5, 0.2, -0.1])
    a1 = by_hand([0.0, -1.0], [0.3, 0.4])
    assert torch.allclose(batch.advantages[0], torch.tensor(a0), atol=1e-6)
    assert torch.allclose(batch.advantages[1, :2], torch.tensor(a1), atol=1e-6)
    assert batch.advantages[1, 2] == 0  # padding
    assert torch.allclose(batch.returns[0], torch.tensor(a0) + batch.values[0], atol=1e-6)
