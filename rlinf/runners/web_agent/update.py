"""The training half of an iteration (seed 000's ``update_online``): which steps are trained, in
which optimizer steps, on which actor rank.

* ``filtered_sft``: ``positive_samples_to_train`` steps drawn from the successful trajectories of
  every iteration so far (recency-biased, :func:`rlinf.objectives.web.draw_positive_samples`);
  ``val_split_ratio`` of them held out for a validation loss.
* ``grpo``: the steps of this iteration's trajectories, each with its trajectory's
  group-relative advantage; steps of groups whose rewards are all equal (advantage 0) are dropped.

An epoch is ``ceil(n / (per_device_train_batch_size x gradient_accumulation_steps x ranks))``
optimizer steps; ``num_train_epochs`` epochs, samples reshuffled each epoch.

Example:
    >>> plan_steps(10, per_device=2, accumulation=2, ranks=1, epochs=2)
    6
"""

from __future__ import annotations

import math
import random

from rlinf.objectives.web import draw_positive_samples, steps_to_batch, trainable_steps, trajectory_advantages


def plan_steps(n_samples: int, per_device: int, accumulation: int, ranks: int, epochs: int) -> int:
    """Optimizer steps of an update over ``n_samples`` samples."""
    per_step = per_device * accumulation * ranks
    return epochs * math.ceil(n_samples / per_step) if n_samples else 0


def select_samples(method: str, trajectories: list[dict], pool: list[tuple[int, dict]], algo, rng: random.Random):
    """``(train_steps, train_advantages, val_steps)`` for this iteration's update."""
    if method == "filtered_sft":
        positives = [(k, t) for k, t in pool if _success(t)]
        steps = draw_positive_samples(positives, algo.positive_samples_to_train, algo.recency_bias_power, rng)
        n_val = int(len(steps) * algo.val_split_ratio)
        return steps[n_val:], None, steps[:n_val]
    rewards = [float(t.get("reward") or 0.0) for t in trajectories]
    keys = [t["task"]["task_id"] for t in trajectories]
    advantages = trajectory_advantages(rewards, keys)
    steps, adv = [], []
    for traj, a in zip(trajectories, advantages):
        if a == 0.0:
            continue
        for step in trainable_steps(traj):
            steps.append(step)
            adv.append(a)
    return steps, adv, []


def pool_entries(method: str, iteration: int, trajectories: list[dict]) -> list[tuple[int, dict]]:
    """What an iteration leaves in the runner's pool for later updates: ``filtered_sft`` draws
    from the successful trajectories of every iteration so far, so it keeps those; GRPO uses this
    iteration's trajectories only, so it keeps none (keeping all of them grew the driver by ~1.2
    MiB an iteration in bench/bench_soak.py).

    >>> ok, bad = {"judge": {"success": True}}, {"judge": {"success": False}}
    >>> pool_entries("filtered_sft", 3, [ok, bad]) == [(3, ok)], pool_entries("grpo", 3, [ok, bad])
    (True, [])
    """
    return [(iteration, t) for t in trajectories if _success(t)] if method == "filtered_sft" else []


def _success(traj: dict) -> bool:
    judge = traj.get("judge") or {}
    return bool(judge.get("success")) and not traj.get("blocked")


def step_batches(steps: list[dict], advantages: list[float] | None, pad_token_id: int, *, per_device: int,
                 accumulation: int, ranks: int, epochs: int, cutoff_len: int, rng: random.Random):
    """Yield ``(per_rank_batches, total_tokens)`` for each optimizer step of the update."""
    per_step = per_device * accumulation * ranks
    order = list(range(len(steps)))
    for _ in range(epochs):
        rng.shuffle(order)
        for start in range(0, len(order), per_step):
            idx = order[start:start + per_step]
            parts = [idx[r::ranks] for r in range(ranks)]
            batches = [steps_to_batch([steps[i] for i in part], pad_token_id,
                                      None if advantages is None else [advantages[i] for i in part],
                                      max_length=cutoff_len) for part in parts]
            yield batches, sum(b.num_train_tokens for b in batches if b.batch_size)
