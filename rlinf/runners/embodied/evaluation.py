"""Evaluations that reproduce, for the embodied runners (on-policy and off-policy).

One evaluation plays ``env.eval.num_episodes`` episodes (default ``env.eval.total_num_envs``),
episode ``i`` from the seed ``env.eval.seed + i``, in rounds of ``total_num_envs`` (one eval
rollout each; :mod:`rlinf.utils.eval_episodes`), with deterministic actions computed for each
episode as if it were alone (fixed forward shape, per-episode noise:
:mod:`rlinf.workers.rollout.policy_worker`). So, for given weights, the per-episode outcomes and
the success rate do not depend on the number of env processes, envs per process, pipeline stages,
placement or backend, nor on whether the run resumed. Each evaluation appends its episodes to
``<runner.logger.log_path>/eval/episodes.jsonl`` and reports the success rate with its 95 %
Wilson interval (``eval/success_rate_low`` / ``_high``).

Example (the plan of an evaluation, without workers):
    >>> from types import SimpleNamespace as NS
    >>> cfg = NS(env=NS(eval=NS(seed=1000, eval_episodes=40, total_num_envs=16)),
    ...          actor=NS(model=NS(policy=NS(val_micro_batch_size=None))),
    ...          runner=NS(logger=NS(log_path="/tmp/rlinf-doc")))
    >>> ev = Evaluation(cfg)
    >>> [r.index for r in ev.rounds()], ev.forward_batch
    ([0, 1, 2], 40)
"""

from __future__ import annotations

from collections.abc import Callable

from rlinf.utils.eval_episodes import EpisodeLog, EvalRound, episode_metrics, eval_rounds
from rlinf.workers.env.messages import EpisodeStats


class Evaluation:
    """The evaluation of one run (see the module docstring).

    Args:
        cfg: the run's config (``env.eval``, ``actor.model.val_micro_batch_size``,
            ``runner.logger.log_path``).
    """

    def __init__(self, cfg):
        env = cfg.env.eval
        self.seed, self.num_episodes, self.slots = int(env.seed), int(env.eval_episodes), int(env.total_num_envs)
        cap = cfg.actor.model.policy.val_micro_batch_size
        #: rows of every evaluation forward pass: the episode count, capped by val_micro_batch_size
        self.forward_batch = min(self.num_episodes, cap) if cap else self.num_episodes
        self.log = EpisodeLog(cfg.runner.logger.log_path)
        #: the step of the checkpoint the run resumed from (the episode log keeps lines up to it)
        self.resume_step: int | None = None

    def rounds(self) -> list[EvalRound]:
        """The rounds of one evaluation."""
        return [EvalRound(self.seed, self.num_episodes, self.slots, r)
                for r in range(eval_rounds(self.num_episodes, self.slots))]

    def run(self, play: Callable[[EvalRound], EpisodeStats], step: int, only_eval: bool = False) -> dict[str, float]:
        """Play every round (``play(round)``: one eval rollout, returns its stats), write the
        episodes to the log and return the ``eval/`` metrics."""
        records: list[dict] = []
        for rnd in self.rounds():
            records += play(rnd).episodes
        records.sort(key=lambda r: r["episode"])
        if [r["episode"] for r in records] != list(range(self.num_episodes)):
            raise RuntimeError(f"the evaluation returned episodes {[r['episode'] for r in records]}, expected "
                               f"0..{self.num_episodes - 1} once each")
        self.log.write(records, step, only_eval, resume_step=self.resume_step)
        return episode_metrics(records, "eval")
