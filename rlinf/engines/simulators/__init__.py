"""Simulators under the embodied runtime: one :class:`VectorEnv` interface, one adapter per library.

* ``toy`` — a pure-numpy reaching task (:mod:`~rlinf.envs.toy_reach`, a world this project ships:
  engines import worlds, worlds import only the interface, :mod:`rlinf.envs.base`), for tests.
* ``maniskill`` — ManiSkill3 (:mod:`~rlinf.engines.simulators.maniskill`): CPU worker processes,
  or one CUDA batch.
* ``libero`` — LIBERO suites (:mod:`~rlinf.engines.simulators.libero`): worker processes.
* ``metaworld`` — Meta-World v3 MT1 tasks and MT10 / MT50 sets
  (:mod:`~rlinf.engines.simulators.metaworld`): worker processes.
* ``gymnasium`` — any registered gymnasium env with a Box action space
  (:mod:`~rlinf.engines.simulators.gymnasium_env`): worker processes.

Build one from ``env.train`` / ``env.eval`` with :func:`make_vector_env`; episode rules are shared
(:class:`~rlinf.engines.simulators.episodes.EpisodeVectorEnv`). Videos:
:mod:`~rlinf.engines.simulators.video`.

Example:
    >>> import torch
    >>> from rlinf.config.env import EnvConfig
    >>> with make_vector_env(EnvConfig(env_type="toy", auto_reset=True), num_envs=3) as env:
    ...     obs = env.reset(seed=1)
    ...     res = env.step(torch.zeros(3, env.action_dim))
    >>> env.max_episode_steps, res.obs.states.shape
    (20, torch.Size([3, 4]))
"""

from __future__ import annotations

import numpy as np

from rlinf.config.env import EnvConfig
from rlinf.engines.simulators.base import EnvObs, SimulatorError, StepResult, VectorEnv
from rlinf.engines.simulators.episodes import BatchSim, EpisodeVectorEnv
from rlinf.engines.simulators.gymnasium_env import build_gymnasium_sim
from rlinf.engines.simulators.maniskill import build_maniskill_sim
from rlinf.engines.simulators.metaworld import build_metaworld_sim
from rlinf.engines.simulators.single import SerialBatchSim
from rlinf.envs.toy_reach import ToyReachEnv

__all__ = ["BatchSim", "EnvObs", "EpisodeVectorEnv", "SimulatorError", "StepResult", "VectorEnv",
           "make_vector_env"]


def make_vector_env(cfg: EnvConfig, num_envs: int | None = None, rank: int = 0) -> EpisodeVectorEnv:
    """Build the simulators of one env group (``env.train`` or ``env.eval``) for one env worker.

    Args:
        cfg: the parsed group config.
        num_envs: environments in this worker; None = ``cfg.total_num_envs`` (one worker).
        rank: the env worker's rank; workers draw different initial states (the draw is seeded
            with ``(cfg.seed, rank)``).

    Raises:
        SimulatorError: a simulator could not be built (its message names the env and task);
            :class:`~rlinf.engines.simulators.maniskill.MissingAssetsError` /
            :class:`~rlinf.engines.simulators.libero_setup.LiberoAssetsError` for missing assets.
    """
    n = num_envs if num_envs is not None else cfg.total_num_envs
    if not n or n < 1:
        raise ValueError("give num_envs or set total_num_envs")
    if cfg.use_fixed_reset_state_ids and n % cfg.group_size:
        raise ValueError(f"num_envs {n} is not a multiple of group_size {cfg.group_size}")
    if cfg.env_type == "toy":
        size = cfg.init_params.camera_heights
        sim: BatchSim = SerialBatchSim([ToyReachEnv(image_size=size) for _ in range(n)])
    elif cfg.env_type == "maniskill":
        sim = build_maniskill_sim(cfg, n)
    elif cfg.env_type == "libero":
        # lazy: the libero module's asset setup costs ~0.3 s; only env_type libero
        from rlinf.engines.simulators.libero import build_libero_sim

        sim = build_libero_sim(cfg, n)
    elif cfg.env_type == "metaworld":
        sim = build_metaworld_sim(cfg, n)
    elif cfg.env_type == "gymnasium":
        sim = build_gymnasium_sim(cfg, n)
    else:  # pragma: no cover - EnvConfig rejects it
        raise ValueError(f"unknown env_type {cfg.env_type!r}")
    seed = int(np.random.SeedSequence([cfg.seed, rank]).generate_state(1)[0]) if rank else cfg.seed
    return EpisodeVectorEnv(sim, max_episode_steps=cfg.episode_steps, auto_reset=cfg.auto_reset,
                            ignore_terminations=cfg.ignore_terminations,
                            use_fixed_reset_state_ids=cfg.use_fixed_reset_state_ids,
                            group_size=cfg.group_size, seed=seed, reward_coef=cfg.reward_coef,
                            use_rel_reward=cfg.use_rel_reward)
