"""The math recipe's memory estimate (:meth:`~rlinf.runners.math.recipe.MathRecipe.memory_estimate`;
the tool-agent recipe inherits it): per-role figures from the typed config and the model's
``config.json``, with the arithmetic of :mod:`rlinf.config.memory` and the FSDP2 helpers shared
by the recipes (:mod:`rlinf.runners.memory_check`). docs/memory.md lists what each role counts.

Example (a two-layer Qwen2 shape on a CPU run)::

    >>> import json, tempfile
    >>> from rlinf.config.math import MathConfig
    >>> from rlinf.scheduler.memory import Capacity
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(f"{folder}/config.json", "w").write(json.dumps({"model_type": "qwen2", "vocab_size": 1000,
    ...     "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    ...     "intermediate_size": 128, "tie_word_embeddings": True}))
    >>> cfg = MathConfig.from_dict({"cluster": {"num_nodes": 1, "accelerators_per_node": 1,
    ...     "component_placement": {"actor,rollout": "all"}}, "data": {"train_data_paths": ["x.jsonl"]},
    ...     "actor": {"model": {"model_path": folder}}}, check_paths=False)
    >>> sorted(math_memory(cfg, cfg.cluster.plan(), Capacity(kind="cpu"), False).components)
    ['actor', 'rollout']
"""

from __future__ import annotations

from rlinf.config.memory import ModelShape, TrainSetup, frozen_items, generate_items, training_items
from rlinf.runners.memory_check import HF_MAX_BATCH, dtype_size, fsdp_remedies, fsdp_setup, in_turns
from rlinf.scheduler.memory import GIB, Capacity, ComponentMemory, MemoryEstimate, MemoryItem, fmt_bytes

__all__ = ["math_memory"]


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


def math_memory(cfg, plan, capacity: Capacity, on_gpu: bool) -> MemoryEstimate:
    """The math run's roles (and the tool agent's: the same groups): actor (FSDP2 or Megatron,
    with a reference / critic it hosts), inference, critic, rollout (HF or an engine's share of
    the device), reward (rule-based: nothing)."""
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
        items = in_turns(training_items(setup), {"weights": collocated and actor.offload_weight,
                                                  "gradients": collocated and actor.offload_grad,
                                                  "optimizer": collocated and actor.offload_optimizer})
        remedies = fsdp_remedies(actor, "actor", "algorithm.training_batch_size_per_gpu",
                                  actor.fsdp_config.sharding_strategy != "no_shard", collocated)
        if algo.kl_beta > 0 and "inference" not in names:
            items += [MemoryItem(f"reference_{i.name}", i.bytes, i.phase, i.where, i.note) for i in frozen_items(
                shape, dtype_size(actor.model.precision), setup.shard_weights, algo.logprob_forward_micro_batch_size,
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
            shape, dtype_size(actor.model.precision), iws, algo.logprob_forward_micro_batch_size, seq, new)),
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
