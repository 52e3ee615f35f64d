"""``algorithm.adv_type`` selects exactly the registered estimators, and the objectives dispatch
through the registry (no estimator names compared outside it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from rlinf.algorithms import ADVANTAGES, AdvantageInputs, AdvantageOutputs, advantage_registry
from rlinf.config.algorithm import ADV_TYPES, AlgorithmConfig
from rlinf.data.embodied_batch import Trajectory
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.embodied import embodied_advantages
from rlinf.objectives.llm import add_advantages
from rlinf.utils.typed_config import ConfigError, parse_section

RLINF = Path(__file__).resolve().parents[2] / "rlinf"


def _batch(rewards, responses, group_size=2):
    batch = RolloutBatch.from_token_lists([[1]] * len(responses), responses, pad_token_id=0, group_size=group_size)
    batch.rewards = torch.tensor(rewards)
    return batch


def test_adv_type_accepts_exactly_the_registered_names():
    registered = set(advantage_registry("llm").names()) | set(advantage_registry("embodied").names())
    assert set(ADV_TYPES) == registered
    for name in registered:
        assert parse_section(AlgorithmConfig, {"adv_type": name, "group_size": 2}, "algorithm").adv_type == name
    with pytest.raises(ConfigError) as info:
        parse_section(AlgorithmConfig, {"adv_type": "ppo"}, "algorithm")
    for name in registered:
        assert repr(name) in str(info.value)


@pytest.mark.parametrize("name", [n for n in ADV_TYPES])
def test_group_estimators_need_groups(name):
    needs_groups = any(advantage_registry(k).get(name).needs_groups
                       for k in ("llm", "embodied") if name in advantage_registry(k))
    if needs_groups:
        with pytest.raises(ConfigError, match="group_size > 1"):
            parse_section(AlgorithmConfig, {"adv_type": name, "group_size": 1}, "algorithm")
    else:
        parse_section(AlgorithmConfig, {"adv_type": name, "group_size": 1}, "algorithm")


def test_reinpp_baseline_selected_by_adv_type():
    batch = _batch([3.0, 1.0, 0.0, 2.0], [[5, 5], [5], [5, 5, 5], [5, 5]])
    add_advantages(batch, AlgorithmConfig(adv_type="reinpp_baseline", group_size=2))
    # centred rewards [1, -1, -1, 1] on every valid token: 8 tokens, mean 0, unbiased var 8 / 7
    a = 1 / (8 / 7) ** 0.5
    torch.testing.assert_close(batch.advantages, torch.tensor(
        [[a, a, 0], [-a, 0, 0], [-a, -a, -a], [a, a, 0]]), atol=1e-5, rtol=0)


def test_gae_reward_goes_to_the_last_response_token():
    batch = _batch([1.0, 0.0], [[5, 5, 5], [5]])
    batch.values = torch.tensor([[0.5, 0.2, 0.4], [0.3, 9.0, 9.0]])
    add_advantages(batch, AlgorithmConfig(adv_type="gae", gamma=0.9, lam=0.8, normalize_advantages=False))
    # row 0: token rewards [0, 0, 1]; A2 = 0.6, A1 = 0.9 * 0.4 - 0.2 + 0.72 * 0.6 = 0.592,
    # A0 = 0.9 * 0.2 - 0.5 + 0.72 * 0.592 = 0.10624; row 1: one token, A0 = 0 - 0.3
    torch.testing.assert_close(batch.advantages, torch.tensor([[0.10624, 0.592, 0.6], [-0.3, 0, 0]]),
                               atol=1e-5, rtol=0)
    batch.values = None
    with pytest.raises(ValueError, match="adv_type gae needs critic values"):
        add_advantages(batch, AlgorithmConfig(adv_type="gae"))


def test_a_new_estimator_is_one_registration(monkeypatch):
    """Register a toy estimator in the real registry: add_advantages runs it by name, with no
    other code to touch (the registry is restored afterwards)."""
    monkeypatch.setattr(ADVANTAGES, "_fns", dict(ADVANTAGES._fns))
    seen = {}

    @ADVANTAGES.register("toy_sign")
    def toy_sign(inputs: AdvantageInputs) -> AdvantageOutputs:
        """A_{i,t} = sign(R_i) * mask_{i,t}."""
        seen["inputs"] = inputs
        adv = torch.sign(inputs.rewards).view(-1, 1) * inputs.response_mask
        return AdvantageOutputs(adv, adv.clone())

    batch = _batch([2.0, -3.0], [[5, 5], [5]], group_size=1)
    add_advantages(batch, AlgorithmConfig(adv_type="toy_sign", gamma=0.5))
    assert (batch.advantages + 0.0).tolist() == [[1.0, 1.0], [-1.0, 0.0]]
    assert seen["inputs"].gamma == 0.5 and seen["inputs"].kl_penalty is None


def test_embodied_runs_take_their_registry():
    with pytest.raises(ConfigError, match="embodied runs use one of gae, grpo, got 'reinpp'"):
        AlgorithmConfig(adv_type="reinpp").estimator("embodied")
    empty = torch.zeros(2, 1, 1, 1)
    traj = Trajectory(raw_actions=empty, logprobs=empty, rewards=torch.tensor([[[1.0]], [[1.0]]]),
                      dones=torch.tensor([[False], [True]]), values=torch.tensor([[0.5], [0.5], [2.0]]))
    adv, ret = embodied_advantages(traj, AlgorithmConfig(adv_type="gae", gamma=0.5, lam=1.0,
                                                         normalize_advantages=False), group_size=1)
    # t1 done (terminated): A1 = 1 - 0.5; t0: 1 + 0.5 * 0.5 - 0.5 + 0.5 * 0.5 = 1.0
    assert adv.tolist() == [[1.0], [0.5]] and ret.tolist() == [[1.5], [1.0]]
    with pytest.raises(ValueError, match="gae needs values"):
        embodied_advantages(Trajectory(raw_actions=empty, logprobs=empty, rewards=traj.rewards, dones=traj.dones),
                            AlgorithmConfig(adv_type="gae"), group_size=1)


def test_no_code_compares_estimator_names():
    """Callers read needs_critic / needs_groups from the registry instead of comparing adv_type."""
    pattern = re.compile(r"adv_type\s*(==|!=|in\s*\(|not\s+in\s*\()")
    hits = [f"{p.relative_to(RLINF)}:{i}: {line.strip()}"
            for p in RLINF.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
            if pattern.search(line)]
    assert not hits, "\n".join(hits)
