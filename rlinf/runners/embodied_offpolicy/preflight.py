"""The off-policy recipe's checks before Ray: the embodied checks (typed config, folders, resume
point, cluster, each split's simulator asked for its shapes) with the off-policy root config, then
the demonstration file (RLPD) read and checked against the train env, and the learner's and
buffer's settings made from the config.

A missing ``<folder>/trajectory.h5`` for PickCube-v1 (RLPD's shipped config) is made first by the
scripted expert (:data:`OFFPOLICY_ASSETS`: ``toolkits.embodied.make_demos``, said in one line). A
bad demonstration file (missing, truncated, another task, controller, reward mode or observation
space, fewer transitions than ``demo_buffer.min_buffer_size``) is one
``algorithm.demo_buffer.load_path`` line naming the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from rlinf.config.embodied_offpolicy import OffPolicyEmbodiedConfig
from rlinf.data.maniskill_trajectory import DemoFileError, load_demos
from rlinf.data.replay_buffer import TRANSITION_FIELDS, NStepAccumulator
from rlinf.models.embodied.factory import sac_network_sizes
from rlinf.objectives.sac import BufferSettings, SACSettings
from rlinf.runners.embodied.preflight import EMBODIED_ASSETS, EmbodiedStart, prepare_embodied
from rlinf.runners.preflight import Asset
from rlinf.utils.typed_config import ConfigError

DEMO_KEY = "algorithm.demo_buffer.load_path"
#: the task the scripted expert of ``toolkits.embodied.make_demos`` solves
EXPERT_TASK = "PickCube-v1"


def _demos_command(cfg: OffPolicyEmbodiedConfig, path: str) -> str | None:
    """``make_demos`` for the train env's task and reward mode, as many episodes as the config
    loads (None: no scripted expert for the task)."""
    env = cfg.env.train
    if env.env_type != "maniskill" or env.init_params.id != EXPERT_TASK:
        return None
    reward = env.init_params.reward_mode
    extra = f" --reward-mode {reward}" if reward and reward != "normalized_dense" else ""
    num = cfg.algorithm.demo_buffer.max_episodes or 100
    return (f"python -m toolkits.embodied.make_demos --env {EXPERT_TASK} --num {num} "
            f"--out {os.path.dirname(path) or '.'}{extra}")


#: the demonstrations RLPD's config reads: made by the scripted expert when missing
OFFPOLICY_ASSETS = (Asset(DEMO_KEY, "trajectory.h5", _demos_command, "about 35 s for 100 episodes here", make=True),)


@dataclass
class OffPolicyStart(EmbodiedStart):
    """:class:`~rlinf.runners.embodied.preflight.EmbodiedStart` plus the learner's settings, the
    buffer's settings and the demonstration transitions (None without ``demo_buffer``)."""

    learner: Any = None
    buffer: Any = None
    demos: dict[str, torch.Tensor] | None = None
    demo_episodes: int = 0


def prepare_offpolicy(raw: Any) -> OffPolicyStart:
    """All checks of an off-policy run before Ray (see the module docstring).

    Raises:
        ConfigError: the first problem found, naming its key.
    """
    base = prepare_embodied(raw, OffPolicyEmbodiedConfig, EMBODIED_ASSETS + OFFPOLICY_ASSETS)
    cfg: OffPolicyEmbodiedConfig = base.cfg
    spec = base.obs_specs["train"]
    demos, episodes = None, 0
    if cfg.algorithm.demo_buffer is not None:
        demos, episodes = load_demo_rows(cfg, spec.state_dim, len(spec.action_low or ()) or None)
    return OffPolicyStart(base.cfg, base.resume_step, base.obs_specs, learner=sac_settings(cfg),
                          buffer=buffer_settings(cfg, with_demos=demos is not None), demos=demos,
                          demo_episodes=episodes)


def sac_settings(cfg: OffPolicyEmbodiedConfig):
    """The learner's :class:`~rlinf.objectives.sac.SACSettings` from the config (the keys'
    meanings are in :mod:`rlinf.config.embodied_offpolicy`)."""
    algo, optim, et = cfg.algorithm, cfg.actor.optim, cfg.algorithm.entropy_tuning
    fixed = et.alpha_type == "fixed_alpha"
    return SACSettings(
        gamma=algo.gamma, tau=algo.tau, **sac_network_sizes(cfg.actor.model),
        critic_subsample_size=algo.subsample_size, agg_q=algo.actor_agg_q or algo.agg_q, target_agg_q=algo.agg_q,
        backup_entropy=algo.backup_entropy, critic_actor_ratio=algo.critic_actor_ratio,
        actor_lr=optim.lr, critic_lr=optim.value_lr or optim.lr, alpha_lr=et.optim.lr,
        adam_betas=(optim.adam_beta1, optim.adam_beta2), adam_eps=optim.adam_eps,
        alpha_type="exp" if fixed else et.alpha_type, initial_alpha=et.initial_alpha, autotune=not fixed,
        target_entropy=et.target_entropy, clip_grad=optim.clip_grad, alpha_clip_grad=et.optim.clip_grad,
        target_update_freq=algo.target_update_freq)


def buffer_settings(cfg: OffPolicyEmbodiedConfig, with_demos: bool = False):
    """The worker's :class:`~rlinf.workers.actor.offpolicy_actor.BufferSettings`."""
    rb, demo = cfg.algorithm.replay_buffer, cfg.algorithm.demo_buffer
    return BufferSettings(capacity=rb.capacity, min_buffer_size=rb.min_buffer_size,
                          sample_window_size=rb.sample_window_size, batch_size=cfg.actor.global_batch_size,
                          demo_fraction=demo.demo_fraction if with_demos and demo else 0.5,
                          on_damaged_buffer=rb.on_damaged_buffer)


def load_demo_rows(cfg: OffPolicyEmbodiedConfig, obs_dim: int, action_dim: int | None) -> tuple[dict, int]:
    """The demonstration file as transition rows for the demo buffer (n-step folded as the
    rollout side folds, ``bootstrap_type: always`` applied), and its episode count."""
    demo, env = cfg.algorithm.demo_buffer, cfg.env.train
    init = env.init_params
    maniskill = env.env_type == "maniskill"
    try:
        loaded = load_demos(demo.load_path, obs_dim=obs_dim, action_dim=action_dim,
                            env_id=init.id if maniskill else None,
                            control_mode=init.control_mode if maniskill else None,
                            only_success=demo.only_success, max_episodes=demo.max_episodes)
    except DemoFileError as exc:
        hint = ("; `python -m toolkits.embodied.make_demos --env PickCube-v1 --num 100 --out DIR` writes one "
                "(DIR/trajectory.h5)" if str(exc).endswith("does not exist") else "")
        raise ConfigError(DEMO_KEY, f"{exc}{hint}") from None
    recorded = (loaded.env_info.get("env_kwargs") or {}).get("reward_mode")
    if maniskill and recorded and init.reward_mode and recorded != init.reward_mode:
        raise ConfigError(DEMO_KEY, f"demo file {demo.load_path}: rewards recorded with reward_mode {recorded}, "
                          f"the env uses {init.reward_mode} (the rewards would mean something else)")
    if len(loaded) < demo.min_buffer_size:
        raise ConfigError(DEMO_KEY, f"demo file {demo.load_path} gives {len(loaded)} transitions, fewer than "
                          f"algorithm.demo_buffer.min_buffer_size ({demo.min_buffer_size})")
    return fold_demos(loaded, cfg.algorithm.n_step, cfg.algorithm.gamma,
                      cfg.algorithm.bootstrap_type == "always"), loaded.num_episodes


def fold_demos(demos, n_step: int, gamma: float, bootstrap_always: bool) -> dict[str, torch.Tensor]:
    """:class:`~rlinf.data.maniskill_trajectory.DemoTransitions` (rows in episode order) ->
    the replay buffer's transition fields, folded to ``n_step`` returns within each episode.

    >>> import torch
    >>> from types import SimpleNamespace
    >>> d = SimpleNamespace(obs=torch.zeros(3, 1), action=torch.zeros(3, 1), reward=torch.tensor([1., 1., 1.]),
    ...                     next_obs=torch.zeros(3, 1), terminated=torch.tensor([False, True, False]),
    ...                     truncated=torch.tensor([False, False, True]))
    >>> rows = fold_demos(d, 2, 0.5, False)
    >>> rows["reward"].tolist(), rows["discount"].tolist(), rows["terminated"].tolist()
    ([1.5, 1.0, 1.0], [0.25, 0.5, 0.5], [True, True, False])
    """
    terminated = torch.zeros_like(demos.terminated) if bootstrap_always else demos.terminated.bool()
    if n_step == 1:
        return {"obs": demos.obs.float(), "action": demos.action.float(), "reward": demos.reward.float(),
                "next_obs": demos.next_obs.float(), "terminated": terminated,
                "discount": torch.full((len(demos.reward),), float(gamma))}
    fold, out = NStepAccumulator(n_step, gamma), []
    for i in range(int(demos.reward.shape[0])):
        step = {"obs": demos.obs[i:i + 1].float(), "action": demos.action[i:i + 1].float(),
                "reward": demos.reward[i:i + 1].float(), "next_obs": demos.next_obs[i:i + 1].float(),
                "terminated": terminated[i:i + 1],
                "truncated": demos.truncated[i:i + 1].bool() | (demos.terminated[i:i + 1].bool() & bootstrap_always)}
        rows = fold.push(step)
        if rows is not None:
            out.append(rows)
    return {k: torch.cat([r[k] for r in out]) for k in TRANSITION_FIELDS}
