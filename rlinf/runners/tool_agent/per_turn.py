"""``agentloop.train_mode: per_turn``: each model turn of an episode becomes its own training
sample, the history before it (prompt, earlier turns, tool results) as its prompt.

The split happens after advantages, on the scored episode batch: the episode's reward, its GRPO /
RLOO / REINFORCE++ advantage (computed over the group of *episodes*, so an episode with many
turns does not count more in its group's baseline) and its GAE values and returns are cut at the
turn boundaries and go with each turn. Because episodes are token in / token out, the history is
exactly the tokens the policy saw, so the rollout's log-probs stay valid for every turn sample
and no re-tokenisation or log-prob recompute is needed.

What changes against ``trajectory``: the unit a sample-level aggregation counts. With
``algorithm.loss_agg_func: seq-mean-token-mean`` (or ``seq-mean-token-sum``) each turn weighs the
same, where in trajectory mode each episode does; ``token-mean`` gives the same loss in both
modes. A step's longest sample is one turn and its history, not the whole episode.

The split sample count is padded up to a multiple (``ranks x n_minibatches``) with copies of the
shortest turn sample whose loss mask is all zero: they weigh nothing in any loss.

Example:
    >>> import torch
    >>> from rlinf.data.rollout_batch import RolloutBatch
    >>> ep = RolloutBatch.from_token_lists([[1, 2]], [[10, 11, 90, 91, 12]], pad_token_id=0,
    ...     episodes=[{"turn_spans": [(0, 2), (4, 5)]}])
    >>> ep.loss_mask = torch.tensor([[1, 1, 0, 0, 1]])
    >>> turns = split_turns(ep, pad_token_id=0)
    >>> [p[m.bool()].tolist() for p, m in zip(turns.prompt_ids, turns.prompt_mask)]
    [[1, 2], [1, 2, 10, 11, 90, 91]]
    >>> [r[m.bool()].tolist() for r, m in zip(turns.response_ids, turns.response_mask)]
    [[10, 11], [12]]
"""

from __future__ import annotations

import dataclasses

import torch

from rlinf.data.rollout_batch import RolloutBatch

#: ``[B, R]`` fields cut to the turn's span (the others of that shape do not exist on the batch)
_TOKEN_FIELDS = ("response_mask", "loss_mask", "rollout_logprobs", "old_logprobs", "ref_logprobs",
                 "values", "advantages", "returns")
#: ``[B]`` fields each turn copies from its episode
_SAMPLE_FIELDS = ("rewards", "correct", "group_ids")


def split_turns(batch: RolloutBatch, pad_token_id: int, multiple: int = 1) -> RolloutBatch:
    """One sample per model turn (see the module docstring), padded to a multiple of ``multiple``.

    Args:
        batch: scored episodes, with ``episodes[i]["turn_spans"]`` (``[start, end)`` of each model
            turn in response positions) and the loss mask.
        pad_token_id: padding id of the new batch.
        multiple: the sample count is rounded up to this with zero-weight copies.

    Returns:
        The turn batch; ``episodes[j]`` is its episode's figures plus ``turn`` (index) and
        ``episode`` (index in ``batch``); ``group_size`` 1.
    """
    if not batch.episodes or any("turn_spans" not in e for e in batch.episodes):
        raise ValueError("per_turn needs each episode's turn_spans (an agent rollout's batch)")
    prompts, responses, rows, spans = [], [], [], []
    for i, episode in enumerate(batch.episodes):
        prompt = batch.prompt_ids[i][batch.prompt_mask[i].bool()].tolist()
        response = batch.response_ids[i].tolist()
        for start, end in episode["turn_spans"]:
            if end <= start:
                continue
            prompts.append(prompt + response[:start])
            responses.append(response[start:end])
            rows.append(i)
            spans.append((start, end))
    if not rows:
        raise ValueError("no episode of the batch has a model turn")
    out = RolloutBatch.from_token_lists(prompts, responses, pad_token_id, group_size=1,
                                        policy_version=batch.policy_version)
    width = out.response_ids.shape[1]
    for name in _TOKEN_FIELDS:
        source = getattr(batch, name)
        if source is None or name == "response_mask":
            continue
        cut = torch.zeros((len(rows), width), dtype=source.dtype)
        for j, (i, (start, end)) in enumerate(zip(rows, spans)):
            cut[j, :end - start] = source[i, start:end]
        setattr(out, name, cut)
    if out.loss_mask is None:
        out.loss_mask = out.response_mask.clone()
    for name in _SAMPLE_FIELDS:
        source = getattr(batch, name)
        if source is not None:
            setattr(out, name, source[torch.as_tensor(rows)])
    for name in ("answers", "texts", "prompt_texts", "finish_reasons"):
        source = getattr(batch, name)
        if source:
            setattr(out, name, [source[i] for i in rows])
    out.episodes = [{**batch.episodes[i], "episode": i, "turn": _turn_index(batch.episodes[i], span)}
                    for i, span in zip(rows, spans)]
    return _pad_to_multiple(out, multiple, pad_token_id)


def _turn_index(episode: dict, span: tuple[int, int]) -> int:
    return [tuple(s) for s in episode["turn_spans"]].index(tuple(span))


def _pad_to_multiple(batch: RolloutBatch, multiple: int, pad_token_id: int) -> RolloutBatch:
    """Round the sample count up to ``multiple`` with loss-mask-zero copies of the shortest sample."""
    missing = -batch.batch_size % max(multiple, 1)
    if not missing:
        return batch
    shortest = int(torch.argmin(batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)))
    filler = batch.select([shortest] * missing)
    filler.loss_mask = torch.zeros_like(filler.loss_mask)
    if filler.advantages is not None:
        filler.advantages = torch.zeros_like(filler.advantages)
    filler.episodes = [{**e, "filler": True} for e in filler.episodes]
    joined = RolloutBatch.concat([batch, filler], pad_token_id)
    return dataclasses.replace(joined, group_size=1)
