"""``agentloop.save_trajectories``: a tool agent's episodes saved in the shared trajectory format,
so the same store and viewer serve web and tool agents.

Each training step's episodes go to ``<run>/train_trajectories/iteration{step}_rank_0.pt`` and
each validation's to ``<run>/test_trajectories/iteration{step}_rank_0.pt``
(:class:`~rlinf.runners.trajectory_store.TrajectoryStore`: written whole, atomically). One
record per episode: the task (``task_id`` = the prompt's index in its data file, the prompt text,
the reference answer), ``repeat`` (its place among that prompt's episodes), ``status`` (the end
reason), ``answer`` (what the reward read), ``reward`` and one step per model turn with the tool
results shown to the model and ``policy_versions``, the versions that sampled the turn's tokens
(two or more when new weights reached it mid-turn, ``runner.rollout_mode: fully_async``). Render them with::

    python -m rlinf.runners.trajectory_viewer results/<experiment>/train_trajectories --iteration 3

Example:
    >>> import torch
    >>> from rlinf.data.rollout_batch import RolloutBatch
    >>> b = RolloutBatch.from_token_lists([[1]], [[2, 3]], 0, group_ids=torch.tensor([7]),
    ...     prompt_texts=["What is 12*34?"], answers=["408"], texts=["408"], finish_reasons=["answer"],
    ...     episodes=[{"end_reason": "answer", "turn_texts": ["<tool_call>..", "408"],
    ...                "turn_results": [[{"status": "ok", "text": "408"}], []]}])
    >>> b.rewards = torch.tensor([1.0])
    >>> (r,) = episode_records(b)
    >>> r["task"]["task_id"], r["repeat"], r["status"], [s["tool_results"] for s in r["steps"]]
    ('7', 0, 'answer', [[{'status': 'ok', 'text': '408'}], []])
"""

from __future__ import annotations

import os

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.runners.trajectory_store import TrajectoryStore


def episode_records(batch: RolloutBatch) -> list[dict]:
    """One trajectory record per episode of ``batch`` (see the module docstring)."""
    seen: dict[str, int] = {}
    records = []
    for i, episode in enumerate(batch.episodes):
        task_id = str(int(batch.group_ids[i])) if batch.group_ids is not None else str(i)
        repeat = seen.get(task_id, 0)
        seen[task_id] = repeat + 1
        texts = episode.get("turn_texts", [])
        results = episode.get("turn_results", [[] for _ in texts])
        versions = episode.get("turn_versions", [])
        records.append({
            "task": {"task_id": task_id, "instruction": _at(batch.prompt_texts, i),
                     "reference_answer": _at(batch.answers, i)},
            "repeat": repeat, "status": episode.get("end_reason"), "answer": _at(batch.texts, i),
            "reward": None if batch.rewards is None else float(batch.rewards[i]),
            "steps": [{"index": t, "response": text, "tool_results": list(results[t]) if t < len(results) else [],
                       "policy_versions": list(versions[t]) if t < len(versions) else []}
                      for t, text in enumerate(texts)]})
    return records


def save_episodes(folder: str, iteration: int, batch: RolloutBatch, split: str) -> str:
    """Write ``batch``'s episodes as ``<folder>/iteration{iteration}_rank_0.pt``; returns the path."""
    records = episode_records(batch)
    store = TrajectoryStore(folder, iteration, rank=0, total=len(records), checkpoint_interval=None,
                            metadata={"kind": "tool_agent", "split": split}, resume=False)
    for record in records:
        store.add(record)
    return os.fspath(store.finish())


def _at(values: list, i: int):
    return values[i] if i < len(values) else None
