"""A math (and tool-agent) step as the placement planner sees it (issue 46,
:meth:`~rlinf.runners.recipe.Recipe.placement_workflow`).

The step of :mod:`rlinf.runners.math.loop`, role by role, in the order it uses them:

    rollout  ->  reward (when placed as a group)  ->  inference (reference log-probs, when used)
             ->  critic (values, when placed)      ->  actor (log-probs + update, whole batch)

then the weight sync actor -> rollout. The knobs: ``algorithm.max_head_offpolicyness`` (how many
batches the rollout may generate ahead of training) where the config's mode lets it move, and
nothing for loops (math has none).

Placed roles the step does not use: ``inference`` placed while ``algorithm.kl_beta`` is 0, or
sharing devices with the actor (the actor then computes the reference log-probs from its own frozen
copy and no inference group starts). Such a role is left out of the workflow, and the planner is
given the placement without it
(:func:`rlinf.runners.autoplace_profile.used_placement`): no candidate places it, and the profile
needs no figures for it. Whatever is not a placed role runs elsewhere and is counted there: a
reward that is not placed scores in the driver (the profile's ``driver_s_per_step``), a critic
that is not placed runs on the actor's devices (its seconds are the actor's).

Example (the tiny disaggregated GRPO config: 32 prompts x 8 answers, synchronous, ``ppo`` loss):

    >>> from rlinf.runners.memory_plan import load_config
    >>> cfg, _, _ = load_config("examples/math/config/grpo_tiny_disaggregated.yaml")
    >>> wf = math_workflow(cfg)
    >>> wf.roles(), wf.samples_per_step, wf.lookahead
    (('rollout', 'reward', 'actor'), 256, (0,))
"""

from __future__ import annotations

from rlinf.config.math import MathConfig
from rlinf.scheduler import Mode
from rlinf.scheduler.autoplace import Stage, Workflow
from rlinf.scheduler.placement import PlacementPlan

__all__ = ["LOOKAHEAD_KEY", "inference_used", "math_workflow"]

#: the config key of the math lookahead
LOOKAHEAD_KEY = "algorithm.max_head_offpolicyness"
#: deepest lookahead the planner tries (or the config's own, when deeper)
MAX_LOOKAHEAD = 2
#: accelerators per node assumed to resolve a placement whose count is left to the machine
#: (``accelerators_per_node: null``): big enough that explicit ranges keep their overlaps
_WIDE = 1024


def _plan(cfg) -> PlacementPlan:
    """The config's placement plan; on a cluster whose accelerator count is the machine's, on a
    wide node (only which roles share devices is read from it)."""
    cluster = cfg.cluster
    return cluster.plan() if cluster.accelerators_per_node is not None else cluster.plan(cluster.shape(_WIDE))


def inference_used(cfg: MathConfig, plan: PlacementPlan | None = None) -> bool:
    """Whether the step runs a separate inference group: ``kl_beta > 0`` and ``inference`` placed
    on devices apart from the actor's (as :func:`~rlinf.runners.math.groups.launch_math_groups`)."""
    plan = plan or _plan(cfg)
    return (cfg.algorithm.kl_beta > 0 and "inference" in plan.components
            and plan.mode("actor", "inference") == Mode.DISAGGREGATED)


def _lookahead(cfg: MathConfig) -> tuple[tuple[int, ...], bool]:
    """The depths the config's mode allows, and whether the knob may move at all."""
    k = cfg.algorithm.max_head_offpolicyness
    deepest = max(MAX_LOOKAHEAD, k)
    mode = cfg.runner.rollout_mode  # as written: null derives the mode from the depth
    if mode == "sync" or (mode is None and cfg.algorithm.loss_type != "decoupled_ppo"):
        return (0,), False  # sync by choice, or a ppo loss that cannot correct older samples
    if mode in ("async", "fully_async"):
        # both need actor and rollout apart; a depth of 0 would allow collocated candidates
        return tuple(range(1, deepest + 1)) if k or mode == "async" else (0,), bool(k) or mode == "async"
    return tuple(range(0, deepest + 1)), True


def math_workflow(cfg: MathConfig) -> Workflow:
    """The math step of ``cfg`` as a :class:`~rlinf.scheduler.autoplace.Workflow` (see the module
    docstring); ``samples_per_step`` = ``data.rollout_batch_size`` x ``algorithm.group_size``."""
    plan = _plan(cfg)
    flow = [Stage("rollout")]
    if "reward" in plan.components:
        flow.append(Stage("reward"))
    if inference_used(cfg, plan):
        flow.append(Stage("inference"))
    if cfg.critic.use_critic_model and "critic" in plan.components:
        flow.append(Stage("critic"))
    flow.append(Stage("actor", whole_batch=True))
    depths, movable = _lookahead(cfg)
    return Workflow(flow=tuple(flow), trainer="actor", receivers=("rollout",), lookahead=depths,
                    lookahead_key=LOOKAHEAD_KEY if movable else None,
                    samples_per_step=cfg.data.rollout_batch_size * cfg.algorithm.group_size,
                    lookahead_now=cfg.algorithm.max_head_offpolicyness)
