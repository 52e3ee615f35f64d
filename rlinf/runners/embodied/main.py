"""Everything an embodied run does between a Hydra config and its result, in order.

    config -> typed config (fails before any worker starts) -> Ray cluster + placement plan
    -> env workers (report the observation spec) -> rollout and actor groups -> runner
    (resume?) -> fit / only_eval -> saved policy, curve PNG, summary

``examples/embodiment/main_embodied.py`` is a thin Hydra wrapper around :func:`run_embodied`.
"""

from __future__ import annotations

from typing import Any


def link_labels(cfg) -> str:
    """The env / rollout / actor ``channel`` blocks as labels of the links they name.

    >>> from types import SimpleNamespace
    >>> from rlinf.config.rollout import ChannelRef
    >>> cfg = SimpleNamespace(env=SimpleNamespace(channel=ChannelRef("env_buffer_list", "obs_buffer")),
    ...                       rollout=SimpleNamespace(channel=ChannelRef("env_buffer_list", "action_buffer")),
    ...                       actor=SimpleNamespace(channel=ChannelRef("replay_buffer", "replay_buffer")))
    >>> link_labels(cfg)
    'observations env -> rollout env_buffer_list/obs_buffer, actions rollout -> env env_buffer_list/action_buffer, trajectories rollout -> actor replay_buffer/replay_buffer'
    """
    env, roll, act = cfg.env.channel, cfg.rollout.channel, cfg.actor.channel
    return (f"observations env -> rollout {env.name}/{env.queue_name}, actions rollout -> env "
            f"{roll.name}/{roll.queue_name}, trajectories rollout -> actor {act.name}/{act.queue_name}")


def run_embodied(raw: Any, print_fn=print) -> dict[str, float]:
    """Run the embodied RL job described by ``raw`` (a Hydra ``DictConfig`` or a plain dict).

    Everything checkable before Ray (simulator task and shapes against the policy included) is
    checked first (:func:`~rlinf.runners.preflight.prepare_embodied`).

    Returns ``steps`` and, when evaluating, ``val/first_success_rate`` / ``val/last_success_rate``
    (or the eval metrics with ``runner.only_eval``).
    """
    from rlinf.runners.recovery import run_with_recovery

    return run_with_recovery(raw, _run_embodied_once, print_fn)


def _run_embodied_once(raw: Any, print_fn=print) -> dict[str, float]:
    from rlinf.runners.preflight import prepare_embodied

    start = prepare_embodied(raw)
    cfg = start.cfg

    from rlinf.runners.embodied.loop import EmbodiedRunner, launch_embodied_groups
    from rlinf.runners.launch import open_logger, start_cluster

    cluster, plan = start_cluster(cfg, print_fn)
    lg = cfg.runner.logger
    logger = open_logger(cfg.runner, start.resume_step)
    modes = ", ".join(f"{a}-{b} {plan.mode(a, b).value}" for a, b in
                      (("env", "rollout"), ("rollout", "actor"), ("env", "actor")))
    print_fn(f"[rlinf] embodied {cfg.algorithm.adv_type}: {cfg.env.train.env_type} "
             f"{cfg.env.train.init_params.id or cfg.env.train.task_suite_name or ''}, "
             f"{cfg.env.train.total_num_envs} train envs, policy {cfg.actor.model.model_type}, "
             f"{cfg.rollout.pipeline_stage_num} pipeline stage(s); {modes}; logs in {lg.log_path}")
    print_fn(f"[rlinf] groups {cfg.env.group_name} (env), {cfg.rollout.group_name} (rollout), "
             f"{cfg.actor.group_name} (actor); links: {link_labels(cfg)}")
    groups = launch_embodied_groups(cfg, cluster, plan)
    runner = None
    try:
        runner = EmbodiedRunner(cfg, groups, logger)
        return runner.run(print_fn)
    finally:
        if runner is not None:
            runner.close()
        groups.shutdown()
        logger.close()
