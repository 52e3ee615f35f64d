"""Shared behavioural check of the policy tests: a few PPO steps on a fixed batch raise the
log-prob of positively-advantaged samples and lower that of negatively-advantaged ones."""

from __future__ import annotations

import torch

from rlinf.algorithms.policy_loss import compute_ppo_loss


def ppo_logprob_change(policy, obs: dict, lr: float, steps: int) -> torch.Tensor:
    """``[N]`` change of each sample's summed log-prob after ``steps`` Adam steps with advantages
    +1 on even samples and -1 on odd ones."""
    with torch.no_grad():
        old = policy.act(**obs, generator=torch.Generator().manual_seed(0))
    n, k, a = old.logprobs.shape
    adv = torch.tensor([1.0, -1.0] * (n // 2)).view(n, 1, 1).expand(n, k, a)
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    for _ in range(steps):
        ev = policy.evaluate(old.raw_actions, **obs)
        loss, _ = compute_ppo_loss(ev.logprobs.reshape(n, -1), old.logprobs.reshape(n, -1),
                                   adv.reshape(n, -1), torch.ones(n, k * a))
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return policy.evaluate(old.raw_actions, **obs).logprobs.sum((1, 2)) - old.logprobs.sum((1, 2))
