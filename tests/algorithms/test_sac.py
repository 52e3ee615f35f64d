"""SAC / CrossQ / RLPD pieces on hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.algorithms.sac import (
    alpha_loss,
    alpha_value,
    crossq_split,
    sac_actor_loss,
    sac_critic_loss,
    sac_critic_target,
    sample_squashed_gaussian,
    soft_update,
    squashed_gaussian_logprob,
    subsample_heads,
)


def test_squashed_logprob_is_the_change_of_variables():
    # one dim, u = 0.5, mu = 0.2, sigma = e^-1: log N(u) - log(1 - tanh(u)^2), by hand
    u, mu, log_std = 0.5, 0.2, -1.0
    sigma = math.exp(log_std)
    normal = -0.5 * ((u - mu) / sigma) ** 2 - math.log(sigma) - 0.5 * math.log(2 * math.pi)
    expected = normal - math.log(1 - math.tanh(u) ** 2)
    got = squashed_gaussian_logprob(torch.tensor([[u]]), torch.tensor([[mu]]), torch.tensor([[log_std]]))
    assert float(got) == pytest.approx(expected, abs=1e-6)
    # far in the tail the stable form stays finite where the naive one gives log(0)
    assert torch.isfinite(squashed_gaussian_logprob(torch.tensor([[20.0]]), torch.zeros(1, 1), torch.zeros(1, 1)))


def test_squashed_density_integrates_to_one():
    """A Monte-Carlo check on the action space: E_uniform[pi(a)] * 2 = 1 on (-1, 1)."""
    mu, log_std = torch.tensor([[0.3]]), torch.tensor([[-0.5]])
    a = torch.linspace(-0.999, 0.999, 20001)[:, None]
    u = torch.atanh(a)
    density = squashed_gaussian_logprob(u, mu.expand_as(u), log_std.expand_as(u)).exp()
    assert float(torch.trapezoid(density, a[:, 0])) == pytest.approx(1.0, abs=2e-3)


def test_sample_is_reparameterised_and_bounded():
    mean = torch.zeros(4, 2, requires_grad=True)
    a, logp = sample_squashed_gaussian(mean, torch.zeros(4, 2), generator=torch.Generator().manual_seed(0))
    assert a.abs().max() < 1 and logp.shape == (4,)
    a.sum().backward()
    assert mean.grad is not None and mean.grad.abs().sum() > 0
    greedy, _ = sample_squashed_gaussian(torch.full((1, 2), 0.5), torch.zeros(1, 2), deterministic=True)
    assert torch.allclose(greedy, torch.tanh(torch.tensor(0.5)).expand(1, 2))


def test_critic_target_bootstraps_through_truncation_not_termination():
    r, next_q, logp = torch.tensor([1.0, 1.0]), torch.tensor([[2.0, 2.0], [3.0, 3.0]]), torch.tensor([0.5, 0.5])
    y = sac_critic_target(r, torch.tensor([False, True]), next_q, logp, gamma=0.9, alpha=0.2)
    assert y.tolist() == pytest.approx([1 + 0.9 * (2.0 - 0.1), 1.0])
    # n-step discount per row; no entropy backup (RLPD)
    y = sac_critic_target(r, torch.tensor([False, False]), next_q, None, gamma=0.9, alpha=0.2,
                          discounts=torch.tensor([0.81, 0.5]))
    assert y.tolist() == pytest.approx([1 + 0.81 * 2.0, 1 + 0.5 * 2.0])
    with pytest.raises(ValueError, match="gamma"):
        sac_critic_target(r, r, next_q, None, gamma=1.5, alpha=0.0)


def test_critic_loss_sums_the_heads_mse():
    q = torch.tensor([[1.0, 2.0], [0.0, 4.0]], requires_grad=True)
    loss = sac_critic_loss(q, torch.tensor([1.0, 3.0]))
    assert float(loss.detach()) == pytest.approx((0 + 1) / 2 + (1 + 1) / 2)
    loss.backward()
    assert q.grad.tolist() == [[0.0, -1.0], [-1.0, 1.0]]   # d/dq mean (q - y)^2 = (q - y) for B = 2


def test_actor_loss_min_or_mean_over_heads():
    q_pi, logp = torch.tensor([[1.0, 4.0], [3.0, 2.0]]), torch.tensor([0.5, -0.5])
    assert float(sac_actor_loss(q_pi, logp, 0.2, "min")) == pytest.approx(((0.1 - 1) + (-0.1 - 2)) / 2)
    assert float(sac_actor_loss(q_pi, logp, 0.2, "mean")) == pytest.approx(((0.1 - 2) + (-0.1 - 3)) / 2)
    with pytest.raises(ValueError, match="agg_q"):
        sac_actor_loss(q_pi, logp, 0.2, "max")


@pytest.mark.parametrize("alpha_type", ["exp", "softplus"])
def test_entropy_tuning_moves_alpha_toward_the_target(alpha_type):
    """Entropy below the target -> alpha rises; above -> alpha falls (a few SGD steps)."""
    for logp, direction in ((torch.full((8,), 3.0), +1), (torch.full((8,), -3.0), -1)):
        p = torch.zeros((), requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1)
        start = float(alpha_value(p.detach(), alpha_type))
        for _ in range(5):
            opt.zero_grad()
            alpha_loss(p, logp, target_entropy=-1.0, alpha_type=alpha_type).backward()
            opt.step()
        assert (float(alpha_value(p.detach(), alpha_type)) - start) * direction > 0


def test_soft_update_is_polyak_and_checks_tau():
    target, source = [torch.zeros(3)], [torch.ones(3)]
    soft_update(target, source, 0.25)
    assert target[0].tolist() == [0.25] * 3
    soft_update(target, source, 1.0)
    assert target[0].tolist() == [1.0] * 3
    for tau in (0.0, 1.5):
        with pytest.raises(ValueError, match="tau"):
            soft_update(target, source, tau)


def test_subsample_heads_draws_a_random_subset_for_the_whole_batch():
    q = torch.arange(10.0)[:, None].expand(10, 4)
    seen = set()
    for seed in range(20):
        sub = subsample_heads(q, 2, torch.Generator().manual_seed(seed))
        assert sub.shape == (2, 4) and (sub == sub[:, :1]).all() and sub[0, 0] != sub[1, 0]
        seen.update(sub[:, 0].tolist())
    assert len(seen) > 5   # different subsets across updates
    assert subsample_heads(q, None) is q and subsample_heads(q, 12) is q


def test_crossq_split_detaches_the_target_half():
    joint = torch.arange(8.0).reshape(2, 4).requires_grad_()
    q, q_next = crossq_split(joint, 2)
    assert q.tolist() == [[0, 1], [4, 5]] and q_next.tolist() == [[2, 3], [6, 7]]
    assert q.requires_grad and not q_next.requires_grad
    with pytest.raises(ValueError):
        crossq_split(joint, 3)
