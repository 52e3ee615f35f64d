"""The memory arithmetic (rlinf/config/memory.py) by hand on a tiny shape, and its sums per device
(rlinf/scheduler/memory.py)."""

from __future__ import annotations

import json

import pytest

from rlinf.config.memory import (
    ModelShape,
    TrainSetup,
    generate_items,
    kv_cache_bytes,
    layer_activation_bytes,
    training_items,
)
from rlinf.scheduler.memory import (
    GIB,
    Capacity,
    ComponentMemory,
    MemoryEstimate,
    MemoryItem,
    check_capacity,
    device_loads,
    render_memory,
)
from rlinf.scheduler.placement import ClusterShape, plan_placement
from rlinf.utils.typed_config import ConfigError

#: vocab 1000, hidden 64, 2 layers, 4 heads of 16, 2 kv heads (kv width 32), intermediate 128
SHAPE = ModelShape(vocab=1000, hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128)


def test_parameter_count_by_hand():
    layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + (64 + 2 * 32) + 3 * 64 * 128 + 2 * 64  # q k v o, biases, mlp, norms
    assert SHAPE.layer_params == layer == 37120
    assert SHAPE.params == 1000 * 64 + 64 + 2 * layer
    assert ModelShape(**{**SHAPE.__dict__, "tied": False}).params == SHAPE.params + 1000 * 64
    assert SHAPE.lora_params(8, ("q_proj", "down_proj")) == 2 * (8 * (64 + 64) + 8 * (128 + 64))


def test_training_items_by_hand():
    n = SHAPE.params
    t = TrainSetup(SHAPE, micro_batch=2, seq=48, response=16, master=4, compute=2, reduce=4,
                   shard_weights=2, shard_grads=2, shard_optim=2, entropy=True)
    got = {i.name: i.bytes for i in training_items(t)}
    per_layer = 2 * (4 + 2) * 64 + 2 * (5 * 64 + 2 * 64 + 4 * 32 + 4 * 128)  # norms + q..mlp, kv repeated
    assert layer_activation_bytes(SHAPE, 2, 48) == per_layer == 2944
    assert got == {
        "weights": n * 4 // 2, "gradients": n * 4 // 2, "optimizer": 2 * n * 4 // 2,
        "gathered": (1000 * 64 + 64 + 2 * 37120) * 2,           # root unit + 2 layers in bf16
        "activations": 2 * 48 * 2 * per_layer + 2 * 48 * 64 * 6,  # + embedding / final norm
        "logits": 2 * 16 * 1000 * (2 + 25),                      # with the entropy term
    }


def test_checkpointing_accumulation_lora_and_offload_change_what_they_should():
    base = TrainSetup(SHAPE, micro_batch=2, seq=48, response=16, shard_weights=4, shard_grads=4, shard_optim=4)
    ckpt = {i.name: i.bytes for i in training_items(TrainSetup(**{**base.__dict__, "grad_ckpt": True}))}
    assert ckpt["activations"] == 2 * 48 * (2 * 64 * 4 + layer_activation_bytes(SHAPE, 4, 48)) + 2 * 48 * 64 * 8
    acc = {i.name: i.bytes for i in training_items(TrainSetup(**{**base.__dict__, "accumulate_unsharded": True}))}
    assert acc["gradients"] == SHAPE.params * 4  # FSDP2 keeps unsharded gradients between no-sync passes
    lora = {i.name: i.bytes for i in training_items(TrainSetup(**{**base.__dict__, "trainable": 1000}))}
    assert lora["optimizer"] == 2 * 1000 * 4 // 4 and lora["weights"] == SHAPE.params * 4 // 4
    off = training_items(TrainSetup(**{**base.__dict__, "offload": True}))
    assert {i.name for i in off if i.where == "host"} == {"weights", "gradients", "optimizer"}


def test_kv_cache_and_generate():
    assert kv_cache_bytes(SHAPE, 8, 100, 2) == 8 * 100 * 2 * 2 * 32 * 2
    items = {i.name: i for i in generate_items(SHAPE, 4, 8, 60, 40, in_turns=True)}
    assert items["kv_cache"].bytes == kv_cache_bytes(SHAPE, 8, 100, 4) and items["weights"].phase


def test_shape_from_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "tie_word_embeddings": True}))
    assert ModelShape.from_folder(str(tmp_path), "actor.model.model_path") == SHAPE
    with pytest.raises(ConfigError, match=r"^actor\.model\.model_path: cannot read .*config\.json"):
        ModelShape.from_folder(str(tmp_path / "nope"), "actor.model.model_path")


def test_collocated_components_add_resident_bytes_and_the_largest_turn():
    plan = plan_placement({"actor,rollout": "0-1", "env": "0"}, ClusterShape(1, 2))
    est = MemoryEstimate({
        "actor": ComponentMemory("actor", (MemoryItem("weights", 3 * GIB), MemoryItem("activations", 2 * GIB, True)),
                                 ("algorithm.training_batch_size_per_gpu",)),
        "rollout": ComponentMemory("rollout", (MemoryItem("kv_cache", 5 * GIB, True),)),
        "env": ComponentMemory("env", (MemoryItem("simulators", GIB, where="host"),))})
    loads = {load.label: load for load in device_loads(plan, est)}
    assert loads["node 0 acc 0"].need == 3 * GIB + 5 * GIB  # actor's resident + rollout's turn (the larger)
    assert loads["node 0 acc 0"].parts == {"actor": 3 * GIB, "rollout": 5 * GIB}
    assert loads["node 0 RAM"].need == GIB and loads["node 0 RAM"].ranks == 5
    over = check_capacity(plan, est, Capacity(accelerator_bytes=7 * GIB, node_bytes=64 * GIB))
    assert [(o.load.label, o.component) for o in over] == [("node 0 acc 0", "rollout"), ("node 0 acc 1", "rollout")]
    text = render_memory(plan, est, Capacity(7 * GIB, 64 * GIB, "test"))
    assert "node 0 acc 0: 8.00 GiB of 7.00 GiB  OVER" in text and "node 0 RAM: 1.00 GiB of 64.00 GiB  ok" in text
