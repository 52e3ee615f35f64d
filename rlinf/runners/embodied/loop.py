"""Embodied RL (PPO with GAE, or GRPO over groups sharing a reset state). One training step:

    1. rollout      <- ``rollout_epoch`` x T policy steps over every train env           (env <-> rollout)
                       T = train episode length / num_action_chunks; stages pipelined
    2. advantages   <- gae: rewards at ``reward_type`` granularity, values, episode ends
                       grpo: episode return of each env vs its group                      (driver)
    3. update       <- ``update_epochs`` x (samples / global_batch_size) optimizer steps  (actor)
    4. weight sync  <- actor rank 0 -> every rollout rank, in place

With ``algorithm.max_head_offpolicyness: 1`` the rollout runs one policy version ahead: the next
training rollout starts (with the weights just synced) before the update of the current batch,
so simulation and the update overlap, and each update learns from data of the previous policy
version (the PPO ratio is taken against the recorded behaviour log-probs). Evaluation and
checkpoints first collect the rollout in flight and sync the newest weights.

Evaluation (deterministic actions on the eval envs, videos when ``env.eval.video_cfg.save_video``)
runs before the first step, every ``runner.val_check_interval`` steps and after the last: the
``env.eval.num_episodes`` seeded episodes of :mod:`rlinf.runners.embodied.evaluation`, the same
outcomes for the same weights whatever the layout, written to ``eval/episodes.jsonl``. With
``env.train.video_cfg.save_video`` the training rollouts feeding the first and every
``val_check_interval``-th update are recorded too (``train_step<N>_rank<r>.mp4``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from rlinf.algorithms.flow_logprob import unpack_step_levels
from rlinf.config.embodied import EmbodiedConfig
from rlinf.data.embodied_batch import EmbodiedBatch, Trajectory
from rlinf.models.embodied.base import ObsSpec
from rlinf.models.embodied.factory import PI0_TYPES
from rlinf.objectives.embodied import embodied_advantages
from rlinf.runners import checkpoint as ckpt
from rlinf.runners.embodied.evaluation import Evaluation
from rlinf.runners.schedule import Schedule, ScheduledRunner
from rlinf.scheduler import Cluster, Mode, PipeLink, PlacementPlan, SchedulerError, TensorLink, WorkerGroup
from rlinf.utils.eval_episodes import EvalRound
from rlinf.utils.metric_logger import MetricLogger
from rlinf.workers.actor.embodied_actor import EmbodiedActorWorker
from rlinf.workers.env.env_worker import EnvWorker
from rlinf.workers.env.messages import ENV_POLICY_PIPE, EpisodeStats
from rlinf.workers.links import POLICY_LINK
from rlinf.workers.rollout.policy_worker import PolicyRolloutWorker

#: running state statistics (``rollout.normalize_states``) beside a saved policy / checkpoint
STATE_NORM_FILE = "state_norm.pt"


def sde_level_metrics(traj: Trajectory, cfg: EmbodiedConfig) -> dict[str, float]:
    """``rollout/noise_level``: the mean Flow-SDE level the step's samples were drawn with, read
    from their stored chains (flow_mlp / pi0 / pi05 with noise_method flow_sde; it moves with
    ``noise_anneal``); no entry for the other policies."""
    model = cfg.actor.model
    if (model.model_type or "").lower() not in ("flow_mlp",) + PI0_TYPES or model.policy.noise_method != "flow_sde":
        return {}
    raw = traj.raw_actions.reshape(-1, *traj.raw_actions.shape[2:])
    levels = unpack_step_levels(raw, model.policy.num_steps).amax(dim=1)
    return {"rollout/noise_level": float(levels.mean())}


@dataclass
class EmbodiedGroups:
    """The launched env, rollout and actor groups and the observation spec they agreed on."""

    env: WorkerGroup
    rollout: WorkerGroup
    actor: WorkerGroup
    obs_spec: ObsSpec
    actor_rollout_mode: Mode = Mode.DISAGGREGATED
    env_actor_mode: Mode = Mode.DISAGGREGATED

    def shutdown(self) -> None:
        try:
            self.env.execute("close").wait(timeout=60)
        except SchedulerError:
            pass  # a dead or stuck env worker: killing the group below ends its simulators too
        finally:
            for group in (self.env, self.rollout, self.actor):
                group.shutdown()


def launch_embodied_groups(cfg: EmbodiedConfig, cluster: Cluster, plan: PlacementPlan) -> EmbodiedGroups:
    """Start env workers (which report the observation spec), then rollout and actor groups
    sized from it; a pipe from every env worker to the rollout worker that serves it, a tensor
    link actor -> rollout.

    Start-up overlaps what it can: the eval simulators start in the background while the train
    simulators report the spec (when the run evaluates), and the rollout and actor processes
    start together."""
    stages, model = cfg.rollout.pipeline_stage_num, cfg.actor.model
    env = WorkerGroup.launch(cluster, EnvWorker, plan.component("env"), name=cfg.env.group_name,
                             args=(cfg.env, stages, model.policy.num_action_chunks))
    launched = [env]
    try:
        if cfg.runner.val_check_interval > 0 or cfg.runner.only_eval:
            env.execute("prepare", "eval").wait()
        obs_spec = env.execute("obs_spec", ranks=[0]).wait()[0]
        temperature = cfg.algorithm.sampling_params.temperature
        norm_clip = cfg.rollout.state_norm_clip if cfg.rollout.normalize_states else None
        rollout = WorkerGroup.launch(cluster, PolicyRolloutWorker, plan.component("rollout"),
                                     name=cfg.rollout.group_name,
                                     args=(model, obs_spec, env.world_size, stages, temperature, norm_clip,
                                           cfg.runner.max_prompt_length),
                                     wait=False)
        launched.append(rollout)
        actor = WorkerGroup.launch(cluster, EmbodiedActorWorker, plan.component("actor"), name=cfg.actor.group_name,
                                   args=(cfg.actor, cfg.algorithm, obs_spec, cfg.critic.value_clip,
                                         cfg.planned_optimizer_steps), wait=False)
        launched.append(actor)
        rollout.wait_started()
        actor.wait_started()
        PipeLink.connect(ENV_POLICY_PIPE, env, rollout,
                         pairs=[(e, e % rollout.world_size) for e in range(env.world_size)])
        TensorLink.connect(POLICY_LINK, actor, 0, rollout)
    except BaseException:
        for group in launched:
            group.shutdown()
        raise
    return EmbodiedGroups(env, rollout, actor, obs_spec, plan.mode("actor", "rollout"),
                          plan.mode("env", "actor"))


class EmbodiedRunner(ScheduledRunner):
    """Drives env, rollout and actor groups through training steps and evaluations.

    Args:
        cfg: the run's config.
        groups: launched groups (:func:`launch_embodied_groups`).
        logger: where :meth:`fit` writes metrics (None: nowhere).
    """

    BAR_KEYS = {"train_sr": "env/success_rate", "eval_sr": "eval/success_rate", "s/step": "time/step"}
    CURVE_KEYS = ("env/success_rate", "eval/success_rate", "env/episode_return", "actor/value_loss")
    SUMMARY_KEY = "eval/success_rate"
    SUMMARY_REPORTED_KEY = "eval/success_reported"  # 0: the env reports no success (gymnasium)

    def __init__(self, cfg: EmbodiedConfig, groups: EmbodiedGroups, logger: MetricLogger | None = None):
        self.cfg, self.groups, self.logger = cfg, groups, logger
        self.schedule = Schedule.from_runner(cfg.runner)
        self.step = 0
        self.total_steps = cfg.runner.max_steps if cfg.runner.max_steps > 0 else cfg.runner.max_epochs
        self.history: list[dict[str, float]] = []
        # actor and rollout sharing devices take turns when asked to (actor/rollout.enable_offload)
        shared = groups.actor_rollout_mode != Mode.DISAGGREGATED
        self.offload_actor = shared and cfg.actor.enable_offload
        self.offload_rollout = shared and bool(cfg.rollout.enable_offload)  # null = no
        # env workers sharing a device with the actor release their simulators after each rollout
        self.offload_env = groups.env_actor_mode != Mode.DISAGGREGATED and cfg.env.enable_offload
        self._rollouts = 0
        self.ahead = cfg.algorithm.max_head_offpolicyness  # 0 or 1 (EmbodiedConfig checks it)
        self._in_flight = None  # a train rollout started ahead of the update (ahead == 1)
        self._collected = None  # its result, collected early (evaluation, checkpoint)
        self._synced = -1       # the actor step the rollout workers hold
        self.evaluation = Evaluation(cfg)
        self.sync_weights()  # the rollout group starts from the actor's initial weights

    # ---- one training step ------------------------------------------------------------------
    def train_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        parts, stats = [], EpisodeStats()
        if self.ahead:                                                                        # 1
            parts, stats, version = self._collect() if self._collected is None else self._collected
            self._collected = None
            staleness = self.step - version
            self._sync_if_stale()
            if self.step + 1 < self.total_steps:  # the next step's data, simulated during the update
                self._in_flight = self._start_rollout("train", seed=self.cfg.runner.seed + self._rollouts,
                                                      record=True, video_name=self._train_video(self.step + 2))
        else:
            staleness = 0
            for epoch in range(self.cfg.algorithm.rollout_epoch):
                video = self._train_video(self.step + 1) if epoch == 0 else None
                traj_parts, epoch_stats = self.rollout("train", seed=self.cfg.runner.seed + self._rollouts,
                                                       record=True, video_name=video)
                parts += traj_parts
                stats = stats.merge(epoch_stats)
        traj = Trajectory.concat_envs(parts)
        t_rollout = time.perf_counter() - t0
        advantages, returns = embodied_advantages(traj, self.cfg.algorithm, self.cfg.env.train.group_size)  # 2
        batch = traj.to_batch(advantages, returns)
        t1 = time.perf_counter()
        actor_metrics = self.update(batch)                                                    # 3
        t_update = time.perf_counter() - t1
        self.step += 1
        t2 = time.perf_counter()
        if not self.ahead:
            self.sync_weights()                                                               # 4
        steps = traj.num_steps * traj.num_envs * traj.raw_actions.shape[2]
        elapsed = time.perf_counter() - t0
        return {**stats.metrics("env"), **actor_metrics, "step": float(self.step),
                "advantage/mean": float(advantages.mean()), "advantage/std": float(advantages.std()),
                "reward/step_mean": float(traj.rewards.sum(-1).mean()),
                **sde_level_metrics(traj, self.cfg),
                "rollout/staleness": float(staleness), "time/rollout": t_rollout, "time/update": t_update,
                "time/sync": time.perf_counter() - t2, "time/step": elapsed,
                # ahead: the rollout ran during the last update, so the whole step is its cycle
                "throughput/env_steps_per_s": steps / max(elapsed if self.ahead else t_rollout, 1e-9)}

    def rollout(self, split: str, seed: int, record: bool, video_name: str | None = None,
                eval_round: EvalRound | None = None) -> tuple[list[Trajectory], EpisodeStats]:
        """One pass of ``split``'s envs: env workers step, rollout workers act (pipelined);
        ``eval_round``: the envs play that round of the evaluation's episodes."""
        return self._finish_rollout(self._start_rollout(split, seed, record, video_name, eval_round))

    def _start_rollout(self, split: str, seed: int, record: bool, video_name: str | None = None,
                       eval_round: EvalRound | None = None) -> tuple:
        env_cfg = self.cfg.env.train if split == "train" else self.cfg.env.eval
        steps = -(-(env_cfg.episode_steps or 50) // self.cfg.actor.model.policy.num_action_chunks)
        tag = f"{split}{self._rollouts}"
        self._rollouts += 1
        if self.offload_actor:
            self.groups.actor.offload().wait()
        env_call = self.groups.env.execute("run", split, tag, steps, seed, video_name, True, eval_round)
        roll_call = self.groups.rollout.execute("run", tag, steps, seed, split == "eval", record,
                                                None if eval_round is None else self.evaluation.forward_batch)
        return env_call, roll_call, self._synced

    def _collect(self) -> tuple[list[Trajectory], EpisodeStats, int]:
        """The train rollout in flight (started now if there is none): trajectories, episode
        statistics and the actor step whose weights acted."""
        handle, self._in_flight = self._in_flight, None
        if handle is None:
            handle = self._start_rollout("train", seed=self.cfg.runner.seed + self._rollouts, record=True,
                                         video_name=self._train_video(self.step + 1))
        return (*self._finish_rollout(handle), handle[2])

    def _train_video(self, update: int) -> str | None:
        """``env.train.video_cfg.save_video``: the name of the video of the training rollout that
        feeds update number ``update`` — the first one and every ``runner.val_check_interval``-th
        (every 10th when evaluation is off) — else None."""
        if not self.cfg.env.train.video_cfg.save_video:
            return None
        every = self.cfg.runner.val_check_interval if self.cfg.runner.val_check_interval > 0 else 10
        return f"train_step{update}" if update == 1 or update % every == 0 else None

    def _settle(self) -> None:
        """Collect a rollout in flight (kept for the next step) and sync the newest weights, so
        the rollout workers are idle and current (before evaluation and checkpoints)."""
        if self._in_flight is not None:
            self._collected = self._collect()
        self._sync_if_stale()

    def _finish_rollout(self, handle: tuple) -> tuple[list[Trajectory], EpisodeStats]:
        env_call, roll_call, _ = handle
        trajs = roll_call.wait()
        if self.offload_rollout:
            self.groups.rollout.offload().wait()
        if self.offload_env:
            self.groups.env.offload().wait()
        if self.offload_actor:
            self.groups.actor.onload().wait()
        stats = EpisodeStats()
        for s in env_call.wait():
            stats = stats.merge(s)
        return [t for t in trajs if t is not None], stats

    def update(self, batch: EmbodiedBatch) -> dict[str, float]:
        actor = self.groups.actor
        num_minibatches = batch.size // self.cfg.actor.global_batch_size
        shards = batch.split(actor.world_size)
        return actor.execute_each("update", [(s, num_minibatches) for s in shards]).wait()[0]

    def _sync_if_stale(self) -> None:
        if self._synced != self.step:  # else the rollout workers hold this step's weights already
            self.sync_weights()

    def sync_weights(self) -> None:
        receiving = self.groups.rollout.execute("receive_weights", self.step)
        self.groups.actor.send_weights().wait()
        receiving.wait()
        self._synced = self.step

    # ---- evaluation ---------------------------------------------------------------------------
    def validate(self) -> dict[str, float]:
        """Deterministic actions on the evaluation's episodes (:class:`Evaluation`: the same
        episodes every time, in rounds of ``env.eval.total_num_envs``; the first round filmed
        when ``env.eval.video_cfg.save_video``)."""
        self._settle()
        video = self.cfg.env.eval.video_cfg.save_video

        def play(rnd: EvalRound) -> EpisodeStats:
            name = f"eval_step{self.step}" if video and rnd.index == 0 else None
            return self.rollout("eval", seed=self.cfg.env.eval.seed, record=False, video_name=name,
                                eval_round=rnd)[1]

        return self.evaluation.run(play, self.step, self.schedule.only_eval)

    # ---- checkpoints and outputs --------------------------------------------------------------
    @property
    def run_dir(self) -> str:
        """``<runner.output_dir>/<runner.experiment_name>``: checkpoints and the saved policy."""
        return os.path.join(self.cfg.runner.output_dir, self.cfg.runner.experiment_name)

    def save_checkpoint(self) -> str:
        """Actor state, the state statistics and the driver's state at the current step, whole or
        not at all (:func:`~rlinf.runners.checkpoint.save_step`); returns the step folder."""
        self._settle()

        def write_parts(folder: str) -> None:
            self.groups.actor.save_checkpoint(os.path.join(folder, "actor")).wait()
            self._save_state_norm(folder)

        return ckpt.save_step(os.path.join(self.run_dir, "checkpoints"), self.step, write_parts,
                              {"step": self.step, "rollouts": self._rollouts, "history": self.history})

    def load_checkpoint(self, path: str) -> None:
        step_dir, _ = ckpt.resume_point(path, self.cfg.runner.resume_unverified)  # the checks every resume makes
        state = ckpt.read_trainer_state(step_dir)
        self.groups.actor.load_checkpoint(os.path.join(step_dir, "actor")).wait()
        norm_file = os.path.join(step_dir, STATE_NORM_FILE)
        if os.path.isfile(norm_file):
            self.groups.rollout.load_state_norm(torch.load(norm_file, weights_only=True)).wait()
        self.step, self._rollouts = int(state["step"]), int(state["rollouts"])
        self.history = list(state["history"])
        self.evaluation.resume_step = self.step
        self.sync_weights()

    def export(self) -> str:
        return self.save_policy()

    def save_policy(self, path: str | None = None) -> str:
        """The trained policy as a model folder (default ``<run>/policy``)."""
        path = path or os.path.join(self.run_dir, "policy")
        self.groups.actor.save_policy(path).wait()
        self._save_state_norm(path)
        return path

    def _save_state_norm(self, folder: str) -> None:
        """``rollout.normalize_states``: rollout rank 0's running state statistics to
        ``<folder>/state_norm.pt`` (the policy expects states normalised with them)."""
        if self.cfg.rollout.normalize_states:
            state = self.groups.rollout.execute("state_norm_state", ranks=[0]).wait()[0]
            if state is not None:
                torch.save(state, os.path.join(folder, STATE_NORM_FILE))

    def close(self) -> None:
        """Collect a rollout still in flight (a run stopped early); the pipes close with the
        groups (``EmbodiedGroups.shutdown``)."""
        if self._in_flight is not None:
            try:
                self._collect()
            except SchedulerError:
                pass  # the run is failing anyway; shutdown reports nothing more
