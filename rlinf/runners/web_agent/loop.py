"""Web-agent RL, one iteration (WebGym's online loop):

    1. tasks        <- ``train_tasks_rollout_size`` train tasks (``train_tasks_sampler``, blocked
                       domains removed), each ``group_size`` times with ``grpo``
    2. rollout      <- multi-turn episodes in real browsers            (env + rollout groups)
    3. judge        <- rule evaluator or LLM judges                     (driver threads)
    4. update       <- filtered SFT on positive steps, or GRPO           (actor group)
    5. weight sync  <- actor rank 0 -> every rollout rank, in place
    6. evaluation   <- test tasks (``test_tasks_rollout_size`` x ``test_tasks_repeat_times``)
                       before the first iteration, every ``runner.test_interval`` iterations and
                       after the last

The schedule around the iteration is the shared one (:class:`~rlinf.runners.schedule.ScheduledRunner`:
evaluations, checkpoints every ``runner.save_interval`` iterations or ``save_interval_secs``
seconds, the ``max_minutes`` limit, the progress bar, the metric logger). Trajectories go to
``<save_path>/train_trajectories/`` and ``<save_path>/test_trajectories/``
(``iteration{K}_rank_{r}.pt``), metrics to ``<save_path>/metrics.jsonl`` (seed 004's rollout
metrics under ``train/`` and ``test/``, the update's under ``actor/``), actor checkpoints to
``<save_path>/checkpoints/global_step_<K>/``. ``runner.resume: auto`` (or ``recover_mode``)
continues after the last complete checkpoint; an iteration whose rollout was interrupted reruns
only its unsaved tasks.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

from rlinf.data.web_tasks import sample_tasks
from rlinf.objectives.web import steps_to_batch
from rlinf.runners import checkpoint as ckpt
from rlinf.runners.schedule import Schedule, ScheduledRunner
from rlinf.runners.trajectory_store import load_iteration
from rlinf.runners.web_agent.metrics import rollout_metrics
from rlinf.runners.web_agent.rollout import run_phase
from rlinf.runners.web_agent.screens import noop_rate
from rlinf.runners.web_agent.update import pool_entries, select_samples, step_batches


def web_schedule(cfg, resume_dir: str | None) -> Schedule:
    """The shared schedule from WebGym's ``runner`` keys (evaluations as ``test_interval``
    says; a rollout-only run saves no checkpoints: its batches are saved as they run)."""
    r = cfg.runner
    return Schedule(label="web_agent", val_interval=r.test_interval if cfg.env_config.evaluates else -1,
                    save_interval=r.save_interval if cfg.trains else -1,
                    save_interval_secs=r.save_interval_secs if cfg.trains else None,
                    max_seconds=r.max_minutes * 60 if r.max_minutes else None, resume_dir=resume_dir,
                    curves_path=os.path.join(cfg.save_path, "curves.png"))


class WebAgentRunner(ScheduledRunner):
    """Drives the launched groups through iterations.

    Args:
        cfg: the run's :class:`~rlinf.config.web.WebAgentConfig`.
        env_urls: one ``{"browser", "site"}`` per env rank.
        policy: ``{"train": ..., "test": ...}``: the batching policies the episodes of each split
            call (evaluation may sample at another temperature).
        actor, rollout: worker groups (None in a rollout-only phase: no update).
        judge: the evaluator (rule or LLM).
        tasks: ``{"train": [...], "test": [...]}``.
        settings: ``{"train": EpisodeSettings, "test": EpisodeSettings}``; limits likewise.
        pad_token_id: for the update's batches.
        logger: a :class:`~rlinf.utils.metric_logger.MetricLogger` (or None).
        service_token: the env ranks' browser servers' bearer token (the run's ``web-service`` token).
        start_iteration: iterations already finished (a resumed run: with an actor, the
            checkpoint of that iteration is loaded by :meth:`run`; a rollout-only run continues
            after its last complete batch).
    """

    BAR_KEYS = {"train": "train/success_rate", "test": "test/success_rate", "loss": "actor/policy_loss"}
    CURVE_KEYS = ("train/success_rate", "test/success_rate", "actor/policy_loss", "actor/sft_loss")
    SUMMARY_KEY = "test/success_rate"

    def __init__(self, cfg, env_urls, policy, actor, rollout, judge, tasks, settings, limits, pad_token_id,
                 logger=None, log=print, start_iteration: int = 0, service_token: str | None = None):
        self.cfg, self.env_urls, self.policy = cfg, env_urls, policy
        self._service_token = service_token
        self.actor, self.rollout, self.judge = actor, rollout, judge
        self.tasks, self.settings, self.limits = tasks, settings, limits
        self.pad_token_id, self.logger, self.log = pad_token_id, logger, log
        self.pool: list[tuple[int, dict]] = []
        self.history: list[dict] = []
        self.total_steps = cfg.runner.iterations
        resume = start_iteration and actor is not None
        self.step = 0 if resume else start_iteration
        self.schedule = web_schedule(cfg, ckpt.step_path(self.checkpoints, start_iteration) if resume else None)

    # -- folders -------------------------------------------------------------------------------
    def _folder(self, split: str) -> str:
        return os.path.join(self.cfg.save_path, f"{split}_trajectories")

    @property
    def checkpoints(self) -> str:
        return os.path.join(self.cfg.save_path, "checkpoints")

    # -- phases --------------------------------------------------------------------------------
    def rollout_phase(self, split: str, iteration: int) -> tuple[list[dict], dict]:
        env = self.cfg.env_config
        rng = random.Random(self.cfg.runner.iteration_seed(iteration) * 2 + (split == "test"))
        if split == "train":
            algo = self.cfg.algorithm_config
            tasks = sample_tasks(self.tasks["train"], "train", size=env.train_tasks_rollout_size,
                                 sampler=env.train_tasks_sampler, rng=rng,
                                 ratios=env.train_tasks_ratio.as_dict() if env.train_tasks_ratio else None,
                                 blocked_domains=env.blocked_domains,
                                 repeat_times=algo.group_size if algo.method == "grpo" else 1)
        else:
            tasks = sample_tasks(self.tasks["test"], "test", size=env.test_tasks_rollout_size, sampler="uniform",
                                 rng=rng, repeat_times=env.test_tasks_repeat_times)
        started = time.monotonic()
        policy = self.policy[split]

        async def phase():
            try:
                return await run_phase(tasks, self.env_urls, policy, self.settings[split], self.limits[split],
                                       self._folder(split), iteration, judge=self.judge, log=self.log,
                                       token=self._service_token)
            finally:  # connections belong to this phase's event loop
                close = getattr(policy.backend, "aclose", None)
                if close is not None:
                    await close()

        trajs = asyncio.run(phase())
        metrics = {f"{split}/{k}": v for k, v in rollout_metrics(trajs).items()}
        if self.limits[split].screenshot_comparison_workers:
            metrics[f"{split}/noop_rate"] = noop_rate(trajs)
        metrics[f"{split}/rollout_seconds"] = time.monotonic() - started
        metrics[f"{split}/trajectories"] = float(len(trajs))
        return trajs, metrics

    def update(self, trajectories: list[dict], iteration: int) -> dict:
        algo = self.cfg.algorithm_config
        rng = random.Random(self.cfg.runner.iteration_seed(iteration))
        self.pool.extend(pool_entries(algo.method, iteration, trajectories))
        steps, adv, val = select_samples(algo.method, trajectories, self.pool, algo, rng)
        ranks = self.actor.world_size
        out = {"actor/samples": float(len(steps)), "actor/val_samples": float(len(val))}
        if not steps:
            out["actor/optimizer_steps"] = 0.0
            return out
        history = []
        for batches, tokens in step_batches(steps, adv, self.pad_token_id, per_device=algo.per_device_train_batch_size,
                                            accumulation=algo.gradient_accumulation_steps, ranks=ranks,
                                            epochs=algo.num_train_epochs, cutoff_len=algo.cutoff_len, rng=rng):
            result = self.actor.execute_each("train_steps", [([b], [tokens]) for b in batches]).wait()
            history.append(result[0][0])
        out["actor/optimizer_steps"] = float(len(history))
        for key in history[-1]:
            out[f"actor/{key}"] = sum(h[key] for h in history) / len(history)
        if val:
            sums = self.actor.execute_each("nll", [(b,) for b in _shards(val, ranks, self.pad_token_id,
                                                                        algo.cutoff_len)]).wait()
            total, count = sum(s for s, _ in sums), sum(n for _, n in sums)
            out["actor/val_loss"] = total / max(count, 1)
        return out

    def sync_weights(self, version: int) -> None:
        receiving = self.rollout.execute("receive_weights", version)
        self.actor.send_weights().wait()
        receiving.wait()

    # -- the schedule's steps ----------------------------------------------------------------------
    def train_step(self) -> dict:
        """One iteration: a train rollout, then (with an actor) the update and the weight sync;
        a rollout-only run collects one batch of ``env_config.split``."""
        it = self.step
        if self.actor is None:
            metrics = self.rollout_phase(self.cfg.env_config.split, it)[1]
        else:
            trajs, metrics = self.rollout_phase("train", it)
            metrics.update(self._update_and_sync(trajs, it))
        self.step = it + 1
        return {"step": float(self.step), **metrics}

    def has_validation(self) -> bool:
        return self.actor is not None and self.cfg.env_config.evaluates

    def validate(self) -> dict:
        return self.rollout_phase("test", self.step)[1]

    def save_checkpoint(self) -> str:
        def write_parts(folder: str) -> None:
            self.actor.execute("save_checkpoint", os.path.join(folder, "actor")).wait()

        return ckpt.save_step(self.checkpoints, self.step, write_parts, {"step": self.step, "metrics": self.history})

    def load_checkpoint(self, path: str) -> None:
        """The actor's state after iteration K (``path``: its ``global_step_<K>`` folder), the
        rollout weights synced to it, the metric history and the positive pool of iterations
        0 .. K-1."""
        folder, _ = ckpt.resume_point(path, self.cfg.runner.resume_unverified)  # the checks every resume makes
        state = ckpt.read_trainer_state(folder)
        self.actor.execute("load_checkpoint", os.path.join(folder, "actor")).wait()
        self.step = int(state["step"])
        self.history = list(state.get("metrics", []))
        self.sync_weights(self.step)
        for k in range(self.step):
            self.pool.extend(pool_entries(self.cfg.algorithm_config.method, k,
                                          load_iteration(self._folder("train"), k)))

    def record(self, metrics: dict) -> None:
        super().record({k: float(v) for k, v in metrics.items()})
        shown = {k: round(float(v), 3) for k, v in metrics.items() if k.endswith(
            ("success_rate", "avg_steps", "sft_loss", "policy_loss", "optimizer_steps"))}
        self.log(f"[web] step {int(metrics['step'])}: {shown}")

    def _update_and_sync(self, trajs, it) -> dict:
        started = time.monotonic()
        out = self.update(trajs, it)
        self.sync_weights(it + 1)
        out["actor/update_seconds"] = time.monotonic() - started
        return out


def _shards(steps, ranks, pad_token_id, cutoff_len):
    return [steps_to_batch(steps[r::ranks], pad_token_id, max_length=cutoff_len) for r in range(ranks)]
