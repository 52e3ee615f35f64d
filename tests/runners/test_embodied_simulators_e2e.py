"""A few embodied training steps on the real simulators: ManiSkill3 PushCube (state, MLP, PPO,
two pipeline stages) and, when LIBERO and its assets are installed, libero_spatial with the tiny
VLA (two cameras, instructions, GRPO)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import ray.cloudpickle

from rlinf.utils.metric_logger import read_metrics

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from test_embodied_runner import toy_config  # noqa: E402

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.ray


def _vulkan_problem() -> str | None:
    from rlinf.engines.simulators.maniskill import vulkan_unavailable_reason

    return vulkan_unavailable_reason()


@pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None, reason="mani-skill is not installed")
def test_maniskill_pushcube_ppo_steps(ray_cluster, tmp_path):
    from rlinf.runners.embodied_main import run_embodied

    problem = _vulkan_problem()
    if problem:
        pytest.skip(f"ManiSkill cannot render here: {problem}")
    cfg = toy_config(tmp_path, {"env": "0", "rollout": "1", "actor": "0-1"}, 2, envs=4, max_steps=2,
                     val_check_interval=2)
    for split in ("train", "eval"):
        cfg["env"][split].update(env_type="maniskill", max_episode_steps=10,
                                 init_params={"id": "PushCube-v1", "control_mode": "pd_joint_delta_pos"})
    cfg["actor"]["model"]["action_dim"] = 8
    cfg["actor"].update(micro_batch_size=10, global_batch_size=20)
    summary = run_embodied(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 2 and "val/last_success_rate" in summary
    step = {int(m["step"]): m for m in read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))}[1]
    assert step["env/episodes"] == 4 and step["actor/grad_norm"] > 0


@pytest.mark.skipif(importlib.util.find_spec("libero") is None,
                    reason="LIBERO is not installed (opt-in extra: RLINF_EXTRAS=...,libero)")
def test_libero_tiny_vla_grpo_step(ray_cluster, tmp_path):
    from rlinf.engines.simulators.libero_setup import bundled_assets_dir
    from rlinf.models.embodied.openvla.tiny import TINY_UNNORM_KEY, write_tiny_openvla
    from rlinf.runners.embodied_main import run_embodied

    if bundled_assets_dir() is None:
        pytest.skip("LIBERO assets are not installed")
    vla = write_tiny_openvla(tmp_path / "vla", action_dim=7, identity_stats=True)
    cfg = toy_config(tmp_path, {"env,rollout": "0", "actor": "0"}, 1, adv="grpo", stages=1, chunks=2,
                     envs=2, group=2, video=True, max_steps=1, val_check_interval=-1)
    for split in ("train", "eval"):
        cfg["env"][split].update(env_type="libero", task_suite_name="libero_spatial", task_ids=[0],
                                 max_episode_steps=4, reward_coef=5.0,
                                 init_params={"camera_heights": 64, "camera_widths": 64})
    cfg["actor"]["model"] = {"model_type": "openvla_oft", "model_path": str(vla), "action_dim": 7,
                             "num_action_chunks": 2, "unnorm_key": TINY_UNNORM_KEY, "image_size": [32, 32],
                             "num_images_in_input": 2, "add_value_head": False}
    cfg["actor"].update(micro_batch_size=2, global_batch_size=4)
    assert run_embodied(cfg, print_fn=lambda *_: None)["steps"] == 1
    step = read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))[-1]
    assert step["env/episodes"] == 2 and "actor/policy_loss" in step
