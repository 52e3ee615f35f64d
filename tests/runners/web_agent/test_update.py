"""The web update: which steps are trained, with which advantages, in which optimizer steps."""

from __future__ import annotations

import random

import pytest
import torch

from rlinf.objectives.web import draw_positive_samples, sft_loss_fn, steps_to_batch, trajectory_advantages
from rlinf.runners.web_agent.update import plan_steps, select_samples, step_batches


def _traj(task_id, reward, n_steps, success=None):
    steps = [{"index": i, "prompt_ids": [1, 2, 3 + i], "response_ids": [7, 8][: 1 + i % 2], "logprobs": [-0.5, -0.25]}
             for i in range(n_steps)]
    steps.append({"index": n_steps, "action": None})  # a dummy step: no tokens, never trained
    return {"task": {"task_id": task_id}, "reward": reward, "steps": steps,
            "judge": {"success": reward > 0 if success is None else success}, "blocked": False}


class Algo:
    positive_samples_to_train = 3
    recency_bias_power = 2.0
    val_split_ratio = 0.34


def test_grpo_advantages_hand_checked_and_equal_groups_dropped():
    # task a: rewards 1, 0 -> +1, -1; task b: both 1 -> 0 (dropped from the update)
    trajs = [_traj("a", 1.0, 2), _traj("a", 0.0, 1), _traj("b", 1.0, 1), _traj("b", 1.0, 1)]
    assert trajectory_advantages([t["reward"] for t in trajs], ["a", "a", "b", "b"]) == pytest.approx(
        [1.0, -1.0, 0.0, 0.0], abs=1e-5)
    steps, adv, val = select_samples("grpo", trajs, [], Algo, random.Random(0))
    assert len(steps) == 3 and adv == pytest.approx([1.0, 1.0, -1.0], abs=1e-5) and val == []
    batch = steps_to_batch(steps, pad_token_id=0, advantages=adv)
    # every response token of a step carries its trajectory's advantage, padding 0
    assert torch.allclose(batch.advantages, torch.tensor([[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]]), atol=1e-5)


def test_filtered_sft_draws_positive_steps_only_and_holds_out_validation():
    pool = [(0, _traj("a", 0.0, 3)), (0, _traj("b", 1.0, 2)), (1, _traj("c", 1.0, 2))]
    steps, adv, val = select_samples("filtered_sft", [], pool, Algo, random.Random(0))
    assert adv is None and len(steps) + len(val) == 3 and len(val) == 1
    positives = {id(s) for _, t in pool[1:] for s in t["steps"]}
    assert all(id(s) in positives for s in steps + val)


def test_recency_bias_prefers_new_iterations():
    old, new = _traj("old", 1.0, 1), _traj("new", 1.0, 1)
    pool = [(0, old), (3, new)]  # weights 1 : 16
    rng = random.Random(1)
    picks = [draw_positive_samples(pool, 1, 2.0, rng)[0] for _ in range(2000)]
    share_new = sum(p is new["steps"][0] for p in picks) / len(picks)
    assert share_new == pytest.approx(16 / 17, abs=0.03)
    # more samples than steps: with replacement, still only positive steps
    assert len(draw_positive_samples(pool, 5, 2.0, rng)) == 5


def test_step_plan_counts_and_shards():
    steps = [{"prompt_ids": [1] * (i + 1), "response_ids": [2, 3]} for i in range(10)]
    assert plan_steps(10, per_device=2, accumulation=2, ranks=2, epochs=3) == 3 * 2
    out = list(step_batches(steps, None, 0, per_device=2, accumulation=2, ranks=2, epochs=3, cutoff_len=64,
                            rng=random.Random(0)))
    assert len(out) == 6
    seen = sorted(b.batch_size for batches, _ in out[:2] for b in batches)
    assert sum(seen) == 10  # one epoch covers every sample once
    for batches, tokens in out:
        assert tokens == sum(int(b.response_mask.sum()) for b in batches)


def test_cutoff_keeps_the_prompt_tail_and_the_response():
    batch = steps_to_batch([{"prompt_ids": list(range(1, 11)), "response_ids": [50, 51]}], 0, max_length=6)
    assert batch.prompt_ids.tolist() == [[7, 8, 9, 10]] and batch.response_ids.tolist() == [[50, 51]]


def test_sft_loss_is_token_mean_nll():
    batch = steps_to_batch([{"prompt_ids": [1], "response_ids": [5, 6]}, {"prompt_ids": [1], "response_ids": [7]}], 0)
    logprobs = torch.tensor([[-1.0, -2.0], [-3.0, -9.0]])  # the -9 sits on padding
    loss, metrics = sft_loss_fn(logprobs, None, batch)
    assert float(loss) == pytest.approx((1 + 2 + 3) / 3) and metrics["sft_loss"] == pytest.approx(2.0)


def test_a_grpo_update_keeps_no_trajectories_and_filtered_sft_only_its_successes():
    """bench_soak: the driver kept every trajectory of every iteration (GRPO never reads them):
    +1.2 MiB an iteration. Now GRPO's pool stays empty, filtered_sft's holds successes only."""
    from types import SimpleNamespace

    from rlinf.runners.web_agent.loop import WebAgentRunner
    from rlinf.runners.web_agent.update import pool_entries

    trajs = [{"task": {"task_id": "t"}, "reward": 1.0, "judge": {"success": True}, "steps": []} for _ in range(4)]
    runner = SimpleNamespace(pool=[], actor=SimpleNamespace(world_size=1),
                             cfg=SimpleNamespace(algorithm_config=SimpleNamespace(method="grpo"),
                                                 runner=SimpleNamespace(iteration_seed=lambda i: i)))
    for iteration in range(3):
        out = WebAgentRunner.update(runner, trajs, iteration)  # equal rewards: nothing to train on
        assert out["actor/optimizer_steps"] == 0.0
    assert runner.pool == []
    failed = {"task": {"task_id": "u"}, "judge": {"success": False}}
    blocked = {"task": {"task_id": "v"}, "judge": {"success": True}, "blocked": True}
    assert pool_entries("filtered_sft", 2, [trajs[0], failed, blocked]) == [(2, trajs[0])]
