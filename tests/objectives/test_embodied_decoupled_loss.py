"""``algorithm.loss_type: decoupled_ppo`` in the embodied PPO loss, checked by hand: the ratio is
taken to the proximal log-probs and clipped around them, each term weighted by pi_prox / pi_behav."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.config.algorithm import AlgorithmConfig
from rlinf.objectives.embodied import embodied_ppo_loss


def test_decoupled_loss_clips_around_the_proximal_policy_and_weights_by_prox_over_behaviour():
    algo = AlgorithmConfig(loss_type="decoupled_ppo", logprob_type="action_level", ratio_clip_eps=0.2)
    behav = torch.zeros(2, 1, 1)
    prox = torch.log(torch.tensor([0.5, 2.0])).view(2, 1, 1)   # w = 0.5, 2.0
    cur = prox + torch.log(torch.tensor([1.5, 0.9])).view(2, 1, 1)  # r = 1.5 (clipped at 1.2), 0.9
    adv = torch.tensor([1.0, -1.0])
    loss, m = embodied_ppo_loss(cur, behav, adv, algo, prox_logprobs=prox)
    # row 0: A > 0, max(-1.5, -1.2) = -1.2, times w 0.5 -> -0.6; row 1: A < 0, max(0.9, 0.9) = 0.9, times 2 -> 1.8
    assert math.isclose(float(loss), (-0.6 + 1.8) / 2, rel_tol=1e-5)
    assert math.isclose(m["behav_imp_weight_mean"], 1.25, rel_tol=1e-5)
    assert m["clip_frac"] == 0.5
    # plain ppo on the same numbers takes the ratio to the behaviour policy, unweighted:
    # r = 0.75 (A > 0: max(-0.75, -0.8) = -0.75) and 1.8 (A < 0: max(1.8, 1.2) = 1.8)
    plain, _ = embodied_ppo_loss(cur, behav, adv, AlgorithmConfig(logprob_type="action_level"))
    assert math.isclose(float(plain), (-0.75 + 1.8) / 2, rel_tol=1e-5)

def test_the_loss_type_and_the_proximal_log_probs_go_together():
    lp = torch.zeros(2, 1, 1)
    with pytest.raises(ValueError, match="decoupled_ppo needs the proximal log-probs"):
        embodied_ppo_loss(lp, lp, torch.ones(2), AlgorithmConfig(loss_type="decoupled_ppo"))
    with pytest.raises(ValueError, match="ppo takes none"):
        embodied_ppo_loss(lp, lp, torch.ones(2), AlgorithmConfig(), prox_logprobs=lp)
