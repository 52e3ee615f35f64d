"""AReaL GRPO / PPO configs (seed 002's keys, AReaL's example configs) -> an rlinf math config.

The placement, rollout backend and parallel sizes come from ``allocation_mode`` (or the newest
per-engine ``rollout.backend`` / ``actor.backend`` strings; grammar in
:mod:`rlinf.config.translate.allocation`); the other keys map one to one where ours means the same
(tables below), and are listed as not translated otherwise. A ``critic`` section makes it PPO
(``adv_type: gae`` with a value model); without one it is GRPO.

Example:
    >>> t = translate_areal({"experiment_name": "gsm8k", "trial_name": "t0",
    ...                      "allocation_mode": "sglang.d4p1t1+d4p1t1",
    ...                      "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
    ...                      "gconfig": {"n_samples": 4}, "actor": {"eps_clip": 0.4}})
    >>> t.out["cluster"]["component_placement"], t.out["rollout"]["backend"]
    ({'actor': '4-7', 'rollout,reward': '0-3'}, 'sglang')
    >>> t.out["algorithm"]
    {'adv_type': 'grpo', 'group_size': 4, 'ratio_clip_eps': 0.4}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlinf.config.translate.allocation import (
    Allocation,
    AllocationError,
    Placed,
    lay_out,
    parse_allocation,
    parse_component,
)
from rlinf.config.translate.common import DIFF, NO, SourceError, Translation, cluster_section
from rlinf.scheduler.config import ClusterConfig
from rlinf.utils.typed_config import ConfigError

#: AReaL dtype names -> ours
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


def num(value: Any) -> Any:
    """YAML 1.1 reads ``1e-8`` as a string; numbers stay numbers."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


#: source key -> (our key, conversion); null values keep our default unless our key takes null
SIMPLE: dict[str, tuple[str, Callable[[Any], Any] | None]] = {
    "seed": ("runner.seed", None),
    "total_train_epochs": ("runner.max_epochs", None),
    "cluster.fileroot": ("runner.output_dir", None),
    "gconfig.n_samples": ("algorithm.group_size", None),
    "gconfig.min_new_tokens": ("algorithm.sampling_params.min_new_tokens", None),
    "gconfig.greedy": ("algorithm.sampling_params.do_sample", lambda v: not v),
    "gconfig.top_p": ("algorithm.sampling_params.top_p", num),
    "gconfig.top_k": ("algorithm.sampling_params.top_k", None),
    "gconfig.temperature": ("algorithm.sampling_params.temperature", num),
    "gconfig.stop_token_ids": ("algorithm.sampling_params.stop_token_ids", list),
    "gconfig.stop": ("algorithm.sampling_params.stop", list),
    "gconfig.frequency_penalty": ("algorithm.sampling_params.frequency_penalty", num),
    "train_dataset.batch_size": ("data.rollout_batch_size", None),
    "train_dataset.shuffle": ("data.shuffle", None),
    "train_dataset.max_length": ("data.max_prompt_length", None),
    "valid_dataset.batch_size": ("data.val_rollout_batch_size", None),
    "valid_dataset.shuffle": ("data.validation_shuffle", None),
    "recover.mode": ("runner.recover_mode", None),
    "recover.retries": ("runner.recover_retries", None),
    "rollout.max_head_offpolicyness": ("algorithm.max_head_offpolicyness", None),
    "actor.path": ("actor.model.model_path", None),
    "actor.attn_impl": ("actor.model.attn_implementation", None),
    "actor.dtype": ("actor.model.precision", lambda v: DTYPES.get(str(v), v)),
    "actor.optimizer.lr": ("actor.optim.lr", num),
    "actor.optimizer.weight_decay": ("actor.optim.weight_decay", num),
    "actor.optimizer.beta1": ("actor.optim.adam_beta1", num),
    "actor.optimizer.beta2": ("actor.optim.adam_beta2", num),
    "actor.optimizer.eps": ("actor.optim.adam_eps", num),
    "actor.optimizer.lr_scheduler_type": ("actor.lr_sched.lr_decay_style", None),
    "actor.optimizer.warmup_steps_proportion": ("actor.lr_sched.lr_warmup_fraction", num),
    "actor.optimizer.gradient_clipping": ("actor.optim.clip_grad", num),
    "actor.ppo_n_minibatches": ("algorithm.n_minibatches", None),
    "actor.eps_clip": ("algorithm.ratio_clip_eps", num),
    "actor.eps_clip_higher": ("algorithm.clip_ratio_high", num),
    "actor.c_clip": ("algorithm.clip_ratio_c", num),
    "actor.reward_clip": ("algorithm.reward_clip", num),
    "actor.discount": ("algorithm.gamma", num),
    "actor.gae_lambda": ("algorithm.lam", num),
    "actor.kl_ctl": ("algorithm.kl_beta", num),
    "actor.kl_estimator": ("algorithm.kl_penalty_type", None),
    "actor.recompute_logprob": ("rollout.recompute_logprobs", None),
    "actor.use_decoupled_loss": ("algorithm.loss_type", lambda v: "decoupled_ppo" if v else "ppo"),
    "actor.behav_imp_weight_cap": ("algorithm.behav_imp_weight_cap", num),
    "actor.dynamic_sampling": ("algorithm.dynamic_sampling", None),
    "actor.use_lora": ("actor.model.is_lora", None),
    "actor.lora_rank": ("actor.model.lora_rank", None),
    "actor.lora_alpha": ("actor.model.lora_alpha", num),
    "actor.target_modules": ("actor.model.lora_target_modules", list),
    "actor.reward_norm.mean_level": ("algorithm.reward_norm.mean_level", None),
    "actor.reward_norm.mean_leave1out": ("algorithm.reward_norm.mean_leave1out", None),
    "actor.reward_norm.std_level": ("algorithm.reward_norm.std_level", None),
    "actor.reward_norm.std_unbiased": ("algorithm.reward_norm.std_unbiased", None),
    "actor.reward_norm.eps": ("algorithm.reward_norm.eps", num),
    "stats_logger.wandb.project": ("runner.logger.project_name", None),
    "critic.path": ("critic.model.model_path", None),
    "critic.optimizer.lr": ("critic.lr", num),
    "critic.eps_clip": ("critic.value_clip", num),
}

#: our keys that take null
NULLABLE = {"algorithm.clip_ratio_high", "algorithm.clip_ratio_c", "algorithm.reward_clip",
            "algorithm.behav_imp_weight_cap", "actor.model.lora_alpha", "algorithm.reward_norm.mean_level",
            "algorithm.reward_norm.std_level", "actor.model.attn_implementation", "critic.value_clip"}

#: source keys (or sections) that are not translated, with the reason
REFUSED: dict[str, str] = {
    "total_train_n_seqs": NO + "runs stop after runner.max_steps or runner.max_epochs",
    "cluster.name_resolve": NO + "Ray finds the workers; there is no name-resolve service",
    "cluster.cluster_name": NO + "rlinf has no per-cluster environment presets",
    "launcher": NO + "Ray starts every process; CPUs, memory and environment per process are not set here",
    "scheduler": NO + "rlinf's driver is the single controller; there is no scheduler service",
    "perf_tracer": NO + "the math config has no tracer",
    "stats_logger": NO + "rlinf's logger has backends (tensorboard, wandb, swanlab) and a project name only",
    "rollout.enable_rollout_tracing": NO + "rlinf traces no single request; rollout.print_outputs prints each "
                                           "generation batch's first prompt and response",
    "rollout.check_trajectory_format": NO + "there is no user workflow to check: rlinf's rollout workers build "
                                            "the samples themselves",
    "rollout.schedule_policy": NO + "there is no request scheduler: each rollout rank generates its share of "
                                    "the prompts (fully_async: the groups it is given as its slots free up)",
    "rollout.setup_timeout": NO + "there is no server to launch or connect to: the engines start inside the "
                                  "rollout workers",
    "rollout": NO + "an inference-server setting; rlinf's engines run inside its rollout workers",
    "gconfig.max_tokens": DIFF + "a per-request cap on prompt + response; rlinf's runner.seq_length is set "
                                 "to data.max_prompt_length + max_new_tokens instead",
    "train_dataset.type": NO + "the math recipe reads RL prompt datasets only",
    "train_dataset.pin_memory": NO + "prompts are tokenised once at start",
    "train_dataset.num_workers": DIFF + "data.num_workers are tokenising processes at start, not loader workers",
    "train_dataset.drop_last": NO + "every step takes a full batch of data.rollout_batch_size prompts",
    "valid_dataset": NO + "validation prompts are read from data.val_data_paths only",
    "saver.freq_epochs": NO + "rlinf saves every runner.save_interval steps or runner.save_interval_secs "
                              "seconds; steps per epoch depend on the dataset size",
    "recover.freq_epochs": NO + "rlinf saves every runner.save_interval steps or runner.save_interval_secs "
                                "seconds; steps per epoch depend on the dataset size",
    "evaluator.freq_epochs": NO + "rlinf validates every runner.val_check_interval steps",
    "evaluator.freq_secs": NO + "rlinf validates every runner.val_check_interval steps, not by time",
    "actor.mb_spec.n_mbs": DIFF + "a number of micro-batches; rlinf sets the micro-batch size "
                                  "(algorithm.training_batch_size_per_gpu)",
    "actor.mb_spec.granularity": NO + "micro-batches are cut per sample",
    "actor.pad_to_maximum": NO + "micro-batches are padded to their longest sequence",
    "actor.disable_dropout": NO + "the model's own dropout settings are used",
    "actor.init_from_scratch": NO + "the actor always loads the checkpoint's weights",
    "actor.weight_update_mode": NO + "weights go from actor to rollout through rlinf's own transfer",
    "actor.fsdp.wrap_policy": NO + "FSDP2 wraps every decoder layer",
    "actor.optimizer.offload": DIFF + "rlinf's actor.offload_optimizer moves the optimizer state off the "
                                      "device between phases when collocated",
    "actor.optimizer.initial_loss_scale": NO + "fp16 loss scaling is not configurable (bf16 / fp32 training)",
    "actor.optimizer.min_loss_scale": NO + "fp16 loss scaling is not configurable (bf16 / fp32 training)",
    "actor.optimizer.hysteresis": NO + "fp16 loss scaling is not configurable (bf16 / fp32 training)",
    "actor.mask_no_eos_with_zero": NO + "truncated responses are trained on as they are",
    "actor.log_agent_stats": NO + "the math recipe has no agent trajectories",
    "actor.log_agent_stats_keys": NO + "the math recipe has no agent trajectories",
    "actor.scheduling_spec": NO + "Ray places workers by cluster.component_placement",
    "actor.colocated_weight_path": NO + "collocated weight sync needs no file",
    "actor.dynamic_sampling_strategy": NO + "dynamic sampling is on / off (algorithm.dynamic_sampling)",
    "actor.overlong_tokens": NO + "read only with overlong_reward_penalty: true",
    "actor.overlong_penalty_factor": NO + "read only with overlong_reward_penalty: true",
    "ref": NO + "the reference policy is the actor's starting checkpoint; its log-probs come from the "
                "actor group (or an inference group placed apart)",
    "critic": NO + "the value model shares actor.optim / actor.lr_sched apart from critic.lr",
}

#: AReaL keys whose value is the same as a top-level key (interpolated in AReaL's examples)
ECHOES = ("experiment_name", "trial_name", "fileroot")


def looks_like_areal(raw: dict[str, Any]) -> str | None:
    """None when ``raw`` has AReaL's shape, else why not."""
    if "runner" in raw or "component_placement" in (raw.get("cluster") or {}):
        return "this is an rlinf config (it has runner / cluster.component_placement), not an AReaL one"
    if "actor_train" in raw or "actor_infer" in raw:
        return "this looks like a ROLL config (actor_train / actor_infer); use --from roll"
    markers = ("allocation_mode", "gconfig", "train_dataset", "trial_name", "saver", "evaluator")
    if not any(k in raw for k in markers) and "path" not in (raw.get("actor") or {}):
        return f"not an AReaL config: none of {', '.join(markers)} or actor.path"
    return None


def translate_areal(raw: dict[str, Any]) -> Translation:
    """Translate a resolved AReaL config tree (see the module docstring)."""
    problem = looks_like_areal(raw)
    if problem:
        raise SourceError(problem)
    t = Translation(raw)
    for section in ("saver", "recover", "evaluator", "stats_logger", "rollout", "actor", "ref", "critic"):
        for key in ECHOES:
            src = f"{section}.{key}"
            if t.has(src):
                top = t.get("cluster.fileroot") if key == "fileroot" else t.get(key)
                t.covered(src, f"same as the top-level {key}" if t.get(src) == top else
                          f"{DIFF}rlinf has one {key} per run (the top-level one)")
    placement(t)
    names(t)
    generation(t)
    datasets(t)
    schedule(t)
    algorithm(t)
    actor(t)
    engines(t)
    asynchrony(t)
    t.apply(SIMPLE, REFUSED, NULLABLE)
    return t


def placement(t: Translation) -> None:
    """``allocation_mode`` (or per-engine ``backend`` strings) -> cluster, backends, parallel sizes."""
    per_node = t.get("cluster.n_gpus_per_node") or 8
    mode = t.get("allocation_mode")
    try:
        if mode:
            allocations = parse_allocation(mode)
            src = "allocation_mode"
        else:
            allocations = per_engine(t)
            src = "rollout.backend" if t.get("rollout.backend") else "actor.backend"
        if not allocations:
            raise AllocationError("no allocation_mode and no per-engine backend strings: "
                                  "the placement cannot be derived")
        layout = lay_out(allocations)
    except AllocationError as exc:
        raise SourceError(f"allocation: {exc}") from None
    layout_with_reward = {**layout, "reward": layout["rollout"]}
    groups = {name: (layout_with_reward[name].gpus, layout_with_reward[name].per_process)
              for name in ("actor", "rollout", "reward", "critic", "inference") if name in layout_with_reward}
    cluster = cluster_section(groups, per_node)
    for key in ("num_nodes", "accelerators_per_node", "component_placement"):
        t.set(src, f"cluster.{key}", cluster[key])
    if t.has("cluster.n_gpus_per_node"):
        t.covered("cluster.n_gpus_per_node", f"cluster.accelerators_per_node = {per_node}")
    if t.has("cluster.n_nodes"):
        t.covered("cluster.n_nodes", f"cluster.num_nodes = {cluster['num_nodes']} (the nodes the allocation uses)")
    t.notes.append("the reward (math verify) is placed with the rollout, as AReaL computes it in the rollout "
                   "workflow")
    parallel_sizes(t, src, layout)


def per_engine(t: Translation) -> list[Allocation]:
    """The newest form: ``rollout.backend`` / ``actor.backend`` / ``critic.backend`` strings, with
    ``scheduling_strategy: {type: colocation, target: <engine>}``."""
    allocations: list[Allocation] = []
    index: dict[str, int] = {}
    for engine, name in (("rollout", None), ("actor", "actor"), ("critic", "critic")):
        spec = t.get(f"{engine}.backend")
        if not isinstance(spec, str) or ":" not in spec:
            continue
        allocation = parse_component(spec)
        allocation.name = allocation.name or name
        strategy = t.get(f"{engine}.scheduling_strategy") or {}
        if strategy.get("type") == "colocation":
            target = strategy.get("target")
            if target not in index:
                raise AllocationError(f"{engine}.scheduling_strategy: colocation target {target!r} has no "
                                      "backend string before it")
            allocation.colocated_with = index[target]
            t.covered(f"{engine}.scheduling_strategy", f"{engine} shares {target}'s accelerators")
        index[engine] = len(allocations)
        allocations.append(allocation)
        t.covered(f"{engine}.backend", f"cluster.component_placement (from {spec})")
    return allocations


def parallel_sizes(t: Translation, src: str, layout: dict[str, Placed]) -> None:
    """Rollout backend / TP / PP and the actor's training backend and Megatron sizes."""
    rollout = layout["rollout"].source
    if rollout.inference:
        t.set(src, "rollout.backend", rollout.backend)
        if rollout.dim("t") > 1:
            t.set(src, "rollout.tensor_parallel_size", rollout.dim("t"))
        if rollout.dim("p") > 1:
            t.set(src, "rollout.pipeline_parallel_size", rollout.dim("p"))
    else:
        t.notes.append(f"{src} names no inference backend: rollout.backend keeps rlinf's default (huggingface)")
    actor = layout["actor"].source
    backend = "megatron" if actor.backend == "megatron" else "fsdp"
    t.set(src, "actor.training_backend", backend)
    if actor.backend == "archon":
        t.notes.append(f"{src}: AReaL's archon backend has no counterpart; the actor trains with FSDP2")
    if backend == "megatron":
        for dim, key in (("t", "tensor_model_parallel_size"), ("p", "pipeline_model_parallel_size")):
            t.set(src, f"actor.model.{key}", actor.dim(dim))
        t.set(src, "actor.megatron.use_hf_ckpt", True, "convert actor.model.model_path on the first run")
    elif actor.dim("t") > 1 or actor.dim("p") > 1:
        t.notes.append(f"{src}: {actor} asks for tensor / pipeline parallelism, which rlinf's FSDP2 actor "
                       f"does not have; its {actor.world} accelerators run {actor.world} FSDP processes")
    for dim, what in (("c", "context"), ("e", "expert")):
        if any(p.source.dim(dim) > 1 for p in layout.values()):
            t.notes.append(f"{src}: {what} parallelism ({dim} > 1) has no counterpart in rlinf and is dropped")
    if "critic" in layout and layout["critic"].source.backend != "fsdp":
        t.notes.append(f"{src}: the value model trains with FSDP2 only")


def names(t: Translation) -> None:
    """``experiment_name`` + ``trial_name`` -> ``runner.experiment_name``."""
    exp, trial = t.get("experiment_name"), t.get("trial_name")
    if exp is None:
        return
    name = f"{exp}_{trial}" if trial else str(exp)
    t.set("experiment_name", "runner.experiment_name", name, "with trial_name" if trial else "")
    if trial is not None:
        t.covered("trial_name", f"runner.experiment_name = {name} (AReaL's <experiment>/<trial> folders)")


def generation(t: Translation) -> None:
    """``gconfig.max_new_tokens`` and the prompt length -> sampling budget and ``runner.seq_length``."""
    new = t.get("gconfig.max_new_tokens")
    if new is not None:
        t.set("gconfig.max_new_tokens", "algorithm.sampling_params.max_new_tokens", new)
        prompt = t.get("train_dataset.max_length") or 1024
        t.set("gconfig.max_new_tokens", "runner.seq_length", prompt + new, "max prompt length + max_new_tokens")
    for key, top in (("actor.max_new_tokens", "gconfig.max_new_tokens"), ("actor.temperature", "gconfig.temperature"),
                     ("actor.group_size", "gconfig.n_samples")):
        if t.has(key):
            if t.get(key) == t.get(top):
                t.covered(key, f"same as {top}")
            else:
                t.skip(key, f"{DIFF}rlinf samples and trains with one value ({top}'s)")


def datasets(t: Translation) -> None:
    """Dataset paths: local files become data paths; hub names are not files."""
    for section, ours in (("train_dataset", "data.train_data_paths"), ("valid_dataset", "data.val_data_paths")):
        path = t.get(f"{section}.path")
        if path is None:
            continue
        if str(path).endswith((".jsonl", ".json", ".csv", ".parquet")):
            t.set(f"{section}.path", ours, [path])
        else:
            t.skip(f"{section}.path", DIFF + f"{path!r} is a dataset name or folder; rlinf reads .jsonl / .json / "
                                             ".csv / .parquet files (set data paths to the files)")


def schedule(t: Translation) -> None:
    """Saver / recover / evaluator frequencies -> one checkpoint schedule and the validation one."""
    for key, ours in (("freq_steps", "runner.save_interval"), ("freq_secs", "runner.save_interval_secs")):
        saver, recover = t.get(f"saver.{key}"), t.get(f"recover.{key}")
        value = saver if saver is not None else recover
        if t.has(f"saver.{key}"):
            if saver is not None:
                t.set(f"saver.{key}", ours, saver)
            elif recover is None:
                t.set(f"saver.{key}", ours, -1 if key == "freq_steps" else None, "null: off")
            else:
                t.covered(f"saver.{key}", f"null; {ours} comes from recover.{key}")
        if t.has(f"recover.{key}"):
            if saver is None and recover is not None:
                t.set(f"recover.{key}", ours, recover, "rlinf's checkpoints serve recovery too")
            elif recover is None or recover == value:
                t.covered(f"recover.{key}", f"{ours} (one checkpoint schedule)")
            else:
                t.skip(f"recover.{key}", f"{DIFF}rlinf has one checkpoint schedule; {ours} = {value} from saver")
    if t.has("evaluator.freq_steps"):
        steps = t.get("evaluator.freq_steps")
        t.set("evaluator.freq_steps", "runner.val_check_interval", -1 if steps is None else steps,
              "null: off" if steps is None else "")
    steps = t.get("total_train_steps", 0)
    if t.has("total_train_steps"):
        t.set("total_train_steps", "runner.max_steps", -1 if steps is None else steps)


def algorithm(t: Translation) -> None:
    """GRPO or PPO, reward scaling / bias, advantage normalisation, overlong penalty."""
    ppo = isinstance(t.get("critic"), dict)
    t.put("algorithm.adv_type", "gae" if ppo else "grpo")
    if ppo:
        t.put("critic.use_critic_model", True)
    t.notes.append("a critic section: PPO, algorithm.adv_type = gae with critic.use_critic_model = true" if ppo
                   else "no critic section: GRPO, algorithm.adv_type = grpo")
    scaling, bias = num(t.get("actor.reward_scaling", 1.0)), num(t.get("actor.reward_bias", 0.0))
    if t.has("actor.reward_scaling") or t.has("actor.reward_bias"):
        if bias == -0.5:
            for key in ("actor.reward_scaling", "actor.reward_bias"):
                if t.has(key):
                    t.set(key, "reward.reward_scale", scaling * 0.5,
                          "(r + bias) x scaling with r in {0, 1} is +-scaling/2")
        else:
            for key in ("actor.reward_scaling", "actor.reward_bias"):
                if t.has(key):
                    t.skip(key, DIFF + "rlinf's math reward is +reward.reward_scale / -reward.reward_scale; "
                                       f"(r + {bias}) x {scaling} with r in {{0, 1}} is not symmetric")
    norm = t.get("actor.adv_norm")
    if t.has("actor.adv_norm"):
        levels = {norm.get("mean_level"), norm.get("std_level")} if isinstance(norm, dict) else {None}
        per_group = not ppo  # ours: per group for grpo, per batch for gae
        if levels == {None}:
            t.set("actor.adv_norm", "algorithm.normalize_advantages", False)
        elif levels == {"group" if per_group else "batch"}:
            t.set("actor.adv_norm", "algorithm.normalize_advantages", True)
        else:
            t.skip("actor.adv_norm", DIFF + "rlinf normalises advantages per group for grpo and per batch for gae "
                                            "(algorithm.normalize_advantages); AReaL's levels "
                                            f"{sorted(map(str, levels))}")
    if t.has("actor.reward_norm.group_size"):
        same = t.get("actor.reward_norm.group_size") == t.get("gconfig.n_samples")
        t.covered("actor.reward_norm.group_size", "groups are algorithm.group_size") if same else \
            t.skip("actor.reward_norm.group_size", DIFF + "rlinf's groups are algorithm.group_size samples")
    if t.get("actor.overlong_reward_penalty"):
        t.set("actor.overlong_reward_penalty", "algorithm.overlong_buffer_len", t.get("actor.overlong_tokens") or 0)
        t.set("actor.overlong_reward_penalty", "algorithm.overlong_penalty_factor",
              num(t.get("actor.overlong_penalty_factor") or 1.0))
        for key in ("actor.overlong_tokens", "actor.overlong_penalty_factor"):
            if t.has(key):
                t.covered(key, "with actor.overlong_reward_penalty")
    elif t.has("actor.overlong_reward_penalty"):
        t.covered("actor.overlong_reward_penalty", "false: algorithm.overlong_buffer_len stays 0 (off)")


def actor(t: Translation) -> None:
    """Actor keys that depend on the training backend, the optimizer type, min LR, micro-batches."""
    megatron = t.value("actor.training_backend") == "megatron"
    precision = DTYPES.get(str(t.get("actor.dtype", "")), None)
    if precision is not None:
        t.set("actor.dtype", "actor.model.precision", precision)
    if megatron and precision in ("bf16", "fp16"):
        t.set("actor.dtype", f"actor.optim.{precision}", True, "Megatron mixed precision")
    if t.has("actor.gradient_checkpointing"):
        if megatron:
            t.skip("actor.gradient_checkpointing", DIFF + "with Megatron rlinf recomputes by "
                                                          "actor.model.recompute_granularity")
        else:
            t.set("actor.gradient_checkpointing", "actor.model.gradient_checkpointing",
                  bool(t.get("actor.gradient_checkpointing")))
    if t.has("actor.grad_reduce_dtype"):
        if megatron:
            t.skip("actor.grad_reduce_dtype", NO + "Megatron reduces gradients in its own dtype")
        else:
            t.set("actor.grad_reduce_dtype", "actor.fsdp_config.mixed_precision.reduce_dtype",
                  DTYPES.get(str(t.get("actor.grad_reduce_dtype")), t.get("actor.grad_reduce_dtype")))
    if megatron and t.has("actor.fsdp"):
        t.skip("actor.fsdp", NO + "the actor trains with Megatron (allocation), not FSDP")
    kind = t.get("actor.optimizer.type")
    if kind is not None:
        if kind == "adam":
            t.set("actor.optimizer.type", "actor.optim.optimizer", "adam", "AdamW, as AReaL's adam")
        else:
            t.skip("actor.optimizer.type", DIFF + f"rlinf's optimizer is AdamW; {kind!r} is not available")
    ratio = t.get("actor.optimizer.min_lr_ratio")
    if ratio is not None and t.get("actor.optimizer.lr") is not None:
        t.set("actor.optimizer.min_lr_ratio", "actor.optim.min_lr", num(t.get("actor.optimizer.lr")) * num(ratio))
    if t.has("actor.optimizer.loss_scale_window"):
        if megatron:
            t.set("actor.optimizer.loss_scale_window", "actor.optim.loss_scale_window",
                  int(num(t.get("actor.optimizer.loss_scale_window"))))
        else:
            t.skip("actor.optimizer.loss_scale_window", NO + "fp16 loss scaling exists only with Megatron")
    tokens = t.get("actor.mb_spec.max_tokens_per_mb")
    if tokens is not None:
        t.set("actor.mb_spec.max_tokens_per_mb", "runner.enable_dynamic_batch_size", True)
        t.set("actor.mb_spec.max_tokens_per_mb", "runner.max_tokens_per_mbs", tokens)
    elif t.has("actor.mb_spec.max_tokens_per_mb"):
        t.covered("actor.mb_spec.max_tokens_per_mb",
                  "null: micro-batches by size (runner.enable_dynamic_batch_size false)")
    for key in ("actor.is_critic", "actor.peft_type"):
        if t.has(key):
            ok = t.get(key) in (False, "lora")
            t.covered(key, "what rlinf does") if ok else t.skip(key, NO + "only a LoRA policy is trained here")
    if t.has("actor.backend") and not t.done("actor.backend"):
        t.covered("actor.backend", f"actor.training_backend = {t.value('actor.training_backend')} "
                                   "(from the allocation)")
    if t.has("actor.colocated"):
        t.covered("actor.colocated", "the placement (allocation) decides collocation")
    if t.has("tokenizer_path"):
        path = t.get("tokenizer_path")
        if path in (None, "", t.get("actor.path")):
            t.covered("tokenizer_path", "the tokenizer is read from the model folder (actor.path)")
        else:
            t.set("tokenizer_path", "actor.tokenizer.tokenizer_model", path)
    if t.has("enable_offload"):
        on = bool(t.get("enable_offload"))
        for key in ("rollout.enable_offload", "actor.offload_weight", "actor.offload_optimizer", "actor.offload_grad"):
            t.set("enable_offload", key, on)


def engines(t: Translation) -> None:
    """The ``sglang:`` / ``vllm:`` sections: the running backend's memory fraction and limits."""
    backend = t.value("rollout.backend", "huggingface")
    keys = {"sglang": {"mem_fraction_static": "gpu_memory_utilization", "max_running_requests": "max_running_requests",
                       "attention_backend": "attention_backend", "cuda_graph_max_bs": "cuda_graph_max_bs",
                       "enable_torch_compile": "use_torch_compile", "torch_compile_max_bs": "torch_compile_max_bs",
                       "decode_log_interval": "sglang_decode_log_interval"},
            "vllm": {"gpu_memory_utilization": "gpu_memory_utilization", "enforce_eager": "enforce_eager",
                     "distributed_executor_backend": "distributed_executor_backend",
                     "max_num_seqs": "max_running_requests"}}
    for engine, table in keys.items():
        if not isinstance(t.get(engine), dict):
            continue
        model = t.get(f"{engine}.model_path" if engine == "sglang" else f"{engine}.model")
        model_key = f"{engine}.model_path" if engine == "sglang" else f"{engine}.model"
        if t.has(model_key):
            t.covered(model_key, "same as actor.path") if model in (None, "", t.get("actor.path")) else \
                t.set(model_key, "rollout.model.model_path", model)
        if engine != backend:
            t.skip(engine, NO + f"the rollout backend is {backend}, so this engine's settings do nothing")
            continue
        for key, ours in table.items():
            value = t.get(f"{engine}.{key}")
            if t.has(f"{engine}.{key}") and value is not None:
                t.set(f"{engine}.{key}", f"rollout.{ours}", num(value))
        t.skip(engine, NO + f"rlinf sets only the {engine} knobs of the rollout section")


def actor_rollout_mode(t: Translation) -> str:
    """What the translated placement makes of actor and rollout: disaggregated, collocated or
    hybrid (``unknown`` when there is no actor, as in an evaluation-only allocation)."""
    try:
        return ClusterConfig.from_dict(t.value("cluster")).plan().mode("actor", "rollout").value
    except (ConfigError, KeyError, ValueError):
        return "unknown"


def asynchrony(t: Translation) -> None:
    """``async_training`` -> ``runner.rollout_mode``; the ``rollout`` section's concurrency, queue,
    grace-period and request keys -> their nearest rlinf keys (or why there is none).

    AReaL counts a *rollout* as one workflow episode: one prompt, sampled ``gconfig.n_samples``
    times; rlinf's ``rollout.max_concurrent_rollouts`` counts sequences, and a group (one prompt's
    ``algorithm.group_size`` sequences) is its unit of admission and training.
    """
    if t.has("async_training"):
        if not t.get("async_training"):
            t.set("async_training", "runner.rollout_mode", "sync",
                  "AReaL then generates each batch and waits for it (rollout_batch)")
            if t.has("rollout.max_head_offpolicyness"):
                t.covered("rollout.max_head_offpolicyness", "not read with async_training false (every batch is "
                                                            "waited for); algorithm.max_head_offpolicyness stays 0")
        elif (placed := actor_rollout_mode(t)) != "disaggregated":
            t.skip("async_training", DIFF + "rlinf's runner.rollout_mode fully_async needs actor and rollout on "
                                            f"separate accelerators; this allocation makes them {placed}, so "
                                            "runner.rollout_mode stays null (derived from max_head_offpolicyness)")
        else:
            t.set("async_training", "runner.rollout_mode", "fully_async")
            if not t.get("actor.use_decoupled_loss"):
                t.notes.append("async_training true with actor.use_decoupled_loss false: rlinf's fully_async needs "
                               "algorithm.loss_type decoupled_ppo (--check refuses the translation); set "
                               "actor.use_decoupled_loss: true")
    else:
        t.notes.append("async_training is not set: AReaL's default (true) trains fully asynchronously; "
                       "runner.rollout_mode stays null (sync, or the async lookahead when "
                       "algorithm.max_head_offpolicyness > 0): write async_training: true for fully_async")
    fully = t.value("runner.rollout_mode") == "fully_async"
    only = NO + "read only by runner.rollout_mode fully_async (async_training true on a disaggregated allocation); "
    group = t.get("gconfig.n_samples") or 1
    if t.has("rollout.max_concurrent_rollouts"):
        value = t.get("rollout.max_concurrent_rollouts")
        if value is None:
            t.covered("rollout.max_concurrent_rollouts", "null: rollout.max_concurrent_rollouts keeps rlinf's "
                                                         "default (one step's worth of sequences)")
        elif fully:
            t.set("rollout.max_concurrent_rollouts", "rollout.max_concurrent_rollouts", int(value) * group,
                  f"AReaL's {value} episodes x gconfig.n_samples {group}: rlinf counts sequences")
        else:
            t.skip("rollout.max_concurrent_rollouts", only + "a sync / async batch starts all its sequences at "
                                                             "once (an engine decodes rollout.max_running_requests "
                                                             "together)")
    if t.has("rollout.pause_grace_period"):
        value = num(t.get("rollout.pause_grace_period"))
        if fully and value is not None:
            t.set("rollout.pause_grace_period", "rollout.pause_grace_period", value,
                  "seconds generation goes on after new weights arrive before it pauses to load them")
        elif not value:
            t.covered("rollout.pause_grace_period", "0: rlinf's default")
        else:
            t.skip("rollout.pause_grace_period", only + "other modes load weights between batches")
    consumer(t)
    queue(t, fully)
    why = ("rlinf's rollout engines run inside its rollout workers, so no generation is an HTTP request that "
           "could time out or be retried; ")
    if t.has("rollout.request_timeout"):
        t.skip("rollout.request_timeout", NO + why + "a rollout worker that dies is named and, under "
                                               "runner.recover_mode fault, the run restarts from its last checkpoint")
    if t.has("rollout.request_retries"):
        t.skip("rollout.request_retries", DIFF + why + "the nearest is runner.recover_retries: restarts of the whole "
                                                 "run from its last checkpoint after a worker dies (recover_mode "
                                                 "fault / auto), in-flight episodes started again from their prompts")


def consumer(t: Translation) -> None:
    """``rollout.consumer_batch_size``: the groups a training step takes (``data.rollout_batch_size``)."""
    if not t.has("rollout.consumer_batch_size"):
        return
    value, batch = t.get("rollout.consumer_batch_size"), t.get("train_dataset.batch_size")
    if batch is None:
        t.set("rollout.consumer_batch_size", "data.rollout_batch_size", value,
              "the groups one step trains on, also the unit of fully_async's staleness admission")
    elif value == batch:
        t.covered("rollout.consumer_batch_size", "same as train_dataset.batch_size: data.rollout_batch_size groups "
                                                 "per step, also the unit of fully_async's staleness admission")
    else:
        t.skip("rollout.consumer_batch_size", DIFF + f"AReaL's staleness capacity counts {value} episodes per "
                                                     f"version while its trainer takes {batch}; rlinf's admission and "
                                                     "its steps both count data.rollout_batch_size groups (from "
                                                     "train_dataset.batch_size)")


def queue(t: Translation, fully: bool) -> None:
    """``rollout.queue_size``: fully_async's two queues (admitted prompts, finished groups)."""
    if not t.has("rollout.queue_size"):
        return
    value = t.get("rollout.queue_size")
    if value is None:
        t.covered("rollout.queue_size", "null: rollout.channel.queue_size keeps rlinf's 0 (unbounded; AReaL bounds "
                                        "it at 16 x max_concurrent_rollouts); fully_async's admission keeps finished, "
                                        "untrained groups under (max_head_offpolicyness + 1) x data.rollout_batch_size")
    elif fully:
        t.set("rollout.queue_size", "rollout.channel.queue_size", value,
              "items per queue: fully_async's admitted and finished groups, as AReaL's input / output episodes")
    else:
        t.skip("rollout.queue_size", DIFF + "outside fully_async rlinf's rollout.channel.queue_size counts rollout "
                                            "chunks waiting for the driver, not episodes")
