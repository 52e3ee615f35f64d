"""A tool agent's loss mask reaches advantages, the policy loss, entropy, KL and the critic:
tool-result tokens are attended to but never trained on."""

from __future__ import annotations

import torch

from rlinf.algorithms.gae import compute_gae_advantages
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.llm import add_advantages, make_loss_fn


def _episode_batch() -> RolloutBatch:
    # two episodes of one group: model tokens (mask 1), tool tokens (mask 0), model tokens
    batch = RolloutBatch.from_token_lists([[1, 2], [1, 2]], [[3, 4, 5, 6, 7], [3, 4, 5]], pad_token_id=0,
                                          group_size=2, logprobs=[[-1.0, -1.0, 0.0, 0.0, -1.0], [-1.0, 0.0, -1.0]])
    batch.loss_mask = torch.tensor([[1, 1, 0, 0, 1], [1, 0, 1, 0, 0]])
    batch.rewards = torch.tensor([1.0, 0.0])
    return batch


def test_the_train_mask_is_the_loss_mask_and_attention_still_covers_tool_tokens():
    batch = _episode_batch()
    assert batch.train_mask.tolist() == [[1, 1, 0, 0, 1], [1, 0, 1, 0, 0]]
    _, attention, _ = batch.model_inputs()
    assert attention[:, 2:].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch.select([1]).loss_mask.tolist() == [[1, 0, 1, 0, 0]]
    joined = RolloutBatch.concat([batch.select([0]), batch.select([1])], pad_token_id=0)
    assert torch.equal(joined.loss_mask, batch.loss_mask)


def test_grpo_advantages_are_zero_on_tool_tokens():
    batch = _episode_batch()
    add_advantages(batch, AlgorithmConfig(group_size=2, normalize_advantages=False))
    # r - group mean = +0.5 / -0.5 on model tokens, 0 on tool tokens and padding
    assert batch.advantages.tolist() == [[0.5, 0.5, 0.0, 0.0, 0.5], [-0.5, 0.0, -0.5, 0.0, 0.0]]


def test_the_policy_loss_ignores_what_happens_on_tool_tokens():
    batch = _episode_batch()
    algo = AlgorithmConfig(group_size=2, normalize_advantages=False, loss_agg_func="token-mean", entropy_bonus=0.01)
    add_advantages(batch, algo)
    batch.old_logprobs = batch.rollout_logprobs.clone()
    loss_fn = make_loss_fn(algo)
    lp = torch.tensor([[-0.9, -1.1, -3.0, -0.2, -1.0], [-1.2, -5.0, -0.8, 0.0, 0.0]])
    ent = torch.ones_like(lp)
    base, m = loss_fn(lp, ent, batch)
    moved = lp.clone()
    moved[0, 2:4] = -7.0  # tool tokens of episode 0
    moved[1, 1] = 2.0     # the tool token of episode 1
    ent2 = ent.clone()
    ent2[0, 2:4] = 50.0
    again, m2 = loss_fn(moved, ent2, batch)
    assert torch.allclose(base, again) and m["entropy"] == m2["entropy"]
    # by hand: token-mean of -A * ratio over the 5 model tokens (ratios unclipped or clipped at 1 +- 0.2)
    ratio = torch.exp(torch.tensor([-0.9 + 1.0, -1.1 + 1.0, -1.0 + 1.0, -1.2 + 1.0, -0.8 + 1.0]))
    adv = torch.tensor([0.5, 0.5, 0.5, -0.5, -0.5])
    per_token = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    expected = per_token.mean() - 0.01 * 1.0  # entropy bonus: mean entropy 1 over model tokens
    assert torch.allclose(base, expected, atol=1e-6), (float(base), float(expected))


def test_gae_skips_tool_spans_as_if_they_were_not_there():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.4, 9.0, 9.0, 0.6]])
    mask = torch.tensor([[1, 1, 0, 0, 1]])
    adv, ret = compute_gae_advantages(rewards, values, mask, gamma=1.0, lam=1.0, normalize_advantages=False)
    plain, _ = compute_gae_advantages(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.2, 0.4, 0.6]]),
                                      torch.ones(1, 3), gamma=1.0, lam=1.0, normalize_advantages=False)
    assert torch.allclose(adv[0, [0, 1, 4]], plain[0]) and adv[0, 2:4].tolist() == [0.0, 0.0]
