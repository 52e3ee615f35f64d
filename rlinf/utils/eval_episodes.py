"""The evaluation's episodes: which episodes an evaluation plays, which env slot plays which, and
where their outcomes are written — the same set whatever the number of env processes, envs per
process or pipeline stages.

Episode ``i`` (``0 <= i < env.eval.num_episodes``) has the seed ``env.eval.seed + i``: its
initial state (ManiSkill / toy: the seed itself; LIBERO / Meta-World with a finite list of initial
states: the seed modulo their count) and, for policies that draw noise even when acting
deterministically (flow / π0 policies' initial noise), the noise of its policy steps
(:func:`noise_seed`). The ``S = env.eval.total_num_envs`` env slots (env process x stage x env,
in rank order) play the episodes in rounds: in round ``r`` slot ``g`` plays episode
``r * S + g``; slots past the last episode play a padding episode that is not counted.

Example (5 episodes on 4 slots: two rounds; in the second, slots 1-3 are padding):
    >>> plan = EvalRound(seed=1000, num_episodes=5, total_slots=4, index=1)
    >>> eval_rounds(5, 4), plan.episodes(first_slot=0, count=4), plan.seeds(first_slot=0, count=2)
    (2, [4, -1, -1, -1], [1004, -1])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rlinf.utils.confidence import wilson_interval

__all__ = ["EpisodeLog", "EvalRound", "episode_metrics", "episode_state_id", "eval_rounds", "noise_seed"]

#: the fields of one line of ``eval/episodes.jsonl`` besides ``step`` and ``only_eval``
RECORD_FIELDS = ("episode", "seed", "task", "success", "return", "length", "ended")


def eval_rounds(num_episodes: int, total_slots: int) -> int:
    """Rounds (one eval rollout each) that ``total_slots`` env slots need for ``num_episodes``.

    >>> eval_rounds(32, 32), eval_rounds(33, 32), eval_rounds(3, 8)
    (1, 2, 1)
    """
    return -(-num_episodes // total_slots)


@dataclass(frozen=True)
class EvalRound:
    """Round ``index`` of an evaluation: which episode each env slot plays (sent to the env
    workers with the eval rollout).

    Attributes:
        seed: ``env.eval.seed``.
        num_episodes: ``env.eval.num_episodes`` (or its default).
        total_slots: ``env.eval.total_num_envs``.
        index: the round.
    """

    seed: int
    num_episodes: int
    total_slots: int
    index: int = 0

    def episodes(self, first_slot: int, count: int) -> list[int]:
        """The episode index of slots ``first_slot .. first_slot + count - 1`` (-1: padding)."""
        base = self.index * self.total_slots + first_slot
        return [e if e < self.num_episodes else -1 for e in range(base, base + count)]

    def seeds(self, first_slot: int, count: int) -> list[int]:
        """The episode seed of those slots (-1: padding)."""
        return [self.seed + e if e >= 0 else -1 for e in self.episodes(first_slot, count)]


def episode_state_id(seed: int, num_states: int | None) -> int:
    """The initial state an episode seed selects: the seed itself when any seed is a state
    (ManiSkill, toy), else the seed modulo the number of initial states (LIBERO, Meta-World).

    >>> episode_state_id(1003, None), episode_state_id(1003, 50)
    (1003, 3)
    """
    return seed if num_states is None else seed % num_states


def noise_seed(episode_seed: int, step: int) -> int:
    """The seed of the policy noise of episode ``episode_seed`` at policy step ``step`` (flow /
    π0 policies draw their initial noise even when acting deterministically).

    >>> noise_seed(1000, 3) == noise_seed(1000, 3) != noise_seed(1000, 4)
    True
    """
    return int(np.random.SeedSequence([episode_seed, step]).generate_state(1)[0])


def episode_metrics(records: Sequence[dict], prefix: str = "eval") -> dict[str, float]:
    """``{prefix}/success_rate`` with its 95 % Wilson interval (``success_rate_low`` /
    ``success_rate_high``), mean return and length and the number of episodes.

    An episode whose env reports no success (``"success": None``, a gymnasium env without
    ``info["success"]`` / ``info["is_success"]``) is left out of the rate; when some are,
    ``{prefix}/success_reported`` is the share that reported, and when none did the rate and its
    interval are absent ("not reported"), not 0.

    >>> m = episode_metrics([{"success": True, "return": 1.0, "length": 4},
    ...                      {"success": False, "return": 0.0, "length": 8}])
    >>> m["eval/success_rate"], m["eval/episode_length"], m["eval/episodes"], round(m["eval/success_rate_low"], 4)
    (0.5, 6.0, 2.0, 0.0945)
    >>> sorted(episode_metrics([{"success": None, "return": 1.0, "length": 4}]))
    ['eval/episode_length', 'eval/episode_return', 'eval/episodes', 'eval/success_reported']
    """
    n = len(records)
    if n == 0:
        return {f"{prefix}/episodes": 0.0}
    counted = [bool(r["success"]) for r in records if r["success"] is not None]
    out: dict[str, float] = {}
    if counted:
        wins = sum(counted)
        low, high = wilson_interval(wins, len(counted))
        out.update({f"{prefix}/success_rate": wins / len(counted), f"{prefix}/success_rate_low": low,
                    f"{prefix}/success_rate_high": high})
    if len(counted) < n:
        out[f"{prefix}/success_reported"] = len(counted) / n
    return {**out,
            f"{prefix}/episode_return": sum(float(r["return"]) for r in records) / n,
            f"{prefix}/episode_length": sum(float(r["length"]) for r in records) / n,
            f"{prefix}/episodes": float(n)}


class EpisodeLog:
    """``<log_path>/eval/episodes.jsonl``: one line per evaluated episode, ``{"step", "only_eval",
    "episode", "seed", "task", "success", "return", "length", "ended"}`` (``step``: the training
    step the evaluated weights belong to, the checkpoint's step for ``runner.only_eval``;
    ``ended``: false for an episode the eval rollout cut before its own end).

    The first write of a run starts the file afresh, or, when the run resumed from the checkpoint
    of step ``resume_step``, keeps the lines up to that step (as ``metrics.jsonl`` does).

    Example:
        >>> import tempfile
        >>> log = EpisodeLog(tempfile.mkdtemp())
        >>> log.write([{"episode": 0, "seed": 7, "task": "t", "success": True, "return": 1.0, "length": 3,
        ...             "ended": True}], step=2)
        >>> [(r["step"], r["seed"], r["success"]) for r in log.read()]
        [(2, 7, True)]
    """

    def __init__(self, log_path: str):
        self.path = os.path.join(log_path, "eval", "episodes.jsonl")
        self._started = False

    def write(self, records: Iterable[dict], step: int, only_eval: bool = False,
              resume_step: int | None = None) -> None:
        """Append one evaluation's ``records`` (dicts with :data:`RECORD_FIELDS`)."""
        if not self._started:
            self._start(resume_step)
        with open(self.path, "a", encoding="utf-8") as out:
            for rec in records:
                out.write(json.dumps({"step": int(step), "only_eval": bool(only_eval),
                                      **{k: rec[k] for k in RECORD_FIELDS}}) + "\n")

    def read(self) -> list[dict]:
        """Every line written so far (none when the file does not exist)."""
        if not os.path.isfile(self.path):
            return []
        with open(self.path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def _start(self, resume_step: int | None) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        kept = [] if resume_step is None else [r for r in self.read() if r["step"] <= resume_step]
        with open(self.path, "w", encoding="utf-8") as out:
            for rec in kept:
                out.write(json.dumps(rec) + "\n")
        self._started = True
