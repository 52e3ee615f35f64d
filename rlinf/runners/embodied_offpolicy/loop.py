"""Off-policy embodied RL (SAC, CrossQ, RLPD) on a replay buffer. One training step:

    sync (``runner.rollout_mode: sync``)
    1. collect  <- T = env.train.max_steps_per_rollout_epoch policy steps of every train env
                   (env <-> rollout); transitions (s, a, r, s', terminated) -> channel -> buffer
    2. update   <- update_epoch x [critic step, an actor + alpha step every critic_actor_ratio,
                   Polyak targets] on batches of actor.global_batch_size (RLPD: half demos);
                   none until the buffer holds replay_buffer.min_buffer_size          (actor)
    3. weights  <- actor -> rollout (tensor link) every weight_sync_interval steps

    async (``runner.rollout_mode: async``)
    1. collect  <- never waits: the next segment of T steps starts as soon as one ends
    2. update   <- the actor takes what arrived, waiting only until it holds what sync would
                   have collected by now (so the update-to-data ratio never exceeds sync's), then
                   update_epoch updates
    3. weights  <- pushed on the channel every weight_sync_interval steps; each rollout worker
                   loads them before its next policy step; staleness = versions behind

    async + ``runner.deterministic: true`` (a fixed lockstep; chunk = one collection)
    1. collect  <- chunk k+1 runs while update k does, acting with the weights sent (tensor link,
                   every weight_sync_interval steps) after update k-1, before the chunk starts
    2. update   <- update k takes exactly the transitions of chunks 0..k: it waits for chunk k
                   and holds back chunk k+1 if it arrived already; then update_epoch updates
    so the buffer's rows, each update's data and each chunk's weights do not depend on timing.

Episodes run on across collections (env workers' ``run(..., reset=False)``); every transition's
``s'`` is the observation the step ended in, also where an auto-reset started the next episode
(``ObsMessage.final_states``). Evaluation (deterministic actions, the eval envs, the newest
weights) runs before the first step, every ``runner.val_check_interval`` steps and after the
last; checkpoints hold the learner and the buffer (the async mode settles first: the segment in
flight is collected and everything on the channel taken into the buffer).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlinf.runners import checkpoint as ckpt
from rlinf.runners.embodied.evaluation import Evaluation
from rlinf.runners.embodied.loop import EmbodiedGroups
from rlinf.runners.schedule import Schedule, ScheduledRunner
from rlinf.scheduler import Channel, Cluster, PipeLink, PlacementPlan, SchedulerError, TensorLink, WorkerGroup
from rlinf.scheduler.group_call import wait_first
from rlinf.utils.metric_logger import MetricLogger
from rlinf.workers.actor.offpolicy_actor import OffPolicyActorWorker
from rlinf.workers.env.env_worker import EnvWorker
from rlinf.workers.env.messages import ENV_POLICY_PIPE, EpisodeStats
from rlinf.workers.links import POLICY_LINK
from rlinf.workers.rollout.offpolicy_rollout import OffPolicyRolloutWorker


@dataclass
class OffPolicyGroups(EmbodiedGroups):
    """The embodied recipe's env, rollout and actor groups plus the run's channel (transitions in,
    pushed weights out), closed after the groups."""

    channel: Any = None

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            try:
                self.channel.close()
            except Exception:  # noqa: BLE001 - Ray may already be going down
                pass


def launch_offpolicy_groups(start, cluster: Cluster, plan: PlacementPlan) -> OffPolicyGroups:
    """Env workers (which report the observation spec), then the rollout workers (the SAC actor)
    and the actor worker (learner + buffers) sized from it; pipes env <-> rollout, the weight link
    actor -> rollout, and one channel for transitions (rollout -> actor) and pushed weights."""
    cfg = start.cfg
    stages, model, algo = cfg.rollout.pipeline_stage_num, cfg.actor.model, cfg.algorithm
    env = WorkerGroup.launch(cluster, EnvWorker, plan.component("env"), name=cfg.env.group_name,
                             args=(cfg.env, stages, 1))
    launched: list = [env]
    channel = None
    try:
        if cfg.runner.val_check_interval > 0 or cfg.runner.only_eval:
            env.execute("prepare", "eval").wait()
        obs_spec = env.execute("obs_spec", ranks=[0]).wait()[0]
        channel = Channel.create(f"{cfg.actor.channel.name}-{uuid.uuid4().hex[:8]}")
        queue = cfg.actor.channel.queue_name
        seed = cfg.actor.seed + cfg.runner.seed
        rollout = WorkerGroup.launch(cluster, OffPolicyRolloutWorker, plan.component("rollout"),
                                     name=cfg.rollout.group_name,
                                     args=(model, obs_spec, env.world_size, stages, channel, queue, algo.n_step,
                                           algo.gamma, seed), wait=False)
        launched.append(rollout)
        action_dim = int(model.policy.action_dim)
        low, high = obs_spec.bounds(action_dim)
        actor = WorkerGroup.launch(cluster, OffPolicyActorWorker, plan.component("actor"), name=cfg.actor.group_name,
                                   args=(obs_spec.state_dim, action_dim, start.learner, start.buffer, low.tolist(),
                                         high.tolist(), seed, start.demos),
                                   kwargs={"channel": channel, "queue": queue,
                                           "rollout_world_size": plan.component("rollout").world_size,
                                           "bootstrap_always": algo.bootstrap_type == "always",
                                           "threads": learner_threads(cfg.runner, cluster, plan)}, wait=False)
        launched.append(actor)
        rollout.wait_started()
        actor.wait_started()
        PipeLink.connect(ENV_POLICY_PIPE, env, rollout,
                         pairs=[(e, e % rollout.world_size) for e in range(env.world_size)])
        TensorLink.connect(POLICY_LINK, actor, 0, rollout)
    except BaseException:
        for group in launched:
            group.shutdown()
        if channel is not None:
            channel.close()
        raise
    return OffPolicyGroups(env, rollout, actor, obs_spec, channel=channel)


def learner_threads(runner, cluster: Cluster, plan: PlacementPlan) -> int | None:
    """Torch threads of the actor process: ``runner.learner_threads``, else in sync mode every
    core of its node (the env and rollout workers wait while it updates) and in async mode its
    slots' share (they simulate meanwhile). None on the local backend (one process: its executor
    shares the cores per call).

    Example:
        >>> from types import SimpleNamespace as NS
        >>> learner_threads(NS(learner_threads=3, rollout_mode="sync"), NS(backend=NS(in_process=False)), None)
        3
        >>> learner_threads(NS(learner_threads=3, rollout_mode="sync"), NS(backend=NS(in_process=True)), None) is None
        True
    """
    if cluster.backend.in_process:
        return None
    if runner.learner_threads is not None:
        return runner.learner_threads
    proc = plan.component("actor").processes[0]
    node = cluster.node(proc.node)
    return node.num_cpus if runner.rollout_mode == "sync" else node.threads_for(len(proc.accelerators))


class OffPolicyRunner(ScheduledRunner):
    """Drives the off-policy loop (see the module docstring).

    Args:
        cfg: the run's :class:`~rlinf.config.embodied_offpolicy.OffPolicyEmbodiedConfig`.
        groups: :func:`launch_offpolicy_groups`.
        logger: where :meth:`fit` writes metrics (None: nowhere).
        print_fn: start-up lines (the buffer's memory).
    """

    BAR_KEYS = {"eval_sr": "eval/success_rate", "q": "actor/q_mean", "sps": "throughput/env_steps_per_s"}
    CURVE_KEYS = ("env/success_rate", "eval/success_rate", "env/episode_return", "actor/critic_loss", "actor/q_mean",
                  "actor/alpha")
    SUMMARY_KEY = "eval/success_rate"
    SUMMARY_REPORTED_KEY = "eval/success_reported"  # 0: the env reports no success (gymnasium)

    def __init__(self, cfg, groups: OffPolicyGroups, logger: MetricLogger | None = None,
                 print_fn: Callable = print):
        self.cfg, self.groups, self.logger = cfg, groups, logger
        self.schedule = Schedule.from_runner(cfg.runner)
        self.step = 0
        self.total_steps = cfg.runner.max_steps if cfg.runner.max_steps > 0 else cfg.runner.max_epochs
        self.history: list[dict[str, float]] = []
        self.async_mode = cfg.runner.rollout_mode == "async"
        self.deterministic = cfg.runner.deterministic  # async: the lockstep (sync mode is one already)
        self.T = cfg.rollout_steps
        self.rows_per_collection = self.T * cfg.env.train.total_num_envs
        self.env_steps = 0            # env steps of finished collections
        self._started_steps = 0       # env steps of collections started (uniform warm-up decision)
        self._rollouts = 0            # rollout tags used (train segments and evaluations)
        self._segment = None          # async: the collection in flight (env call, rollout call)
        self._stats = EpisodeStats()  # episodes finished since the last step's metrics
        self._rollout_version = 0     # weights the rollout workers act with
        self._rows_base = 0           # transitions the buffer had received when this fit began
        self.evaluation = Evaluation(cfg)  # the seeded eval episodes and eval/episodes.jsonl
        counters = groups.actor.execute("counters").wait()[0]
        self._actor_version = counters["version"]
        self._chunks = int(counters["chunks"])  # train collections started (their numbers: 0, 1, ...)
        print_fn(f"[rlinf] replay buffer: {counters['capacity']} transitions of {counters['row_floats']} numbers, "
                 f"{counters['memory_mb']:.2f} MiB preallocated in the actor process"
                 + (f"; {counters['demos']} demonstration transitions" if counters["demos"] else ""))
        self.sync_weights()

    # ---- one training step -----------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        steps_before = self.env_steps
        sync_s = 0.0
        if self.async_mode and self.deterministic:
            actor_metrics, t_rollout, sync_s = self._lockstep_update()                               # 1-3
        elif self.async_mode:
            actor_metrics = self._async_update()                                                     # 1, 2
            t_rollout = 0.0
        else:
            self._finish_segment(self._start_segment())                                               # 1
            t_rollout = time.perf_counter() - t0
            actor_metrics = self.groups.actor.execute("train_step", self.cfg.algorithm.update_epoch,
                                                      upto=self._chunks - 1).wait()[0]                # 2
            self._actor_version = int(actor_metrics["actor/version"])
            if (self.step + 1) % self.cfg.runner.weight_sync_interval == 0:                          # 3
                t_sync = time.perf_counter()
                self.sync_weights()
                sync_s = time.perf_counter() - t_sync
        self.step += 1
        elapsed = time.perf_counter() - t0
        stats, self._stats = self._stats, EpisodeStats()
        steps = self.env_steps - steps_before
        return {**stats.metrics("env"), **actor_metrics, "step": float(self.step), "time/step": elapsed,
                "time/rollout": t_rollout, "time/sync": sync_s,
                "throughput/env_steps_per_s": steps / max(elapsed, 1e-9),
                "throughput/env_steps_total": float(self.env_steps),
                "rollout/version": float(self._rollout_version)}

    def _async_update(self) -> dict[str, float]:
        """Async steps 1-2: keep the collections going while the actor's step runs."""
        if self._segment is None:
            self._segment = self._start_segment()
        min_rows = self._rows_base + (self.step + 1) * self.rows_per_collection
        update = self.groups.actor.execute("train_step", self.cfg.algorithm.update_epoch, 0, min_rows,
                                           self.cfg.runner.weight_sync_interval, self.step)
        while True:
            # Checked before waiting: the collection may have finished while the previous update
            # ran on. Waiting on the update alone then would deadlock, since the update waits for
            # rows that only the next collection brings (seen: a hang at the 4th step).
            if all(c.done() for c in self._segment):  # the collection finished: start the next
                self._finish_segment(self._segment)
                self._segment = self._start_segment()
            if update.done():
                metrics = update.wait()[0]
                self._actor_version = int(metrics["actor/version"])
                return metrics
            pending = [c for c in self._segment if not c.done()]
            if pending:  # else the collection ended since the check above: go round and start the next
                wait_first([update, *pending])  # (the likely cause of a hang seen at step 22, load ~40)

    def _lockstep_update(self) -> tuple[dict[str, float], float, float]:
        """Async steps 1-3 with ``runner.deterministic`` (see the module docstring): finish chunk
        ``step`` (started during the previous step), send the weights of the last update when due,
        start chunk ``step + 1`` and run update ``step`` on chunks 0..``step`` meanwhile. Returns
        the update's metrics, the seconds spent waiting for the chunk and sending weights."""
        k = self.step
        t0 = time.perf_counter()
        if self._segment is not None:
            self._finish_segment(self._segment)
            self._segment = None
        while self._chunks < k + 1:  # the first step: nothing collected yet to overlap with
            self._finish_segment(self._start_segment())
        t1 = time.perf_counter()
        if k % self.cfg.runner.weight_sync_interval == 0 and self._rollout_version < self._actor_version:
            self.sync_weights()  # the rollout side is idle now: chunk k+1 acts with update k-1's weights
        t2 = time.perf_counter()
        self._segment = self._start_segment()
        metrics = self.groups.actor.execute("train_step", self.cfg.algorithm.update_epoch, upto=k).wait()[0]
        self._actor_version = int(metrics["actor/version"])
        return metrics, t1 - t0, t2 - t1

    def _start_segment(self) -> tuple:
        """Start one collection (chunk) of ``T`` policy steps (env workers continue their episodes)."""
        cfg = self.cfg
        tag = f"train{self._rollouts}"
        seed = cfg.runner.seed + self._rollouts
        self._rollouts += 1
        uniform = cfg.algorithm.uniform_warmup and self._started_steps < cfg.algorithm.replay_buffer.min_buffer_size
        self._started_steps += self.rows_per_collection
        chunk, self._chunks = self._chunks, self._chunks + 1
        env_call = self.groups.env.execute("run", "train", tag, self.T, seed, None, False)
        roll_call = self.groups.rollout.execute("collect", tag, self.T, seed, uniform,
                                                self.async_mode and not self.deterministic, chunk)
        return env_call, roll_call

    def _finish_segment(self, segment: tuple) -> None:
        env_call, roll_call = segment
        results = roll_call.wait()
        for s in env_call.wait():
            self._stats = self._stats.merge(s)
        self.env_steps += sum(r["env_steps"] for r in results)
        self._rollout_version = min(r["version"] for r in results)

    def _settle(self) -> None:
        """Async: collect the segment in flight and load the pushed weights; then, if the rollout
        workers are behind the actor, sync them: the rollout side is idle and current."""
        if self._segment is not None:
            self._finish_segment(self._segment)
            self._segment = None
        if self.async_mode:
            self._rollout_version = min(self.groups.rollout.execute("poll_weights").wait())
        if self._rollout_version < self._actor_version:
            self.sync_weights()

    def sync_weights(self) -> None:
        """Actor -> every rollout worker over the tensor link (with the learner's policy version)."""
        receiving = self.groups.rollout.execute("receive_weights", self._actor_version)
        self.groups.actor.send_weights().wait()
        receiving.wait()
        self._rollout_version = self._actor_version

    # ---- evaluation ---------------------------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        """Deterministic actions on the evaluation's seeded episodes
        (:class:`~rlinf.runners.embodied.evaluation.Evaluation`), one eval rollout per round."""
        self._settle()
        env_cfg = self.cfg.env.eval
        steps = env_cfg.episode_steps or 50

        def play(rnd) -> EpisodeStats:
            tag = f"eval{self._rollouts}"
            self._rollouts += 1
            video = f"eval_step{self.step}" if env_cfg.video_cfg.save_video and rnd.index == 0 else None
            env_call = self.groups.env.execute("run", "eval", tag, steps, env_cfg.seed, video, True, rnd)
            self.groups.rollout.execute("run", tag, steps, env_cfg.seed, True, False,
                                        self.evaluation.forward_batch).wait()
            stats = EpisodeStats()
            for s in env_call.wait():
                stats = stats.merge(s)
            return stats

        return self.evaluation.run(play, self.step, self.schedule.only_eval)

    # ---- checkpoints and outputs --------------------------------------------------------------------
    @property
    def run_dir(self) -> str:
        return os.path.join(self.cfg.runner.output_dir, self.cfg.runner.experiment_name)

    def save_checkpoint(self) -> str:
        """The learner, its buffer (everything on the channel taken in first) and the driver's
        counters at the current step, whole or not at all."""
        if self._segment is not None:  # the weights stay as they are: a save does not change the run
            self._finish_segment(self._segment)
            self._segment = None
        self.groups.actor.execute("ingest").wait()

        def write_parts(folder: str) -> None:
            self.groups.actor.save_checkpoint(os.path.join(folder, "actor")).wait()

        return ckpt.save_step(os.path.join(self.run_dir, "checkpoints"), self.step, write_parts,
                              {"step": self.step, "rollouts": self._rollouts, "env_steps": self.env_steps,
                               "history": self.history})

    def load_checkpoint(self, path: str) -> None:
        step_dir, _ = ckpt.resume_point(path, self.cfg.runner.resume_unverified)  # the checks every resume makes
        state = ckpt.read_trainer_state(step_dir)
        self.groups.actor.load_checkpoint(os.path.join(step_dir, "actor")).wait()
        counters = self.groups.actor.execute("counters").wait()[0]
        self.step, self._rollouts = int(state["step"]), int(state["rollouts"])
        self.env_steps = self._started_steps = int(state.get("env_steps", 0))
        self.history = list(state["history"])
        self.evaluation.resume_step = self.step
        self._actor_version = counters["version"]
        self._chunks = int(counters["chunks"])
        self.sync_weights()

    def fit(self, print_fn=print) -> dict[str, float]:
        self._rows_base = self.groups.actor.execute("counters").wait()[0]["received"] - \
            self.step * self.rows_per_collection
        return super().fit(print_fn)

    def export(self) -> str:
        path = os.path.join(self.run_dir, "policy")
        self.groups.actor.execute("save_policy", path).wait()
        return path

    def close(self) -> None:
        """Collect a segment still in flight (a run stopped early)."""
        if self._segment is not None:
            try:
                self._finish_segment(self._segment)
            except SchedulerError:
                pass  # the run is failing anyway
            self._segment = None
