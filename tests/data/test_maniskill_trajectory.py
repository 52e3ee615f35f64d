"""ManiSkill trajectory files: what the writer puts in them (ManiSkill's layout), the round trip to
transitions, and one clear line for a missing, truncated, damaged or mismatched file."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from rlinf.data.maniskill_trajectory import DemoFileError, TrajectoryWriter, json_path_for, load_demos


def episode(steps: int, dim: int = 3, start: float = 0.0, success_at_end: bool = True) -> dict:
    obs = start + np.arange((steps + 1) * dim, dtype=np.float32).reshape(steps + 1, dim)
    return dict(obs=obs, actions=np.full((steps, 2), start, np.float32),
                terminated=[False] * (steps - 1) + [success_at_end],
                truncated=[False] * (steps - 1) + [not success_at_end],
                success=[False] * (steps - 1) + [success_at_end], rewards=list(np.linspace(0, 1, steps)),
                env_states={"actors": {"cube": np.zeros((steps + 1, 13))},
                            "articulations": {"panda": np.ones((steps + 1, 31))}})


def write(path, episodes, **kw):
    kwargs = {"obs_mode": "state", "control_mode": "pd_ee_delta_pos"}
    with TrajectoryWriter(path, env_id="PickCube-v1", env_kwargs=kwargs, max_episode_steps=50,
                          source_type="scripted") as w:
        for i, ep in enumerate(episodes):
            w.add_episode(seed=10 + i, control_mode="pd_ee_delta_pos", **ep, **kw)
    return path


def test_writer_uses_maniskills_layout(tmp_path):
    path = write(tmp_path / "trajectory.h5", [episode(4), episode(2, start=100.0)])
    with h5py.File(path) as f:
        assert list(f.keys()) == ["traj_0", "traj_1"]
        g = f["traj_0"]
        assert g["obs"].shape == (5, 3) and g["actions"].shape == (4, 2) and g["actions"].dtype == np.float32
        assert g["terminated"].dtype == bool and g["truncated"].shape == (4,) and g["success"][-1]
        assert g["env_states/actors/cube"].shape == (5, 13) and g["env_states/articulations/panda"].shape == (5, 31)
        assert g["rewards"].shape == (4,)
    meta = json.loads(json_path_for(path).read_text())
    assert meta["env_info"] == {"env_id": "PickCube-v1", "max_episode_steps": 50,
                                "env_kwargs": {"obs_mode": "state", "control_mode": "pd_ee_delta_pos"}}
    assert meta["source_type"] == "scripted"
    assert meta["episodes"][1] == {"episode_id": 1, "episode_seed": 11, "reset_kwargs": {"seed": 11, "options": {}},
                                   "control_mode": "pd_ee_delta_pos", "elapsed_steps": 2, "success": True}


def test_round_trip_gives_transitions_in_episode_order(tmp_path):
    path = write(tmp_path / "t.h5", [episode(4), episode(2, start=100.0, success_at_end=False)])
    demos = load_demos(path, obs_dim=3, action_dim=2, env_id="PickCube-v1", control_mode="pd_ee_delta_pos")
    assert len(demos) == 6 and demos.num_episodes == 2 and demos.env_info["env_id"] == "PickCube-v1"
    np.testing.assert_array_equal(demos.obs[3].numpy(), [9, 10, 11])
    np.testing.assert_array_equal(demos.next_obs[3].numpy(), [12, 13, 14])  # last step of episode 0
    np.testing.assert_array_equal(demos.obs[4].numpy(), [100, 101, 102])   # episode 1 starts afresh
    assert demos.terminated.tolist() == [False, False, False, True, False, False]
    assert demos.truncated.tolist() == [False] * 5 + [True] and demos.done.tolist() == [False] * 3 + [True, False, True]
    np.testing.assert_allclose(demos.reward[:4].numpy(), np.linspace(0, 1, 4), rtol=1e-6)
    assert demos.action[5].tolist() == [100.0, 100.0]
    assert set(demos.as_dict()) == {"obs", "action", "reward", "next_obs", "terminated", "truncated", "done"}
    only = load_demos(path, only_success=True)
    assert only.num_episodes == 1 and len(only) == 4
    assert load_demos(path, max_episodes=1).num_episodes == 1


def test_a_file_without_rewards_gets_success_as_reward_and_no_sidecar_is_needed(tmp_path):
    ep = episode(3)
    del ep["rewards"]
    path = write(tmp_path / "t.h5", [ep])
    json_path_for(path).unlink()
    demos = load_demos(path)
    assert demos.reward.tolist() == [0.0, 0.0, 1.0] and demos.env_info == {}


def test_writer_refuses_mismatched_lengths_and_an_aborted_write_leaves_no_file(tmp_path):
    bad = episode(3)
    bad["obs"] = bad["obs"][:3]
    with pytest.raises(ValueError, match="obs needs 4 rows"):
        write(tmp_path / "t.h5", [bad])
    assert not (tmp_path / "t.h5").exists() and not (tmp_path / "t.json").exists()
    assert list(tmp_path.iterdir()) == []


def test_bad_files_give_one_line_naming_the_file(tmp_path):
    with pytest.raises(DemoFileError, match=r"demo file .*nope.h5 does not exist"):
        load_demos(tmp_path / "nope.h5")
    path = write(tmp_path / "t.h5", [episode(4), episode(4)])
    with pytest.raises(DemoFileError, match="observations have 3 numbers, the env gives 42"):
        load_demos(path, obs_dim=42)
    with pytest.raises(DemoFileError, match="actions have 2 numbers, the env takes 8"):
        load_demos(path, action_dim=8)
    with pytest.raises(DemoFileError, match="recorded on PickCube-v1, the env is PushCube-v1"):
        load_demos(path, env_id="PushCube-v1")
    with pytest.raises(DemoFileError, match="control mode pd_ee_delta_pos, the env uses pd_joint_delta_pos"):
        load_demos(path, control_mode="pd_joint_delta_pos")
    with pytest.raises(DemoFileError, match=r"other.json \(the JSON sidecar of t.h5\) does not exist"):
        load_demos(path, tmp_path / "other.json")
    # a truncated HDF5 file (a copy cut in half)
    cut = tmp_path / "cut.h5"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DemoFileError, match=r"cut.h5 is damaged or truncated \(.*\)"):
        load_demos(cut)
    # a sidecar cut short
    side = tmp_path / "t.json"
    side.write_text(side.read_text()[:40])
    with pytest.raises(DemoFileError, match="t.json: not valid JSON"):
        load_demos(path)


def test_files_that_do_not_hold_state_transitions_are_refused(tmp_path):
    path = write(tmp_path / "t.h5", [episode(2), episode(2)])
    meta = json.loads(json_path_for(path).read_text())
    meta["episodes"].append({**meta["episodes"][-1], "episode_id": 2})
    json_path_for(path).write_text(json.dumps(meta))
    with pytest.raises(DemoFileError, match="traj_2 is not in the file; truncated"):
        load_demos(path)
    raw = write(tmp_path / "raw.h5", [episode(2)])
    with h5py.File(raw, "a") as f:
        del f["traj_0/obs"]
    with pytest.raises(DemoFileError, match="traj_0 has no `obs`.*replay_trajectory --obs-mode state"):
        load_demos(raw)
    dict_obs = episode(2)
    dict_obs["obs"] = {"agent": {"qpos": np.zeros((3, 9))}, "extra": {"tcp_pose": np.zeros((3, 7))}}
    rgb = write(tmp_path / "rgb.h5", [dict_obs])
    with pytest.raises(DemoFileError, match="traj_0/obs is a group"):
        load_demos(rgb)
    with h5py.File(tmp_path / "empty.h5", "w"):
        pass
    with pytest.raises(DemoFileError, match="has no traj_\\* episodes"):
        load_demos(tmp_path / "empty.h5")
