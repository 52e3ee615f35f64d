"""Every embodied policy, wrapped by FSDP2 as the embodied actor wraps it, returns tensors of its
own from ``forward`` (act / evaluate / value): FSDP2 warns "returned a view tensor" otherwise,
and an in-place op on such a view would skip its pre-backward hook (issue 29).

The FSDP2 part runs in a child process (one gloo rank, its own process group) so that no process
group outlives the test in the pytest worker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlinf.models.embodied.base import ObsSpec, PolicyOutput, own_outputs
from rlinf.models.embodied.factory import build_policy

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, os, sys, tempfile, warnings
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from rlinf.models.embodied.base import ObsSpec
from rlinf.models.embodied.factory import build_policy
from rlinf.models.embodied.openvla.tiny import write_tiny_openvla

store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
state = dict(states=torch.randn(3, 5))
image = dict(images=torch.randint(0, 255, (3, 32, 32, 3), dtype=torch.uint8))
bounds = dict(action_low=(-1.0,) * 7, action_high=(1.0,) * 7)
vla = write_tiny_openvla(tempfile.mkdtemp(), identity_stats=True)
cases = {
    "mlp": ({"model_type": "mlp", "action_dim": 2, "num_action_chunks": 3}, ObsSpec(state_dim=5), state),
    "mlp_action_level": ({"model_type": "mlp", "action_dim": 2, "num_action_chunks": 3,
                          "value_type": "action_level"}, ObsSpec(state_dim=5), state),
    "cnn": ({"model_type": "cnn", "action_dim": 2, "hidden_size": 16}, ObsSpec(image_shape=(64, 64, 3)),
            dict(images=torch.randint(0, 255, (3, 64, 64, 3), dtype=torch.uint8))),
    "flow_mlp": ({"model_type": "flow_mlp", "action_dim": 2, "num_action_chunks": 3}, ObsSpec(state_dim=5), state),
    "openvla_oft": ({"model_type": "openvla_oft", "model_path": str(vla), "action_dim": 7,
                     "add_value_head": True, "unnorm_key": "tiny_dataset"},
                    ObsSpec(image_shape=(32, 32, 3), **bounds), dict(instructions=["pick"] * 3, **image)),
}
report = {}
for name, (cfg, spec, obs) in cases.items():
    policy = fully_shard(build_policy(cfg, spec))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = policy(mode="act", **obs)
        again = policy(mode="evaluate", raw_actions=out.raw_actions, **obs)
        values = policy(mode="value", **obs)
        (again.logprobs.sum() + values.sum()).backward()
    grads = [p.grad is not None for p in policy.parameters() if p.requires_grad]
    report[name] = {"warnings": [str(w.message)[:120] for w in seen if "view tensor" in str(w.message)],
                    "grads": sum(grads), "params": len(grads)}
dist.destroy_process_group()
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def fsdp_report() -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp", "mlp_action_level", "cnn", "flow_mlp", "openvla_oft"])
def test_fsdp2_wrapped_policy_returns_no_view(fsdp_report, name):
    entry = fsdp_report[name]
    assert entry["warnings"] == []
    assert entry["grads"] > 0  # the backward ran through the hooked outputs


def test_own_outputs_copies_only_grad_requiring_views():
    base = torch.ones(4, 1, requires_grad=True) * 3
    plain = torch.zeros(4, 1).squeeze(-1)  # a view, but nothing to hook: left as it is
    out = own_outputs(PolicyOutput(actions=torch.zeros(4, 1, 1), raw_actions=torch.zeros(4, 1, 1),
                                   logprobs=base.view(4, 1, 1), values=base.squeeze(-1), entropy=plain))
    assert not out.logprobs._is_view() and not out.values._is_view()
    assert out.entropy is plain
    assert out.values.tolist() == [3.0, 3.0, 3.0, 3.0]
    leaf = torch.ones(2, 1, requires_grad=True)
    own_outputs(leaf.squeeze(-1)).sum().backward()
    assert leaf.grad.tolist() == [[1.0], [1.0]]


def test_policy_forward_matches_its_methods_values():
    policy = build_policy({"model_type": "mlp", "action_dim": 2, "num_action_chunks": 3}, ObsSpec(state_dim=5))
    states = torch.randn(4, 5)
    direct = policy.value(states=states)
    through_forward = policy(mode="value", states=states)
    assert direct._is_view() and not through_forward._is_view()
    assert torch.equal(direct, through_forward)
