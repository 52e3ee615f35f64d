"""A two-step PPO run of the flow_mlp policy (Flow-SDE, Flow-Noise, Flow-SDE with noise_anneal) on
the toy simulator: the chain travels in raw_actions from the rollout worker to the actor, whose
first minibatch sees the behaviour log-probs again (approximate KL ~ 0), also when the level the
samples were drawn with changed between the steps."""

from __future__ import annotations

import sys

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics
from tests.runners.test_embodied_runner import toy_config

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


# the first under Ray (the chain crosses process boundaries), the other two on the local backend
# (the same loop with every group in this process: ~20 s less each than a Ray launch)
@pytest.mark.parametrize(("flow", "backend"), [
    pytest.param({"noise_method": "flow_sde", "num_steps": 3, "ignore_last": True}, "ray", marks=pytest.mark.ray),
    ({"noise_method": "flow_noise", "num_steps": 2, "joint_logprob": True, "detach_critic_input": True}, "local"),
    ({"noise_method": "flow_sde", "num_steps": 3, "noise_anneal": True, "noise_params": [0.9, 0.3, 1]}, "local")])
def test_flow_policy_ppo_steps(request, tmp_path, flow, backend):
    from rlinf.runners.embodied.recipe import run_embodied

    if backend == "ray":
        request.getfixturevalue("ray_cluster")
    cfg = toy_config(tmp_path, {"env": "0", "rollout": "1", "actor": "1"}, 2, stages=1, chunks=2, backend=backend)
    cfg["actor"]["model"].update(model_type="flow_mlp", hidden_size=16, policy_hidden_sizes=[16],
                                 critic_hidden_sizes=[16], **flow)
    # the first minibatch of an update recomputes the rollout's log-probs (KL ~ 0 < 1e-6), the next
    # one follows an optimizer step: each update stops after exactly one step
    cfg["algorithm"].update(target_kl=1e-6)
    summary = run_embodied(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 2
    metrics = {int(m["step"]): m for m in read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))}
    for step in (1, 2):
        assert metrics[step]["actor/optimizer_steps"] == 1.0 and metrics[step]["actor/early_stop"] == 1.0
        assert metrics[step]["actor/value_loss"] > 0
    if flow.get("noise_anneal"):  # step 1 sampled at the start level, step 2 (weights of step 1) at the end
        assert [round(metrics[s]["rollout/noise_level"], 6) for s in (1, 2)] == [0.9, 0.3]
    elif flow["noise_method"] == "flow_sde":
        assert [round(metrics[s]["rollout/noise_level"], 6) for s in (1, 2)] == [0.5, 0.5]
    else:
        assert "rollout/noise_level" not in metrics[1]
    assert (tmp_path / "out" / "t" / "policy" / "policy.pt").is_file()
