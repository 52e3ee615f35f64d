"""The web actor on both engines, as a 2-rank Ray group: filtered-SFT steps lower the response
NLL, FSDP2 and DeepSpeed ZeRO-2 take the same steps from the same weights (same losses), the
weights reach a receiver over the link, and a checkpoint restores the NLL exactly."""

from __future__ import annotations

import json
import sys

import pytest
import ray.cloudpickle

from rlinf.config.actor import ActorConfig, OptimConfig
from rlinf.config.algorithm import AlgorithmConfig
from rlinf.objectives.web import steps_to_batch
from rlinf.scheduler import TensorLink, WorkerGroup, plan_placement
from rlinf.workers.actor.web_actor import WebActorWorker
from rlinf.workers.links import WEIGHT_LINK

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from test_fsdp_actor_worker import WeightReceiver, tiny_model

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray

STEPS = [{"prompt_ids": [1, 2, 3 + i % 5], "response_ids": [10 + i % 7, 20 + i % 3, 30]} for i in range(8)]


def _shards(steps, ranks):
    return [steps_to_batch(steps[r::ranks], 0) for r in range(ranks)]


def _run(ray_cluster, tmp_path, deepspeed):
    path = tiny_model(tmp_path / f"model_{bool(deepspeed)}")
    plan = plan_placement({"actor": "0-1", "receiver": "2"}, ray_cluster.shape)
    actor_cfg = ActorConfig(optim=OptimConfig(lr=1e-2, clip_grad=1.0))
    algo = AlgorithmConfig(training_batch_size_per_gpu=2)
    actor = WorkerGroup.launch(ray_cluster, WebActorWorker, plan.component("actor"),
                               args=(path, actor_cfg, algo, 10, "filtered_sft", 2, deepspeed))
    receiver = WorkerGroup.launch(ray_cluster, WeightReceiver, plan.component("receiver"))
    try:
        def nll():
            parts = actor.execute_each("nll", [(b,) for b in _shards(STEPS, 2)]).wait(120)
            return sum(s for s, _ in parts) / sum(n for _, n in parts)

        before = nll()
        shards = _shards(STEPS, 2)
        tokens = sum(b.num_response_tokens for b in shards)
        losses = []
        for _ in range(3):
            out = actor.execute_each("train_steps", [([b], [tokens]) for b in shards]).wait(120)
            assert out[0] == out[1]  # reduced across ranks
            losses.append(out[0][0]["sft_loss"])
        after = nll()
        actor.execute("save_checkpoint", str(tmp_path / f"ckpt_{bool(deepspeed)}")).wait(120)
        actor.execute_each("train_steps", [([b], [tokens]) for b in shards]).wait(120)
        actor.execute("load_checkpoint", str(tmp_path / f"ckpt_{bool(deepspeed)}")).wait(120)
        restored = nll()
        TensorLink.connect(WEIGHT_LINK, actor, 0, receiver)
        receiving = receiver.receive(path)
        actor.send_weights().wait(120)
        names, changed = receiving.wait(120)[0]
        return before, losses, after, restored, names, changed
    finally:
        actor.shutdown()
        receiver.shutdown()


def test_web_actor_fsdp_and_deepspeed_agree(ray_cluster, tmp_path):
    pytest.importorskip("deepspeed")
    ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "gradient_clipping": "auto", "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 2}}
    (tmp_path / "zero2.json").write_text(json.dumps(ds))
    fsdp = _run(ray_cluster, tmp_path, None)
    zero = _run(ray_cluster, tmp_path, (str(tmp_path / "zero2.json"), 1))
    for before, losses, after, restored, names, changed in (fsdp, zero):
        assert after < before - 0.1 and losses[-1] < losses[0]  # SFT steps lower the response NLL
        assert restored == pytest.approx(after, rel=1e-6)  # the checkpoint holds the trained weights
        assert "model.embed_tokens.weight" in names and changed  # the receiver got new weights
    assert zero[1] == pytest.approx(fsdp[1], rel=1e-4)  # the same steps on both engines
