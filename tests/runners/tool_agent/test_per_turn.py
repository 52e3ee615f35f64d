"""``agentloop.train_mode: per_turn``: the turn samples carry the episode's tokens, log-probs and
advantages exactly; a token-mean loss equals the trajectory's, a sequence-mean one weighs turns
equally; filler samples weigh nothing."""

from __future__ import annotations

import pytest
import torch

from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.llm import add_advantages, make_loss_fn
from rlinf.runners.tool_agent.per_turn import split_turns

PAD = 0


def _episodes() -> RolloutBatch:
    """Two episodes of one group: (turn, tool, turn) and (turn)."""
    # episode 0: turn [10 11] tool [90 91 92] turn [12 13 14]; episode 1: turn [20 21 22 23]
    batch = RolloutBatch.from_token_lists(
        [[1, 2, 3], [4, 5]], [[10, 11, 90, 91, 92, 12, 13, 14], [20, 21, 22, 23]], PAD, group_size=2,
        logprobs=[[-.1, -.2, 0, 0, 0, -.3, -.4, -.5], [-.6, -.7, -.8, -.9]],
        episodes=[{"turn_spans": [(0, 2), (5, 8)], "tool_calls": 1},
                  {"turn_spans": [(0, 4)], "tool_calls": 0}])
    batch.loss_mask = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0, 0]])
    batch.rewards = torch.tensor([1.0, 0.0])
    batch.old_logprobs = batch.rollout_logprobs.clone()
    batch.correct = torch.tensor([True, False])
    return batch


def _real(ids, mask):
    return [row[m.bool()].tolist() for row, m in zip(ids, mask)]


def test_each_turn_is_a_sample_with_its_history_as_prompt():
    batch = _episodes()
    add_advantages(batch, AlgorithmConfig(adv_type="grpo", group_size=2))
    turns = split_turns(batch, PAD)
    assert _real(turns.prompt_ids, turns.prompt_mask) == [[1, 2, 3], [1, 2, 3, 10, 11, 90, 91, 92], [4, 5]]
    assert _real(turns.response_ids, turns.response_mask) == [[10, 11], [12, 13, 14], [20, 21, 22, 23]]
    logprobs = _real(turns.rollout_logprobs, turns.response_mask)
    assert [len(x) for x in logprobs] == [2, 3, 4]
    assert sum(logprobs, []) == pytest.approx([-.1, -.2, -.3, -.4, -.5, -.6, -.7, -.8, -.9])
    assert turns.loss_mask.tolist() == turns.response_mask.tolist()
    # GRPO over the two *episodes*: rewards 1 and 0 -> +0.7071 / -0.7071, shared by every turn
    adv = _real(turns.advantages, turns.response_mask)
    assert adv[0] == pytest.approx([0.7071] * 2, abs=1e-4) and adv[1] == pytest.approx([0.7071] * 3, abs=1e-4)
    assert adv[2] == pytest.approx([-0.7071] * 4, abs=1e-4)
    assert turns.rewards.tolist() == [1.0, 1.0, 0.0] and turns.correct.tolist() == [True, True, False]
    assert [(e["episode"], e["turn"]) for e in turns.episodes] == [(0, 0), (0, 1), (1, 0)]


def _loss(batch: RolloutBatch, agg: str, logprobs: torch.Tensor) -> float:
    algo = AlgorithmConfig(adv_type="grpo", group_size=2, loss_agg_func=agg, entropy_bonus=0.0)
    return float(make_loss_fn(algo)(logprobs, None, batch)[0])


def test_token_mean_loss_is_the_trajectorys_and_seq_mean_weighs_turns_equally():
    batch = _episodes()
    add_advantages(batch, AlgorithmConfig(adv_type="grpo", group_size=2))
    new_logprobs = batch.rollout_logprobs + 0.01 * torch.arange(8.0)  # moved a little (ratios inside the clip)
    turns = split_turns(batch, PAD, multiple=4)
    assert turns.batch_size == 4 and turns.loss_mask[3].sum() == 0 and turns.episodes[3]["filler"]
    # the same new log-probs, cut at the turns (filler row: a copy of the shortest turn)
    cut = torch.zeros_like(turns.rollout_logprobs)
    for j, (i, (s, e)) in enumerate([(0, (0, 2)), (0, (5, 8)), (1, (0, 4)), (0, (0, 2))]):
        cut[j, :e - s] = new_logprobs[i, s:e]
    assert _loss(turns, "token-mean", cut) == pytest.approx(_loss(batch, "token-mean", new_logprobs), rel=1e-6)
    # seq-mean-token-mean by hand: per-sample token means of -A * ratio; the filler row is left out
    ratio = torch.exp(new_logprobs - batch.rollout_logprobs)
    a = 0.70710678
    per_turn = [float((-a * ratio[0, 0:2]).mean()), float((-a * ratio[0, 5:8]).mean()),
                float((a * ratio[1, 0:4]).mean())]
    assert _loss(turns, "seq-mean-token-mean", cut) == pytest.approx(sum(per_turn) / 3, rel=1e-5)
    per_episode = [float((-a * ratio[0][batch.loss_mask[0].bool()]).mean()), per_turn[2]]
    assert _loss(batch, "seq-mean-token-mean", new_logprobs) == pytest.approx(sum(per_episode) / 2, rel=1e-5)


def test_a_batch_without_turn_spans_is_refused():
    plain = RolloutBatch.from_token_lists([[1]], [[2, 3]], PAD)
    with pytest.raises(ValueError, match="turn_spans"):
        split_turns(plain, PAD)
