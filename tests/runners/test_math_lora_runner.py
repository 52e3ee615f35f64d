"""GRPO with a LoRA actor through ``run_math``: the rollout engine receives merged weights every
step, the checkpoint holds the PEFT adapter, the HF export is the merged model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import ray.cloudpickle
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_generation_worker import tiny_model_with_tokenizer
from test_math_runner_features import base_config, with_dirs

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


def test_grpo_with_a_lora_actor(ray_cluster, tmp_path):
    from safetensors.torch import load_file

    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = with_dirs(base_config(tmp_path, model, {"actor,rollout,reward": "0-1"}, 2,
                                runner={"max_steps": 2, "save_interval": 2},
                                actor={"model": {"model_path": model, "is_lora": True, "lora_rank": 4,
                                                 "lora_alpha": 16}, "optim": {"lr": 5e-2}}), tmp_path / "a")
    assert run_math(cfg, print_fn=lambda *_: None)["steps"] == 2
    run = tmp_path / "a" / "t"
    adapter = load_file(str(run / "checkpoints" / "global_step_2" / "actor" / "lora_adapter"
                            / "adapter_model.safetensors"))
    assert adapter and all(k.startswith("base_model.model.") and ".lora_" in k for k in adapter)
    assert any(".lora_B." in k and v.abs().sum() > 0 for k, v in adapter.items())  # B left zero: trained
    base, merged = (load_file(str(Path(model) / "model.safetensors")),
                    load_file(str(run / "huggingface" / "model.safetensors")))
    assert set(merged) - {"lm_head.weight"} == set(base)  # the export also writes the tied head
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged[q], base[q])
    assert torch.equal(merged["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
