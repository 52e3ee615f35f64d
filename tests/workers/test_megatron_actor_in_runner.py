"""The math GRPO runner with ``actor.training_backend: megatron``: examples/math/config/
grpo_tiny_megatron_cpu.yaml (TP=2, HF checkpoint converted on start) on a tiny model: two steps
with a KL term (the actor's frozen Megatron reference) and the weights synced to the HF rollout
after each. (The random model earns equal rewards, so the steps carry no gradient; the engine
tests check the update itself.)

megatron-core runs on the CPU through the test-only shim: the runner launches the shimmed
subclass of the product worker (patched into ``math_groups`` for this test only)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

pytest.importorskip("megatron.core")

from test_generation_worker import tiny_model_with_tokenizer
from test_megatron_actor_worker import ShimmedMegatronActor

from rlinf.data.prompt_dataset import PromptDataset, PromptLoader
from rlinf.data.readers import read_rows
from rlinf.runners.math import groups as math_groups
from rlinf.runners.math.loop import MathRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from test_math_configs import load

pytestmark = pytest.mark.ray


def prompts_file(path: Path, n: int) -> str:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"w{5 + i % 20} w{6 + i % 20}", "answer": str(i % 3)}) + "\n")
    return str(path)


def test_grpo_steps_with_the_megatron_actor(ray_cluster, tmp_path, monkeypatch):
    from rlinf.data.tokenizer import load_tokenizer

    model = tiny_model_with_tokenizer(tmp_path / "model")
    data = prompts_file(tmp_path / "train.jsonl", 8)
    cfg = load("grpo_tiny_megatron_cpu", [
        f"actor.model.model_path={model}", f"rollout.model.model_path={model}",
        f"data.train_data_paths=[{data}]", "data.val_data_paths=[]", "data.rollout_batch_size=4",
        "data.max_prompt_length=8", "runner.seq_length=16", "algorithm.group_size=2",
        "algorithm.training_batch_size_per_gpu=2", "algorithm.kl_beta=0.01", "actor.optim.lr=1e-3",
        f"actor.megatron.ckpt.save_path={tmp_path / 'megatron_ckpt'}"])
    assert cfg.actor.training_backend == "megatron" and cfg.actor.model.llm.tensor_model_parallel_size == 2
    tok = load_tokenizer(model)
    train = PromptLoader(PromptDataset(read_rows(cfg.data.train_data_paths, "prompt", "answer"),
                                       lambda text: tok(text)["input_ids"], 8), 4, shuffle=True, seed=0)
    monkeypatch.setattr(math_groups, "MegatronActorWorker", ShimmedMegatronActor)
    groups = math_groups.launch_math_groups(cfg, ray_cluster, cfg.cluster.plan(), total_steps=2)
    try:
        runner = MathRunner(cfg, groups, train, None, tok.pad_token_id)
        for step in (1, 2):
            metrics = runner.train_step()
            assert metrics["step"] == step and metrics["reward/count"] == 8  # 4 prompts x 2
            for key in ("actor/loss", "actor/grad_norm", "actor/kl", "time/update", "time/sync"):
                assert math.isfinite(metrics[key]), key
            assert metrics["actor/lr"] == pytest.approx(1e-3)
        # both syncs reached every rollout rank
        prompts = [(train.next_batch(), cfg.algorithm.sampling_params, 1, 0)] * groups.rollout.world_size
        assert all(b.policy_version == 2 for b in groups.rollout.execute_each("generate", prompts).wait())
    finally:
        groups.shutdown()
