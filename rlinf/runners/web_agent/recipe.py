"""The web-agent recipe (WebGym's seeds 000 / 004): a policy acting for many steps in real headless
Chromium on the shipped sites, judged, trained with filtered SFT or GRPO; one iteration as
:mod:`rlinf.runners.web_agent.loop` shows it.

    config (WebGym's keys) -> :class:`~rlinf.config.web.WebAgentConfig` + tasks + model / browser
    checks (before Ray) -> env ranks (browser servers, sites) + rollout + actor groups
    -> :class:`~rlinf.runners.web_agent.loop.WebAgentRunner` -> iterations -> summary

A config without an ``actor`` placement is a rollout-only phase (seed 004's ``rollout.py``: one
rollout of ``env_config.split`` per iteration, saved and judged); with one it is the online loop.
``examples/web_agent/main.py`` is its Hydra entry; :func:`run_web` runs it from a dict.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

from rlinf.config.web import WebAgentConfig
from rlinf.config.web_sections import WebRunnerConfig
from rlinf.runners.recipe import Recipe, run_recipe
from rlinf.runners.recovery import Recovery
from rlinf.runners.web_agent.memory import web_memory
from rlinf.runners.web_agent.preflight import WebStart, prepare_web
from rlinf.utils.metric_logger import MetricLogger
from rlinf.utils.typed_config import parse_section


def wandb_env(log_cfg) -> None:
    """wandb reads its key and entity from the environment: ``log_config.wandb_key_env_var``
    names the variable holding the key (unset = offline), ``entity_name`` the team."""
    key = os.environ.get(log_cfg.wandb_key_env_var)
    if key:
        os.environ["WANDB_API_KEY"] = key
        os.environ.setdefault("WANDB_MODE", "online")
    else:
        os.environ["WANDB_MODE"] = "offline"
    if log_cfg.entity_name:
        os.environ["WANDB_ENTITY"] = log_cfg.entity_name


class WebRecipe(Recipe):
    """Web-agent RL on the shared run layer (see the module docstring)."""

    name = "web_agent"
    config_cls = WebAgentConfig
    summary_metric = "success_rate"
    summary_label = "held-out success rate"
    layout_hint = "WebGym's layout (sections env_config / policy_config)"
    reference_page = "web"  # WebGym's keys: a page of their own
    reference_order = 0

    def claims(self, raw) -> bool:
        """WebGym's layout, recognised by its sections (it has no ``runner.task_type``)."""
        return "env_config" in raw or "policy_config" in raw

    def memory_estimate(self, cfg, plan, capacity, start=None):
        """Browsers, rollout and actor (:func:`~rlinf.runners.web_agent.memory.web_memory`)."""
        return web_memory(cfg, plan, capacity, capacity.kind == "gpu")

    def needed_extras(self, raw: Any) -> list[tuple[str, str]]:
        """``math`` (the policy's transformers) and ``web`` (Playwright)."""
        return [("math", "transformers and math-verify"), ("web", "Playwright (the web agent's browser driver)")]

    def prepare(self, raw: Any) -> WebStart:
        return prepare_web(raw)

    def describe(self, start: WebStart, plan) -> list[str]:
        cfg = start.cfg
        what = (f"online loop ({cfg.algorithm_config.method}, {cfg.runner.iterations} iterations)" if cfg.trains
                else f"rollout-only phase of split {cfg.env_config.split}")
        gen = cfg.env_config.vllm_server_url or f"{cfg.policy_config.rollout_backend} rollout workers"
        modes = ", ".join(f"{a}-{b} {plan.mode(a, b).value}" for a, b in (("env", "rollout"), ("rollout", "actor"))
                          if a in plan.components and b in plan.components)
        return [f"web agent: {what}; generation: {gen}; {modes or 'env only'}; outputs in {cfg.save_path}"]

    def open_logger(self, start: WebStart):
        """A :class:`~rlinf.utils.metric_logger.MetricLogger` in ``save_path`` (``metrics.jsonl``
        and ``algorithm_config.report_to``'s tracker, named by ``log_config``), cut back to the
        resumed iteration."""
        cfg = start.cfg
        os.makedirs(cfg.save_path, exist_ok=True)
        if cfg.algorithm_config.report_to == "wandb":
            wandb_env(cfg.log_config)
        backends = [cfg.algorithm_config.report_to] if cfg.algorithm_config.report_to != "none" else []
        return MetricLogger(cfg.save_path, cfg.log_config.project_name, cfg.log_config.run_name, backends,
                            resume_step=start.resume_step)

    def launch(self, start: WebStart, cluster, plan, print_fn: Callable = print):
        # lazy: groups loads the scheduler's worker-group layer (~0.2 s); only a launched run needs it
        from rlinf.runners.web_agent.groups import launch_web_groups

        return launch_web_groups(start.cfg, cluster, plan, start)

    def build_runner(self, start: WebStart, groups, logger, print_fn: Callable = print):
        # lazy: build imports the loop, torch and playwright (~5 s); only a launched run needs it
        from rlinf.runners.web_agent.build import build_runner

        return build_runner(start, groups, logger, print_fn)

    def recovery(self, raw: dict) -> Recovery:
        """``runner.recover_mode`` of the web keys; checkpoints in ``<save_path>/checkpoints``.
        A resume is never named by hand here: ``runner.resume: auto`` continues whatever
        ``save_path`` holds."""
        runner = parse_section(WebRunnerConfig, raw.get("runner"), "runner")
        save_path = raw.get("save_path")
        folder = os.path.join(str(save_path), "checkpoints") if isinstance(save_path, str) else ""
        return Recovery(runner.recover_mode, runner.recover_retries, folder,
                        resume_unverified=runner.resume_unverified)

    def with_resume(self, raw: dict, checkpoint: str | None) -> dict:
        """``runner.resume: auto``: the run continues from ``save_path`` (its latest complete
        checkpoint and the saved part of an interrupted batch)."""
        out = copy.deepcopy(raw)
        out.setdefault("runner", {})["resume"] = "auto"
        return out


#: the web-agent recipe (stateless; one instance serves every run)
WEB_RECIPE = WebRecipe()


def run_web(raw: Any, print_fn: Callable = print) -> dict[str, float]:
    """Run the web-agent job described by ``raw`` (a Hydra ``DictConfig`` or a dict):
    :func:`~rlinf.runners.recipe.run_recipe` with :data:`WEB_RECIPE`. Returns ``steps``
    (iterations finished) and the first / last evaluation success rates
    (``val/first_success_rate``, ``val/last_success_rate``)."""
    return run_recipe(WEB_RECIPE, raw, print_fn)
