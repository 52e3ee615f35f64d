"""Skipping the old-log-prob pass changes nothing where it is allowed: one optimizer step over a
batch with ``old_logprobs`` recomputed by the actor vs left None (the loss takes the detached
current log-probs) gives the same loss, gradient norm and weights, for the PPO and the decoupled
PPO loss; and the rule that decides when the pass may be skipped."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fsdp_engine_helpers import TEMPERATURE, TOTAL_STEPS, make_batch, make_cfg, run_in_world_of_one


def _scenario(model_dir: str, out: str) -> dict:
    from rlinf.config.algorithm import AlgorithmConfig
    from rlinf.engines.training.fsdp import FSDPEngine
    from rlinf.objectives.llm import make_loss_fn

    res = {}
    for loss_type in ("ppo", "decoupled_ppo"):
        loss = make_loss_fn(AlgorithmConfig(loss_type=loss_type, entropy_bonus=0.0))
        for mode in ("recomputed", "skipped"):
            torch.manual_seed(0)
            eng = FSDPEngine(model_dir, make_cfg(), temperature=TEMPERATURE, device=torch.device("cpu"),
                             total_steps=TOTAL_STEPS)
            batch = make_batch()
            batch.rollout_logprobs = torch.zeros_like(batch.advantages) - 1.0  # behaviour policy
            if mode == "recomputed":
                batch.old_logprobs, _ = eng.compute_logprobs(batch, 3)
            mbs = [batch.select([0, 1, 2]), batch.select([3, 4, 5])]
            metrics = eng.train_minibatch(mbs, loss, batch.num_response_tokens)
            res[loss_type, mode] = {"metrics": metrics, "state": eng.full_state_dict()}
            del eng
    return res


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    out, _ = run_in_world_of_one(_scenario, tmp_path_factory.mktemp("old_logprobs"))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["ppo", "decoupled_ppo"])
def test_skipping_the_recompute_gives_the_same_step(res, loss_type):
    a, b = res[loss_type, "recomputed"], res[loss_type, "skipped"]
    for key in ("policy_loss", "grad_norm"):
        assert key in a["metrics"], sorted(a["metrics"])
        assert a["metrics"][key] == pytest.approx(b["metrics"][key], rel=1e-5, abs=1e-7), key
    assert a["metrics"]["grad_norm"] > 0
    for name, tensor in a["state"].items():
        assert torch.allclose(tensor, b["state"][name], rtol=1e-5, atol=1e-6), name


def _cfg(tmp_path, **over):
    from rlinf.config.math import MathConfig

    model = tmp_path / "m"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(over.pop("hf", {"model_type": "qwen2", "attention_dropout": 0.0})))
    raw = {"cluster": {"num_nodes": 1, "accelerators_per_node": 1, "component_placement": {"actor,rollout": "0"}},
           "data": {"train_data_paths": ["x.jsonl"], "rollout_batch_size": 4},
           "algorithm": {"group_size": 2}, "actor": {"model": {"model_path": str(model)}}}
    for section, values in over.items():
        raw.setdefault(section, {}).update(values)
    return MathConfig.from_dict(raw, check_paths=False)


@pytest.mark.parametrize("over, why", [
    ({}, None),
    ({"rollout": {"recompute_logprobs": False}}, "rollout.recompute_logprobs is false"),
    ({"algorithm": {"n_minibatches": 2, "training_batch_size_per_gpu": 4}}, "algorithm.n_minibatches is 2"),
    ({"hf": {"model_type": "qwen2", "attention_dropout": 0.1}}, "dropout (attention_dropout=0.1)"),
    ({"algorithm": {"kl_beta": 0.1, "kl_in_reward": True, "adv_type": "reinpp"}}, "KL penalty in the reward"),
])
def test_when_the_old_logprobs_are_the_updates_own(tmp_path, over, why):
    from rlinf.runners.math.pipeline import old_logprobs_are_current

    got = old_logprobs_are_current(_cfg(tmp_path, **over))
    assert (got is None) if why is None else (why in got), got
