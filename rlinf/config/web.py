"""The whole config of a web-agent run (WebGym's sections, seed 000), checked before anything starts.

Sections: ``save_path``, ``data_path``, ``model_config``, ``policy_config``, ``context_config``,
``env_config`` (:mod:`rlinf.config.web_env`), ``openai_config``, ``log_config``
(:mod:`rlinf.config.web_sections`), ``algorithm_config`` (:mod:`rlinf.config.web_train`),
``cluster`` (the scheduler's :class:`~rlinf.scheduler.config.ClusterConfig`) and ``runner``.

What runs follows from the placement: ``env`` is always placed (the browser servers);
``rollout`` generates with our engines (absent = an external server at
``env_config.vllm_server_url``); ``actor`` placed = the online loop (rollouts, then training,
each iteration), absent = a rollout-only run of ``env_config.split``.

Example:
    >>> cfg = WebAgentConfig.from_dict({
    ...     "save_path": "results/web", "policy_config": {"base_model": "models/tiny"},
    ...     "cluster": {"num_nodes": 1, "accelerators_per_node": 1,
    ...                 "component_placement": {"env": 0, "rollout": 0, "actor": 0}},
    ... }, check_paths=False)
    >>> cfg.trains, cfg.components, cfg.plan().mode("env", "actor").value
    (True, ('env', 'rollout', 'actor'), 'collocated')
    >>> WebAgentConfig.from_dict({"save_path": "r", "cluster": {"component_placement": {"env": 0}}},
    ...                          check_paths=False)
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: cluster.component_placement: missing component 'rollout': place it (the run's own rollout workers generate) or set env_config.vllm_server_url to an external OpenAI-compatible server
"""  # noqa: E501 - a doctest's expected output is one line

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from rlinf.config.root import RootConfig
from rlinf.config.web_env import DIFFICULTIES, WebEnvConfig
from rlinf.config.web_sections import (
    WebContextConfig,
    WebLogConfig,
    WebModelConfig,
    WebOpenAIConfig,
    WebPolicyConfig,
    WebRunnerConfig,
)
from rlinf.config.web_train import (  # noqa: F401
    DeepSpeedSettings,
    WebAlgorithmConfig,
    load_deepspeed_config,
    zero_to_fsdp,
    zero_to_fsdp_text,
)
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.placement import ClusterShape, PlacementPlan
from rlinf.utils.typed_config import check, collect_notes, field_default

#: Components a web-agent run can place; env is required.
WEB_COMPONENTS = ("env", "rollout", "actor")


@dataclass(frozen=True)
class WebAgentConfig(RootConfig):
    """The root of a web-agent run's config (``hydra:`` / ``defaults:`` are dropped first).

    Attributes:
        save_path: root of the run's outputs (trajectories, checkpoints, logs).
        cluster: where env (browser servers), rollout (generation) and actor (training) run.
        data_path: the folder holding task files; ``env_config.train_tasks`` / ``test_tasks``
            are relative to it unless absolute. Relative paths are relative to the working
            directory (the repository root for the shipped examples).
        model_config: the policy's model family and prompt version.
        policy_config: the policy's model folder and sampling settings.
        context_config: how pages and the history are shown to the policy.
        env_config: browser servers, timeouts, task sampling, incremental saves.
        openai_config: the evaluator and the LLM judges' endpoints.
        log_config: experiment tracking names.
        algorithm_config: the update: filtered SFT or GRPO, batch sizes, optimizer, backend.
        runner: iterations, evaluation schedule, seed, resume, time limit.
    """

    save_path: str
    cluster: ClusterConfig
    data_path: str = "examples/web_agent/data"
    model_config: WebModelConfig = field(default_factory=WebModelConfig)
    policy_config: WebPolicyConfig = field(default_factory=WebPolicyConfig)
    context_config: WebContextConfig = field(default_factory=WebContextConfig)
    env_config: WebEnvConfig = field(default_factory=WebEnvConfig)
    openai_config: WebOpenAIConfig = field(default_factory=WebOpenAIConfig)
    log_config: WebLogConfig = field(default_factory=WebLogConfig)
    algorithm_config: WebAlgorithmConfig = field(default_factory=WebAlgorithmConfig)
    runner: WebRunnerConfig = field(default_factory=WebRunnerConfig)

    COMPONENTS = WEB_COMPONENTS
    REQUIRED = ("env",)
    RUN_KIND = "a web-agent run"
    PLACEMENT_EXAMPLE = "{env: 0, rollout: 0}"

    # ------------------------------------------------------------------ what runs

    @property
    def components(self) -> tuple[str, ...]:
        """The placed components, in :data:`WEB_COMPONENTS` order."""
        return self.placed_components

    @property
    def trains(self) -> bool:
        """The online loop (actor placed) rather than a rollout-only run."""
        return "actor" in self.components

    @property
    def external_server(self) -> bool:
        """Generation goes to ``env_config.vllm_server_url`` instead of our rollout workers."""
        return self.env_config.vllm_server_url is not None

    @property
    def evaluates(self) -> bool:
        """Evaluation rollouts run (in the online loop, or as the run itself with split test)."""
        return self.env_config.evaluates

    def task_path(self, split: str) -> str:
        """The task file of ``split`` (train / test): absolute, or joined to ``data_path``.

        >>> WebAgentConfig(save_path="r", cluster=None, data_path="data").task_path("test")
        'data/test.jsonl'
        """
        name = self.env_config.train_tasks if split == "train" else self.env_config.test_tasks
        return name if os.path.isabs(name) else os.path.join(self.data_path, name)

    def needed_splits(self) -> tuple[str, ...]:
        """The task files this run reads: train when it collects train rollouts, test when it
        evaluates."""
        train = self.trains or self.env_config.split == "train"
        return tuple(s for s, on in (("train", train), ("test", self.evaluates)) if on)

    def plan(self, shape: ClusterShape | None = None) -> PlacementPlan:
        """The placement plan (``shape`` fills in a null ``accelerators_per_node``)."""
        return self.cluster.plan(shape)

    def notes(self) -> list[str]:
        """Start-up lines for accepted keys that do nothing in this run (the judges' endpoints
        under the rule evaluator, wandb names without wandb)."""
        out = collect_notes(self)
        if self.openai_config.evaluator == "rule":
            changed = [f.name for f in fields(WebOpenAIConfig) if f.name != "evaluator"
                       and getattr(self.openai_config, f.name) != field_default(f)]
            if changed:
                out.append(f"openai_config: {', '.join(changed)}: not read: openai_config.evaluator is rule "
                           "(answers are compared with the tasks' reference answers)")
        env = self.env_config
        default = field_default(next(f for f in fields(type(env)) if f.name == "screenshot_comparison_workers"))
        if not env.save_screenshots and env.screenshot_comparison_workers != default:
            out.append(f"env_config.screenshot_comparison_workers: {env.screenshot_comparison_workers}: not read: "
                       "env_config.save_screenshots is false (there are no screenshots to compare)")
        if self.policy_config.test_temperature is not None and not env.evaluates:
            out.append(f"policy_config.test_temperature: {self.policy_config.test_temperature}: not read: no "
                       "evaluation rollouts (env_config.test_tasks_rollout_size is 0)")
        runner_default = WebRunnerConfig()
        if not self.trains:
            for key in ("save_interval", "save_interval_secs"):
                if getattr(self.runner, key) != getattr(runner_default, key):
                    out.append(f"runner.{key}: {getattr(self.runner, key)}: not read: a rollout-only run (no actor "
                               "placed) saves its batches as they run and has no checkpoints")
        algo = self.algorithm_config
        if self.trains and algo.backend == "fsdp" and algo.deepspeed_config_filename is not None:
            ds = self.deepspeed_settings()
            out.append(f"algorithm_config.deepspeed_config_filename: {algo.deepspeed_config_filename} "
                       f"(ZeRO-{ds.stage}) "
                       f"runs on FSDP2 (training_backend fsdp): {zero_to_fsdp_text(ds)}")
        if self.algorithm_config.report_to != "wandb":
            changed = [f.name for f in fields(WebLogConfig) if f.name != "run_name"
                       and getattr(self.log_config, f.name) != field_default(f)]
            if changed:
                out.append(f"log_config: {', '.join(changed)}: not read: algorithm_config.report_to is "
                           f"{self.algorithm_config.report_to}")
        return out

    # ------------------------------------------------------------------ checks

    def validate(self, path: str) -> None:
        check(bool(self.save_path.strip()), "save_path", "expected a folder, got ''")
        check(bool(self.data_path.strip()), "data_path", "expected a folder, got ''")
        self._check_components()
        env, policy = self.env_config, self.policy_config
        if self.trains:
            check(env.split == "train", "env_config.split",
                  "the online loop (actor placed) trains on train rollouts: set train (evaluation "
                  "uses env_config.test_tasks)")
            cutoff = self.algorithm_config.cutoff_len
            check(policy.max_new_tokens < cutoff, "policy_config.max_new_tokens",
                  f"{policy.max_new_tokens} leaves no room for the prompt in algorithm_config.cutoff_len {cutoff}")
        if self.external_server:
            check(policy.rollout_backend == "hf", "policy_config.rollout_backend",
                  f"{policy.rollout_backend!r} has no effect: generation goes to env_config.vllm_server_url; "
                  "remove it (or set the URL null)")
        if env.split == "test" and not self.trains:
            check(env.evaluates, "env_config.test_tasks_rollout_size",
                  "0 with split test would collect nothing; set -1 (every task) or >= 1")
        default = field_default(next(f for f in fields(WebRunnerConfig) if f.name == "test_interval"))
        if not env.evaluates:
            check(self.runner.test_interval == default, "runner.test_interval",
                  f"{self.runner.test_interval} has no effect: env_config.test_tasks_rollout_size is 0 "
                  "(no evaluation)")
        elif env.split == "test" and not self.trains:
            check(self.runner.test_interval == default, "runner.test_interval",
                  f"{self.runner.test_interval} has no effect: a rollout-only run of split test makes every "
                  "iteration an evaluation batch")
        if self.cluster.accelerators_per_node is not None:
            self.check_against_plan(self.plan())

    def _check_components(self) -> None:
        self.check_component_names()
        names, url = self.components, self.env_config.vllm_server_url
        if self.trains:
            check("rollout" in names, "cluster.component_placement",
                  "missing component 'rollout': the online loop (actor placed) generates with its own "
                  "rollout workers, which load the trained weights; an external server cannot")
        if "rollout" in names:
            check(url is None, "env_config.vllm_server_url",
                  f"{url!r}, but rollout is placed (the run's own workers generate); set null, or "
                  "remove rollout from cluster.component_placement to use the external server")
        else:
            check(url is not None, "cluster.component_placement",
                  "missing component 'rollout': place it (the run's own rollout workers generate) or "
                  "set env_config.vllm_server_url to an external OpenAI-compatible server")

    def check_against_plan(self, plan: PlacementPlan) -> None:
        """Rules that depend on the number of env worker ranks (their share of instances,
        connections and ``rank_load_weight``)."""
        env = self.env_config
        ranks = plan.component("env").world_size
        weights = env.rank_load_weight
        check(not weights or len(weights) == ranks, "env_config.rank_load_weight",
              f"gives {len(weights)} weights for {ranks} env worker ranks (the env placement); give "
              f"{ranks} or none (equal shares)")
        check(env.server_size >= ranks, "env_config.server_size",
              f"{env.server_size} browser instances cannot be split over {ranks} env worker ranks "
              "(each needs >= 1)")
        for op, size in env.http_pools.as_dict().items():
            check(size >= ranks, f"env_config.http_pools.{op}",
                  f"{size} connections cannot be split over {ranks} env worker ranks (each needs >= 1)")

    def check_paths(self) -> None:
        """Files and folders the run reads must exist; raised before anything starts."""
        check(not os.path.isfile(self.save_path), "save_path", f"{self.save_path!r} is a file, not a folder")
        for split in self.needed_splits():
            key = f"env_config.{split}_tasks"
            path = self.task_path(split)
            check(os.path.isfile(path), key, f"{path!r} does not exist (relative names are joined to "
                                             f"data_path {self.data_path!r})")
        if "rollout" in self.components or self.trains:
            check(self.policy_config.base_model is not None, "policy_config.base_model",
                  "missing: the run's own rollout / actor workers need the policy's HF model folder")
            for key in ("base_model", "checkpoint_path"):
                folder = getattr(self.policy_config, key)
                if folder is not None:
                    check(os.path.isfile(os.path.join(folder, "config.json")), f"policy_config.{key}",
                          f"{folder!r} is not an HF model folder (no config.json)")
        exe = self.env_config.browser.executable_path
        check(exe is None or (os.path.isfile(exe) and os.access(exe, os.X_OK)),
              "env_config.browser.executable_path", f"{exe!r} is not an executable file")
        if self.trains and self.algorithm_config.backend == "deepspeed":
            self.deepspeed_settings()
            check(importlib.util.find_spec("deepspeed") is not None, "algorithm_config.training_backend",
                  "'deepspeed' needs the deepspeed package, which is not installed: run "
                  "`bash scripts/setup_env.sh --extras deepspeed`, or use fsdp")

    def deepspeed_settings(self) -> DeepSpeedSettings | None:
        """Read the DeepSpeed file (None when there is none) and check its batch counts against
        algorithm_config; errors name the key and the file."""
        path = self.algorithm_config.deepspeed_path()
        if path is None:
            return None
        settings = load_deepspeed_config(path)
        algo = self.algorithm_config
        for name, ours, theirs in (
                ("per_device_train_batch_size", algo.per_device_train_batch_size, settings.micro_batch_size),
                ("gradient_accumulation_steps", algo.gradient_accumulation_steps,
                 settings.gradient_accumulation_steps)):
            check(theirs is None or theirs == ours, f"algorithm_config.{name}",
                  f"{ours} disagrees with {settings.path} ({theirs}); write \"auto\" in the file")
        return settings

    def check_tasks(self, tasks: Sequence[Mapping[str, Any]], split: str) -> None:
        """Rules that need the loaded tasks of ``split`` (the runner calls it after loading):
        absolute start URLs without the site server; train tasks left after the blocked
        domains, and of every difficulty the ratio sampler asks for.

        >>> cfg = WebAgentConfig.from_dict({"save_path": "r", "env_config": {
        ...     "site_server": {"enabled": False}, "vllm_server_url": "http://127.0.0.1:8999"},
        ...     "cluster": {"component_placement": {"env": 0}}}, check_paths=False)
        >>> cfg.check_tasks([{"task_id": "t1", "start_url": "/shop/", "difficulty": "easy"}], "train")
        Traceback (most recent call last):
        ...
        rlinf.utils.typed_config.ConfigError: env_config.site_server.enabled: false, but task 't1' of examples/web_agent/data/train.jsonl has the relative start_url '/shop/'; enable the site server or make the URL absolute
        """  # noqa: E501 - a doctest's expected output is one line
        env, where = self.env_config, self.task_path(split)
        check(bool(tasks), f"env_config.{split}_tasks", f"{where} holds no task")
        if not env.site_server.enabled:
            for task in tasks:
                url = str(task.get("start_url", ""))
                check(url.startswith(("http://", "https://")), "env_config.site_server.enabled",
                      f"false, but task {task.get('task_id')!r} of {where} has the relative start_url "
                      f"{url!r}; enable the site server or make the URL absolute")
        if split != "train":
            return
        blocked = set(env.blocked_domains)
        kept = [t for t in tasks if t.get("domain") not in blocked]
        check(bool(kept), "env_config.blocked_domains",
              f"{sorted(blocked)} leaves none of the {len(tasks)} tasks of {where}")
        if env.train_tasks_ratio is not None:
            present = {t.get("difficulty") for t in kept}
            for name in DIFFICULTIES:
                share = getattr(env.train_tasks_ratio, name)
                check(share == 0 or name in present, f"env_config.train_tasks_ratio.{name}",
                      f"{share}, but {where} has no {name} task (after blocked_domains)")
