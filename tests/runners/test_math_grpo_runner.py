"""Two synchronous GRPO steps end to end on the fake cluster: every phase runs, weights sync."""

from __future__ import annotations

import json
import sys

import pytest
import ray.cloudpickle

from rlinf.config.math import MathConfig
from rlinf.data.prompt_dataset import PromptDataset, PromptLoader
from rlinf.data.readers import read_rows
from rlinf.runners.math.groups import launch_math_groups
from rlinf.runners.math.loop import MathRunner

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "workers"))
from test_generation_worker import tiny_model_with_tokenizer

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


def write_data(path, n):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": f"w{5 + i % 20} w{6 + i % 20}", "answer": str(i % 3)}) + "\n")
    return str(path)


@pytest.mark.parametrize("placement, collocated", [
    ({"actor,rollout,reward": "0-1"}, True),
    ({"actor": "0-1", "rollout": "2", "reward": "3"}, False),
])
def test_two_steps_and_validation(ray_cluster, tmp_path, placement, collocated):
    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = MathConfig.from_dict({
        "cluster": {"num_nodes": 1, "accelerators_per_node": 8, "component_placement": placement},
        "runner": {"seq_length": 32},
        "algorithm": {"group_size": 2, "n_minibatches": 1, "training_batch_size_per_gpu": 2,
                      "kl_beta": 0.01, "sampling_params": {"max_new_tokens": 6, "min_new_tokens": 1}},
        "data": {"train_data_paths": [write_data(tmp_path / "train.jsonl", 12)],
                 "val_data_paths": [write_data(tmp_path / "val.jsonl", 4)],
                 "rollout_batch_size": 4, "max_prompt_length": 8},
        "actor": {"model": {"model_path": model}, "optim": {"lr": 1e-3}},
        "reward": {"reward_scale": 1.0},
    })
    from rlinf.data.tokenizer import load_tokenizer

    tok = load_tokenizer(model)
    encode = lambda text: tok(text)["input_ids"]  # noqa: E731
    train = PromptLoader(PromptDataset(read_rows(cfg.data.train_data_paths, "prompt", "answer"), encode, 8),
                         cfg.data.rollout_batch_size, shuffle=True, seed=0)
    val = PromptLoader(PromptDataset(read_rows(cfg.data.val_data_paths, "prompt", "answer"), encode, 8),
                       2, shuffle=False, seed=0)
    groups = launch_math_groups(cfg, ray_cluster, cfg.cluster.plan(), total_steps=2)
    try:
        runner = MathRunner(cfg, groups, train, val, tok.pad_token_id)
        assert runner.collocated is collocated
        for step in (1, 2):
            metrics = runner.train_step()
            assert metrics["step"] == step and metrics["reward/count"] == 8  # 4 prompts x 2
            for key in ("actor/loss", "actor/grad_norm", "actor/kl", "time/rollout", "time/update",
                        "response/length_mean", "throughput/tokens_per_s"):
                assert key in metrics, key
        val_metrics = runner.validate()
        assert val_metrics["val/count"] == 4 and 0.0 <= val_metrics["val/accuracy"] <= 1.0
        # both syncs reached every rollout rank
        batch = groups.rollout.execute_each("generate", [(train.next_batch(), cfg.algorithm.sampling_params, 1, 0)]
                                            * groups.rollout.world_size).wait()
        assert all(b.policy_version == 2 for b in batch)
    finally:
        groups.shutdown()
