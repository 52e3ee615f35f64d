"""A few embodied training steps on a real simulator: ManiSkill3 PushCube (state, MLP, PPO, two
pipeline stages). The VLA runs on ManiSkill (images) and LIBERO are the example configs'
tiny CPU variants, run end to end by tests/examples/test_embodied_configs.py."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from rlinf.utils.metric_logger import read_metrics

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from test_embodied_runner import toy_config

# The local backend: the simulator is this test's subject, not Ray (the embodied loop under Ray,
# hybrid placement and two pipeline stages, is test_embodied_runner.py's)
pytestmark = pytest.mark.slow


def _vulkan_problem() -> str | None:
    from rlinf.engines.simulators.maniskill import vulkan_unavailable_reason

    return vulkan_unavailable_reason()


@pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None, reason="mani-skill is not installed")
def test_maniskill_pushcube_ppo_steps(tmp_path):
    from rlinf.runners.embodied.recipe import run_embodied

    problem = _vulkan_problem()
    if problem:
        pytest.skip(f"ManiSkill cannot render here: {problem}")
    cfg = toy_config(tmp_path, {"env": "0", "rollout": "1", "actor": "0-1"}, 2, envs=4, max_steps=2,
                     val_check_interval=2, backend="local")
    for split in ("train", "eval"):
        # envs_per_process=2: one simulator process per pipeline stage (each process start
        # imports torch and ManiSkill, seconds of CPU); one env per process has its own tests
        # (tests/simulators/test_maniskill.py).
        cfg["env"][split].update(env_type="maniskill", max_episode_steps=10, envs_per_process=2,
                                 init_params={"id": "PushCube-v1", "control_mode": "pd_joint_delta_pos"})
    cfg["actor"]["model"]["action_dim"] = 8
    cfg["actor"].update(micro_batch_size=10, global_batch_size=20)
    summary = run_embodied(cfg, print_fn=lambda *_: None)
    assert summary["steps"] == 2 and "val/last_success_rate" in summary
    step = {int(m["step"]): m for m in read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))}[1]
    assert step["env/episodes"] == 4 and step["actor/grad_norm"] > 0
