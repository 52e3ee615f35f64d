"""The off-policy embodied recipe: SAC, CrossQ and RLPD on a replay buffer, on the same
simulators, env workers and checks as the embodied recipe, one training step as
:mod:`rlinf.runners.embodied_offpolicy.loop` shows it.

    config -> :class:`~rlinf.config.embodied_offpolicy.OffPolicyEmbodiedConfig` + simulator shapes
    + demonstration file (before Ray) -> env workers (report the observation spec) -> rollout
    workers (the SAC actor) and the actor worker (learner + buffers), one channel between them
    -> :class:`~rlinf.runners.embodied_offpolicy.loop.OffPolicyRunner` -> fit / only_eval

``examples/embodiment/main_embodied.py`` picks it when ``algorithm.loss_type`` (or ``adv_type``) is
``embodied_sac`` (:func:`embodied_recipe_for`); :func:`run_offpolicy` runs it from a dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlinf.config.embodied_offpolicy import OffPolicyEmbodiedConfig, OffPolicyRunnerConfig, offpolicy_requested
from rlinf.runners.embodied.recipe import EMBODIED_RECIPE, link_labels
from rlinf.runners.embodied_offpolicy.memory import buffer_items
from rlinf.runners.embodied_offpolicy.preflight import OffPolicyStart, prepare_offpolicy
from rlinf.runners.memory_check import with_items
from rlinf.runners.recipe import Recipe, run_recipe
from rlinf.runners.recovery import runner_recovery


class OffPolicyRecipe(Recipe):
    """Off-policy embodied RL on the shared run layer (see the module docstring)."""

    name = "embodied_offpolicy"
    config_cls = OffPolicyEmbodiedConfig
    summary_metric = "success_rate"
    summary_label = "eval success rate"
    task_type = "embodied"
    reference_order = 30  # last: its own algorithm and runner sections
    reference_suffix = "(off-policy embodied)"

    def claims(self, raw) -> bool:
        """``runner.task_type: embodied`` with ``algorithm.loss_type`` / ``adv_type:
        embodied_sac`` (RLinf's switch)."""
        return super().claims(raw) and offpolicy_requested(raw)

    def memory_estimate(self, cfg, plan, capacity, start=None):
        """The embodied figures plus the replay buffer (and the demonstrations) in the actor
        process (:func:`~rlinf.runners.embodied_offpolicy.memory.buffer_items`)."""
        est = EMBODIED_RECIPE.memory_estimate(cfg, plan, capacity, start)
        items, notes = buffer_items(cfg, start)
        est = with_items(est, {"actor": items})
        return type(est)(est.components, (*est.notes, *notes))

    def needed_extras(self, raw: Any) -> list[tuple[str, str]]:
        """The embodied run's (its simulators and policies)."""
        return EMBODIED_RECIPE.needed_extras(raw)

    def prepare(self, raw: Any) -> OffPolicyStart:
        return prepare_offpolicy(raw)

    def describe(self, start: OffPolicyStart, plan) -> list[str]:
        cfg = start.cfg
        algo, model = cfg.algorithm, cfg.actor.model.policy
        kind = ("CrossQ" if model.q_head_type == "crossq" else "RLPD" if algo.demo_buffer is not None else "SAC")
        train = cfg.env.train
        demos = (f", {len(start.demos['reward'])} demonstration transitions ({start.demo_episodes} episodes)"
                 if start.demos is not None else "")
        utd = algo.update_epoch / (cfg.rollout_steps * train.total_num_envs)
        return [f"embodied off-policy {kind} ({cfg.runner.rollout_mode}): {train.env_type} "
                f"{train.init_params.id or train.task_suite_name or ''}, {train.total_num_envs} train envs x "
                f"{cfg.rollout_steps} steps per collection, {algo.update_epoch} updates per step (UTD {utd:.3g}), "
                f"batch {cfg.actor.global_batch_size}, {model.num_q_heads} {model.q_head_type} Q heads{demos}; "
                f"logs in {cfg.runner.logger.log_path}",
                f"groups {cfg.env.group_name} (env), {cfg.rollout.group_name} (rollout), {cfg.actor.group_name} "
                f"(actor); links: {link_labels(cfg)}"]

    def recovery(self, raw: dict):
        return runner_recovery(raw, OffPolicyRunnerConfig)

    def launch(self, start: OffPolicyStart, cluster, plan, print_fn: Callable = print):
        # lazy: the off-policy loop and its workers (~1 s) only once Ray starts, not for preflight/CLI
        from rlinf.runners.embodied_offpolicy.loop import launch_offpolicy_groups

        return launch_offpolicy_groups(start, cluster, plan)

    def build_runner(self, start: OffPolicyStart, groups, logger, print_fn: Callable = print):
        # lazy: the off-policy loop and its workers (~1 s) only once Ray starts, not for preflight/CLI
        from rlinf.runners.embodied_offpolicy.loop import OffPolicyRunner

        return OffPolicyRunner(start.cfg, groups, logger, print_fn)


#: the off-policy recipe (stateless; one instance serves every run)
OFFPOLICY_RECIPE = OffPolicyRecipe()


def embodied_recipe_for(cfg: Any) -> Recipe:
    """The recipe an embodied config asks for: :data:`OFFPOLICY_RECIPE` when
    ``algorithm.loss_type`` / ``adv_type`` is ``embodied_sac``, else the on-policy one."""
    return OFFPOLICY_RECIPE if offpolicy_requested(cfg) else EMBODIED_RECIPE


def run_offpolicy(raw: Any, print_fn: Callable = print) -> dict[str, float]:
    """Run the off-policy job described by ``raw`` (a Hydra ``DictConfig`` or a plain dict);
    returns ``steps`` and, when evaluating, ``val/first_success_rate`` / ``val/last_success_rate``."""
    return run_recipe(OFFPOLICY_RECIPE, raw, print_fn)
