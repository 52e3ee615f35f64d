"""Launch the worker groups of a web run where ``cluster.component_placement`` puts them:
``env`` (browser servers: :class:`~rlinf.workers.env.web_env_worker.WebEnvWorker`), ``rollout``
(our generation engines; absent when ``env_config.vllm_server_url`` names an external server)
and ``actor`` (training; absent in a rollout-only phase). The actor's rank 0 is linked to the
rollout ranks for in-place weight sync, as in math runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rlinf.config.actor import ActorConfig
from rlinf.config.rollout import RolloutConfig
from rlinf.config.web_train import zero_to_fsdp
from rlinf.scheduler import TensorLink, WorkerGroup
from rlinf.utils.typed_config import ConfigError, parse_section

#: the actor section's keys -> the web keys they are made from (errors name what the user wrote)
ACTOR_KEYS = {"algorithm_config.seed": "runner.seed", "algorithm_config.model.model_path": "policy_config.base_model",
              "algorithm_config.optim.lr": "algorithm_config.learning_rate",
              "algorithm_config.lr_sched.lr_warmup_iters": "algorithm_config.warmup_steps",
              "algorithm_config.lr_sched.lr_decay_style": "algorithm_config.lr_scheduler_type",
              "algorithm_config.model.gradient_checkpointing": "algorithm_config.deepspeed_config_filename",
              "algorithm_config.fsdp_config": "algorithm_config.deepspeed_config_filename"}
#: the rollout section's keys -> the web keys
ROLLOUT_KEYS = {"policy_config.backend": "policy_config.rollout_backend"}


def parse_as_written(cls, raw: dict, path: str, written: dict[str, str], fallback: str):
    """``parse_section(cls, raw, path)`` for a section the run builds from the user's keys: an
    error names the key the user wrote (``written``: built key or key prefix -> written key;
    others: ``fallback``), never the built one.

    >>> from rlinf.config.actor import ActorConfig
    >>> parse_as_written(ActorConfig, {"optim": {"lr": -1.0}}, "algorithm_config", ACTOR_KEYS, "algorithm_config")
    Traceback (most recent call last):
    ...
    rlinf.utils.typed_config.ConfigError: algorithm_config.learning_rate: must be > 0, got -1.0
    """
    try:
        return parse_section(cls, raw, path)
    except ConfigError as exc:
        key = next((w for built, w in written.items() if exc.key == built or exc.key.startswith(built + ".")),
                   fallback)
        raise ConfigError(key, str(exc)[len(exc.key) + 2:]) from None


@dataclass
class WebGroups:
    """The launched groups; ``service_token``: the env ranks' browser servers' bearer token
    (derived from the run's secret; never printed)."""

    env: WorkerGroup
    env_urls: list[dict]
    rollout: WorkerGroup | None
    actor: WorkerGroup | None
    service_token: str | None = field(default=None, repr=False)

    def shutdown(self) -> None:
        if self.env is not None:
            try:
                self.env.execute("close").wait(timeout=30)
            except Exception:  # noqa: BLE001 - a dead env rank has nothing left to close
                pass
        for group in (self.env, self.rollout, self.actor):
            if group is not None:
                group.shutdown()


def rollout_section(cfg):
    """The math-side ``RolloutConfig`` our generation workers take, from ``policy_config``."""
    backend = {"hf": "huggingface", "vllm": "vllm"}[cfg.policy_config.rollout_backend]
    return parse_as_written(RolloutConfig, {"backend": backend, "detokenize": True}, "policy_config", ROLLOUT_KEYS,
                            "policy_config")


def actor_section(cfg, model_path: str):
    """The ``ActorConfig`` of the web actor, from ``algorithm_config`` (seed 000's keys)."""
    a = cfg.algorithm_config
    decay = {"constant_with_warmup": "constant", "constant": "constant", "linear": "linear",
             "cosine": "cosine"}[a.lr_scheduler_type]
    warmup = 0 if a.lr_scheduler_type == "constant" else a.warmup_steps
    raw = {"seed": cfg.runner.seed if cfg.runner.seed is not None else 1234,
           "model": {"model_path": model_path},
           "optim": {"lr": a.learning_rate, "clip_grad": 1.0},
           "lr_sched": {"lr_warmup_iters": warmup, "lr_decay_style": decay}}
    if a.backend == "fsdp" and a.deepspeed_config_filename is not None:  # the ZeRO file mapped onto FSDP2
        z = zero_to_fsdp(cfg.deepspeed_settings())
        raw["model"]["gradient_checkpointing"] = z["gradient_checkpointing"]
        raw["fsdp_config"] = {"sharding_strategy": z["sharding_strategy"], "cpu_offload": z["cpu_offload"],
                              "mixed_precision": {"param_dtype": z["param_dtype"]}}
    return parse_as_written(ActorConfig, raw, "algorithm_config", ACTOR_KEYS, "algorithm_config")


def algorithm_section(cfg):
    """The math-side ``AlgorithmConfig`` the actor's loss reads (GRPO: PPO clip; the sampling
    temperature the log-probs are computed at)."""
    # lazy: config.algorithm imports torch (~6.5 s); the web preflight reaches this module without needing it
    from rlinf.config.algorithm import AlgorithmConfig, SamplingParams

    a, p = cfg.algorithm_config, cfg.policy_config
    temperature = p.temperature if a.method == "grpo" and p.temperature > 0 else 1.0
    return AlgorithmConfig(group_size=max(a.group_size, 1), ratio_clip_eps=a.clip_ratio,
                           training_batch_size_per_gpu=a.per_device_train_batch_size,
                           sampling_params=SamplingParams(temperature=temperature))


def sampling_params(cfg, temperature: float | None = None):
    # lazy: config.algorithm imports torch (~6.5 s); the web preflight reaches this module without needing it
    from rlinf.config.algorithm import SamplingParams

    p = cfg.policy_config
    t = p.temperature if temperature is None else temperature
    return SamplingParams(do_sample=t > 0, temperature=t if t > 0 else 1.0,
                          top_k=p.top_k if p.top_k > 0 else 1000000, top_p=p.top_p,
                          max_new_tokens=p.max_new_tokens, min_p=p.min_p)


def total_update_steps(cfg, actor_ranks: int) -> int:
    """Optimizer steps the LR schedule plans for (filtered_sft: positive_samples_to_train per
    iteration; grpo: the train rollout's size x group size, one step per sample at most)."""
    a, e = cfg.algorithm_config, cfg.env_config
    per_iter = (a.positive_samples_to_train if a.method == "filtered_sft"
                else max(e.train_tasks_rollout_size, 1) * a.group_size)
    per_step = a.per_device_train_batch_size * a.gradient_accumulation_steps * actor_ranks
    return max(1, cfg.runner.iterations * a.num_train_epochs * math.ceil(per_iter / per_step))


def multi_node(cluster) -> bool:
    """Whether the browser servers must bind their node's address (the env workers run apart
    from the driver, on more than one node) rather than 127.0.0.1.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> two, ray, local = NS(num_nodes=2), NS(in_process=False), NS(in_process=True)
        >>> multi_node(NS(backend=ray, shape=two)), multi_node(NS(backend=local, shape=two))
        (True, False)
    """
    return not cluster.backend.in_process and cluster.shape.num_nodes > 1


def launch_web_groups(cfg, cluster, plan, start) -> WebGroups:
    # lazy: the workers import torch, safetensors and the engines (~2 s); only launch needs them
    from rlinf.workers.actor.web_actor import WebActorWorker
    from rlinf.workers.env.web_env_worker import SERVICE_PURPOSE, WebEnvWorker
    from rlinf.workers.links import WEIGHT_LINK
    from rlinf.workers.rollout.generation_worker import GenerationWorker

    e = cfg.env_config
    env_plan = plan.component("env")
    weights = list(e.rank_load_weight) or [1.0] * env_plan.world_size
    service = dict(operation_timeout=e.operation_timeout, wait_timeout=e.wait_timeout,
                   instance_lifetime_max_minutes=e.instance_lifetime_max,
                   executable_path=start.executable, viewport=tuple(e.browser.viewport), headless=e.browser.headless)
    site_seed = e.site_server.seed if e.site_server.enabled else None
    launched: list[WorkerGroup] = []
    try:
        env = WorkerGroup.launch(cluster, WebEnvWorker, env_plan, name="WebEnvGroup",
                                 args=(e.server_size, weights, service, site_seed, multi_node(cluster)),
                                 wait=False)
        launched.append(env)
        rollout = actor = None
        if "rollout" in plan.components and e.vllm_server_url is None:
            rollout = WorkerGroup.launch(cluster, GenerationWorker, plan.component("rollout"), name="RolloutGroup",
                                         args=(start.model_path, rollout_section(cfg)), wait=False)
            launched.append(rollout)
        if "actor" in plan.components:
            ranks = plan.component("actor").world_size
            a = cfg.algorithm_config
            deepspeed = ((str(a.deepspeed_path()), a.gradient_accumulation_steps)
                         if a.backend == "deepspeed" else None)
            actor = WorkerGroup.launch(cluster, WebActorWorker, plan.component("actor"), name="ActorGroup",
                                       args=(start.model_path, actor_section(cfg, start.model_path),
                                             algorithm_section(cfg), total_update_steps(cfg, ranks),
                                             a.method, a.per_device_train_batch_size, deepspeed), wait=False)
            launched.append(actor)
        for group in launched:
            group.wait_started()
        if actor is not None and rollout is not None:
            TensorLink.connect(WEIGHT_LINK, actor, 0, rollout)
        urls = env.execute("urls").wait()
    except BaseException:
        for group in launched:
            group.shutdown()
        raise
    return WebGroups(env, urls, rollout, actor, service_token=cluster.secret.token(SERVICE_PURPOSE))
