"""The embodied recipe: PPO with GAE or GRPO on simulators (ManiSkill3, LIBERO, the toy reaching
task) with MLP / CNN / OpenVLA(-OFT) policies, one training step as
:mod:`rlinf.runners.embodied.loop` shows it.

    config -> :class:`~rlinf.config.embodied.EmbodiedConfig` + simulator shapes (before Ray)
    -> env workers (report the observation spec) -> rollout and actor groups
    -> :class:`~rlinf.runners.embodied.loop.EmbodiedRunner` -> fit / only_eval
    -> saved policy, curve PNG, summary

``examples/embodiment/main_embodied.py`` is its Hydra entry; :func:`run_embodied` runs it from a
dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlinf.config.embodied import EmbodiedConfig
from rlinf.config.embodied_offpolicy import offpolicy_requested
from rlinf.runners.embodied.memory import embodied_memory
from rlinf.runners.embodied.preflight import EmbodiedStart, prepare_embodied
from rlinf.runners.extras_check import config_value
from rlinf.runners.recipe import Recipe, run_recipe

#: ``env.<split>.env_type`` -> (the extra that installs it, the library's name)
SIMULATOR_EXTRAS = {"maniskill": ("embodied", "ManiSkill3"), "libero": ("libero", "LIBERO"),
                    "metaworld": ("metaworld", "Meta-World"), "gymnasium": ("embodied", "gymnasium")}


def link_labels(cfg) -> str:
    """The env / rollout / actor ``channel`` blocks as labels of the links they name.

    >>> from types import SimpleNamespace
    >>> from rlinf.config.rollout import ChannelRef
    >>> cfg = SimpleNamespace(env=SimpleNamespace(channel=ChannelRef("env_buffer_list", "obs_buffer")),
    ...                       rollout=SimpleNamespace(channel=ChannelRef("env_buffer_list", "action_buffer")),
    ...                       actor=SimpleNamespace(channel=ChannelRef("replay_buffer", "replay_buffer")))
    >>> link_labels(cfg)
    'observations env -> rollout env_buffer_list/obs_buffer, actions rollout -> env env_buffer_list/action_buffer, trajectories rollout -> actor replay_buffer/replay_buffer'
    """  # noqa: E501 - a doctest's expected output is one line
    env, roll, act = cfg.env.channel, cfg.rollout.channel, cfg.actor.channel
    return (f"observations env -> rollout {env.name}/{env.queue_name}, actions rollout -> env "
            f"{roll.name}/{roll.queue_name}, trajectories rollout -> actor {act.name}/{act.queue_name}")


class EmbodiedRecipe(Recipe):
    """Embodied RL on the shared run layer (see the module docstring)."""

    name = "embodied"
    config_cls = EmbodiedConfig
    summary_metric = "success_rate"
    summary_label = "eval success rate"
    task_type = "embodied"
    reference_order = 10  # after math's: adds env and below

    def claims(self, raw) -> bool:
        """``runner.task_type: embodied`` without the off-policy switch (``algorithm.loss_type``
        / ``adv_type: embodied_sac``, RLinf's)."""
        return super().claims(raw) and not offpolicy_requested(raw)

    def memory_estimate(self, cfg, plan, capacity, start=None):
        """Simulators, rollout and actor (:func:`~rlinf.runners.embodied.memory.embodied_memory`)."""
        return embodied_memory(cfg, plan, capacity, capacity.kind == "gpu")

    def placement_workflow(self, cfg):
        """``Loop((env, rollout), chunk steps x rollout_epoch)`` -> actor (whole batch), lookahead
        0 / 1 and ``rollout.pipeline_stage_num`` where the config may take them; every placed role
        is used (:func:`~rlinf.runners.embodied.workflow.embodied_workflow`)."""
        from rlinf.runners.embodied.workflow import embodied_workflow  # lazy: the registry imports this module

        return embodied_workflow(cfg)

    def needed_extras(self, raw: Any) -> list[tuple[str, str]]:
        """Per split ``env.<split>.env_type``: ``maniskill`` -> ``embodied``, ``libero`` ->
        ``libero``, ``metaworld`` -> ``metaworld``, ``gymnasium`` -> ``embodied`` (which brings
        gymnasium; ``toy`` needs nothing); ``save_video`` ->
        ``embodied`` (imageio); ``actor.model.model_type`` openvla / openvla_oft -> ``math`` and
        ``embodied`` (transformers, peft); pi0 / pi05 -> ``math`` and ``embodied`` (transformers,
        sentencepiece)."""
        out: list[tuple[str, str]] = []
        env = config_value(raw, "env", {}) or {}
        for split in ("train", "eval"):
            env_type = str(config_value(env, f"{split}.env_type", "") or "")
            if env_type in SIMULATOR_EXTRAS:
                extra, name = SIMULATOR_EXTRAS[env_type]
                out.append((extra, f"{name} (env.{split}.env_type: {env_type})"))
            if config_value(env, f"{split}.video_cfg.save_video", False) is True:
                out.append(("embodied", f"imageio (env.{split}.video_cfg.save_video)"))
        model_type = str(config_value(raw, "actor.model.model_type", "") or "")
        if model_type in ("openvla", "openvla_oft"):
            out.append(("math", f"transformers (actor.model.model_type: {model_type})"))
            out.append(("embodied", f"peft (actor.model.model_type: {model_type})"))
        if model_type in ("pi0", "pi05"):
            out.append(("math", f"transformers (actor.model.model_type: {model_type})"))
            out.append(("embodied", f"sentencepiece (actor.model.model_type: {model_type})"))
        return out

    def prepare(self, raw: Any) -> EmbodiedStart:
        return prepare_embodied(raw)

    def describe(self, start: EmbodiedStart, plan) -> list[str]:
        cfg = start.cfg
        modes = ", ".join(f"{a}-{b} {plan.mode(a, b).value}" for a, b in
                          (("env", "rollout"), ("rollout", "actor"), ("env", "actor")))
        train = cfg.env.train
        return [f"embodied {cfg.algorithm.adv_type}: {train.env_type} "
                f"{train.init_params.id or train.task_suite_name or ''}, {train.total_num_envs} train envs, "
                f"policy {cfg.actor.model.model_type}, {cfg.rollout.pipeline_stage_num} pipeline stage(s); "
                f"{modes}; logs in {cfg.runner.logger.log_path}",
                f"groups {cfg.env.group_name} (env), {cfg.rollout.group_name} (rollout), "
                f"{cfg.actor.group_name} (actor); links: {link_labels(cfg)}"]

    def launch(self, start: EmbodiedStart, cluster, plan, print_fn: Callable = print):
        # lazy: the loop and workers cost ~3.1 s more; registry imports this recipe for preflight, --memory, the doc
        from rlinf.runners.embodied.loop import launch_embodied_groups

        return launch_embodied_groups(start.cfg, cluster, plan)

    def build_runner(self, start: EmbodiedStart, groups, logger, print_fn: Callable = print):
        # lazy: the loop and workers cost ~3.1 s more; only a launched run needs them
        from rlinf.runners.embodied.loop import EmbodiedRunner

        return EmbodiedRunner(start.cfg, groups, logger)


#: the embodied recipe (stateless; one instance serves every run)
EMBODIED_RECIPE = EmbodiedRecipe()


def run_embodied(raw: Any, print_fn: Callable = print) -> dict[str, float]:
    """Run the embodied RL job described by ``raw`` (a Hydra ``DictConfig`` or a plain dict):
    :func:`~rlinf.runners.recipe.run_recipe` with :data:`EMBODIED_RECIPE`. Returns ``steps``
    and, when evaluating, ``val/first_success_rate`` / ``val/last_success_rate`` (or the eval
    metrics with ``runner.only_eval``)."""
    return run_recipe(EMBODIED_RECIPE, raw, print_fn)
