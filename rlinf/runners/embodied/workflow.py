"""An embodied (on-policy) step as the placement planner sees it (issue 46,
:meth:`~rlinf.runners.recipe.Recipe.placement_workflow`).

The step of :mod:`rlinf.runners.embodied.loop`: the env workers and the rollout (policy) workers
take turns, chunk step after chunk step, over every train env, ``rollout_epoch`` times; then the
actor trains on the whole batch and sends its weights to the rollout::

    Loop((env, rollout), iterations = chunk steps x rollout_epoch)  ->  actor (whole batch)

Every placed role (env, rollout, actor) is used. One sample is one transition of one env (what
the update trains on): ``samples_per_step`` = ``env.train.total_num_envs`` x chunk steps x
``algorithm.rollout_epoch``.

Knobs: ``algorithm.max_head_offpolicyness`` 0 or 1 (the next rollout runs during the update), only
where the config may take both (a ``ppo`` loss, ``rollout_epoch`` 1, no ``enable_offload``);
``rollout.pipeline_stage_num``: the stage counts (1-4) that split every split's envs evenly (and
into whole groups) on one env process.

Example (the toy reaching task: 16 envs x 20 chunk steps, 2 pipeline stages, synchronous):

    >>> from rlinf.runners.memory_plan import load_config
    >>> cfg, _, _ = load_config("examples/embodiment/config/toy_ppo_mlp.yaml")
    >>> wf = embodied_workflow(cfg)
    >>> wf.roles(), wf.samples_per_step, wf.lookahead, wf.pipeline_stages, wf.pipeline_stages_now
    (('env', 'rollout', 'actor'), 320, (0, 1), (1, 2, 4), 2)
"""

from __future__ import annotations

from rlinf.config.embodied import EmbodiedConfig
from rlinf.scheduler.autoplace import Loop, Stage, Workflow

__all__ = ["LOOKAHEAD_KEY", "PIPELINE_KEY", "embodied_workflow", "pipeline_stage_options"]

LOOKAHEAD_KEY = "algorithm.max_head_offpolicyness"
PIPELINE_KEY = "rollout.pipeline_stage_num"
#: the most pipeline stages the planner tries
MAX_STAGES = 4


def pipeline_stage_options(cfg: EmbodiedConfig) -> tuple[int, ...]:
    """Stage counts up to :data:`MAX_STAGES` (and the config's own) that split the train and eval
    envs evenly into whole groups on one env process."""
    out = []
    for s in range(1, max(MAX_STAGES, cfg.rollout.pipeline_stage_num) + 1):
        ok = all(split.total_num_envs % s == 0 and (split.total_num_envs // s) % split.group_size == 0
                 for split in (cfg.env.train, cfg.env.eval))
        if ok or s == cfg.rollout.pipeline_stage_num:
            out.append(s)
    return tuple(out)


def _lookahead(cfg: EmbodiedConfig) -> tuple[int, ...]:
    algo = cfg.algorithm
    if algo.loss_type != "ppo":
        return (1,)  # decoupled_ppo needs the rollout one version ahead
    offload = any(bool(x) for x in (cfg.env.enable_offload, cfg.actor.enable_offload, cfg.rollout.enable_offload))
    if algo.rollout_epoch != 1 or offload:
        return (0,)
    return (0, 1)


def embodied_workflow(cfg: EmbodiedConfig) -> Workflow:
    """The embodied step of ``cfg`` (see the module docstring)."""
    depths, stages = _lookahead(cfg), pipeline_stage_options(cfg)
    iterations = cfg.chunk_steps * cfg.algorithm.rollout_epoch
    return Workflow(flow=(Loop(("env", "rollout"), iterations=iterations), Stage("actor", whole_batch=True)),
                    trainer="actor", receivers=("rollout",), lookahead=depths,
                    lookahead_key=LOOKAHEAD_KEY if len(depths) > 1 else None,
                    pipeline_stages=stages, pipeline_key=PIPELINE_KEY if len(stages) > 1 else None,
                    samples_per_step=cfg.env.train.total_num_envs * iterations,
                    lookahead_now=cfg.algorithm.max_head_offpolicyness,
                    pipeline_stages_now=cfg.rollout.pipeline_stage_num)
