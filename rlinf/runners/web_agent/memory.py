"""The web-agent recipe's memory estimate (:meth:`~rlinf.runners.web_agent.recipe.WebRecipe.memory_estimate`):
headless Chromium by measured figures, the policy's rollout and actor by its ``config.json`` and
the DeepSpeed file's ZeRO stage. docs/memory.md lists what each role counts.

Example (browsers only: 4 Chromium instances on one env rank)::

    >>> round((CHROMIUM_FIRST + 3 * CHROMIUM_INSTANCE) / MIB)
    907
"""

from __future__ import annotations

from rlinf.config.memory import ModelShape, TrainSetup, generate_items, training_items
from rlinf.runners.memory_check import HF_MAX_BATCH, MIB
from rlinf.scheduler.memory import Capacity, ComponentMemory, MemoryEstimate, MemoryItem
from rlinf.utils.typed_config import ConfigError

__all__ = ["web_memory"]

#: Headless Chromium (/usr/bin/chromium --headless=new, one small page, 9 processes each), PSS
#: measured here: 382 MiB for one instance alone, 175 MiB per instance with 4 running (shared pages
#: counted once): the first instance, then each further one.
CHROMIUM_FIRST = 382 * MIB
CHROMIUM_INSTANCE = 175 * MIB


def web_memory(cfg, plan, capacity: Capacity, on_gpu: bool) -> MemoryEstimate:
    """A web-agent run's roles: env (headless Chromium, measured), rollout (HF generate or a vLLM
    share of the device) and actor (DeepSpeed ZeRO stage from its file)."""
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
