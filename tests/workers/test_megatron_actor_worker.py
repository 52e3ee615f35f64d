"""The Megatron actor as a 2-rank Ray worker group with TP=2 (one replica: both ranks gather the
two shards): log-probs against the HF model, one update, offload, weight sync over the link.

Ray workers run megatron-core on the CPU through the test-only shim, installed by a subclass
defined here (shipped to the workers by value)."""

from __future__ import annotations

import sys

import pytest
import ray.cloudpickle
import torch

from rlinf.config.actor import ActorConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.batching import plan_update
from rlinf.objectives.llm import add_advantages
from rlinf.scheduler import TensorLink, WorkerGroup, plan_placement
from rlinf.utils.typed_config import parse_section
from rlinf.workers.links import WEIGHT_LINK

pytest.importorskip("megatron.core")
import megatron_cpu_shim
from test_fsdp_actor_worker import WeightReceiver, tiny_model

from rlinf.workers.actor.megatron_actor import MegatronActorWorker

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
ray.cloudpickle.register_pickle_by_value(megatron_cpu_shim)
pytestmark = pytest.mark.ray


class ShimmedMegatronActor(MegatronActorWorker):
    """The product worker, after redirecting megatron-core's CUDA calls to the CPU."""

    def __init__(self, *args, **kwargs):
        megatron_cpu_shim.install()
        torch.set_num_threads(1)
        super().__init__(*args, **kwargs)


def test_megatron_actor_group_logprobs_update_offload_and_weight_sync(ray_cluster, tmp_path):
    from transformers import AutoModelForCausalLM

    from rlinf.engines.training.common import response_logprobs

    path = tiny_model(tmp_path / "model")
    algo = AlgorithmConfig(group_size=2, n_minibatches=1, training_batch_size_per_gpu=2)
    actor_cfg = parse_section(ActorConfig, {
        "training_backend": "megatron", "optim": {"lr": 1e-2, "clip_grad": 1.0},
        "model": {"tensor_model_parallel_size": 2},
        "megatron": {"use_hf_ckpt": True, "ckpt": {"save_path": str(tmp_path / "cache")}}}, "actor")
    plan = plan_placement({"actor": "0-1", "receiver": "2"}, ray_cluster.shape)
    actor = WorkerGroup.launch(ray_cluster, ShimmedMegatronActor, plan.component("actor"),
                               args=(path, actor_cfg, algo, 10))
    receiver = WorkerGroup.launch(ray_cluster, WeightReceiver, plan.component("receiver"))
    try:
        batch = RolloutBatch.from_token_lists([[5, 1, 2], [1, 2], [3], [6, 3]],
                                              [[4, 5, 6], [7], [8, 9], [10, 11, 12]], 0, group_size=2)
        batch.rewards = torch.tensor([1.0, -1.0, -1.0, 1.0])
        shards = plan_update(batch, world_size=2, n_minibatches=1).shards
        logprobs = actor.execute_each("compute_logprobs", [(s,) for s in shards]).wait(180)
        assert [tuple(lp.shape) for lp in logprobs] == [(2, 3), (2, 3)]  # each rank its own shard
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad():
            expected, _ = response_logprobs(hf, batch, 1.0, False)
        got = torch.cat(logprobs)
        assert float((got - expected).abs().max()) < 1e-5
        batch.old_logprobs = got
        add_advantages(batch, algo)
        update = plan_update(batch, world_size=2, n_minibatches=1)
        metrics = actor.execute_each("update", [(s, update.minibatch_tokens) for s in update.shards]).wait(180)
        assert metrics[0] == metrics[1]
        assert metrics[0]["actor/grad_norm"] > 0 and metrics[0]["actor/lr"] == pytest.approx(1e-2)
        # on-policy first step: -token-mean(A) = -(3 - 1 - 2 + 3) * 0.70711 / 9 (as for FSDP)
        assert metrics[0]["actor/loss"] == pytest.approx(-3 * 0.5 ** 0.5 / 9, abs=1e-4)
        after = torch.cat(actor.execute_each("compute_logprobs", [(s,) for s in update.shards]).wait(180))
        assert not torch.allclose(after, batch.old_logprobs)  # the policy moved
        actor.offload().wait(60)
        again = torch.cat(actor.execute_each("compute_logprobs", [(s,) for s in update.shards]).wait(180))
        assert torch.equal(again, after)  # compute onloads what offload moved
        TensorLink.connect(WEIGHT_LINK, actor, 0, receiver)
        receiving = receiver.receive(path)
        sent = actor.send_weights().wait(180)
        names, changed = receiving.wait(180)[0]
        hf_names = sorted(k for k in hf.state_dict() if k != "lm_head.weight")  # tied to the embedding
        assert sent[0] > 0 and sent[1] == 0
        assert names == hf_names and sorted(changed) == sorted(hf.state_dict())
    finally:
        actor.shutdown()
        receiver.shutdown()
