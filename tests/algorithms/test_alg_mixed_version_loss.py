"""Fully asynchronous training (issue 45): the decoupled PPO loss over a batch whose tokens were
sampled by two behaviour policies, and GRPO's one baseline over a mixed-version group, both
checked against arithmetic done by hand."""

import math

import torch

from rlinf.algorithms import (
    AdvantageInputs,
    compute_decoupled_ppo_loss,
    compute_grpo_advantages,
    get_advantage_estimator,
)
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.llm import make_loss_fn

DT = torch.float64


def close(actual, expected, atol=1e-9):
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


def logp(*probs):
    return torch.log(torch.tensor(probs, dtype=DT))


# Trained at step 2 (actor version 2). Sample 0: tokens 0-1 sampled by version 0, token 2 by
# version 1 (a partial rollout continued under new weights); sample 1: both tokens by version 1,
# then a padding position (mask 0) holding garbage that must not count.
#                      s0t0  s0t1  s0t2   s1t0  s1t1  s1t2(pad)
TOKEN_VERSIONS = [[0, 0, 1], [1, 1, -1]]
BEHAVIOUR = torch.stack([logp(0.2, 0.5, 0.1), logp(0.6, 0.25, 1e-6)])   # mu, per token
PROXIMAL = torch.stack([logp(0.4, 0.4, 0.4), logp(0.3, 0.5, 0.9)])      # pi_prox (version 2)
CURRENT = torch.stack([logp(0.5, 0.2, 0.44), logp(0.33, 0.35, 0.9)])    # pi (being trained)
ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]], dtype=DT)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
# Importance weights w = pi_prox / mu, token by token (the version that sampled each token):
#   s0t0 0.4/0.2 = 2   s0t1 0.4/0.5 = 0.8   s0t2 0.4/0.1 = 4   s1t0 0.3/0.6 = 0.5   s1t1 0.5/0.25 = 2
W = [2.0, 0.8, 4.0, 0.5, 2.0]
# Ratios r = pi / pi_prox: s0t0 1.25, s0t1 0.5, s0t2 1.1, s1t0 1.1, s1t1 0.7
R = [1.25, 0.5, 1.1, 1.1, 0.7]
A = [1.0, 1.0, 1.0, -1.0, -1.0]


def run_loss(current, **kwargs):
    return compute_decoupled_ppo_loss(current, PROXIMAL, BEHAVIOUR, ADVANTAGES, MASK, ratio_clip_eps=0.2, **kwargs)


def test_decoupled_loss_on_mixed_versions_truncated_cap():
    loss, m = run_loss(CURRENT, behav_imp_weight_cap=3.0)
    # clipped surrogate l = max(-A r, -A clip(r, 0.8, 1.2)):
    #   s0t0 max(-1.25, -1.2) = -1.2 (clipped)   s0t1 max(-0.5, -0.8) = -0.5
    #   s0t2 max(-1.1, -1.1) = -1.1              s1t0 max(1.1, 1.1) = 1.1
    #   s1t1 max(0.7, 0.8) = 0.8 (clipped)
    # weights capped at 3 (truncate): 2, 0.8, min(4, 3) = 3, 0.5, 2
    # token-mean over the 5 valid tokens: (2*-1.2 + 0.8*-0.5 + 3*-1.1 + 0.5*1.1 + 2*0.8) / 5
    #   = (-2.4 - 0.4 - 3.3 + 0.55 + 1.6) / 5 = -3.95 / 5 = -0.79
    close(loss, -0.79)
    close(m["behav_imp_weight_mean"], (2 + 0.8 + 4 + 0.5 + 2) / 5)  # 1.86, before the cap
    close(m["behav_imp_weight_max"], 4.0)
    close(m["behav_cap_frac"], 1 / 5)  # s0t2 only
    close(m["clip_frac"], 2 / 5)  # s0t0, s1t1
    close(m["ratio_mean"], sum(R) / 5)


def test_decoupled_loss_mask_mode_and_no_cap():
    loss, m = run_loss(CURRENT, behav_imp_weight_cap=3.0, behav_imp_weight_cap_mode="mask")
    # s0t2 (w = 4 > 3) leaves the loss and the token count: (-2.4 - 0.4 + 0.55 + 1.6) / 4 = -0.1625
    close(loss, -0.1625)
    close(m["clip_frac"], 2 / 4)
    loss, _ = run_loss(CURRENT)
    # no cap: s0t2 weighs 4 * -1.1 = -4.4: (-2.4 - 0.4 - 4.4 + 0.55 + 1.6) / 5 = -5.05 / 5 = -1.01
    close(loss, -1.01)


def test_per_token_importance_weights_from_the_gradient():
    # With clipping out of reach (ratios in [0.01, 11]) every valid token is unclipped, so
    # d loss / d log pi_t = w_t * (-A_t r_t) / 5 and w_t = grad_t * 5 / (-A_t r_t).
    current = CURRENT.clone().requires_grad_(True)
    loss, _ = compute_decoupled_ppo_loss(current, PROXIMAL, BEHAVIOUR, ADVANTAGES, MASK,
                                         clip_eps_low=0.99, clip_eps_high=10.0, behav_imp_weight_cap=3.0)
    loss.backward()
    grad = current.grad
    valid = [grad[0, 0], grad[0, 1], grad[0, 2], grad[1, 0], grad[1, 1]]
    weights = [g.item() * 5 / (-a * r) for g, a, r in zip(valid, A, R)]
    # 2, 0.8, 4 -> 3 (cap), 0.5, 2: each token weighed by the policy version that sampled it
    for got, want in zip(weights, [2.0, 0.8, 3.0, 0.5, 2.0]):
        assert math.isclose(got, want, abs_tol=1e-9), (weights, TOKEN_VERSIONS)
    assert grad[1, 2].item() == 0.0  # padding
    # one weight per sample (e.g. the sample's first-token behaviour policy) would give s0t2
    # 0.4/0.2 = 2, not min(0.4/0.1, 3) = 3: the token-level weight is what is checked above
    assert abs(weights[2] - W[0]) > 0.9


def test_trainer_loss_fn_uses_rollout_logprobs_as_behaviour_per_token():
    # The same batch through the loss the training engine applies (make_loss_fn): behaviour =
    # rollout_logprobs, proximal = old_logprobs (recomputed by the actor), position s1t2 is a
    # tool result in the response (loss_mask 0) instead of padding.
    batch = RolloutBatch(
        prompt_ids=torch.ones(2, 1, dtype=torch.long), prompt_mask=torch.ones(2, 1, dtype=torch.long),
        response_ids=torch.ones(2, 3, dtype=torch.long), response_mask=torch.ones(2, 3, dtype=torch.long),
        group_size=2, rollout_logprobs=BEHAVIOUR, old_logprobs=PROXIMAL, advantages=ADVANTAGES,
        loss_mask=MASK)
    algo = AlgorithmConfig(group_size=2, loss_type="decoupled_ppo", behav_imp_weight_cap=3.0, ratio_clip_eps=0.2)
    loss, metrics = make_loss_fn(algo)(CURRENT, None, batch)
    close(loss, -0.79)  # the hand-computed value of test_decoupled_loss_on_mixed_versions_truncated_cap
    assert math.isclose(metrics["behav_imp_weight_mean"], 1.86, abs_tol=1e-9)


# ---------------------------------------------------------------- GRPO over a mixed-version group


def test_grpo_one_baseline_over_a_mixed_version_group():
    # One prompt, group of 4: members 0, 1 started under version 0, members 2, 3 under version 1.
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    mask = torch.ones(4, 2)
    adv, _ = compute_grpo_advantages(rewards, mask, group_size=4, eps=0.0)
    # whole group: mean 0.75; deviations 0.25, -0.75, 0.25, 0.25; squares sum 0.75;
    # unbiased var 0.75 / 3 = 0.25, std 0.5 -> A = 0.5, -1.5, 0.5, 0.5
    close(adv, [[0.5, 0.5], [-1.5, -1.5], [0.5, 0.5], [0.5, 0.5]], atol=1e-6)
    # per-version baselines would give +-0.7071 for {1, 0} (version 0) and 0 for {1, 1}
    # (version 1, all equal): not what a group gets
    assert abs(adv[2, 0].item()) > 0.4 and abs(abs(adv[0, 0].item()) - math.sqrt(0.5)) > 0.2
    # the registered estimator (adv_type grpo, eps 1e-6) agrees: 0.25 / (0.5 + 1e-6)
    out = get_advantage_estimator("grpo")(AdvantageInputs(rewards=rewards, response_mask=mask, group_size=4))
    close(out.advantages[:, 0], [0.25 / 0.500001, -0.75 / 0.500001, 0.25 / 0.500001, 0.25 / 0.500001], atol=1e-6)
