"""``cluster.memory_check`` before Ray (warn / error / off, a bad value) and the placement CLI's
``--memory``, on a math config whose model folder holds only a config.json."""

from __future__ import annotations

import json

import pytest
import yaml

from rlinf.config.math import MathConfig
from rlinf.config.memory import ModelShape
from rlinf.runners.math.recipe import MATH_RECIPE
from rlinf.runners.memory_check import check_before_ray
from rlinf.scheduler.config import ClusterConfig
from rlinf.scheduler.memory import GIB, Capacity
from rlinf.scheduler.placement.__main__ import main as placement_main
from rlinf.utils.typed_config import ConfigError

HF = {"model_type": "qwen2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 128, "tie_word_embeddings": True}


def _raw(model: str, mode: str = "warn") -> dict:
    return {"cluster": {"num_nodes": 1, "accelerators_per_node": 2, "memory_check": mode,
                        "component_placement": {"actor,rollout": "all"}},
            "data": {"train_data_paths": ["x.jsonl"], "rollout_batch_size": 4, "max_prompt_length": 32},
            "runner": {"seq_length": 96},
            "algorithm": {"group_size": 2, "training_batch_size_per_gpu": 2,
                          "sampling_params": {"max_new_tokens": 64}},
            "actor": {"model": {"model_path": model}}}


@pytest.fixture
def model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(HF))
    return str(tmp_path)


def _cfg(model: str, mode: str = "warn") -> MathConfig:
    return MathConfig.from_dict(_raw(model, mode), check_paths=False)


TINY_GPU = Capacity(accelerator_bytes=GIB // 1024, node_bytes=64 * GIB, source="test: 1 MiB GPUs")


def test_error_refuses_naming_the_role_and_the_keys(model):
    printed = []
    with pytest.raises(ConfigError) as err:
        check_before_ray(MATH_RECIPE, _cfg(model, "error"), printed.append, TINY_GPU)
    assert err.value.key == "cluster.memory_check"
    text = str(err.value)
    assert text.startswith("cluster.memory_check: error: actor on node 0 acc 0 needs ~")
    for key in ("algorithm.training_batch_size_per_gpu", "set actor.model.gradient_checkpointing: true",
                "set actor.fsdp_config.cpu_offload: true", "(and 1 more device(s))"):
        assert key in text, text
    assert any("memory estimate (per rank):" in line for line in printed)  # printed before refusing


def test_warn_prints_and_goes_on_and_a_plan_that_fits_says_ok(model):
    printed = []
    est = check_before_ray(MATH_RECIPE, _cfg(model), printed.append, TINY_GPU)
    assert est is not None and set(est.components) == {"actor", "rollout"}
    warnings = [line for line in printed if "warning: memory:" in line]
    assert len(warnings) == 1 and "actor on node 0 acc 0" in warnings[0]
    printed.clear()
    check_before_ray(MATH_RECIPE, _cfg(model, "error"), printed.append,
                     Capacity(80 * GIB, 64 * GIB, "test", kind="gpu"))
    assert "[rlinf]   node 0 acc 0:" in "\n".join(printed) and not any("warning" in p for p in printed)
    actor = est.components["actor"]
    n = ModelShape.from_hf_config(HF).params
    # 4 x 2 samples over 2 ranks = 4 per rank, micro-batches of 2: 2 micro-batches, so FSDP2 keeps
    # unsharded fp32 gradients; weights and AdamW state are sharded over the 2 ranks
    assert {i.name: i.bytes for i in actor.items}["weights"] == n * 4 // 2
    assert {i.name: i.bytes for i in actor.items}["gradients"] == n * 4


def test_off_prints_nothing(model):
    printed = []
    assert check_before_ray(MATH_RECIPE, _cfg(model, "off"), printed.append, TINY_GPU) is None
    assert printed == []
    bare = yaml.safe_load("memory_check: off")["memory_check"]  # YAML 1.1 reads a bare off as false
    assert bare is False and check_before_ray(MATH_RECIPE, _cfg(model, bare), printed.append, TINY_GPU) is None
    assert printed == []


def test_a_bad_value_is_refused_naming_the_key(model):
    with pytest.raises(ConfigError, match=r"^cluster\.memory_check: 'loud' is not allowed; expected one of "
                                          r"'warn', 'error', 'off', False"):
        _cfg(model, "loud")
    with pytest.raises(ConfigError, match=r"^cluster\.memory_check: 0 is not allowed"):
        _cfg(model, 0)
    with pytest.raises(ConfigError, match=r"^cluster\.accelerator_memory_gib: must be > 0"):
        ClusterConfig.from_dict({"component_placement": {"actor": 0}, "accelerator_memory_gib": -1})


def test_the_placement_cli_prints_the_estimate_with_the_map(model, tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(_raw(model)))
    assert placement_main([str(path), "--memory", "--device-memory-gib", "0.001"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 node x 2; components: actor (2), rollout (2)")
    assert "memory estimate (per rank):" in out and "device peaks (0.001 GiB per accelerator):" in out
    assert "node 0 acc 1:" in out and "OVER" in out
    n = ModelShape.from_hf_config(HF).params
    assert f"{n / 1e6:.1f}M x 4 B / 2" in out  # the actor's weights line
    assert placement_main([str(path), "--memory", "--device-memory-gib", "-3"]) == 2
    assert capsys.readouterr().err.startswith("error: --device-memory-gib")
    assert placement_main([str(path)]) == 0 and "memory estimate" not in capsys.readouterr().out
