"""The FSDP2 actor as a 2-rank Ray worker group: log-probs, one update, weight sync over a link."""

from __future__ import annotations

import sys

import pytest
import ray.cloudpickle
import torch

from rlinf.config.actor import ActorConfig, OptimConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.objectives.batching import plan_update
from rlinf.objectives.llm import add_advantages
from rlinf.scheduler import TensorLink, Worker, WorkerGroup, plan_placement
from rlinf.workers.actor.fsdp_actor import FSDPActorWorker
from rlinf.workers.links import WEIGHT_LINK

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


def tiny_model(path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return str(path)


class WeightReceiver(Worker):
    def receive(self, model_path):
        from transformers import AutoModelForCausalLM

        state = self.recv_tensors(WEIGHT_LINK)
        model = AutoModelForCausalLM.from_pretrained(model_path)
        original = {k: v.clone() for k, v in model.state_dict().items()}
        model.load_state_dict(state, strict=False)
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, original[k])]
        return sorted(state), changed


def test_actor_group_logprobs_update_and_weight_sync(ray_cluster, tmp_path):
    path = tiny_model(tmp_path / "model")
    algo = AlgorithmConfig(group_size=2, n_minibatches=1, training_batch_size_per_gpu=2)
    actor_cfg = ActorConfig(optim=OptimConfig(lr=1e-2, clip_grad=1.0))
    plan = plan_placement({"actor": "0-1", "receiver": "2"}, ray_cluster.shape)
    actor = WorkerGroup.launch(ray_cluster, FSDPActorWorker, plan.component("actor"),
                               args=(path, actor_cfg, algo, 10))
    receiver = WorkerGroup.launch(ray_cluster, WeightReceiver, plan.component("receiver"))
    try:
        batch = RolloutBatch.from_token_lists([[1, 2], [1, 2], [3], [3]],
                                              [[4, 5, 6], [7], [8, 9], [10, 11, 12]], 0, group_size=2)
        batch.rewards = torch.tensor([1.0, -1.0, -1.0, 1.0])
        update = plan_update(batch, world_size=2, n_minibatches=1)
        logprobs = actor.execute_each("compute_logprobs", [(s,) for s in update.shards]).wait(120)
        batch.old_logprobs = torch.cat(logprobs)
        assert batch.old_logprobs.shape == (4, 3)
        assert torch.all(batch.old_logprobs[batch.response_mask == 0] == 0)
        assert torch.all(batch.old_logprobs[batch.response_mask == 1] < 0)
        add_advantages(batch, algo)
        update = plan_update(batch, world_size=2, n_minibatches=1)
        metrics = actor.execute_each(
            "update", [(s, update.minibatch_tokens) for s in update.shards]).wait(120)
        assert metrics[0] == metrics[1]  # reduced across ranks
        assert metrics[0]["actor/grad_norm"] > 0 and metrics[0]["actor/lr"] > 0
        # on-policy first step: ratio 1, so the loss is -token-mean(A). GRPO advantages are
        # +-1/sqrt(2) (unbiased std of +-1 is sqrt(2)); response lengths 3, 1, 2, 3 with signs
        # +, -, -, + give -(3 - 1 - 2 + 3) * 0.70711 / 9 = -0.23570
        assert metrics[0]["actor/loss"] == pytest.approx(-3 * 0.5 ** 0.5 / 9, abs=1e-4)
        after = actor.execute_each("compute_logprobs", [(s,) for s in update.shards]).wait(120)
        assert not torch.allclose(torch.cat(after), batch.old_logprobs)  # the policy moved
        TensorLink.connect(WEIGHT_LINK, actor, 0, receiver)
        receiving = receiver.receive(path)
        sent = actor.send_weights().wait(120)
        names, changed = receiving.wait(120)[0]
        assert sent[0] > 0 and sent[1] == 0
        assert "model.layers.0.self_attn.q_proj.weight" in names and changed
    finally:
        actor.shutdown()
        receiver.shutdown()
