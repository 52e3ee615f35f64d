"""The env worker: steps its share of the simulators, stage by stage, against the rollout workers.

Each env worker holds ``total_num_envs / (env processes x pipeline_stage_num)`` environments per
stage. A rollout runs ``T`` policy steps; in each, for every stage in turn, the worker receives
that stage's action chunk from its rollout worker, executes its ``K`` actions and sends the next
observations back. With two stages the simulator steps stage A while the policy computes stage B's
actions — the env / policy pipeline. The messages travel over a direct pipe to the rollout worker
(:data:`ENV_POLICY_PIPE`, one TCP connection per env worker; see :mod:`rlinf.scheduler.pipe`): a
round trip costs tens of microseconds, so the pipeline is bound by the simulator and the policy,
not by messaging. A failure on either side is sent through the pipe, so the partner raises at once.

Every message after a chunk carries ``final_states``: the state observation in which each episode
that ended during the chunk ended, so off-policy transitions ``(s, a, r, s')`` stay exact across
auto-resets. ``run(..., reset=False)`` continues the live episodes of the previous rollout of that
split instead of resetting (off-policy collection in short segments; needs ``auto_reset``).

An evaluation round (``run(..., eval_round=EvalRound)``) resets every environment into the
initial state of the episode its slot plays (:class:`~rlinf.utils.eval_episodes.EvalRound`;
global slot = (rank x stages + stage) x envs per stage + row), sends the episode seeds with the
first observations, plays one episode per environment (padding rows idle from the start) and
returns each episode's record in ``EpisodeStats.episodes``.
"""

from __future__ import annotations

import traceback
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from rlinf.config.env import EnvConfig, EnvSectionConfig
from rlinf.engines.simulators import make_vector_env
from rlinf.engines.simulators.base import EnvObs, VectorEnv
from rlinf.engines.simulators.video import VideoRecorder
from rlinf.models.embodied.base import ObsSpec
from rlinf.scheduler import Worker
from rlinf.utils.eval_episodes import EvalRound, episode_state_id
from rlinf.workers.env.messages import ENV_POLICY_PIPE, EpisodeStats, ObsMessage, action_key, obs_key


class EnvWorker(Worker):
    """One env process.

    Args:
        cfg: the ``env:`` section.
        stages: ``rollout.pipeline_stage_num``.
        num_action_chunks: ``K``, actions per policy step.
    """

    def __init__(self, cfg: EnvSectionConfig, stages: int, num_action_chunks: int):
        self.cfg, self.stages, self.num_action_chunks = cfg, stages, num_action_chunks
        self._envs: dict[str, list[VectorEnv]] = {}
        self._pending: dict[str, Future] = {}
        self._live: dict[str, dict[int, EnvObs]] = {}  # split -> stage -> observations to act on next
        self._background = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sim-build")
        self._built = 0

    def _split_cfg(self, split: str) -> EnvConfig:
        return self.cfg.train if split == "train" else self.cfg.eval

    def envs(self, split: str) -> list[VectorEnv]:
        """This worker's simulators of ``split`` (``train`` / ``eval``), one batch per stage
        (built now, or collected from :meth:`prepare`)."""
        if split not in self._envs:
            pending = self._pending.pop(split, None)
            self._envs[split] = pending.result() if pending is not None else self._build(split)
            self._built += 1
        return self._envs[split]

    def prepare(self, split: str) -> None:
        """Start building ``split``'s simulators in the background and return at once; the next
        :meth:`envs` (a rollout) collects them. Simulator processes start in parallel with
        whatever this worker and the other groups do meanwhile (e.g. the eval simulators while
        the rollout and actor workers start). Errors surface at that next use. Simulators living
        in this process (toy, ``sim_in_worker``, GPU) are not built from a second thread: for them
        this does nothing and the next use builds them."""
        if split not in self._envs and split not in self._pending and _process_based(self._split_cfg(split)):
            self._pending[split] = self._background.submit(self._build, split)

    def _build(self, split: str) -> list[VectorEnv]:
        """One simulator batch per stage; process-based simulators (ManiSkill on CPU, LIBERO)
        start all their processes at once instead of one stage after another."""
        cfg = self._split_cfg(split)
        per_stage = cfg.total_num_envs // (self.world_size * self.stages)
        ranks = [self.rank * self.stages + s for s in range(self.stages)]
        if self.stages == 1 or not _process_based(cfg):
            return [make_vector_env(cfg, per_stage, rank=r) for r in ranks]
        with ThreadPoolExecutor(max_workers=self.stages, thread_name_prefix=f"{split}-stage") as pool:
            futures = [pool.submit(make_vector_env, cfg, per_stage, rank=r) for r in ranks]
        built, errors = [], []
        for future in futures:
            try:
                built.append(future.result())
            except BaseException as exc:  # noqa: BLE001 - re-raised below, after closing the rest
                errors.append(exc)
        if errors:
            for env in built:
                env.close()
            raise errors[0]
        return built

    def simulators_built(self) -> int:
        """How many times a split's simulators were built (once per split, unless offloaded)."""
        return self._built

    def obs_spec(self) -> ObsSpec:
        """What the train simulators give the policy (sizes the model)."""
        env = self.envs("train")[0]
        return obs_spec_of(env, env.reset(seed=0))

    def run(self, split: str, tag: str, num_steps: int, seed: int,
            video_name: str | None = None, reset: bool = True, eval_round: EvalRound | None = None) -> EpisodeStats:
        """Serve one rollout of ``num_steps`` policy steps; returns the finished episodes.

        Every stage is reset with ``seed`` (+ stage) first; with ``reset=False`` the environments
        go on from where the previous rollout of ``split`` left them (its last observations are
        sent first; the first rollout still resets), so episodes run across rollouts (needs
        ``auto_reset``). With ``video_name`` the first stage's environments are recorded
        (``env.<split>.video_cfg``) to ``<video_base_dir>/<name>.mp4``. The rollout worker at the
        other end of this worker's pipe serves the same ``tag`` and ``num_steps``. With
        ``eval_round`` the environments play that round's episodes instead (see the module
        docstring; ``seed`` is then unused).
        """
        (pipe,) = self.pipes(ENV_POLICY_PIPE).values()
        try:
            if not reset and not self._split_cfg(split).auto_reset:
                raise ValueError(f"env.{split}.auto_reset is false: a rollout that continues the previous one "
                                 "needs auto-reset environments")
            return self._serve(pipe, split, tag, num_steps, seed, video_name, reset, eval_round)
        except BaseException as exc:
            pipe.send_error(f"env worker {self.rank} ({split}): "
                            + "".join(traceback.format_exception_only(type(exc), exc)).strip())
            raise

    def _serve(self, pipe, split: str, tag: str, num_steps: int, seed: int,
               video_name: str | None, reset: bool = True, eval_round: EvalRound | None = None) -> EpisodeStats:
        envs, cfg = self.envs(split), self._split_cfg(split)
        stats = EpisodeStats()
        recorder = None
        if video_name is not None and cfg.video_cfg.save_video:
            recorder = VideoRecorder(cfg.video_cfg.video_base_dir, fps=cfg.video_cfg.fps,
                                     info_on_video=cfg.video_cfg.info_on_video)
        live = self._live.pop(split, {})
        trackers: list[_EpisodeTracker | None] = [None] * len(envs)
        for s, env in enumerate(envs):
            if eval_round is not None:
                obs, trackers[s] = self._reset_round(env, s, eval_round, cfg)
            else:
                obs = live.get(s) if not reset else None
                if obs is None:
                    obs = env.reset(seed=seed * 1000 + self.rank * self.stages + s)
            if recorder is not None and s == 0:
                recorder.add(env.render())
            pipe.send(ObsMessage(obs=obs, reset_state_ids=torch.as_tensor(env.reset_state_ids),
                                 episode_seeds=None if trackers[s] is None else torch.as_tensor(trackers[s].seeds)),
                      key=obs_key(tag, self.rank, s))
        # Without auto_reset (and in an evaluation round) an environment plays one episode per
        # rollout: once it ends, later steps of the rollout earn nothing and do not count as
        # further episodes. Padding rows of an evaluation round are finished from the start.
        finished = [None if cfg.auto_reset and eval_round is None else torch.zeros(env.num_envs, dtype=torch.bool)
                    for env in envs]
        for s, tracker in enumerate(trackers):
            if tracker is not None and not all(e >= 0 for e in tracker.episodes):
                finished[s] |= torch.as_tensor([e < 0 for e in tracker.episodes])
                envs[s].set_idle(finished[s])
        # With 2+ stages and simulator processes the last step of a stage's chunk is left running
        # in those processes while this worker finishes the previous stage (waits for its step,
        # sends its observations) and receives the next stage's actions: the simulators of two
        # stages overlap with each other and with this worker's messaging. With 1 stage the
        # policy needs the observations before it can send more actions, and simulators stepped
        # in this process have nothing to overlap with, so every chunk finishes at once (this
        # worker steps one stage while the policy computes the other's actions).
        overlap = self.stages > 1 and all(env.steps_in_background for env in envs)
        pending: _ChunkRun | None = None
        for _ in range(num_steps):
            for s, env in enumerate(envs):
                actions = pipe.recv(key=action_key(tag, self.rank, s))
                run = _ChunkRun(env, s, self.num_action_chunks, finished[s], stats, recorder if s == 0 else None,
                                trackers[s])
                run.start(actions)
                if pending is not None:
                    self._finish(pending, pipe, tag, live)
                pending = run
                if not overlap:
                    self._finish(pending, pipe, tag, live)
                    pending = None
        if pending is not None:
            self._finish(pending, pipe, tag, live)
        if recorder is not None and len(recorder):
            recorder.save(f"{video_name}_rank{self.rank}")
        for tracker in trackers:
            if tracker is not None:
                stats.episodes += tracker.records()
        if cfg.auto_reset and len(live) == len(envs):  # a later run(reset=False) goes on from here
            self._live[split] = live
        return stats

    def _reset_round(self, env: VectorEnv, stage: int, eval_round: EvalRound,
                     cfg: EnvConfig) -> tuple[EnvObs, _EpisodeTracker]:
        """Reset ``env`` (stage ``stage``) into the initial states of the episodes its rows play
        in ``eval_round`` (padding rows: state 0)."""
        n = env.num_envs
        first = (self.rank * self.stages + stage) * n
        episodes, seeds = eval_round.episodes(first, n), eval_round.seeds(first, n)
        states = getattr(env, "num_reset_states", None)
        obs = env.reset(reset_state_ids=[episode_state_id(s, states) if s >= 0 else 0 for s in seeds])
        name = cfg.init_params.id or cfg.task_suite_name or cfg.env_type
        tasks = [d or name for d in obs.task_descriptions] if obs.task_descriptions else [name] * n
        return obs, _EpisodeTracker(episodes, seeds, tasks)

    def _finish(self, run: _ChunkRun, pipe, tag: str, live: dict[int, EnvObs]) -> None:
        msg = run.finish()
        live[run.stage] = msg.obs
        pipe.send(msg, key=obs_key(tag, self.rank, run.stage))

    def offload(self) -> None:
        """``env.enable_offload``: release every simulator (GPU simulation buffers and renderers,
        or the simulator processes on CPU) until the next rollout rebuilds them. Nothing is lost:
        every rollout starts by resetting its environments from the rollout's seed."""
        self.close()

    def close(self) -> None:
        self._live = {}
        pending, self._pending = list(self._pending.values()), {}
        for future in pending:  # simulators still starting: wait for them, then close them too
            try:
                self._envs.setdefault(f"pending{id(future)}", future.result())
            except BaseException:  # noqa: BLE001 - a failed build has nothing left to close
                pass
        for envs in self._envs.values():
            for env in envs:
                env.close()
        self._envs = {}


def _process_based(cfg: EnvConfig) -> bool:
    """Simulators living in their own processes (safe to build from several threads)."""
    if cfg.env_type == "libero":
        return True
    if cfg.env_type == "maniskill" and not cfg.sim_in_worker:
        backend = cfg.init_params.sim_backend
        return backend == "cpu" or (backend == "auto" and not torch.cuda.is_available())
    return False


def obs_spec_of(env: VectorEnv, obs: EnvObs) -> ObsSpec:
    """The :class:`ObsSpec` of ``env`` from one of its observation batches: state size, the
    first camera's image shape, whether a second (wrist) camera exists, action bounds."""
    cams = list(obs.images)
    image = obs.images[cams[0]] if cams else None
    return ObsSpec(state_dim=0 if obs.states is None else int(obs.states.shape[1]),
                   image_shape=None if image is None else tuple(int(x) for x in image.shape[1:]),
                   has_wrist=len(cams) > 1,
                   action_low=tuple(float(x) for x in env.action_low),
                   action_high=tuple(float(x) for x in env.action_high))


class _ChunkRun:
    """One stage's chunk of ``K`` actions: steps ``0 .. K-2`` run in :meth:`start`, the last is
    started there and collected in :meth:`finish`, which returns the stage's next message.

    Rewards after an episode's end inside the chunk are dropped (the environment was reset and
    the rest of the chunk was planned for the old one). ``finished`` (no auto-reset): rows whose
    episode already ended in this rollout; they earn nothing and end no further episode (updated
    in place), and the simulators stop stepping them (:meth:`VectorEnv.set_idle`).
    """

    def __init__(self, env: VectorEnv, stage: int, num_action_chunks: int,
                 finished: torch.Tensor | None, stats: EpisodeStats, recorder: VideoRecorder | None,
                 tracker: _EpisodeTracker | None = None):
        n = env.num_envs
        self.env, self.stage, self.finished, self.stats, self.recorder = env, stage, finished, stats, recorder
        self.tracker = tracker
        self.rewards = torch.zeros(n, num_action_chunks)
        self.done = torch.zeros(n, dtype=torch.bool)
        self.over = finished.clone() if finished is not None else torch.zeros(n, dtype=torch.bool)
        self.terminated = torch.zeros(n, dtype=torch.bool)
        self.truncated = torch.zeros(n, dtype=torch.bool)
        self.final: EnvObs | None = None
        self.final_states: torch.Tensor | None = None  # where each episode ended in this chunk (rows: done)
        self.chunk_step = 0  # the action of the chunk the next result belongs to

    def start(self, actions: torch.Tensor) -> None:
        for k in range(actions.shape[1] - 1):
            self._absorb(self.env.step(actions[:, k]))
        self.env.step_async(actions[:, -1])

    def finish(self) -> ObsMessage:
        res = self.env.step_wait()
        self._absorb(res)
        return ObsMessage(obs=res.obs, rewards=self.rewards, dones=self.done, terminations=self.terminated,
                          final_obs=self.final, truncated=self.truncated,
                          reset_state_ids=torch.as_tensor(self.env.reset_state_ids), final_states=self.final_states)

    def _absorb(self, res) -> None:
        live = ~self.done & ~self.over
        self.rewards[:, self.chunk_step] = res.rewards.cpu() * live
        ended = res.dones.cpu() & live
        if bool(ended.any()):
            info = res.infos
            ids = torch.nonzero(ended).view(-1)
            reported = info.get("success_reported")  # gymnasium envs: whether the env reports success
            self.stats.add(info["episode_return"].cpu()[ids], info["episode_length"].cpu()[ids],
                           info["success_once"].cpu()[ids], None if reported is None else reported.cpu()[ids])
            if self.tracker is not None:
                self.tracker.ended(ids.tolist(), info)
            last = res.final_obs if res.final_obs is not None else res.obs
            if last.states is not None:  # every end, terminated or cut: the off-policy s'
                states = last.states.cpu()
                if self.final_states is None:
                    self.final_states = states.clone()
                else:
                    self.final_states[ended] = states[ended]
            cut = ended & ~res.terminations.cpu()
            if bool(cut.any()):
                self.final = last.clone() if self.final is None else _merge_rows(self.final, last, cut)
                self.truncated |= cut
        self.terminated |= res.terminations.cpu() & live
        if self.tracker is not None:
            self.tracker.last = res.infos
        self.done |= ended
        if self.finished is not None:
            self.finished |= ended
            if bool(ended.any()):  # nobody reads these rows again in this rollout: stop simulating them
                self.env.set_idle(self.finished)
        if self.recorder is not None:
            self.recorder.add(self.env.render(), rewards=res.rewards.tolist(), successes=res.successes.tolist())
        self.chunk_step += 1


class _EpisodeTracker:
    """The episodes one stage's rows play in an evaluation round, and their records."""

    def __init__(self, episodes: list[int], seeds: list[int], tasks: list[str]):
        self.episodes, self.seeds, self.tasks = episodes, seeds, tasks
        self._records: dict[int, dict] = {}
        self.last: dict[str, torch.Tensor] | None = None  # the infos of the latest step

    def ended(self, rows: list[int], info: dict[str, torch.Tensor], ended: bool = True) -> None:
        """Record the episodes of ``rows`` (not padding, not recorded yet) from step infos."""
        returns, lengths = info["episode_return"].cpu(), info["episode_length"].cpu()
        success = info["success_once"].cpu()
        reported = info.get("success_reported")  # absent: the simulator always reports success
        for r in rows:
            if self.episodes[r] >= 0 and r not in self._records:
                known = reported is None or bool(reported.cpu()[r])
                self._records[r] = {"episode": self.episodes[r], "seed": self.seeds[r], "task": self.tasks[r],
                                    "success": bool(success[r]) if known else None, "return": float(returns[r]),
                                    "length": int(lengths[r]), "ended": ended}

    def records(self) -> list[dict]:
        """Every episode of the round; one the rollout cut before its end is recorded as it
        stood after the last step (``ended`` false)."""
        open_rows = [r for r, e in enumerate(self.episodes) if e >= 0 and r not in self._records]
        if open_rows and self.last is not None:
            self.ended(open_rows, self.last, ended=False)
        return [self._records[r] for r in sorted(self._records)]


def _merge_rows(base: EnvObs, new: EnvObs, rows: torch.Tensor) -> EnvObs:
    """``base`` with the rows ``rows`` taken from ``new``."""
    out = base.clone()
    if out.states is not None:
        out.states[rows] = new.states[rows].to(out.states.device)
    for name, image in out.images.items():
        image[rows] = new.images[name][rows].to(image.device)
    return out
