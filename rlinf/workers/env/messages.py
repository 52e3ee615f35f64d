"""The two messages of the env <-> rollout loop, one pair per stage and policy step.

An env worker sends an :class:`ObsMessage` (observations after the last chunk, with that chunk's
rewards and episode ends); the rollout worker answers with the next chunk of actions
``[n, K, A]`` for the same stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlinf.engines.simulators.base import EnvObs


@dataclass
class ObsMessage:
    """Observations of one stage of one env worker after a chunk of actions.

    Attributes:
        obs: observations to act on next (after auto-resets).
        rewards: ``[n, K]`` rewards of the chunk just executed (None for the first message).
        dones: ``[n]`` an episode ended during the chunk.
        terminations: ``[n]`` it ended because the task ended.
        final_obs: last observations of episodes cut by the time limit during the chunk (rows of
            other environments are filler), or None when no episode was cut.
        truncated: ``[n]`` which rows of ``final_obs`` are real.
        reset_state_ids: ``[n]`` initial states of the current episodes.
        final_states: ``[n, D]`` state observation in which every episode that ended during the
            chunk ended (terminated or cut by the time limit; rows where ``dones``; other rows are
            filler), or None when no episode ended or the env gives no states. With auto-reset,
            ``obs`` already holds the next episode's first observation, so an off-policy
            transition's ``s'`` is this row (exact across resets).
        episode_seeds: ``[n]`` int64, first message of an evaluation round only: the seed of the
            episode each row plays (-1: a padding row, not counted;
            :class:`~rlinf.utils.eval_episodes.EvalRound`); None otherwise.
    """

    obs: EnvObs
    rewards: torch.Tensor | None = None
    dones: torch.Tensor | None = None
    terminations: torch.Tensor | None = None
    final_obs: EnvObs | None = None
    truncated: torch.Tensor | None = None
    reset_state_ids: torch.Tensor | None = None
    final_states: torch.Tensor | None = None
    episode_seeds: torch.Tensor | None = None


@dataclass
class EpisodeStats:
    """Finished episodes of a rollout (one entry per episode); an evaluation round also lists
    each of its episodes in ``episodes`` (dicts with
    :data:`~rlinf.utils.eval_episodes.RECORD_FIELDS`).

    ``reported`` says, per episode, whether its environment reported success at all (a
    gymnasium env without ``info["success"]`` / ``info["is_success"]`` does not); the success
    rate counts only those episodes, and is absent, not 0, when none did.

    Example:
        >>> s = EpisodeStats()
        >>> s.add(torch.tensor([1.0, 3.0]), torch.tensor([5.0, 5.0]), torch.tensor([False, False]),
        ...       reported=torch.tensor([0.0, 0.0]))
        >>> s.metrics("env")
        {'env/success_reported': 0.0, 'env/episode_return': 2.0, 'env/episode_length': 5.0, 'env/episodes': 2.0}
    """

    returns: list[float] = field(default_factory=list)
    lengths: list[float] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)
    episodes: list[dict] = field(default_factory=list)
    reported: list[bool] = field(default_factory=list)

    def add(self, returns: torch.Tensor, lengths: torch.Tensor, successes: torch.Tensor,
            reported: torch.Tensor | None = None) -> None:
        """Episodes that ended; ``reported``: per episode, whether the env reported success
        (None: every one did)."""
        self.returns += returns.tolist()
        self.lengths += lengths.tolist()
        self.successes += successes.bool().tolist()
        self.reported += [True] * len(returns) if reported is None else reported.bool().tolist()

    def merge(self, other: EpisodeStats) -> EpisodeStats:
        return EpisodeStats(self.returns + other.returns, self.lengths + other.lengths,
                            self.successes + other.successes, self.episodes + other.episodes,
                            self.reported + other.reported)

    def metrics(self, prefix: str) -> dict[str, float]:
        """``{prefix}/success_rate`` (over the episodes whose env reported success; absent when
        none did, with ``{prefix}/success_reported`` then the share that did: 0),
        ``episode_return``, ``episode_length``, ``episodes``."""
        n = len(self.returns)
        if n == 0:
            return {f"{prefix}/episodes": 0.0}
        counted = [s for s, ok in zip(self.successes, self.reported) if ok]
        out: dict[str, float] = {}
        if counted:
            out[f"{prefix}/success_rate"] = sum(counted) / len(counted)
        if len(counted) < n:
            out[f"{prefix}/success_reported"] = len(counted) / n
        return {**out, f"{prefix}/episode_return": sum(self.returns) / n,
                f"{prefix}/episode_length": sum(self.lengths) / n,
                f"{prefix}/episodes": float(n)}


#: Name of the pipes between env workers and rollout workers (``PipeLink.connect`` on the driver).
ENV_POLICY_PIPE = "env_policy"


def obs_key(tag: str, env_rank: int, stage: int) -> str:
    return f"{tag}/obs/{env_rank}/{stage}"


def action_key(tag: str, env_rank: int, stage: int) -> str:
    return f"{tag}/act/{env_rank}/{stage}"
