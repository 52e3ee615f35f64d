"""``env:`` — the simulators of an embodied run: ``env.train`` and ``env.eval`` (one env group each).

Keys follow the reference's embodied section; keys marked *(our key)* are rlinf's own. Shared
groups live in ``config/env/*.yaml`` and are pulled in with Hydra defaults
(``- env/maniskill_pick_cube@env.train``).

Example:
    >>> from rlinf.utils.typed_config import parse_section
    >>> cfg = parse_section(EnvConfig, {"env_type": "libero", "task_suite_name": "libero_spatial",
    ...                                 "task_ids": [0, 3], "total_num_envs": 4, "group_size": 2},
    ...                     "env.train")
    >>> cfg.task_suite_name, cfg.task_ids, cfg.episode_steps
    ('libero_spatial', (0, 3), 220)
    >>> parse_section(EnvConfig, {"env_type": "libero", "task_suite_name": "libero_100"}, "env.eval")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: env.eval.task_suite_name: 'libero_100' is not a LIBERO suite; expected one of libero_spatial, libero_object, libero_goal, libero_10, libero_90
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from rlinf.config.rollout import ChannelRef
from rlinf.utils.typed_config import check, rule

__all__ = ["EnvConfig", "EnvInitParams", "EnvSectionConfig", "LIBERO_SUITES", "METAWORLD_SUITES", "VideoConfig"]

#: LIBERO suites -> (number of tasks, default max_episode_steps). The step budgets are those the
#: OpenVLA / OpenVLA-OFT LIBERO evaluations use (longest demonstration plus a margin).
LIBERO_SUITES: dict[str, tuple[int, int]] = {
    "libero_spatial": (10, 220),
    "libero_object": (10, 280),
    "libero_goal": (10, 300),
    "libero_10": (10, 520),
    "libero_90": (90, 400),
}

#: Meta-World multi-task sets -> number of tasks (one env split holds all of them).
METAWORLD_SUITES: dict[str, int] = {"MT10": 10, "MT50": 50}
#: Meta-World's ``max_path_length`` (the same for every v3 task): the default episode length.
METAWORLD_MAX_PATH_LENGTH = 500

#: The cameras each simulator returns when ``init_params.camera_names`` is null.
DEFAULT_CAMERAS: dict[str, tuple[str, ...]] = {"libero": ("agentview", "robot0_eye_in_hand"),
                                                "metaworld": ("corner2",)}


@dataclass(frozen=True)
class VideoConfig:
    """``env.<train|eval>.video_cfg``: episode videos written by the env worker.

    Attributes:
        save_video: write mp4 videos of episodes: every evaluation (``eval``); the training
            rollouts feeding the first and every ``runner.val_check_interval``-th update
            (``train``; every 10th without evaluation).
        info_on_video: draw step, reward and success on each frame.
        video_base_dir: folder the videos go to (the reference sets
            ``${runner.logger.log_path}/video/train``).
        fps: frames per second of the written videos (our key).
    """

    save_video: bool = False
    info_on_video: bool = True
    video_base_dir: str = "results/video"
    fps: int = 10

    def validate(self, path: str) -> None:
        check(self.fps >= 1, f"{path}.fps", f"must be >= 1, got {self.fps}")


@dataclass(frozen=True)
class EnvInitParams:
    """``env.<train|eval>.init_params``: arguments for building each simulator.

    Attributes:
        camera_heights, camera_widths: camera image size in pixels; null = the simulator's
            default (ManiSkill: the task's sensor size, LIBERO: 128).
        id: ManiSkill task id (``PickCube-v1``); required for ``env_type: maniskill``. Meta-World:
            the MT1 task name (``reach-v3``), or null with ``task_suite_name``. gymnasium
            (required): a registered id (``Pendulum-v1``), or ``my_module:MyEnv-v0`` to import
            ``my_module`` first in every env process.
        obs_mode: ManiSkill observation mode: ``state`` or ``rgb`` (``rgb+segmentation`` for the
            bridge digital-twin tasks). Meta-World: ``state`` (39 numbers) or ``rgb`` (the state
            plus one image per camera). LIBERO always returns images and proprio state.
        control_mode: ManiSkill controller (``pd_ee_delta_pose``, ...); null = the task's default.
        reward_mode: ManiSkill reward (``sparse``, ``dense``, ``normalized_dense``, ``none``);
            null = the task's default. LIBERO's reward is success (0 or 1).
        sim_backend: ManiSkill physics: ``cpu`` (one env per process), ``gpu`` (all envs in one
            process on CUDA) or ``auto`` (gpu when CUDA is available).
        sim_config: extra ManiSkill ``sim_config`` (``sim_freq``, ``control_freq``, ...).
        sensor_configs: extra ManiSkill ``sensor_configs`` (``shader_pack``, ...).
        human_render_camera_configs: ManiSkill render camera for videos (``width``, ``height``).
        camera_names: LIBERO / Meta-World cameras returned as images (Meta-World: with
            ``obs_mode: rgb``; the first one also renders videos); null = the simulator's default
            (LIBERO: agentview and robot0_eye_in_hand, Meta-World: corner2) (our key).
        shadows: LIBERO / Meta-World: MuJoCo shadows and multisampling in offscreen rendering; off
            renders about 1.6x faster on CPU (our key).
        instruction: ManiSkill: language instruction sent with every observation of a task that
            has none of its own (the stock tasks such as PickCube-v1 have none; the bridge
            digital twins do, and theirs wins); null = no instruction (our key).
    """

    camera_heights: int | None = None
    camera_widths: int | None = None
    id: str | None = None
    obs_mode: str = "state"
    control_mode: str | None = None
    reward_mode: str | None = None
    sim_backend: Literal["auto", "cpu", "gpu"] = "auto"
    sim_config: dict[str, Any] = field(default_factory=dict)
    sensor_configs: dict[str, Any] = field(default_factory=dict)
    human_render_camera_configs: dict[str, Any] = field(default_factory=dict)
    camera_names: tuple[str, ...] | None = None
    shadows: bool = False
    instruction: str | None = None

    def validate(self, path: str) -> None:
        for key in ("camera_heights", "camera_widths"):
            value = getattr(self, key)
            check(value is None or value >= 8, f"{path}.{key}", f"must be >= 8 or null, got {value}")
        check(self.camera_names is None or len(self.camera_names) >= 1, f"{path}.camera_names",
              "name at least one camera, or null for the simulator's default")

    def cameras_for(self, env_type: str) -> tuple[str, ...]:
        """``camera_names``, or the default cameras of ``env_type`` when null.

        >>> EnvInitParams().cameras_for("metaworld"), EnvInitParams(camera_names=("a",)).cameras_for("libero")
        (('corner2',), ('a',))
        """
        return tuple(self.camera_names) if self.camera_names else DEFAULT_CAMERAS.get(env_type, ())


@dataclass(frozen=True)
class EnvConfig:
    """``env.train`` / ``env.eval``: one group of vectorised simulators.

    Attributes:
        env_type: simulator: ``maniskill`` (ManiSkill3), ``libero``, ``metaworld`` (Meta-World v3),
            ``gymnasium`` (any env registered with gymnasium whose action space is a Box; the
            id in ``init_params.id``) or ``toy`` (a pure-numpy reaching task for tests and
            debugging).
        task_suite_name: LIBERO suite (libero_spatial, libero_object, libero_goal, libero_10,
            libero_90), or a Meta-World multi-task set (MT10, MT50) run as one env split.
        task_ids: LIBERO / Meta-World set tasks to use (indices into the suite); null = all
            (our key).
        total_num_envs: parallel environments of this group across all env workers; null = set
            by the runner.
        auto_reset: reset an environment as soon as its episode ends (the step result then
            carries the finished episode's last observation separately).
        ignore_terminations: episodes end only at ``max_episode_steps``; successes are still
            reported every step.
        use_fixed_reset_state_ids: every group of ``group_size`` environments starts from the
            same initial state, drawn once per reset and reused by auto-resets (true for GRPO).
            False: each episode starts from a freshly drawn state.
        max_episode_steps: steps after which an episode is truncated; null = the simulator's
            default (ManiSkill: the task's registered limit, LIBERO: per suite, see
            :data:`LIBERO_SUITES`, Meta-World: the task's max path length, 500); gymnasium: required
            (the env is built with this limit).
        use_rel_reward: reward is the difference between this step's and the previous step's
            (scaled) reward.
        reward_coef: scale of the simulator's reward.
        seed: seed of the reset-state draws (same seed, same sequence of initial states);
            ``env.eval``: episode ``i`` of an evaluation has the seed ``seed + i`` (its initial
            state and, for flow / π0 policies, its policy noise). Must be >= 0.
        num_episodes: ``env.eval`` only: episodes of one evaluation, played in rounds of
            ``total_num_envs`` (one episode per environment per round; the surplus of the last
            round is padding, not counted); null = ``total_num_envs`` (one round). The same
            episodes, whatever the number of env processes, environments per process or pipeline
            stages (our key).
        group_size: environments per group sharing an initial state.
        video_cfg: see :class:`VideoConfig`.
        init_params: see :class:`EnvInitParams`.
        step_timeout_s: a simulator process that does not answer a step, reset or render within
            this many seconds is reported as hung (our key).
        envs_per_process: ManiSkill CPU / Meta-World / gymnasium simulation: environments each simulator
            process holds,
            stepped one after another (1 = a process per environment; with fewer cores than
            environments, a few processes of several envs start faster and step with fewer
            messages) (our key).
        start_timeout_s: limit for starting a simulator process and building its environment
            (our key).
        sim_in_worker: ManiSkill CPU / Meta-World / gymnasium simulation: the env worker steps its
            environments itself,
            one after another, instead of in simulator processes: no process start-up and no
            extra message hop per step, one core per env worker; place several env workers
            (``cluster.component_placement.env: 0-1``) to use several cores. A simulator that
            hangs is then not cut off by ``step_timeout_s`` (our key).
        max_steps_per_rollout_epoch: off-policy runs (train split): policy steps of every
            environment per collection (sync mode: per training step; episodes run on across
            collections); null = max_episode_steps. The eval split plays whole episodes, so null
            or max_episode_steps (RLinf's key).
    """

    env_type: Literal["maniskill", "libero", "metaworld", "gymnasium", "toy"]
    task_suite_name: str | None = None
    task_ids: tuple[int, ...] | None = None
    total_num_envs: int | None = None
    auto_reset: bool = False
    ignore_terminations: bool = False
    use_fixed_reset_state_ids: bool = False
    max_episode_steps: int | None = None
    use_rel_reward: bool = False
    reward_coef: float = 1.0
    seed: int = 0
    num_episodes: int | None = None
    group_size: int = 1
    video_cfg: VideoConfig = field(default_factory=VideoConfig)
    init_params: EnvInitParams = field(default_factory=EnvInitParams)
    step_timeout_s: float = 60.0
    start_timeout_s: float = 300.0
    envs_per_process: int = 1
    sim_in_worker: bool = False
    max_steps_per_rollout_epoch: int | None = rule(None, scope="offpolicy")

    @property
    def episode_steps(self) -> int | None:
        """``max_episode_steps``, or the LIBERO suite's default; None = the simulator's default
        (ManiSkill: the task's registered limit, toy: 20)."""
        if self.max_episode_steps is not None:
            return self.max_episode_steps
        if self.env_type == "libero" and self.task_suite_name in LIBERO_SUITES:
            return LIBERO_SUITES[self.task_suite_name][1]
        if self.env_type == "metaworld":
            return METAWORLD_MAX_PATH_LENGTH
        return None

    @property
    def eval_episodes(self) -> int:
        """Episodes of one evaluation: ``num_episodes``, else ``total_num_envs`` (one round)."""
        return int(self.num_episodes if self.num_episodes is not None else self.total_num_envs or 0)

    def validate(self, path: str) -> None:
        check(self.group_size >= 1, f"{path}.group_size", f"must be >= 1, got {self.group_size}")
        check(self.seed >= 0, f"{path}.seed", f"must be >= 0, got {self.seed}")
        check(self.num_episodes is None or self.num_episodes >= 1, f"{path}.num_episodes",
              f"must be >= 1 (or null: total_num_envs), got {self.num_episodes}")
        if self.total_num_envs is not None:
            check(self.total_num_envs >= 1, f"{path}.total_num_envs",
                  f"must be >= 1 or null, got {self.total_num_envs}")
            check(self.total_num_envs % self.group_size == 0, f"{path}.total_num_envs",
                  f"{self.total_num_envs} is not a multiple of group_size {self.group_size}")
        check(self.max_episode_steps is None or self.max_episode_steps >= 1, f"{path}.max_episode_steps",
              f"must be >= 1 or null, got {self.max_episode_steps}")
        check(self.max_steps_per_rollout_epoch is None or self.max_steps_per_rollout_epoch >= 1,
              f"{path}.max_steps_per_rollout_epoch", f"must be >= 1 or null, got {self.max_steps_per_rollout_epoch}")
        for key in ("step_timeout_s", "start_timeout_s"):
            check(getattr(self, key) > 0, f"{path}.{key}", f"must be > 0, got {getattr(self, key)}")
        check(self.envs_per_process >= 1, f"{path}.envs_per_process",
              f"must be >= 1, got {self.envs_per_process}")
        check(self.envs_per_process == 1 or self.env_type in ("maniskill", "metaworld", "gymnasium"),
              f"{path}.envs_per_process",
              f"only ManiSkill, Meta-World and gymnasium group environments in a process; {self.env_type} needs 1")
        if self.sim_in_worker:
            check(self.env_type in ("maniskill", "metaworld", "gymnasium"), f"{path}.sim_in_worker",
                  f"only ManiSkill CPU, Meta-World and gymnasium environments run inside the env worker; "
                  f"{self.env_type} needs its simulator processes")
            check(self.init_params.sim_backend != "gpu", f"{path}.sim_in_worker",
                  "sim_backend gpu already simulates every environment in the env worker; drop one")
            check(self.envs_per_process == 1, f"{path}.envs_per_process",
                  "has no effect with sim_in_worker (there are no simulator processes); drop one")
        if self.env_type == "maniskill":
            check(bool(self.init_params.id), f"{path}.init_params.id",
                  "env_type maniskill needs a task id (e.g. PickCube-v1)")
        else:
            check(self.init_params.instruction is None, f"{path}.init_params.instruction",
                  f"only ManiSkill tasks take an instruction from the config; {self.env_type} tasks "
                  "carry their own")
        if self.env_type == "metaworld":
            self._validate_metaworld(path)
        if self.env_type == "gymnasium":
            self._validate_gymnasium(path)
        if self.env_type == "libero":
            suites = ", ".join(LIBERO_SUITES)
            check(self.task_suite_name is not None, f"{path}.task_suite_name",
                  f"env_type libero needs a suite; one of {suites}")
            check(self.task_suite_name in LIBERO_SUITES, f"{path}.task_suite_name",
                  f"{self.task_suite_name!r} is not a LIBERO suite; expected one of {suites}")
            n_tasks = LIBERO_SUITES[self.task_suite_name][0]
            for i, task_id in enumerate(self.task_ids or ()):
                check(0 <= task_id < n_tasks, f"{path}.task_ids[{i}]",
                      f"{self.task_suite_name} has tasks 0..{n_tasks - 1}, got {task_id}")

    def _validate_gymnasium(self, path: str) -> None:
        p = self.init_params
        check(bool(p.id), f"{path}.init_params.id",
              "env_type gymnasium needs a registered id (e.g. Pendulum-v1, or my_module:MyEnv-v0)")
        check(self.max_episode_steps is not None, f"{path}.max_episode_steps",
              "env_type gymnasium needs the episode length here (rollouts are planned from it before any "
              "env is built; e.g. Pendulum-v1 registers 200)")
        check(self.task_suite_name is None and self.task_ids is None, f"{path}.task_suite_name",
              "gymnasium envs have no task suites; name the env in init_params.id")
        check(p.obs_mode == "state", f"{path}.init_params.obs_mode",
              f"a gymnasium env returns its own observation (images of a Dict observation are kept as "
              f"cameras); leave obs_mode at state, got {p.obs_mode!r}")
        for key in ("control_mode", "reward_mode", "camera_heights", "camera_widths", "camera_names"):
            check(getattr(p, key) is None, f"{path}.init_params.{key}",
                  "has no effect on a gymnasium env (it has its own controller, reward and cameras); remove it")
        for key in ("sim_config", "sensor_configs", "human_render_camera_configs"):
            check(not getattr(p, key), f"{path}.init_params.{key}", "is a ManiSkill key; remove it")
        check(not p.shadows, f"{path}.init_params.shadows", "is a LIBERO / Meta-World key; remove it")

    def _validate_metaworld(self, path: str) -> None:
        p = self.init_params
        sets = ", ".join(METAWORLD_SUITES)
        check(p.id is None or self.task_suite_name is None, f"{path}.task_suite_name",
              f"give either init_params.id (one MT1 task, e.g. reach-v3) or task_suite_name ({sets}), not both")
        check(p.id is not None or self.task_suite_name is not None, f"{path}.init_params.id",
              f"env_type metaworld needs a task name (e.g. reach-v3) or task_suite_name ({sets})")
        if self.task_suite_name is not None:
            check(self.task_suite_name in METAWORLD_SUITES, f"{path}.task_suite_name",
                  f"{self.task_suite_name!r} is not a Meta-World task set; expected one of {sets}")
            n_tasks = METAWORLD_SUITES[self.task_suite_name]
            for i, task_id in enumerate(self.task_ids or ()):
                check(0 <= task_id < n_tasks, f"{path}.task_ids[{i}]",
                      f"{self.task_suite_name} has tasks 0..{n_tasks - 1}, got {task_id}")
        else:
            check(self.task_ids is None, f"{path}.task_ids", "picks tasks of a task_suite_name; an MT1 task has one")
        check(p.obs_mode in ("state", "rgb"), f"{path}.init_params.obs_mode",
              f"Meta-World gives state or rgb observations, got {p.obs_mode!r}")
        for key in ("control_mode", "reward_mode"):
            check(getattr(p, key) is None, f"{path}.init_params.{key}",
                  "is a ManiSkill key; Meta-World has one controller and its own dense reward")


@dataclass(frozen=True)
class EnvSectionConfig:
    """``env``: the env worker group and its two simulator groups.

    Attributes:
        group_name: worker group name (names the group in logs and error lines).
        channel: labels the env -> rollout link (observations) in the start-up summary and in
            errors; the link is a direct pipe per env worker (``rlinf.scheduler.pipe``), so
            queue_size takes only 0.
        enable_offload: when env workers share a device with the actor, release the simulators
            after every rollout (GPU buffers / CPU simulator processes) and rebuild them for the
            next one; no state is lost (every rollout resets its environments).
        train: simulators used for training rollouts.
        eval: simulators used for evaluation (the runner decides when, e.g.
            ``runner.val_check_interval``).
    """

    train: EnvConfig
    eval: EnvConfig
    group_name: str = "EnvGroup"
    channel: ChannelRef = field(default_factory=lambda: ChannelRef(name="env_buffer_list",
                                                                   queue_name="obs_buffer"))
    enable_offload: bool = False

    #: the largest seed a simulator takes (ManiSkill seeds below 2**31 - 1)
    MAX_SEED = 2**31 - 2

    def validate(self, path: str) -> None:
        check(self.train.num_episodes is None, f"{path}.train.num_episodes",
              "counts evaluation episodes; only env.eval reads it: remove it (training rollouts play "
              "total_num_envs x rollout_epoch episodes)")
        last = self.eval.seed + max(self.eval.eval_episodes, 1) - 1
        check(last <= self.MAX_SEED, f"{path}.eval.seed",
              f"{self.eval.seed} + {self.eval.eval_episodes} episodes reaches {last}; episode seeds must stay "
              f"<= {self.MAX_SEED}")
