"""The scripted PickCube-v1 expert solves its episodes, and make_demos writes files that our loader
and ManiSkill's own dataset class read, whose env states restore the recorded observations."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from toolkits.embodied import make_demos

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None, reason="mani-skill is not installed")


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    from rlinf.engines.simulators.maniskill import vulkan_unavailable_reason

    if problem := vulkan_unavailable_reason():
        pytest.skip(f"ManiSkill cannot render here: {problem}")
    out = tmp_path_factory.mktemp("demos")
    return make_demos.make_demos("PickCube-v1", 6, out, seed=100, keep_failures=True, print_fn=lambda *_: None)


@pytest.mark.slow
def test_the_expert_solves_pickcube(demos):
    assert demos["played"] == demos["written"] == 6
    assert demos["solved"] >= 5  # 50 / 50 over seeds 0-49 when measured


def test_written_demos_load_as_transitions(demos):
    from rlinf.data.maniskill_trajectory import load_demos

    t = load_demos(demos["h5"], obs_dim=42, action_dim=4, env_id="PickCube-v1", control_mode="pd_ee_delta_pos")
    assert t.num_episodes == 6 and len(t) >= 6 and int(t.done.sum()) == 6
    assert float(t.action.abs().max()) <= 1.0 and bool(t.reward.max() > 0.5)
    assert bool((t.next_obs[:-1][~t.done[:-1]] == t.obs[1:][~t.done[:-1]]).all())  # steps chain up


def test_maniskill_reads_the_files_and_env_states_restore_the_observations(demos):
    import gymnasium as gym
    import h5py
    from mani_skill.trajectory.dataset import ManiSkillTrajectoryDataset
    from mani_skill.trajectory.utils import dict_to_list_of_dicts

    ds = ManiSkillTrajectoryDataset(demos["h5"], load_count=2, device="cpu")
    assert ds[0]["obs"].shape == (42,) and ds[0]["action"].shape == (4,)
    env = gym.make("PickCube-v1", obs_mode="state", control_mode="pd_ee_delta_pos", sim_backend="cpu", num_envs=1)
    try:
        with h5py.File(demos["h5"]) as f:
            def read(group):
                return {k: read(v) if isinstance(v, h5py.Group) else v[()] for k, v in group.items()}
            states = dict_to_list_of_dicts(read(f["traj_1"]["env_states"]))
            obs = f["traj_1"]["obs"][()]
        env.reset(seed=101)
        t = len(states) // 2
        env.unwrapped.set_state_dict({k: {n: np.asarray(v)[None] for n, v in d.items()} for k, d in states[t].items()})
        restored = env.unwrapped.get_obs().cpu().numpy().reshape(-1)
        np.testing.assert_allclose(restored[:18], obs[t][:18], atol=1e-4)  # robot joint positions and velocities
    finally:
        env.close()


def test_bad_arguments_exit_2_with_one_line(capsys, tmp_path):
    assert make_demos.main(["--env", "PushCube-v1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == ("error: --env PushCube-v1: no scripted expert; one exists for "
                                                "PickCube-v1")
    assert make_demos.main(["--num", "0", "--out", str(tmp_path)]) == 2
    assert "--num must be >= 1" in capsys.readouterr().err
