"""ROLL RLVR / PPO configs (seed 001's keys, ROLL's example configs) -> an rlinf math config.

The workers' ``device_mapping`` (read by :mod:`rlinf.config.translate.device_mapping`) become the
placement: ``actor_train`` -> actor, ``actor_infer`` -> rollout (``num_gpus_per_worker``
accelerators per engine), ``reference`` -> the actor itself when on the same accelerators, else an
inference group, ``critic`` -> critic. ``strategy_args`` pick the backends (megatron_train ->
Megatron; fsdp2_train and deepspeed_train -> FSDP2; vllm / sglang / hf_infer -> rollout.backend).

Example:
    >>> t = translate_roll({"rollout_batch_size": 64, "num_return_sequences_in_group": 8,
    ...     "actor_train": {"strategy_args": {"strategy_name": "megatron_train",
    ...                                       "strategy_config": {"tensor_model_parallel_size": 2}},
    ...                     "device_mapping": "list(range(0,4))"},
    ...     "actor_infer": {"strategy_args": {"strategy_name": "vllm"}, "num_gpus_per_worker": 2,
    ...                     "device_mapping": "list(range(4,8))"}})
    >>> t.out["cluster"]["component_placement"], t.out["rollout"]
    ({'actor': '0-3', 'rollout,reward': '4-7:0-1'}, {'backend': 'vllm', 'tensor_parallel_size': 2})
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlinf.config.translate.areal import DTYPES, NULLABLE, num
from rlinf.config.translate.common import DIFF, NO, SourceError, Translation, cluster_section, show
from rlinf.config.translate.device_mapping import DeviceMappingError, parse_device_mapping

ROLLOUT_BACKENDS = {"vllm": "vllm", "sglang": "sglang", "hf_infer": "huggingface"}
TRAIN_BACKENDS = {"megatron_train": "megatron", "fsdp2_train": "fsdp", "deepspeed_train": "fsdp"}
LOSS_AGG = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")

SIMPLE: dict[str, tuple[str, Callable[[Any], Any] | None]] = {
    "exp_name": ("runner.experiment_name", str),
    "seed": ("runner.seed", None),
    "output_dir": ("runner.output_dir", None),
    "logging_dir": ("runner.logger.log_path", None),
    "max_steps": ("runner.max_steps", None),
    "save_steps": ("runner.save_interval", None),
    "eval_steps": ("runner.val_check_interval", None),
    "num_gpus_per_node": ("cluster.accelerators_per_node", None),
    "rollout_batch_size": ("data.rollout_batch_size", None),
    "val_batch_size": ("data.val_rollout_batch_size", None),
    "prompt_length": ("data.max_prompt_length", None),
    "num_return_sequences_in_group": ("algorithm.group_size", None),
    "pretrain": ("actor.model.model_path", None),
    "pg_clip": ("algorithm.ratio_clip_eps", num),
    "value_clip": ("critic.value_clip", num),
    "reward_clip": ("algorithm.reward_clip", num),
    "lambd": ("algorithm.lam", num),
    "gamma": ("algorithm.gamma", num),
    "max_grad_norm": ("actor.optim.clip_grad", num),
    "entropy_loss_coef": ("algorithm.entropy_bonus", num),
    "critic_warmup": ("critic.warmup_steps", None),
    "enable_old_logprobs_recompute": ("rollout.recompute_logprobs", None),
    "actor_train.model_args.dtype": ("actor.model.precision", lambda v: DTYPES.get(str(v), v)),
    "actor_train.model_args.model_name_or_path": ("actor.model.model_path", None),
    "actor_train.model_args.attn_implementation": ("actor.model.attn_implementation",
                                                   lambda v: {"fa2": "flash_attention_2"}.get(v, v)),
    "actor_train.training_args.learning_rate": ("actor.optim.lr", num),
    "actor_train.training_args.weight_decay": ("actor.optim.weight_decay", num),
    "actor_train.training_args.warmup_steps": ("actor.lr_sched.lr_warmup_iters", None),
    "actor_train.training_args.lr_scheduler_type": ("actor.lr_sched.lr_decay_style", None),
    "actor_train.training_args.adam_beta1": ("actor.optim.adam_beta1", num),
    "actor_train.training_args.adam_beta2": ("actor.optim.adam_beta2", num),
    "actor_train.training_args.adam_epsilon": ("actor.optim.adam_eps", num),
    "actor_train.training_args.max_grad_norm": ("actor.optim.clip_grad", num),
    "actor_train.training_args.per_device_train_batch_size": ("algorithm.training_batch_size_per_gpu", None),
    "actor_train.data_args.prompt": ("data.prompt_key", None),
    "actor_train.data_args.messages": ("data.messages_key", None),
    "actor_train.infer_batch_size": ("algorithm.logprob_forward_micro_batch_size", None),
    "actor_infer.generating_args.max_new_tokens": ("algorithm.sampling_params.max_new_tokens", None),
    "actor_infer.generating_args.min_new_tokens": ("algorithm.sampling_params.min_new_tokens", None),
    "actor_infer.generating_args.temperature": ("algorithm.sampling_params.temperature", num),
    "actor_infer.generating_args.top_p": ("algorithm.sampling_params.top_p", num),
    "actor_infer.generating_args.top_k": ("algorithm.sampling_params.top_k", None),
    "actor_infer.generating_args.do_sample": ("algorithm.sampling_params.do_sample", None),
    "actor_infer.generating_args.repetition_penalty": ("algorithm.sampling_params.repetition_penalty", num),
    "actor_infer.infer_batch_size": ("algorithm.rollout_batch_size_per_gpu", None),
    "critic.training_args.learning_rate": ("critic.lr", num),
}

REFUSED: dict[str, str] = {
    "hydra": NO + "Hydra's own settings of the ROLL run; the written file has rlinf's",
    "defaults": NO + "ROLL's Hydra defaults list (its shared config files) is not read",
    "logging_steps": NO + "rlinf logs every step",
    "track_with": NO + "rlinf's loggers are runner.logger.logger_backends",
    "tracker_kwargs": NO + "tracker credentials and options are not carried over",
    "rpc_timeout": NO + "Ray calls have no configurable timeout here",
    "system_envs": NO + "environment variables are not set by the config",
    "profiler_timeline": NO + "the math config has no profiler",
    "profiler_memory": NO + "the math config has no profiler",
    "profiler_output_dir": NO + "the math config has no profiler",
    "length_profiler_dir": NO + "the math config has no profiler",
    "report_length_and_rewards": NO + "rlinf logs lengths and rewards every step",
    "model_download_type": NO + "models are local HF folders",
    "checkpoint_config": NO + "checkpoints go to runner.output_dir",
    "max_ckpt_to_keep": NO + "rlinf keeps every checkpoint",
    "base_dir": NO + "outputs go to runner.output_dir",
    "rollout_dump_dir": NO + "rollouts are not dumped",
    "num_nodes": NO + "cluster.num_nodes follows from the device mappings",
    "sequence_length": NO + "runner.seq_length = prompt_length + response_length",
    "val_prompt_length": NO + "validation uses data.max_prompt_length",
    "val_sequence_length": NO + "validation uses runner.seq_length",
    "generate_opt_level": NO + "generation batching is the rollout engine's",
    "is_num_return_sequences_expand": NO + "generation batching is the rollout engine's",
    "max_running_requests": NO + "set rollout.max_running_requests for the engine",
    "is_use_additional_prompts": NO + "every step takes exactly data.rollout_batch_size prompts",
    "max_additional_running_prompts": NO + "every step takes exactly data.rollout_batch_size prompts",
    "model_update_buffer_size_mb": NO + "weight sync buffers are rlinf's own",
    "is_offload_states": DIFF + "rlinf offloads per component (actor.offload_*, rollout.enable_offload)",
    "l2": NO + "rlinf's weight decay is decoupled (actor.optim.weight_decay)",
    "target_kl": NO + "rlinf's KL weight is fixed (no adaptive controller)",
    "kl_horizon": NO + "rlinf's KL weight is fixed (no adaptive controller)",
    "advantage_clip": NO + "advantages are not clipped",
    "add_len_reward": NO + "the math reward has no length term",
    "use_reward_scaling": NO + "rewards are normalised by algorithm.reward_norm only",
    "use_reward_norm": NO + "rewards are normalised by algorithm.reward_norm only",
    "whiten_rewards": NO + "rewards are normalised by algorithm.reward_norm (norm_mean_type / norm_std_type)",
    "enable_reference": NO + "reference log-probs are computed whenever algorithm.kl_beta > 0",
    "force_disable_old_logprobs_recompute": NO + "see rollout.recompute_logprobs",
    "train_infer_correction": NO + "no train / inference mismatch correction",
    "rollout_mock": NO + "no rollout dump / mock",
    "reward_pretrain": NO + "it starts the value model, which rlinf trains only with adv_estimator gae",
    "actor_train.model_args": NO + "rlinf loads the model with actor.model's keys",
    "actor_train.training_args": NO + "not a training argument rlinf reads",
    "actor_train.data_args": NO + "rlinf's data keys are data.*",
    "actor_train.strategy_args.strategy_config": NO + "not a strategy setting rlinf reads",
    "actor_train": NO + "not a worker setting rlinf reads",
    "actor_infer.generating_args": NO + "not a sampling setting rlinf reads",
    "actor_infer.model_args": NO + "the rollout engine loads the actor's checkpoint",
    "actor_infer.data_args": NO + "prompts are built once by data.*",
    "actor_infer.strategy_args.strategy_config": NO + "not an engine setting rlinf reads",
    "actor_infer": NO + "not a worker setting rlinf reads",
    "reference": NO + "the reference policy is the actor's starting checkpoint, run by the actor's backend",
    "critic": NO + "the value model trains with FSDP2 and shares actor.optim apart from critic.lr",
    "reward": NO + "the math reward is rlinf's rule-based verifier (reward.*), placed with the rollout",
    "rewards": NO + "the math reward is rlinf's rule-based verifier (reward.*), placed with the rollout",
    "validation": NO + "validation samples with the training sampling parameters",
}


def looks_like_roll(raw: dict[str, Any]) -> str | None:
    """None when ``raw`` has ROLL's shape, else why not."""
    if "runner" in raw or "component_placement" in (raw.get("cluster") or {}):
        return "this is an rlinf config (it has runner / cluster.component_placement), not a ROLL one"
    if not isinstance(raw.get("actor_train"), dict) and not isinstance(raw.get("actor_infer"), dict):
        areal = "allocation_mode" in raw or "gconfig" in raw
        hint = "; it looks like an AReaL config, use --from areal" if areal else ""
        return f"not a ROLL config: no actor_train / actor_infer section{hint}"
    return None


def translate_roll(raw: dict[str, Any]) -> Translation:
    """Translate a resolved ROLL config tree (see the module docstring)."""
    problem = looks_like_roll(raw)
    if problem:
        raise SourceError(problem)
    t = Translation(raw)
    placement(t)
    strategies(t)
    lengths(t)
    algorithm(t)
    batches(t)
    data(t)
    t.apply(SIMPLE, REFUSED, NULLABLE)
    return t


def devices(t: Translation, worker: str) -> list[int] | None:
    """A worker's accelerators (None when it has no device_mapping)."""
    if not t.has(f"{worker}.device_mapping"):
        return None
    try:
        return parse_device_mapping(t.get(f"{worker}.device_mapping"))
    except DeviceMappingError as exc:
        raise SourceError(f"{worker}.device_mapping: {exc}") from None


def placement(t: Translation) -> None:
    """device_mapping of every worker -> cluster.component_placement."""
    per_node = t.get("num_gpus_per_node") or 8
    actor, rollout = devices(t, "actor_train"), devices(t, "actor_infer")
    if actor is None or rollout is None:
        raise SourceError("actor_train.device_mapping and actor_infer.device_mapping are needed for the placement")
    per_engine = t.get("actor_infer.num_gpus_per_worker") or 1
    if len(rollout) % per_engine:
        raise SourceError(f"actor_infer: {len(rollout)} accelerators do not split into workers of "
                          f"num_gpus_per_worker={per_engine}")
    groups = {"actor": (actor, 1), "rollout": (rollout, per_engine), "reward": (rollout, per_engine)}
    t.covered("actor_train.device_mapping", f"cluster.component_placement.actor ({len(actor)} processes)")
    t.covered("actor_infer.device_mapping", f"cluster.component_placement.rollout ({len(rollout) // per_engine} "
                                            "engines)")
    ref = devices(t, "reference")
    if ref is not None:
        if sorted(ref) == sorted(actor):
            t.covered("reference.device_mapping", "the actor group computes the reference log-probs")
        else:
            groups["inference"] = (ref, 1)
            t.covered("reference.device_mapping", "cluster.component_placement.inference")
    if isinstance(t.get("critic"), dict):
        crit = devices(t, "critic")
        if crit is not None and sorted(crit) != sorted(actor):
            groups["critic"] = (crit, 1)
        if crit is not None:
            t.covered("critic.device_mapping", "cluster.component_placement.critic" if "critic" in groups
                      else "the value model runs on the actor's accelerators")
    try:
        cluster = cluster_section(groups, per_node)
    except ValueError as exc:
        raise SourceError(f"actor_infer: {exc}") from None
    t.put("cluster.num_nodes", cluster["num_nodes"])
    t.put("cluster.component_placement", cluster["component_placement"])
    t.set("num_gpus_per_node" if t.has("num_gpus_per_node") else "actor_train.device_mapping",
          "cluster.accelerators_per_node", per_node, "" if t.has("num_gpus_per_node") else "ROLL's default")
    t.notes.append(f"cluster.num_nodes = {cluster['num_nodes']} and cluster.component_placement = "
                   f"{show(cluster['component_placement'])} come from the device mappings; the math reward is placed "
                   "with the rollout")


def strategies(t: Translation) -> None:
    """strategy_args of actor_train / actor_infer / reference / critic -> backends and sizes."""
    name = t.get("actor_train.strategy_args.strategy_name")
    backend = TRAIN_BACKENDS.get(name)
    if name is not None:
        if backend is None:
            t.skip("actor_train.strategy_args.strategy_name", NO + f"{name!r} is not a training strategy rlinf has")
        else:
            how = "nearest: ZeRO sharding -> FSDP2 full_shard" if name == "deepspeed_train" else ""
            t.set("actor_train.strategy_args.strategy_name", "actor.training_backend", backend, how)
    cfg = "actor_train.strategy_args.strategy_config"
    if backend == "megatron":
        t.set("actor_train.strategy_args.strategy_name", "actor.megatron.use_hf_ckpt", True,
              "convert the HF checkpoint on the first run")
        precision = DTYPES.get(str(t.get("actor_train.model_args.dtype", "")))
        if precision is not None:
            t.set("actor_train.model_args.dtype", "actor.model.precision", precision)
        if precision in ("bf16", "fp16"):
            t.set("actor_train.model_args.dtype", f"actor.optim.{precision}", True, "Megatron mixed precision")
        for key, ours in (("tensor_model_parallel_size", "actor.model.tensor_model_parallel_size"),
                          ("pipeline_model_parallel_size", "actor.model.pipeline_model_parallel_size"),
                          ("sequence_parallel", "actor.model.sequence_parallel"),
                          ("recompute_granularity", "actor.model.recompute_granularity"),
                          ("moe_token_dispatcher_type", "actor.model.moe_token_dispatcher_type"),
                          ("overlap_grad_reduce", "actor.optim.overlap_grad_reduce"),
                          ("use_distributed_optimizer", "actor.optim.use_distributed_optimizer")):
            if t.has(f"{cfg}.{key}"):
                t.set(f"{cfg}.{key}", ours, t.get(f"{cfg}.{key}"))
        for key in ("context_parallel_size", "expert_model_parallel_size", "virtual_pipeline_model_parallel_size"):
            if t.has(f"{cfg}.{key}"):
                size = t.get(f"{cfg}.{key}")
                t.covered(f"{cfg}.{key}", "1 = none, as rlinf") if size in (None, 1) else \
                    t.skip(f"{cfg}.{key}", NO + "rlinf's Megatron actor has tensor and pipeline parallelism only")
        if t.has("actor_train.model_args.disable_gradient_checkpointing"):
            t.skip("actor_train.model_args.disable_gradient_checkpointing",
                   DIFF + "with Megatron rlinf recomputes by actor.model.recompute_granularity")
    elif backend == "fsdp":
        for key, ours in (("fsdp_size", "actor.fsdp_config.fsdp_size"),
                          ("param_dtype", "actor.fsdp_config.mixed_precision.param_dtype"),
                          ("reduce_dtype", "actor.fsdp_config.mixed_precision.reduce_dtype"),
                          ("reshard_after_forward", "actor.fsdp_config.reshard_after_forward"),
                          ("offload_policy", "actor.fsdp_config.cpu_offload")):
            if t.has(f"{cfg}.{key}"):
                value = t.get(f"{cfg}.{key}")
                t.set(f"{cfg}.{key}", ours, DTYPES.get(str(value), value) if "dtype" in key else value)
        if t.has("actor_train.model_args.disable_gradient_checkpointing"):
            t.set("actor_train.model_args.disable_gradient_checkpointing", "actor.model.gradient_checkpointing",
                  not t.get("actor_train.model_args.disable_gradient_checkpointing"))
    infer = t.get("actor_infer.strategy_args.strategy_name")
    if infer is not None:
        if infer in ROLLOUT_BACKENDS:
            t.set("actor_infer.strategy_args.strategy_name", "rollout.backend", ROLLOUT_BACKENDS[infer])
        else:
            t.skip("actor_infer.strategy_args.strategy_name", NO + f"{infer!r} is not a rollout engine rlinf has")
    rollout_engine(t, infer)
    if t.has("reference.strategy_args.strategy_name") and "inference" not in t.value("cluster.component_placement", {}):
        t.covered("reference.strategy_args.strategy_name", "the actor's backend computes the reference log-probs")


def rollout_engine(t: Translation, infer: str | None) -> None:
    """actor_infer's engine settings and engine size (num_gpus_per_worker)."""
    cfg = "actor_infer.strategy_args.strategy_config"
    memory = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static"}.get(infer or "")
    if memory and t.get(f"{cfg}.{memory}") is not None:
        t.set(f"{cfg}.{memory}", "rollout.gpu_memory_utilization", num(t.get(f"{cfg}.{memory}")))
    for key in ("enforce_eager",):
        if infer == "vllm" and t.has(f"{cfg}.{key}"):
            t.set(f"{cfg}.{key}", f"rollout.{key}", t.get(f"{cfg}.{key}"))
    per_engine = t.get("actor_infer.num_gpus_per_worker") or 1
    tp, pp = t.get(f"{cfg}.tensor_parallel_size"), t.get(f"{cfg}.pipeline_parallel_size")
    if tp is not None:
        t.set(f"{cfg}.tensor_parallel_size", "rollout.tensor_parallel_size", tp)
    if pp is not None:
        t.set(f"{cfg}.pipeline_parallel_size", "rollout.pipeline_parallel_size", pp)
    if t.has("actor_infer.num_gpus_per_worker"):
        if tp is None and pp is None and per_engine > 1:
            t.set("actor_infer.num_gpus_per_worker", "rollout.tensor_parallel_size", per_engine,
                  "one engine spans its accelerators")
        elif (tp or 1) * (pp or 1) == per_engine:
            t.covered("actor_infer.num_gpus_per_worker", "accelerators per rollout process in the placement")
        else:
            t.skip("actor_infer.num_gpus_per_worker", DIFF + f"{per_engine} accelerators per engine, but "
                                                             f"tensor x pipeline parallel = {(tp or 1) * (pp or 1)}")


def lengths(t: Translation) -> None:
    """response_length -> max_new_tokens; prompt + response -> runner.seq_length."""
    response = t.get("response_length") or t.get("actor_infer.generating_args.max_new_tokens")
    prompt = t.get("prompt_length") or 1024
    if t.has("response_length"):
        t.set("response_length", "algorithm.sampling_params.max_new_tokens", response)
    if response is not None:
        t.set("response_length" if t.has("response_length") else "actor_infer.generating_args.max_new_tokens",
              "runner.seq_length", prompt + response, "prompt_length + response_length")
    if t.has("actor_infer.generating_args.max_new_tokens") and t.has("response_length"):
        same = t.get("actor_infer.generating_args.max_new_tokens") == response
        t.covered("actor_infer.generating_args.max_new_tokens", "same as response_length") if same else \
            t.set("actor_infer.generating_args.max_new_tokens", "algorithm.sampling_params.max_new_tokens",
                  t.get("actor_infer.generating_args.max_new_tokens"))
    for key, top in (("actor_infer.generating_args.num_return_sequences", "num_return_sequences_in_group"),):
        if t.has(key):
            t.covered(key, f"same as {top}") if t.get(key) == t.get(top) else \
                t.skip(key, DIFF + f"rlinf samples algorithm.group_size (from {top}) responses per prompt")
    if t.has("actor_infer.generating_args.num_beams"):
        beams = t.get("actor_infer.generating_args.num_beams")
        t.covered("actor_infer.generating_args.num_beams", "1 = sampling, as rlinf") if beams in (None, 1) else \
            t.skip("actor_infer.generating_args.num_beams", NO + "rlinf samples; no beam search")


def algorithm(t: Translation) -> None:
    """adv_estimator, KL, clipping, normalisation, loss aggregation, epochs, async ratio."""
    est = t.get("adv_estimator")
    ppo = est == "gae"
    if est is not None:
        if est in ("grpo", "gae"):
            t.set("adv_estimator", "algorithm.adv_type", est)
            if ppo:
                t.set("adv_estimator", "critic.use_critic_model", True)
        else:
            t.skip("adv_estimator", DIFF + f"ROLL's {est!r} estimator has no rlinf equivalent "
                                           "(rlinf: grpo, gae, reinpp, rloo); algorithm.adv_type keeps its default")
    if t.get("use_kl_loss") and t.get("kl_loss_coef") is not None:
        t.set("kl_loss_coef", "algorithm.kl_beta", num(t.get("kl_loss_coef")))
        t.covered("use_kl_loss", "KL in the loss (algorithm.kl_in_reward stays false)")
        if t.has("init_kl_coef"):
            t.skip("init_kl_coef", DIFF + "rlinf has one KL weight; kl_loss_coef (use_kl_loss) was used")
    else:
        for key in ("use_kl_loss", "kl_loss_coef"):
            if t.has(key):
                t.covered(key, "use_kl_loss is off")
        if t.has("init_kl_coef"):
            t.set("init_kl_coef", "algorithm.kl_beta", num(t.get("init_kl_coef")))
            t.set("init_kl_coef", "algorithm.kl_in_reward", True, "ROLL adds the KL penalty to the token rewards")
    if t.has("add_token_level_kl"):
        t.covered("add_token_level_kl", "algorithm.kl_in_reward (from init_kl_coef)")
    penalty = t.get("kl_penalty")
    if penalty is not None:
        if penalty in ("kl", "abs", "mse"):
            t.set("kl_penalty", "algorithm.kl_penalty_type", penalty)
        else:
            t.skip("kl_penalty", NO + f"{penalty!r}: rlinf's estimators are kl, abs, mse and low_var_kl")
    if t.get("use_pg_clip_range"):
        t.set("pg_clip_low", "algorithm.ratio_clip_eps", num(t.get("pg_clip_low", 0.2)))
        t.set("pg_clip_high", "algorithm.clip_ratio_high", num(t.get("pg_clip_high", 0.2)))
        t.covered("use_pg_clip_range", "pg_clip_low / pg_clip_high")
        if t.has("pg_clip"):
            t.covered("pg_clip", "replaced by pg_clip_low (use_pg_clip_range)")
    else:
        for key in ("use_pg_clip_range", "pg_clip_low", "pg_clip_high"):
            if t.has(key):
                t.covered(key, "use_pg_clip_range is off: pg_clip is both sides")
    if t.has("dual_clip_loss"):
        t.covered("dual_clip_loss", "off, as rlinf (algorithm.clip_ratio_c null)") if not t.get("dual_clip_loss") \
            else t.skip("dual_clip_loss", NO + "ROLL's dual-clip constant is its own; set algorithm.clip_ratio_c")
    if t.has("whiten_advantages"):
        if ppo:
            t.set("whiten_advantages", "algorithm.normalize_advantages", bool(t.get("whiten_advantages")))
        else:
            t.skip("whiten_advantages", DIFF + "ROLL whitens over the batch; rlinf's normalize_advantages is per "
                                               "group for grpo")
    for key, ours in (("norm_mean_type", "mean_level"), ("norm_std_type", "std_level")):
        if t.has(key):
            level = t.get(key)
            if level in (None, "batch", "group"):
                t.set(key, f"algorithm.reward_norm.{ours}", level)
            else:
                t.skip(key, NO + f"{level!r}: rlinf normalises rewards per batch or per group")
    loss = t.get("loss_agg_mode")
    if loss is not None:
        if loss in LOSS_AGG:
            t.set("loss_agg_mode", "algorithm.loss_agg_func", loss)
        else:
            t.skip("loss_agg_mode", NO + f"{loss!r}: rlinf aggregates {', '.join(LOSS_AGG)}")
    if t.has("ppo_epochs"):
        epochs = t.get("ppo_epochs")
        t.covered("ppo_epochs", "1 = one pass over each batch, as rlinf") if epochs in (None, 1) else \
            t.skip("ppo_epochs", NO + "the math loop makes one pass over each rollout batch "
                                      "(algorithm.n_minibatches optimizer steps)")
    if t.has("async_generation_ratio"):
        ratio = t.get("async_generation_ratio")
        t.covered("async_generation_ratio", "0 = synchronous, as rlinf's default") if not ratio else \
            t.skip("async_generation_ratio", DIFF + "a fraction of requests generated ahead; rlinf's "
                                                    "algorithm.max_head_offpolicyness counts policy versions")
    if t.has("resume_from_checkpoint"):
        resume = t.get("resume_from_checkpoint")
        if isinstance(resume, str):
            t.set("resume_from_checkpoint", "runner.resume_dir", resume)
        else:
            t.set("resume_from_checkpoint", "runner.recover_mode", "resume" if resume else "disabled")
    if ppo and t.get("reward_pretrain") is not None:
        t.set("reward_pretrain", "critic.model.model_path", t.get("reward_pretrain"))


def batches(t: Translation) -> None:
    """gradient_accumulation_steps -> optimizer steps per rollout batch (algorithm.n_minibatches)."""
    key = "actor_train.training_args.gradient_accumulation_steps"
    if not t.has(key):
        return
    placed = t.value("cluster.component_placement", {})
    procs = len(devices(t, "actor_train") or [])
    cfg = "actor_train.strategy_args.strategy_config"
    if t.value("actor.training_backend") == "megatron":
        procs //= ((t.get(f"{cfg}.tensor_model_parallel_size") or 1)
                   * (t.get(f"{cfg}.pipeline_model_parallel_size") or 1))
    per_step = (t.get("actor_train.training_args.per_device_train_batch_size") or 1) * (t.get(key) or 1) * procs
    samples = (t.get("rollout_batch_size") or 0) * (t.get("num_return_sequences_in_group") or 1)
    if placed and per_step and samples and samples % per_step == 0:
        t.set(key, "algorithm.n_minibatches", samples // per_step,
              f"{samples} samples per step / ({per_step} per optimizer step)")
    else:
        t.skip(key, DIFF + f"an optimizer step of {per_step} samples does not divide the {samples} samples of a "
                           "step; set algorithm.n_minibatches")


def data(t: Translation) -> None:
    """Training / validation files and the chat template."""
    for src, ours in (("actor_train.data_args.file_name", "data.train_data_paths"),
                      ("validation.data_args.file_name", "data.val_data_paths")):
        if t.has(src):
            files = t.get(src)
            t.set(src, ours, [files] if isinstance(files, str) else list(files or []))
    for section in ("actor_train", "actor_infer", "validation"):
        key = f"{section}.data_args.template"
        if t.has(key):
            if t.get(key) == "native":
                if section == "actor_train":
                    t.set(key, "data.apply_chat_template", True, "the tokenizer's chat template")
                else:
                    t.covered(key, "the tokenizer's chat template (data.apply_chat_template)")
            else:
                t.skip(key, DIFF + f"ROLL's named template {t.get(key)!r}; rlinf applies the tokenizer's own chat "
                                   "template (data.apply_chat_template)")
