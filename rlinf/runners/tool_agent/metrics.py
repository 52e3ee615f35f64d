"""A tool agent's episode metrics, from a batch's ``episodes`` figures.

Example:
    >>> import torch
    >>> from rlinf.data.rollout_batch import RolloutBatch
    >>> b = RolloutBatch.from_token_lists([[1], [1]], [[2, 3], [4]], pad_token_id=0,
    ...     episodes=[{"turns": 2, "tool_calls": 1, "invalid_calls": 1, "tool_errors": 0, "tool_timeouts": 0,
    ...                "end_reason": "answer", "model_tokens": 1, "tool_tokens": 1},
    ...               {"turns": 1, "tool_calls": 0, "invalid_calls": 0, "tool_errors": 0, "tool_timeouts": 0,
    ...                "end_reason": "length", "model_tokens": 1, "tool_tokens": 0}])
    >>> b.correct = torch.tensor([True, False])
    >>> m = agent_metrics(b)
    >>> m["agent/success"], m["agent/tool_call_rate"], m["agent/invalid_call_rate"], m["agent/end_length"]
    (0.5, 0.5, 0.5, 0.5)
"""

from __future__ import annotations

from rlinf.data.rollout_batch import RolloutBatch

#: end reasons reported as ``agent/end_<reason>`` (share of episodes)
END_REASONS = ("answer", "max_turns", "length", "tool_failure")


def agent_metrics(batch: RolloutBatch, prefix: str = "agent") -> dict[str, float]:
    """Per-episode means and rates:

    * ``success``: share of episodes the verifier marked correct;
    * ``turns``, ``tool_calls`` (per episode), ``tool_call_rate`` (share with >= 1 call);
    * ``invalid_call_rate``: malformed calls / all call attempts (well-formed + malformed);
    * ``tool_error_rate``, ``tool_timeout_rate``: per call run;
    * ``response_length`` (model + tool tokens), ``model_length`` (the model's own tokens);
    * ``end_<reason>``: share of episodes that ended so.
    """
    eps = batch.episodes
    if not eps:
        return {}
    n = len(eps)
    calls = sum(e["tool_calls"] for e in eps)
    invalid = sum(e["invalid_calls"] for e in eps)
    out = {
        "turns": sum(e["turns"] for e in eps) / n,
        "tool_calls": calls / n,
        "tool_call_rate": sum(e["tool_calls"] > 0 for e in eps) / n,
        "invalid_call_rate": invalid / max(calls + invalid, 1),
        "tool_error_rate": sum(e["tool_errors"] for e in eps) / max(calls, 1),
        "tool_timeout_rate": sum(e["tool_timeouts"] for e in eps) / max(calls, 1),
        "response_length": sum(e["model_tokens"] + e["tool_tokens"] for e in eps) / n,
        "model_length": sum(e["model_tokens"] for e in eps) / n,
    }
    if batch.correct is not None:
        out["success"] = float(batch.correct.float().mean())
    for reason in END_REASONS:
        out[f"end_{reason}"] = sum(e["end_reason"] == reason for e in eps) / n
    return {f"{prefix}/{k}": float(v) for k, v in out.items()}


def format_ok(episode: dict) -> bool:
    """An episode that ended with an answer and wrote no malformed call (``agentloop.format_reward``)."""
    return episode["end_reason"] == "answer" and episode["invalid_calls"] == 0
