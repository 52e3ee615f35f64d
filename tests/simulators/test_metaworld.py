"""Meta-World behind the simulator interface: task names (and close matches for bad ones), reset
determinism, shapes, the success flag of a scripted reach, MT10 as one split, images, the process
vector env and the probe before Ray."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from rlinf.config.env import EnvConfig, EnvInitParams
from rlinf.utils.typed_config import ConfigError, parse_section

pytestmark = pytest.mark.skipif(importlib.util.find_spec("metaworld") is None,
                                reason="metaworld is not installed (the metaworld extra of scripts/setup_env.sh)")


def mt1(task: str = "reach-v3", **kw) -> EnvConfig:
    params = kw.pop("init_params", {})
    return EnvConfig(env_type="metaworld", init_params=EnvInitParams(id=task, **params), **kw)


def reach_action(state: np.ndarray) -> np.ndarray:
    """Move the hand (state[0:3]) toward the goal (state[36:39])."""
    return np.clip(np.concatenate([(state[36:39] - state[0:3]) * 20.0, [0.0]]), -1, 1).astype(np.float32)


def test_task_names_match_the_library():
    from rlinf.engines.simulators.metaworld import import_metaworld

    import_metaworld()  # sets MUJOCO_GL before MuJoCo's first import in this process
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS, MT10_V3

    from rlinf.engines.simulators.metaworld import MT10_TASKS, TASK_NAMES

    assert TASK_NAMES == tuple(ALL_V3_ENVIRONMENTS) and MT10_TASKS == tuple(MT10_V3)


def test_single_env_reset_is_deterministic_and_a_scripted_reach_succeeds():
    from rlinf.engines.simulators.metaworld import MetaWorldSingleEnv

    env = MetaWorldSingleEnv(["reach-v3"])
    try:
        spec = env.spec()
        assert spec.default_max_episode_steps == 500 and spec.action_low.tolist() == [-1.0] * 4
        first, again, other = env.reset(7).state, env.reset(7).state, env.reset(8).state
        assert first.shape == (39,) and first.dtype == np.float32
        np.testing.assert_array_equal(first, again)
        assert not np.allclose(first[36:39], other[36:39])  # another seed, another goal
        obs = env.reset(7)
        assert obs.task_description == "reach-v3" and obs.images == {}
        step = env.step(np.zeros(4, np.float32))
        assert not step.success and not step.terminated and 0.0 <= step.reward <= 10.0
        successes = []
        for _ in range(80):
            step = env.step(reach_action(step.obs.state))
            successes.append(step.success)
        assert any(successes) and successes[-1] and not step.terminated  # Meta-World never terminates
        assert step.reward > 9.0
    finally:
        env.close()


def test_mt10_split_spreads_tasks_and_appends_the_one_hot():
    from rlinf.engines.simulators.metaworld import MetaWorldSingleEnv, single_env_kwargs

    cfg = EnvConfig(env_type="metaworld", task_suite_name="MT10", task_ids=(1, 4))
    kwargs = single_env_kwargs(cfg)
    assert kwargs["task_names"] == ["push-v3", "drawer-open-v3"] and kwargs["one_hot_size"] == 10
    env = MetaWorldSingleEnv(**kwargs)
    try:
        a, b = env.reset(10), env.reset(11)  # state id k: task k % 2, seed k // 2
        assert (a.task_description, b.task_description) == ("push-v3", "drawer-open-v3")
        assert a.state.shape == (49,) and a.state[39:].tolist() == [0, 1] + [0] * 8
        assert b.state[39:].argmax() == 4
    finally:
        env.close()


def test_rgb_observations_and_video_frames_are_upright_images():
    from rlinf.engines.simulators.metaworld import MetaWorldSingleEnv

    env = MetaWorldSingleEnv(["reach-v3"], obs_mode="rgb", camera_size=(48, 64), camera_names=("corner2", "topview"))
    try:
        obs = env.reset(0)
        assert {k: v.shape for k, v in obs.images.items()} == {"corner2": (48, 64, 3), "topview": (48, 64, 3)}
        frame = env.render()
        assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8 and frame.std() > 5
        # corner2 is defined upside down in Meta-World's scene: the floor (bright) is at the bottom
        # once rotated, the dark background above the table at the top
        assert frame[-8:].mean() > frame[:8].mean()
        with pytest.raises(Exception, match="no camera 'nocam'"):
            MetaWorldSingleEnv(["reach-v3"], obs_mode="rgb", camera_names=("nocam",)).reset(0)
    finally:
        env.close()


@pytest.mark.slow
def test_vector_env_in_processes_reports_success_once_and_truncates():
    from rlinf.engines.simulators import make_vector_env

    cfg = mt1(max_episode_steps=60, auto_reset=True, envs_per_process=2)
    with make_vector_env(cfg, num_envs=3) as env:
        assert env.steps_in_background and env.max_episode_steps == 60 and env.action_dim == 4
        obs = env.reset(seed=3)
        assert obs.states.shape == (3, 39) and obs.task_descriptions == ["reach-v3"] * 3
        for _ in range(60):
            res = env.step(torch.from_numpy(np.stack([reach_action(s) for s in obs.states.numpy()])))
            obs = res.final_obs if res.final_obs is not None else res.obs
        assert res.truncations.all() and not res.terminations.any()
        assert res.infos["success_once"].all() and res.infos["episode_length"].tolist() == [60.0] * 3
        assert not torch.equal(res.obs.states, res.final_obs.states)  # auto-reset into new episodes


def test_unknown_task_is_refused_with_close_matches():
    from rlinf.engines.simulators.base import SimulatorError
    from rlinf.engines.simulators.metaworld import metaworld_tasks
    from rlinf.runners.embodied.sim_probe import probe_obs_spec

    with pytest.raises(ConfigError, match=r"env.train.init_params.id: 'pick-place-v2' is not a Meta-World v3 "
                                          r"task; did you mean pick-place-v3"):
        probe_obs_spec(mt1("pick-place-v2"), "env.train")
    with pytest.raises(SimulatorError, match="did you mean reach-v3"):
        metaworld_tasks(mt1("reach_v3"))


@pytest.mark.parametrize("raw, key", [
    ({"task_suite_name": "MT20"}, "env.train.task_suite_name"),
    ({"task_suite_name": "MT10", "init_params": {"id": "reach-v3"}}, "env.train.task_suite_name"),
    ({}, "env.train.init_params.id"),
    ({"task_suite_name": "MT10", "task_ids": [10]}, r"env.train.task_ids\[0\]"),
    ({"init_params": {"id": "reach-v3"}, "task_ids": [0]}, "env.train.task_ids"),
    ({"init_params": {"id": "reach-v3", "obs_mode": "depth"}}, "env.train.init_params.obs_mode"),
    ({"init_params": {"id": "reach-v3", "control_mode": "pd_ee_delta_pos"}}, "env.train.init_params.control_mode"),
])
def test_bad_config_names_the_key(raw, key):
    with pytest.raises(ConfigError, match=key):
        parse_section(EnvConfig, {"env_type": "metaworld", **raw}, "env.train")


def test_probe_reports_the_shapes_before_any_worker():
    from rlinf.runners.embodied.sim_probe import probe_obs_spec

    spec = probe_obs_spec(mt1(), "env.train")
    assert (spec.state_dim, spec.image_shape, spec.action_low) == (39, None, (-1.0,) * 4)
    multi = probe_obs_spec(EnvConfig(env_type="metaworld", task_suite_name="MT10"), "env.eval")
    assert multi.state_dim == 49
    rgb = probe_obs_spec(mt1(init_params={"obs_mode": "rgb", "camera_heights": 32}), "env.train")
    assert rgb.image_shape == (32, 32, 3) and not rgb.has_wrist
    with pytest.raises(ConfigError, match="env.train.init_params.camera_names"):
        probe_obs_spec(mt1(init_params={"obs_mode": "rgb", "camera_names": ("wrist",)}), "env.train")
