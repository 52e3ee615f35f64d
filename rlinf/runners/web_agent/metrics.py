"""Rollout metrics of web trajectories (seed 004's ``calculate_rollout_metrics``).

Trajectories are the dicts of docs/web_agent.md. Definitions (``n`` = number of trajectories,
``S`` = number of steps over all of them):

- crashed (:func:`is_crashed`), seed 004's four rules in order: (1) empty or no steps, (2) the
  first action is ``invalid_url``, (3) a dummy action (a step whose ``action`` is None or
  missing), (4) fewer than 10 steps, not ending with an ``answer`` action, and not blocked.
  Only these rules decide; ``status`` is not read (a ``straggler`` stopped after 3 steps without
  an answer is crashed by rule 4, as in the seed).
- blocked: the trajectory's ``blocked`` flag.
- success (:func:`is_success`): the judge's ``success`` when ``judge`` is a dict holding it,
  else ``reward > 0``.
- ``success_rate`` = successes among the trajectories that are neither crashed nor blocked,
  divided by the number of those (seed 004: "non-crashed, non-blocked"); ``success_rate_all`` =
  successes / n. ``success_rate/<difficulty>`` uses the first rule within each difficulty
  present (``task.difficulty``, ``unknown`` when missing).
- ``avg_steps`` = S / n; ``avg_chars_per_response`` = characters of all step responses / number
  of steps with a response (a per-response mean, not per trajectory).
- ``goback_rate`` and ``invalid_action_rate`` = steps whose action type is ``goback`` /
  ``invalid``, divided by S.
- ``crashed_rate``, ``blocked_rate``, ``straggler_rate`` (status ``straggler``),
  ``timeout_rate`` (status ``timeout``) = count / n; ``avg_reward`` = mean reward, None as 0.

A rate with an empty denominator is 0.0; the counts (``num_*``) say how many were measured.

>>> trajs = [{"task": {"difficulty": "easy"}, "steps": [{"action": {"type": "answer", "text": "1"}}],
...           "status": "answered", "blocked": False, "reward": 1.0}]
>>> m = rollout_metrics(trajs)
>>> m["success_rate"], m["success_rate/easy"], m["crashed_rate"]
(1.0, 1.0, 0.0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: rule 4's step bound: shorter trajectories must end with an answer (or be blocked)
MIN_STEPS_WITHOUT_ANSWER = 10


def _action_type(step: object) -> str | None:
    if not isinstance(step, Mapping):
        return None
    action = step.get("action")
    return action.get("type") if isinstance(action, Mapping) else None


def is_crashed(traj: Mapping | None) -> bool:
    """Seed 004's crash rules (module docstring).

    >>> answer = {"action": {"type": "answer", "text": "x"}}
    >>> is_crashed({"steps": []}), is_crashed({"steps": [answer]}), is_crashed({"steps": [{"action": None}, answer]})
    (True, False, True)
    """
    steps = traj.get("steps") if isinstance(traj, Mapping) else None
    if not steps:
        return True
    if _action_type(steps[0]) == "invalid_url":
        return True
    if any(not isinstance(s, Mapping) or s.get("action") is None for s in steps):
        return True
    return (len(steps) < MIN_STEPS_WITHOUT_ANSWER and _action_type(steps[-1]) != "answer"
            and not traj.get("blocked"))


def is_success(traj: Mapping) -> bool:
    """The judge's verdict when recorded, else a positive reward.

    >>> is_success({"judge": {"success": False}, "reward": 1.0}), is_success({"reward": 0.5})
    (False, True)
    """
    judge = traj.get("judge")
    if isinstance(judge, Mapping) and "success" in judge:
        return bool(judge["success"])
    return float(traj.get("reward") or 0.0) > 0


def _rate(count: float, total: float) -> float:
    return count / total if total else 0.0


def rollout_metrics(trajectories: Sequence[Mapping]) -> dict[str, float]:
    """The metrics of the module docstring, as floats (counts included as ``num_*``)."""
    n = len(trajectories)
    crashed = [is_crashed(t) for t in trajectories]
    blocked = [bool(t.get("blocked")) for t in trajectories]
    success = [is_success(t) for t in trajectories]
    steps = [s for t in trajectories for s in (t.get("steps") or [])]
    responses = [s.get("response") for s in steps if isinstance(s, Mapping) and isinstance(s.get("response"), str)]
    action_types = [_action_type(s) for s in steps]
    counted = [not c and not b for c, b in zip(crashed, blocked)]
    statuses = [t.get("status") for t in trajectories]
    out = {
        "num_trajectories": float(n),
        "num_steps": float(len(steps)),
        "num_success": float(sum(success)),
        "num_crashed": float(sum(crashed)),
        "num_blocked": float(sum(blocked)),
        "success_rate": _rate(sum(s and k for s, k in zip(success, counted)), sum(counted)),
        "success_rate_all": _rate(sum(success), n),
        "avg_steps": _rate(len(steps), n),
        "avg_chars_per_response": _rate(sum(len(r) for r in responses), len(responses)),
        "goback_rate": _rate(action_types.count("goback"), len(steps)),
        "invalid_action_rate": _rate(action_types.count("invalid"), len(steps)),
        "crashed_rate": _rate(sum(crashed), n),
        "blocked_rate": _rate(sum(blocked), n),
        "straggler_rate": _rate(statuses.count("straggler"), n),
        "timeout_rate": _rate(statuses.count("timeout"), n),
        "avg_reward": _rate(sum(float(t.get("reward") or 0.0) for t in trajectories), n),
    }
    by_difficulty: dict[str, list[int]] = {}
    for t, s, k in zip(trajectories, success, counted):
        task = t.get("task") if isinstance(t.get("task"), Mapping) else {}
        tally = by_difficulty.setdefault(str(task.get("difficulty") or "unknown"), [0, 0])
        tally[0] += int(s and k)
        tally[1] += int(k)
    for difficulty, (wins, total) in sorted(by_difficulty.items()):
        out[f"success_rate/{difficulty}"] = _rate(wins, total)
    return out
