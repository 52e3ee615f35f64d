"""What every recipe does once its pre-Ray checks passed: start (or join) the Ray cluster, say
where it runs and which accepted keys do nothing more here (the config's notes), fit the
placement to the cluster, and open the metric logger."""

from __future__ import annotations

from typing import Any

from rlinf.scheduler.placement import plan_placement
from rlinf.scheduler.placement.fold import fold_note
from rlinf.utils.metric_logger import MetricLogger


def start_cluster(cfg: Any, print_fn=print):
    """``(cluster, plan)`` for a typed root config (``MathConfig`` / ``EmbodiedConfig``), after
    its placement-dependent checks (``cfg.check_against_plan``)."""
    # lazy: rlinf.scheduler resolves Cluster on first use (__getattr__), loading the backends
    from rlinf.scheduler import Cluster

    cluster = Cluster.from_config(cfg.cluster)
    print_fn(f"[rlinf] {cluster.origin}")
    folded = local_fold_note(cfg.cluster, cluster.shape)
    if folded is not None:
        print_fn(f"[rlinf] note: {folded}")
    for note in cfg.notes():
        print_fn(f"[rlinf] note: {note}")
    plan = cfg.cluster.plan(cluster.shape)
    cfg.check_against_plan(plan)
    return cluster, plan


def local_fold_note(cluster_cfg: Any, shape=None) -> str | None:
    """The start-up line of a ``cluster.backend: local`` run whose placement has a group on
    several processes (each folded to one, :mod:`rlinf.scheduler.placement.fold`); None on Ray
    or when every group is one process already.

    >>> from rlinf.scheduler.config import ClusterConfig
    >>> local_fold_note(ClusterConfig.from_dict({"backend": "local", "accelerators_per_node": 2,
    ...                                          "component_placement": {"actor,rollout,reward": "all"}}))
    'cluster.backend local: actor 2 processes -> 1, rollout 2 processes -> 1, reward 2 processes -> 1 in this process; each group keeps its accelerators (actor,rollout,reward: 0,1), so groups placed apart stay apart'
    """  # noqa: E501 - a doctest's expected output is one line
    if cluster_cfg.backend != "local":
        return None
    return fold_note(plan_placement(cluster_cfg.component_placement, shape or cluster_cfg.shape()))


def open_logger(runner_cfg: Any, resume_step: int | None):
    """The run's :class:`~rlinf.utils.metric_logger.MetricLogger` (``runner.logger``), cut back to
    ``resume_step`` when resuming."""
    lg = runner_cfg.logger
    return MetricLogger(lg.log_path, lg.project_name, lg.experiment_name, lg.logger_backends,
                        resume_step=resume_step)
