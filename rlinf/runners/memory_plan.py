"""Memory foreseen: each role's memory per rank, from the typed config and the model's
``config.json``, summed where the placement puts it and checked against the devices before Ray.

``cluster.memory_check`` (``warn`` default, ``error``, ``off``) decides what a device that does not
fit does: a warning, a refusal (``config error: cluster.memory_check: ...`` naming the role and the
keys that would bring it under), or nothing (no estimate at all). The figures come from
:mod:`rlinf.config.memory` (formulas there; docs/memory.md).

Usage (the placement map with the estimate, no run)::

    python -m rlinf.scheduler.placement examples/math/config/grpo_tiny_cpu.yaml --memory
    python -m rlinf.runners.memory_plan examples/math/config/qwen2.5-1.5b-grpo-fsdp.yaml --device-memory-gib 80

Example:
    >>> from rlinf.scheduler.memory import Capacity
    >>> remedy_text(("algorithm.training_batch_size_per_gpu", "actor.model.gradient_checkpointing: true"))
    'lower algorithm.training_batch_size_per_gpu, or set actor.model.gradient_checkpointing: true'
"""

from __future__ import annotations

import sys
from typing import Any

from rlinf.config.memory import DTYPE_BYTES, ModelShape, TrainSetup, frozen_items, generate_items, training_items
from rlinf.scheduler.memory import (
    GIB,
    Capacity,
    ComponentMemory,
    MemoryEstimate,
    MemoryItem,
    check_capacity,
    fmt_bytes,
    node_ram_bytes,
    register_file_estimator,
    render_memory,
)
from rlinf.utils.typed_config import ConfigError

MIB = 1 << 20
#: Measured here (bench/README.md "Memory estimate"): RSS of a spawned ManiSkill PushCube simulator
#: process with one CPU-simulated env (state obs; Python, torch, SAPIEN), and each further env in it.
MANISKILL_PROCESS = 559 * MIB
MANISKILL_ENV = int(2.3 * MIB)
#: ManiSkill's first env inside the env worker itself (``sim_in_worker``: no process of its own).
MANISKILL_IN_WORKER = 164 * MIB
#: LIBERO: one simulator process with one env (robosuite + MuJoCo with EGL rendering, two 128 x 128
#: cameras, libero_spatial task 0), measured here.
LIBERO_PROCESS = 2083 * MIB
#: Headless Chromium (/usr/bin/chromium --headless=new, one small page, 9 processes each), PSS
#: measured here: 382 MiB for one instance alone, 175 MiB per instance with 4 running (shared pages
#: counted once): the first instance, then each further one.
CHROMIUM_FIRST = 382 * MIB
CHROMIUM_INSTANCE = 175 * MIB
#: HF ``generate`` / the lean loop decode at most this many sequences at once (the engine's default).
HF_MAX_BATCH = 64


def remedy_text(keys: tuple[str, ...]) -> str:
    """How the keys are named in a warning or refusal (``lower K`` / ``set K: V``)."""
    parts = [f"set {k}" if ":" in k else (k if k.startswith("more ") else f"lower {k}") for k in keys]
    return ", or ".join(parts)


def _half(name: str) -> int:
    return DTYPE_BYTES[name]


def _shard(ws: int, strategy: str, fsdp_size: int) -> int:
    if strategy == "no_shard":
        return 1
    return ws if fsdp_size in (-1, ws) else fsdp_size


def fsdp_setup(actor, shape: ModelShape, ws: int, micro: int, seq: int, response: int, entropy: bool,
               n_micro: int, grad_ckpt: bool | None = None) -> TrainSetup:
    """The :class:`TrainSetup` of an FSDP2 actor (``actor`` section) on ``ws`` ranks."""
    fc, model = actor.fsdp_config, actor.model
    s = _shard(ws, fc.sharding_strategy, fc.fsdp_size)
    compute = _half(fc.amp_autocast.precision) if fc.amp_autocast.enabled else _half(fc.mixed_precision.param_dtype)
    trainable = shape.lora_params(model.lora_rank, model.llm.lora_target_modules) if model.is_lora else None
    return TrainSetup(shape, micro_batch=micro, seq=seq, response=response, master=_half(model.precision),
                      compute=compute, reduce=_half(fc.mixed_precision.reduce_dtype), shard_weights=s, shard_grads=s,
                      shard_optim=s, accumulate_unsharded=fc.enable_gradient_accumulation and n_micro > 1 and s > 1,
                      reshard_after_forward=fc.reshard_after_forward and fc.sharding_strategy != "shard_grad_op",
                      grad_ckpt=model.gradient_checkpointing if grad_ckpt is None else grad_ckpt, entropy=entropy,
                      eager=model.attn_implementation == "eager", trainable=trainable, offload=fc.cpu_offload)


def _fsdp_remedies(actor, prefix: str, micro_key: str, ws_sharded: bool, collocated: bool) -> tuple[str, ...]:
    keys = [micro_key]
    if not actor.model.gradient_checkpointing:
        keys.append(f"{prefix}.model.gradient_checkpointing: true")
    if not actor.fsdp_config.cpu_offload:
        keys.append(f"{prefix}.fsdp_config.cpu_offload: true")
    if collocated and not (actor.offload_weight and actor.offload_optimizer):
        keys.append(f"{prefix}.offload_weight / offload_optimizer: true")
    keys.append("more ranks for the role (cluster.component_placement)" if ws_sharded
                else f"{prefix}.fsdp_config.sharding_strategy: full_shard")
    return tuple(keys)


def _in_turns(items: list[MemoryItem], names: dict[str, bool]) -> list[MemoryItem]:
    from dataclasses import replace

    return [replace(i, phase=True) if names.get(i.name) and i.where == "device" else i for i in items]


def _on_host(items: list[MemoryItem]) -> list[MemoryItem]:
    """On a CPU run every byte is host RAM, and nothing leaves it between turns."""
    from dataclasses import replace

    return [replace(i, where="host", phase=False) for i in items]


def _megatron_items(cfg, shape: ModelShape, ws: int, micro: int, seq: int, response: int, entropy: bool,
                    n_micro: int) -> list[MemoryItem]:
    """Megatron: TP x PP split the model; the distributed optimizer splits the fp32 main weights and
    AdamW state over the data-parallel ranks; bf16 / fp16 keep fp32 main weights and gradients."""
    ml, o = cfg.actor.model.llm, cfg.actor.optim
    tp, pp = ml.tensor_model_parallel_size, ml.pipeline_model_parallel_size
    dp = max(1, ws // (tp * pp))
    half = o.bf16 or o.fp16
    c = 2 if half else 4
    n = shape.params // (tp * pp)
    opt = n * (8 + (4 if half else 0)) // (dp if o.use_distributed_optimizer else 1)
    setup = TrainSetup(shape, micro_batch=micro, seq=seq, response=response, master=c, compute=c,
                       grad_ckpt=ml.recompute_granularity == "full", entropy=entropy, act_divisor=tp,
                       act_layers=shape.layers / pp * min(pp, n_micro))
    rest = [i for i in training_items(setup) if i.name in ("activations", "logits")]
    return [MemoryItem("weights", n * c, note=f"{shape.params / 1e6:.1f}M x {c} B / TP {tp} x PP {pp}"),
            MemoryItem("gradients", n * 4, note="fp32 main gradients"),
            MemoryItem("optimizer", opt, note="AdamW 2 x fp32" + (" + fp32 main weights" if half else "")
                       + (f" / DP {dp}" if o.use_distributed_optimizer else ""))] + rest


def _math(cfg, plan, capacity: Capacity, on_gpu: bool) -> MemoryEstimate:
    shape = ModelShape.from_folder(cfg.model_path, "actor.model.model_path")
    algo, new = cfg.algorithm, cfg.algorithm.sampling_params.max_new_tokens
    seq = cfg.data.max_prompt_length + new
    names = set(plan.components)
    collocated = "rollout" in names and plan.mode("actor", "rollout").value == "collocated"
    ws = plan.component("actor").world_size
    per_rank = max(1, cfg.data.rollout_batch_size * algo.group_size // ws // max(1, algo.n_minibatches))
    micro = algo.training_batch_size_per_gpu
    if cfg.runner.enable_dynamic_batch_size:
        micro = max(1, cfg.runner.max_tokens_per_mbs // seq)
    micro = min(micro, per_rank)
    n_micro = -(-per_rank // micro)
    entropy = algo.calculate_entropy or algo.entropy_bonus > 0
    out: dict[str, ComponentMemory] = {}
    actor = cfg.actor
    if actor.training_backend == "megatron":
        items = _megatron_items(cfg, shape, ws, micro, seq, new, entropy, n_micro)
        remedies = ("algorithm.training_batch_size_per_gpu", "actor.model.recompute_granularity: full",
                    "actor.optim.use_distributed_optimizer: true", "actor.model.tensor_model_parallel_size")
    else:
        setup = fsdp_setup(actor, shape, ws, micro, seq, new, entropy, n_micro)
        items = _in_turns(training_items(setup), {"weights": collocated and actor.offload_weight,
                                                  "gradients": collocated and actor.offload_grad,
                                                  "optimizer": collocated and actor.offload_optimizer})
        remedies = _fsdp_remedies(actor, "actor", "algorithm.training_batch_size_per_gpu",
                                  actor.fsdp_config.sharding_strategy != "no_shard", collocated)
        if algo.kl_beta > 0 and "inference" not in names:
            items += [MemoryItem(f"reference_{i.name}", i.bytes, i.phase, i.where, i.note) for i in frozen_items(
                shape, _half(actor.model.precision), setup.shard_weights, algo.logprob_forward_micro_batch_size,
                seq, new)]
        if cfg.critic.use_critic_model and "critic" not in names:
            items += [MemoryItem(f"critic_{i.name}", i.bytes, i.phase, i.where, i.note)
                      for i in training_items(fsdp_setup(actor, shape, ws, micro, seq, 0, False, n_micro))]
    out["actor"] = ComponentMemory("actor", tuple(items), remedies, shape.describe())
    if "critic" in names:
        cws = plan.component("critic").world_size
        out["critic"] = ComponentMemory("critic", tuple(training_items(fsdp_setup(
            actor, shape, cws, micro, seq, 0, False, n_micro))), ("algorithm.training_batch_size_per_gpu",))
    if "inference" in names:
        iws = plan.component("inference").world_size
        out["inference"] = ComponentMemory("inference", tuple(frozen_items(
            shape, _half(actor.model.precision), iws, algo.logprob_forward_micro_batch_size, seq, new)),
            ("algorithm.logprob_forward_micro_batch_size",))
    rws = plan.component("rollout").world_size
    sequences = cfg.data.rollout_batch_size * algo.group_size // max(1, rws)
    if algo.rollout_batch_size_per_gpu:
        sequences = min(sequences, algo.rollout_batch_size_per_gpu * algo.group_size)
    offload = collocated and cfg.rollout.enable_offload is not False
    out["rollout"] = _rollout(cfg.rollout, shape, max(1, sequences), cfg.data.max_prompt_length, new, offload,
                              capacity, on_gpu, plan, "algorithm.rollout_batch_size_per_gpu")
    if "reward" in names:
        out["reward"] = ComponentMemory("reward", (), note="rule-based reward: no model")
    return MemoryEstimate(out)


def _rollout(rcfg, shape: ModelShape, sequences: int, prompt: int, new: int, in_turns: bool, capacity: Capacity,
             on_gpu: bool, plan, batch_key: str) -> ComponentMemory:
    """The rollout engine: HF generate (weights, KV cache of the decoded batch) or vLLM / SGLang
    (their memory fraction of the device)."""
    backend = rcfg.engine_backend
    if backend == "huggingface" or not on_gpu:
        if backend != "huggingface":  # vLLM on the CPU: its KV cache is kv_cache_space_gb
            items = [MemoryItem("weights", shape.params * 4, note="fp32 on the CPU"),
                     MemoryItem("kv_cache", int(rcfg.kv_cache_space_gb * GIB), note="rollout.kv_cache_space_gb")]
            return ComponentMemory("rollout", tuple(items), ("rollout.kv_cache_space_gb",), shape.describe())
        batch = min(HF_MAX_BATCH, sequences)
        items = generate_items(shape, 2 if on_gpu else 4, batch, prompt, new, in_turns)
        return ComponentMemory("rollout", tuple(items), (batch_key, "rollout.enable_offload: true"), shape.describe())
    accs = max(1, len(plan.component("rollout").processes[0].accelerators))
    frac = rcfg.gpu_memory_utilization
    if capacity.accelerator_bytes is None:
        return ComponentMemory("rollout", (), note=f"{backend}: {frac} of each GPU (GPU memory unknown)")
    total = int(frac * capacity.accelerator_bytes * accs)
    items = [MemoryItem("engine", total, in_turns, note=f"rollout.gpu_memory_utilization {frac} x "
                        f"{fmt_bytes(capacity.accelerator_bytes)} x {accs} GPU(s): weights + KV cache")]
    return ComponentMemory("rollout", tuple(items), ("rollout.gpu_memory_utilization", "rollout.enable_offload: true"),
                           shape.describe())


def _pi0_params(path: str) -> tuple[int, int]:
    """``(all, PaliGemma's)`` parameters of a π0 / π0.5 folder, from its safetensors headers
    (zeros when unreadable: the preflight names the folder's problem)."""
    import math

    from rlinf.models.embodied.pi0 import Pi0CheckpointError, inspect_pi0_folder

    try:
        shapes = inspect_pi0_folder(path).shapes()
    except (Pi0CheckpointError, OSError):
        return 0, 0
    vlm = sum(math.prod(v) for k, v in shapes.items() if k.startswith("paligemma_with_expert.paligemma."))
    return sum(math.prod(v) for v in shapes.values()), vlm


def _pi0_memory(cfg, out: dict, ws: int) -> None:
    """π0 / π0.5 weights in ``actor.model.precision`` (the rollout's whole, the actor's sharded over
    its ``ws`` ranks by FSDP2); gradients and AdamW state (same dtype) for the trained part (without
    PaliGemma under ``train_expert_only``). Activations not estimated."""
    model = cfg.actor.model
    total, vlm = _pi0_params(model.model_path)
    size = DTYPE_BYTES.get(model.precision, 4)
    trained = total - vlm if model.policy.train_expert_only else total
    note = f"~{total / 1e9:.2f}B params ({model.precision})"
    w = [MemoryItem("weights", total * size // ws, note=note + (f" / {ws} ranks" if ws > 1 else ""))]
    train = w + [MemoryItem("gradients", trained * size // ws, note=f"~{trained / 1e9:.2f}B trained params"),
                 MemoryItem("optimizer", 2 * trained * size // ws)]
    out["rollout"] = ComponentMemory("rollout", (MemoryItem("weights", total * size, note=note),),
                                     note="activations not estimated")
    out["actor"] = ComponentMemory("actor", tuple(train), ("actor.micro_batch_size",
                                                           "actor.model.train_expert_only: true"),
                                   "activations not estimated")


def _policy_shape(cfg) -> tuple[ModelShape | None, int]:
    """An embodied policy's LM shape (VLAs) or None, and a parameter count for small policies."""
    model = cfg.actor.model
    if (model.model_type or "").lower() in ("openvla", "openvla_oft") and model.model_path:
        return ModelShape.from_folder(model.model_path, "actor.model.model_path"), 0
    widths = list(model.policy.policy_hidden_sizes or (256, 256, 256))
    dims = [128] + widths + [model.policy.action_dim or 8]
    mlp = sum(a * b + b for a, b in zip(dims, dims[1:]))
    return None, 2 * mlp + (2_000_000 if (model.model_type or "") == "cnn" else 0)


def _embodied(cfg, plan, capacity: Capacity, on_gpu: bool) -> MemoryEstimate:
    out: dict[str, ComponentMemory] = {}
    env = cfg.env.train
    ews = plan.component("env").world_size
    per_proc = -(-max(env.total_num_envs or 1, cfg.env.eval.total_num_envs or 1) // ews)
    if env.env_type == "maniskill" and env.init_params.sim_backend == "gpu":
        out["env"] = ComponentMemory("env", (), note="ManiSkill GPU simulation: not estimated")
    elif env.env_type == "maniskill":
        if env.sim_in_worker:
            b = MANISKILL_IN_WORKER + (per_proc - 1) * MANISKILL_ENV
        else:
            procs = -(-per_proc // env.envs_per_process)
            b = procs * MANISKILL_PROCESS + (per_proc - procs) * MANISKILL_ENV
        out["env"] = ComponentMemory("env", (MemoryItem("simulators", b, where="host",
                                                        note=f"{per_proc} ManiSkill envs (measured per env)"),),
                                     ("env.train.total_num_envs", "more env ranks (cluster.component_placement)"))
    elif env.env_type == "libero":
        out["env"] = ComponentMemory("env", (MemoryItem("simulators", per_proc * LIBERO_PROCESS, where="host",
                                                        note=f"{per_proc} LIBERO processes (measured)"),),
                                     ("env.train.total_num_envs", "more env ranks (cluster.component_placement)"))
    else:
        out["env"] = ComponentMemory("env", (), note="toy env: numpy arrays only")
    try:
        shape, small = _policy_shape(cfg)
    except ConfigError as exc:
        return MemoryEstimate(out, (f"rollout / actor not estimated: {exc}",))
    actor = cfg.actor
    ws = plan.component("actor").world_size
    if (actor.model.model_type or "").lower() in ("pi0", "pi05") and actor.model.model_path:
        _pi0_memory(cfg, out, ws)
    elif shape is None:
        w = [MemoryItem("weights", small * 4, note=f"~{small / 1e6:.2f}M params (mlp/cnn)")]
        train = w + [MemoryItem("gradients", small * 4), MemoryItem("optimizer", small * 8)]
        out["rollout"] = ComponentMemory("rollout", tuple(w))
        out["actor"] = ComponentMemory("actor", tuple(train), ("actor.micro_batch_size",))
    else:
        tokens = (actor.model.policy.action_dim or 7) * (actor.model.policy.num_action_chunks or 1)
        seq = 256 * actor.model.policy.num_images_in_input + (cfg.runner.max_prompt_length or 64) + tokens
        micro = actor.micro_batch_size or 1
        n_micro = max(1, (actor.global_batch_size or micro) // ws // micro)
        setup = fsdp_setup(actor, shape, ws, micro, seq, tokens, cfg.algorithm.entropy_bonus > 0, n_micro)
        out["actor"] = ComponentMemory("actor", tuple(training_items(setup)), _fsdp_remedies(
            actor, "actor", "actor.micro_batch_size", True, False), shape.describe() + " (language model only)")
        out["rollout"] = ComponentMemory("rollout", tuple(frozen_items(
            shape, _half(actor.model.precision), 1, actor.model.policy.val_micro_batch_size or per_proc, seq, tokens)),
            ("actor.model.val_micro_batch_size",), shape.describe())
    return MemoryEstimate(out)


def _web(cfg, plan, capacity: Capacity, on_gpu: bool) -> MemoryEstimate:
    out: dict[str, ComponentMemory] = {}
    env = cfg.env_config
    ews = plan.component("env").world_size
    per = -(-env.server_size // ews)
    browsers = CHROMIUM_FIRST + (per - 1) * CHROMIUM_INSTANCE
    out["env"] = ComponentMemory("env", (MemoryItem("browsers", browsers, where="host",
                                                    note=f"{per} Chromium instances (measured)"),),
                                 ("env_config.server_size", "more env ranks (cluster.component_placement)"))
    names = set(plan.components)
    if "rollout" not in names:
        return MemoryEstimate(out)
    if cfg.policy_config.base_model is None:
        return MemoryEstimate(out, ("rollout / actor not estimated: policy_config.base_model is not set",))
    try:
        shape = ModelShape.from_folder(cfg.policy_config.base_model, "policy_config.base_model")
    except ConfigError as exc:
        return MemoryEstimate(out, (f"rollout / actor not estimated: {exc}",))
    new = cfg.policy_config.max_new_tokens
    algo = cfg.algorithm_config
    prompt = max(1, algo.cutoff_len - new)
    rws = plan.component("rollout").world_size
    collocated = "actor" in names and plan.mode("actor", "rollout").value == "collocated"
    if cfg.policy_config.rollout_backend == "vllm" and on_gpu and capacity.accelerator_bytes:
        frac = 0.55
        out["rollout"] = ComponentMemory("rollout", (MemoryItem("engine", int(frac * capacity.accelerator_bytes),
                                                                collocated),), (), shape.describe())
    else:
        items = generate_items(shape, 2 if on_gpu else 4, min(HF_MAX_BATCH, -(-env.server_size // rws)), prompt, new,
                               collocated)
        out["rollout"] = ComponentMemory("rollout", tuple(items), ("env_config.server_size",), shape.describe())
    if "actor" in names:
        ws = plan.component("actor").world_size
        micro = algo.per_device_train_batch_size
        ds = cfg.deepspeed_settings() if algo.deepspeed_config_filename else None
        stage = ds.stage if ds else 3
        half = 2 if (ds is None or ds.bf16 or ds.fp16) else 4
        setup = TrainSetup(shape, micro_batch=micro, seq=algo.cutoff_len, response=new, master=4, compute=half,
                           shard_weights=ws if stage >= 3 else 1, shard_grads=ws if stage >= 2 else 1, shard_optim=ws,
                           grad_ckpt=bool(ds and ds.activation_checkpointing),
                           offload=bool(ds and (ds.offload_optimizer or ds.offload_param)))
        out["actor"] = ComponentMemory("actor", tuple(training_items(setup)), (
            "algorithm_config.per_device_train_batch_size", "algorithm_config.cutoff_len",
            "activation_checkpointing / offload_optimizer in the DeepSpeed file", "more actor ranks"),
            f"{shape.describe()}, ZeRO-{stage}")
    return MemoryEstimate(out)


def estimate(cfg: Any, plan, capacity: Capacity, extra: dict | None = None) -> MemoryEstimate:
    """Every placed role's memory per rank for ``cfg`` (a Math / Embodied / WebAgent config) on
    ``plan``. A GPU run (``capacity.accelerator_bytes`` known) keeps model state on the device; a CPU
    run holds everything in the node's RAM. A role whose model shape cannot be read is left out
    with a note. ``extra``: component -> more :class:`MemoryItem` s its recipe knows after its
    checks (an off-policy run's replay buffer)."""
    from rlinf.config.embodied import EmbodiedConfig
    from rlinf.config.math import MathConfig

    on_gpu = capacity.kind == "gpu"
    build = _math if isinstance(cfg, MathConfig) else _embodied if isinstance(cfg, EmbodiedConfig) else _web
    try:
        est = build(cfg, plan, capacity, on_gpu)
    except ConfigError as exc:
        return MemoryEstimate({}, (f"not estimated: {exc}",))
    for name, items in (extra or {}).items():
        if name in est.components:
            c = est.components[name]
            est.components[name] = ComponentMemory(c.component, (*c.items, *items), c.remedies, c.note)
    if not on_gpu:
        est = MemoryEstimate({n: ComponentMemory(c.component, tuple(_on_host(list(c.items))), c.remedies, c.note)
                              for n, c in est.components.items()}, est.notes)
    return est


def run_capacity(cluster, probe_cuda: bool = True) -> Capacity:
    """What one accelerator and one node hold: ``cluster.accelerator_memory_gib``, else
    ``torch.cuda`` on this node (when ``probe_cuda``), else a CPU run against this node's RAM."""
    ram = node_ram_bytes()
    if cluster.accelerator_memory_gib is not None:
        return Capacity(int(cluster.accelerator_memory_gib * GIB), ram, "cluster.accelerator_memory_gib")
    if probe_cuda:
        import torch

        if torch.cuda.is_available():
            return Capacity(torch.cuda.get_device_properties(0).total_memory, ram,
                            f"torch.cuda: {torch.cuda.get_device_name(0)}")
    return Capacity(None, ram, "CPU run: the node's RAM" if ram else "", kind="cpu")


def _planned(cfg, capacity: Capacity):
    if cfg.cluster.accelerators_per_node is not None:
        return cfg.cluster.plan()
    count = 1
    if capacity.source.startswith("torch.cuda"):
        import torch

        count = torch.cuda.device_count()
    return cfg.cluster.plan(cfg.cluster.shape(count))


def check_before_ray(cfg: Any, print_fn=print, capacity: Capacity | None = None,
                     extra: dict | None = None) -> MemoryEstimate | None:
    """The start-up estimate of every recipe (``cluster.memory_check``): prints it, then warns
    about (``warn``) or refuses (``error``: :class:`ConfigError` on ``cluster.memory_check``) a
    device it exceeds; ``off``: nothing. ``extra`` as in :func:`estimate`. Returns the estimate
    (None when off)."""
    mode = cfg.cluster.memory_check
    if mode in ("off", False):  # a bare YAML off reads as false
        return None
    capacity = capacity or run_capacity(cfg.cluster)
    plan = _planned(cfg, capacity)
    est = estimate(cfg, plan, capacity, extra)
    for line in render_memory(plan, est, capacity).splitlines():
        print_fn(f"[rlinf] {line}")
    over = check_capacity(plan, est, capacity)
    if not over:
        return est
    o = over[0]
    mem = est.components[o.component]
    text = (f"{o.component} on {o.load.label} needs ~{fmt_bytes(o.load.need)} of {fmt_bytes(o.have)} ("
            + ", ".join(f"{n} {fmt_bytes(b)}" for n, b in o.load.parts.items()) + ")"
            + (f"; to bring it under: {remedy_text(mem.remedies)}" if mem.remedies else "")
            + (f" (and {len(over) - 1} more device(s))" if len(over) > 1 else ""))
    if mode == "error":
        raise ConfigError("cluster.memory_check", f"error: {text}; or set cluster.memory_check: warn")
    print_fn(f"[rlinf] warning: memory: {text}")
    return est


def load_config(path: str) -> tuple[Any, dict]:
    """The typed root config of a YAML file (Hydra-composed when it has ``defaults:``, data paths
    not checked) and the resolved raw tree."""
    import os

    import yaml

    from rlinf.config.embodied import EmbodiedConfig
    from rlinf.config.math import MathConfig
    from rlinf.config.root import resolve_hydra
    from rlinf.config.web import WebAgentConfig

    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    if isinstance(raw, dict) and "defaults" in raw:
        from hydra import compose, initialize_config_dir

        os.environ.setdefault("REPO_PATH", os.getcwd())
        with initialize_config_dir(os.path.dirname(os.path.abspath(path)), version_base="1.3"):
            raw = resolve_hydra(compose(os.path.splitext(os.path.basename(path))[0]))
    if not isinstance(raw, dict):
        raise ConfigError("", f"{path}: not a YAML mapping")
    if "env_config" in raw or "policy_config" in raw:
        return WebAgentConfig.from_dict(raw, check_paths=False), raw
    if (raw.get("runner") or {}).get("task_type") == "embodied":
        return EmbodiedConfig.from_dict(raw), raw
    return MathConfig.from_dict(raw, check_paths=False), raw


@register_file_estimator
def estimate_file(path: str):
    """The placement CLI's ``--memory``: the config's raw ``cluster:`` mapping and a function
    ``(plan, capacity) -> MemoryEstimate`` for it."""
    cfg, raw = load_config(path)
    return raw["cluster"], lambda plan, capacity: estimate(cfg, plan, capacity)


def main(argv: list[str] | None = None) -> int:
    """``python -m rlinf.runners.memory_plan CONFIG [--device-memory-gib G]``: the estimate with
    the placement map (as ``python -m rlinf.scheduler.placement CONFIG --memory``)."""
    from rlinf.scheduler.placement.__main__ import main as placement_main

    return placement_main([*(argv if argv is not None else sys.argv[1:]), "--memory"])


if __name__ == "__main__":
    sys.exit(main())
