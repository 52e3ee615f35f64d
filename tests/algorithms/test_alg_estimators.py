"""Every registered advantage estimator, called through the registry with its one signature
(``AdvantageInputs -> AdvantageOutputs``); expected values worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.algorithms import AdvantageInputs, advantage_registry, get_advantage_estimator


def close(actual, expected, atol=1e-5):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def run(name, kind="llm", **fields):
    return get_advantage_estimator(name, kind)(AdvantageInputs(**fields))


# ---------------------------------------------------------------- metadata


@pytest.mark.parametrize("kind, expected", [
    ("llm", {"gae": (True, False), "grpo": (False, True), "reinpp": (False, False),
             "reinpp_baseline": (False, True), "rloo": (False, True)}),
    ("embodied", {"gae": (True, False), "grpo": (False, True)}),
])
def test_registered_estimators_and_their_needs(kind, expected):
    registry = advantage_registry(kind)
    assert registry.names() == sorted(expected)
    for name, (needs_critic, needs_groups) in expected.items():
        est = registry.get(name)
        assert (est.name, est.needs_critic, est.needs_groups) == (name, needs_critic, needs_groups)


@pytest.mark.parametrize("kind", ["llm", "embodied"])
def test_every_estimator_states_its_formula(kind):
    registry = advantage_registry(kind)
    for name in registry.names():
        doc = registry.get(name).fn.__doc__ or ""
        assert "=" in doc and len(doc) > 80, f"{name}: put the formula in the docstring"


def test_unknown_kind_and_name():
    with pytest.raises(ValueError, match="llm"):
        advantage_registry("vision")
    with pytest.raises(ValueError, match="registered: gae, grpo$"):
        get_advantage_estimator("reinpp", "embodied")


# ---------------------------------------------------------------- LLM token batches


def test_grpo_estimator_by_hand():
    out = run("grpo", rewards=torch.tensor([1.0, 0.0, 0.0, 2.0]),
              response_mask=torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]]), group_size=2)
    # group 1: mean 0.5, unbiased std sqrt(0.5); 0.5 / 0.70711 = 0.70711
    # group 2: mean 1, deviations -1, +1, unbiased std sqrt(2); 1 / 1.41421 = 0.70711
    a = 0.5 / math.sqrt(0.5)
    close(out.advantages, [[a, a], [-a, 0], [-a, -a], [0, 0]])
    close(out.returns, out.advantages)


def test_grpo_estimator_ignores_kl_penalty():
    mask = torch.ones(2, 1)
    plain = run("grpo", rewards=torch.tensor([1.0, 0.0]), response_mask=mask, group_size=2)
    with_kl = run("grpo", rewards=torch.tensor([1.0, 0.0]), response_mask=mask, group_size=2,
                  kl_penalty=torch.full((2, 1), 5.0))
    close(with_kl.advantages, plain.advantages)


def test_reinpp_estimator_by_hand():
    out = run("reinpp", rewards=torch.tensor([1.0, 0.0]), response_mask=torch.tensor([[1, 1], [1, 0]]),
              kl_penalty=torch.tensor([[0.1, 0.1], [0.2, 0.3]]), normalize_advantages=False)
    # row 0: token rewards [-0.1, 1 - 0.1]; G1 = 0.9, G0 = -0.1 + 0.9 = 0.8
    # row 1: the only valid token is t=0: reward 0 - 0.2; the masked KL 0.3 is not used
    close(out.returns, [[0.8, 0.9], [-0.2, 0.0]])
    close(out.advantages, out.returns)


def test_reinpp_baseline_estimator_whitens_over_the_batch():
    out = run("reinpp_baseline", rewards=torch.tensor([3.0, 1.0, 0.0, 2.0]),
              response_mask=torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]]), group_size=2)
    # group means 2 and 1 -> centred rewards [1, -1, -1, 1]; gamma 1: each valid token's return
    # is its row's centred reward
    close(out.returns, [[1, 1, 0], [-1, 0, 0], [-1, -1, -1], [1, 1, 0]])
    # 8 valid tokens: four +1, four -1; mean 0, unbiased var 8 / 7 -> A = +-1 / sqrt(8/7) = +-0.93541
    a = 1 / math.sqrt(8 / 7)
    close(out.advantages, [[a, a, 0], [-a, 0, 0], [-a, -a, -a], [a, a, 0]])
    # GRPO would divide each group by its own std instead: group 1 gives 1 / sqrt(2) = 0.70711
    grpo = run("grpo", rewards=torch.tensor([3.0, 1.0, 0.0, 2.0]),
               response_mask=torch.ones(4, 3), group_size=2)
    assert abs(grpo.advantages[0, 0].item() - a) > 0.2


def test_reinpp_baseline_estimator_gamma_and_kl():
    out = run("reinpp_baseline", rewards=torch.tensor([2.0, 0.0]), response_mask=torch.ones(2, 2),
              group_size=2, gamma=0.5, kl_penalty=torch.tensor([[0.2, 0.0], [0.0, 0.4]]),
              normalize_advantages=False)
    # centred [1, -1]; row 0 token rewards [-0.2, 1]: G1 = 1, G0 = -0.2 + 0.5 * 1 = 0.3
    # row 1 token rewards [0, -1 - 0.4]: G1 = -1.4, G0 = 0.5 * -1.4 = -0.7
    close(out.returns, [[0.3, 1.0], [-0.7, -1.4]])
    close(out.advantages, out.returns)


def test_rloo_estimator_whitened():
    out = run("rloo", rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]), response_mask=torch.ones(4, 1),
              group_size=2)
    # leave-one-out: [1 - 0, 0 - 1, 0 - 0, 0 - 0] = [1, -1, 0, 0]; mean 0, unbiased var 2 / 3
    s = math.sqrt(2 / 3)
    close(out.advantages, [[1 / s], [-1 / s], [0], [0]])


def test_gae_estimator_by_hand():
    out = run("gae", rewards=torch.tensor([1.0]), response_mask=torch.tensor([[1, 1, 1, 0]]),
              values=torch.tensor([[0.5, 0.2, 0.4, 7.0]]), kl_penalty=torch.tensor([[0.1, 0.0, 0.0, 0.0]]),
              gamma=0.9, lam=0.8, normalize_advantages=False)
    # token rewards [-0.1, 0, 1] (outcome at the last valid token), gamma * lam = 0.72
    # t2: delta = 1 - 0.4 = 0.6; A2 = 0.6
    # t1: delta = 0 + 0.9 * 0.4 - 0.2 = 0.16; A1 = 0.16 + 0.72 * 0.6 = 0.592
    # t0: delta = -0.1 + 0.9 * 0.2 - 0.5 = -0.42; A0 = -0.42 + 0.72 * 0.592 = 0.00624
    close(out.advantages, [[0.00624, 0.592, 0.6, 0]])
    close(out.returns, [[0.50624, 0.792, 1.0, 0]])


def test_gae_estimator_without_values_is_refused():
    with pytest.raises(ValueError, match="critic values"):
        run("gae", rewards=torch.tensor([1.0]), response_mask=torch.ones(1, 2))


# ---------------------------------------------------------------- embodied rollouts


def test_embodied_grpo_estimator_by_hand():
    rewards = torch.tensor([[1.0, 0.0, 2.0, 0.0], [1.0, 3.0, 0.0, 0.0]])  # [T=2, N=4]
    dones = torch.tensor([[False, False, True, False], [True, False, False, True]])
    out = run("grpo", "embodied", rewards=rewards, dones=dones, group_size=2, normalize_advantages=False)
    # first-episode returns: env0 1 + 1 = 2, env1 0 + 3 = 3, env2 2 (done at t=0), env3 0
    # groups (0, 1): mean 2.5 -> -0.5, +0.5; (2, 3): mean 1 -> +1, -1; env2 is not alive at t=1
    close(out.advantages, [[-0.5, 0.5, 1.0, -1.0], [-0.5, 0.5, 0.0, -1.0]])
    close(out.returns, torch.zeros(2, 4))
    # action-level rewards [T, N, K]: the same advantage on every action of the chunk
    per_action = run("grpo", "embodied", rewards=torch.stack([rewards / 2, rewards / 2], -1), dones=dones,
                     group_size=2, normalize_advantages=False)
    close(per_action.advantages, out.advantages.unsqueeze(-1).expand(2, 4, 2))


def test_embodied_gae_estimator_with_bootstrap():
    out = run("gae", "embodied", rewards=torch.tensor([[1.0], [1.0]]),
              values=torch.tensor([[0.5], [0.5], [2.0]]), dones=torch.tensor([[False], [True]]),
              bootstrap_values=torch.tensor([[0.0], [1.0]]), gamma=0.5, lam=1.0, normalize_advantages=False)
    # t1 ends the episode (cut by a time limit): r1 = 1 + 0.5 * 1.0 = 1.5, no V_2 past the done:
    # A1 = 1.5 - 0.5 = 1.0; t0: delta = 1 + 0.5 * 0.5 - 0.5 = 0.75, A0 = 0.75 + 0.5 * 1.0 = 1.25
    close(out.advantages, [[1.25], [1.0]])
    close(out.returns, [[1.75], [1.5]])
