"""What every recipe does once its pre-Ray checks passed: start (or join) the Ray cluster, say
where it runs and which accepted keys do nothing more here (the config's notes), fit the
placement to the cluster, and open the metric logger."""

from __future__ import annotations

from typing import Any


def start_cluster(cfg: Any, print_fn=print):
    """``(cluster, plan)`` for a typed root config (``MathConfig`` / ``EmbodiedConfig``), after
    its placement-dependent checks (``cfg.check_against_plan``)."""
    from rlinf.scheduler import Cluster

    cluster = Cluster.from_config(cfg.cluster)
    print_fn(f"[rlinf] {cluster.origin}")
    for note in cfg.notes():
        print_fn(f"[rlinf] note: {note}")
    plan = cfg.cluster.plan(cluster.shape)
    cfg.check_against_plan(plan)
    return cluster, plan


def open_logger(runner_cfg: Any, resume_step: int | None):
    """The run's :class:`~rlinf.utils.metric_logger.MetricLogger` (``runner.logger``), cut back to
    ``resume_step`` when resuming."""
    from rlinf.utils.metric_logger import MetricLogger

    lg = runner_cfg.logger
    return MetricLogger(lg.log_path, lg.project_name, lg.experiment_name, lg.logger_backends,
                        resume_step=resume_step)
