"""πRL flow log-probabilities: hand-computed steps, recomputation, limits and the SDE marginal."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.algorithms.flow_logprob import (
    aggregate_flow_logprobs,
    annealed_noise_level,
    chain_logprob,
    chain_logprob_gathered,
    combine_logprobs,
    flow_sde_level,
    gaussian_entropy_of_std,
    gaussian_logprob,
    pack_chain,
    sample_chain,
    sde_sigma,
    sde_step_moments,
    stochastic_mask,
    time_grid,
    unpack_chain,
    unpack_step_levels,
)


def test_time_grid_and_sigma_by_hand():
    assert time_grid(4).tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    # a * sqrt(t / (1 - t)): t = 0.75 -> 0.5 * sqrt(3); t = 1 uses t_1 = 0.75 -> 0.5 * sqrt(1 / 0.25) = 1
    assert sde_sigma(torch.tensor(0.75), 0.5, 0.75).item() == pytest.approx(0.5 * math.sqrt(3.0))
    assert sde_sigma(torch.tensor(1.0), 0.5, 0.75).item() == pytest.approx(1.0)


def test_sde_step_by_hand():
    # x = 2, v = 1, t = 0.75, Delta = 0.25, a = 0.5: s = 0.5 sqrt(3), s^2 = 0.75
    # x0_hat = 2 - 0.75 = 1.25, x1_hat = 2 + 0.25 = 2.25
    # mu = 1.25 (1 - 0.75 + 0.25) + 2.25 (0.75 - 0.25 - 0.75 * 0.25 / 1.5) = 0.625 + 2.25 * 0.375 = 1.46875
    mean, std = sde_step_moments(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor(0.75), 0.25, 0.5, 0.75)
    assert mean.item() == pytest.approx(1.46875)
    assert std.item() == pytest.approx(math.sqrt(0.75) * 0.5)


def test_gaussian_logprob_entropy_and_combination_by_hand():
    # log N(1; 0, 2^2) = -1/8 - log 2 - 0.5 log(2 pi)
    lp = gaussian_logprob(torch.tensor([1.0, 3.0]), torch.zeros(2), torch.tensor([2.0, 0.0]))
    assert lp[0].item() == pytest.approx(-0.125 - math.log(2.0) - 0.5 * math.log(2 * math.pi))
    assert lp[1].item() == 0.0
    assert gaussian_entropy_of_std(torch.tensor(2.0)).item() == pytest.approx(0.5 * math.log(2 * math.pi * math.e * 4))
    init = torch.full((1, 1, 1), -4.0)
    steps = torch.tensor([-1.0, -2.0, -3.0]).view(1, 3, 1, 1)
    one = torch.tensor([[False, True, False]])
    assert combine_logprobs(init, steps, one, joint=False).item() == -2.0  # the stochastic step alone
    assert combine_logprobs(init, steps, torch.ones(1, 3, dtype=torch.bool), joint=True).item() == -2.5  # -10 / 4
    assert aggregate_flow_logprobs(torch.ones(2, 2, 3), "chunk_level").tolist() == [6.0, 6.0]


def test_stochastic_masks():
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        m = stochastic_mask("flow_sde", 3, 4, True, False, g)
        assert m.sum().item() == 3 and bool((m == m[0]).all()) and not bool(m[:, 3].any())
    seen = {int(stochastic_mask("flow_sde", 1, 4, False, False, g)[0].nonzero()) for _ in range(60)}
    assert seen == {0, 1, 2, 3}
    assert not stochastic_mask("flow_noise", 2, 4, False, True).any()


def _linear_velocity(weight: torch.Tensor, std: float | None = None):
    def velocity(x, t):
        v = x * weight + t.view(-1, 1, 1)
        return v, None if std is None else torch.full_like(x, std)
    return velocity


@pytest.mark.parametrize("method,joint,std", [("flow_sde", False, None), ("flow_noise", True, 0.1)])
def test_recomputed_logprob_equals_sampled_and_has_gradients(method, joint, std):
    g = torch.Generator().manual_seed(1)
    weight = torch.tensor(0.3, requires_grad=True)
    x0 = torch.randn(5, 2, 3, generator=g)
    mask = stochastic_mask(method, 5, 4, False, False, g)
    with torch.no_grad():
        s = sample_chain(_linear_velocity(weight, std), x0, method, 4, 0.5, joint, mask, g)
    lp, ent = chain_logprob(_linear_velocity(weight, std), s.chain, s.mask, method, 0.5, joint)
    assert torch.allclose(lp, s.logprobs, atol=1e-5) and torch.allclose(ent, s.entropy, atol=1e-6)
    lp.sum().backward()
    assert weight.grad is not None and weight.grad.abs().item() > 0
    if method == "flow_noise":
        assert torch.allclose(ent, gaussian_entropy_of_std(torch.tensor(0.1)).expand_as(ent))


@pytest.mark.parametrize("method,joint", [("flow_sde", False), ("flow_noise", True), ("flow_sde", True)])
def test_gathered_recompute_equals_the_step_by_step_one_values_and_gradients(method, joint):
    """Rows of one minibatch come from different rollout calls (Flow-SDE: another stochastic step
    per row, or none); the gathered pass must give the same log-probs, entropies and gradients."""
    g = torch.Generator().manual_seed(5)
    b, n = 6, 4
    cond = torch.randn(b, 1, 3, generator=g)  # a per-row observation the velocity reads
    weight = torch.tensor(0.4, requires_grad=True)
    chain = torch.randn(b, n + 1, 2, 3, generator=g)
    if method == "flow_sde":
        mask = torch.zeros(b, n, dtype=torch.bool)
        for row, k in enumerate([0, 2, 1, 3, 2]):  # the last row: no stochastic step
            mask[row, k] = True
    else:
        mask = torch.ones(b, n, dtype=torch.bool)

    def step_by_step(x, t):
        return x * weight + cond * t.view(-1, 1, 1), torch.sigmoid(x + cond) * 0.5 + 0.1

    def gathered(x, t, rows):
        return x * weight + cond[rows] * t.view(-1, 1, 1), torch.sigmoid(x + cond[rows]) * 0.5 + 0.1

    ref_lp, ref_ent = chain_logprob(step_by_step, chain, mask, method, 0.7, joint)
    (ref_grad,) = torch.autograd.grad(ref_lp.sum(), weight)
    lp, ent = chain_logprob_gathered(gathered, chain, mask, method, 0.7, joint)
    (grad,) = torch.autograd.grad(lp.sum(), weight)
    assert torch.allclose(lp, ref_lp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-6)
    assert torch.allclose(grad, ref_grad, rtol=1e-4)
    if method == "flow_sde" and not joint:
        assert bool((lp[-1] == 0).all())  # no stochastic step: log-prob 0


def test_small_noise_limits_give_the_ode_path():
    x0 = torch.randn(4, 2, 2, generator=torch.Generator().manual_seed(2))
    vel = _linear_velocity(torch.tensor(-0.5))
    ode = sample_chain(vel, x0, "flow_sde", 4, 0.5, False, torch.zeros(4, 4, dtype=torch.bool))
    sde = sample_chain(vel, x0, "flow_sde", 4, 1e-6, False, torch.ones(4, 4, dtype=torch.bool))
    noisy = sample_chain(_linear_velocity(torch.tensor(-0.5), 1e-7), x0, "flow_noise", 4, 0.5, True,
                         torch.ones(4, 4, dtype=torch.bool))
    assert torch.allclose(sde.chain, ode.chain, atol=1e-5) and torch.allclose(noisy.chain, ode.chain, atol=1e-5)
    assert bool((ode.logprobs == 0).all())  # no stochastic step: every std is 0
    # a = 1 on the ODE-only chain differs: the SDE mean has the drift correction
    sde_big = sde_step_moments(x0, x0, torch.tensor(0.5), 0.25, 1.0, 0.75)[0]
    assert not torch.allclose(sde_big, x0 - 0.25 * x0)


def test_sde_step_keeps_the_marginal_of_a_gaussian_flow():
    """Data a ~ N(m, s^2), x_t = t eps + (1 - t) a ~ N((1 - t) m, V_t), V_t = t^2 + (1 - t)^2 s^2; the
    exact velocity is E[eps - a | x_t]. One SDE step from x_t ~ its marginal lands on the marginal at
    t - Delta (up to O(Delta^2)); the step without the drift correction overshoots the variance by
    Delta s_t^2."""
    m, s2, t, delta, a = 1.5, 0.25, 0.5, 0.02, 1.0

    def marginal(tt):
        return (1 - tt) * m, tt ** 2 + (1 - tt) ** 2 * s2

    mu, var = marginal(t)
    x = mu + math.sqrt(var) * torch.randn(400_000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    v = (t - (1 - t) * s2) * (x - mu) / var - m
    mean, std = sde_step_moments(x, v, torch.tensor(t, dtype=torch.float64), delta, a, 0.75)
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    nxt = mean + std * noise
    want_mu, want_var = marginal(t - delta)
    assert nxt.mean().item() == pytest.approx(want_mu, abs=5e-3)
    assert nxt.var().item() == pytest.approx(want_var, abs=4e-3)
    naive = x - delta * v + std * noise
    sigma2 = a ** 2 * t / (1 - t)
    assert abs(naive.var().item() - want_var) > 0.5 * delta * sigma2  # the correction matters


def test_noise_anneal_schedule_by_hand():
    # RLinf's noise_params [0.7, 0.3, 400]: 0.7 - 0.4 * step / 400, then 0.3
    assert annealed_noise_level(0.7, 0.3, 400, 0) == pytest.approx(0.7)
    assert annealed_noise_level(0.7, 0.3, 400, 100) == pytest.approx(0.6)
    assert annealed_noise_level(0.7, 0.3, 400, 399) == pytest.approx(0.301)
    assert annealed_noise_level(0.7, 0.3, 400, 400) == annealed_noise_level(0.7, 0.3, 400, 5000) == pytest.approx(0.3)
    assert annealed_noise_level(0.2, 0.8, 3, 1) == pytest.approx(0.4)  # rising schedules too
    assert flow_sde_level(0.5, False, (0.7, 0.3, 400), 100) == 0.5  # without noise_anneal: noise_level
    assert flow_sde_level(0.5, True, (0.7, 0.3, 400), 100) == pytest.approx(0.6)
    # rounded to the chain's dtype, so the stored level is the sampled one
    assert flow_sde_level(0.5, True, (0.7, 0.3, 400), 100, torch.bfloat16) == 0.6015625
    with pytest.raises(ValueError, match="anneal_steps"):
        annealed_noise_level(0.7, 0.3, 0, 1)


def test_packed_step_slots_carry_each_rows_level():
    chain = torch.arange(2 * 3 * 1 * 2, dtype=torch.float32).view(2, 3, 1, 2)
    mask = torch.tensor([[True, False], [False, True]])
    raw = pack_chain(chain, mask, rows=1, noise_level=torch.tensor([0.75, 0.25]))
    assert raw[:, 0, -2:].tolist() == [[0.75, 0.0], [0.0, 0.25]]
    back, back_mask = unpack_chain(raw, 2, 1, 2)
    assert torch.equal(back, chain) and torch.equal(back_mask, mask)
    assert unpack_step_levels(raw, 2).tolist() == [[0.75, 0.0], [0.0, 0.25]]
    # a level of 0 would read back as a deterministic step
    with pytest.raises(ValueError, match="noise_level must be > 0"):
        pack_chain(chain, mask, rows=1, noise_level=0.0)


def test_per_row_levels_recompute_each_rows_own_density():
    """Rows sampled at different Flow-SDE levels (an annealed level moved between rollouts): the
    gathered and step-by-step recomputes with the ``[B, N]`` levels equal, row by row, the
    recompute at that row's level alone, and differ from the recompute at one shared level."""
    g = torch.Generator().manual_seed(3)
    b, n = 4, 3
    weight = torch.tensor(0.2)
    levels_by_row = [0.9, 0.3, 0.6, 0.3]
    x0 = torch.randn(b, 2, 2, generator=g)
    velocity = _linear_velocity(weight)
    chains, masks = [], []
    for row, a in enumerate(levels_by_row):
        mask = torch.zeros(1, n, dtype=torch.bool)
        mask[0, row % (n - 1)] = True
        s = sample_chain(velocity, x0[row:row + 1], "flow_sde", n, a, False, mask, g)
        chains.append(s.chain)
        masks.append(mask)
    raw = pack_chain(torch.cat(chains), torch.cat(masks), rows=2, noise_level=torch.tensor(levels_by_row))
    chain, mask = unpack_chain(raw, n, 2, 2)
    levels = unpack_step_levels(raw, n)
    lp, _ = chain_logprob_gathered(lambda x, t, rows: velocity(x, t), chain, mask, "flow_sde", levels, False)
    lp_steps, _ = chain_logprob(velocity, chain, mask, "flow_sde", levels, False)
    assert torch.allclose(lp, lp_steps, atol=1e-5)
    for row, a in enumerate(levels_by_row):
        alone, _ = chain_logprob(velocity, chain[row:row + 1], mask[row:row + 1], "flow_sde", a, False)
        assert torch.allclose(lp[row:row + 1], alone, atol=1e-5)
    shared, _ = chain_logprob(velocity, chain, mask, "flow_sde", 0.6, False)
    assert not torch.allclose(shared[:2], lp[:2], atol=1e-3)
