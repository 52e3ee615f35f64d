"""``env_type: gymnasium``: a user's own envs (registered by ``rlinf_gym_test_envs``, imported
through ``module:Id``) behind the simulator interface — shapes, the [-1, 1] -> Box scaling, seeding,
the Dict flattening order with images apart, success from ``info["is_success"]`` and "not
reported" without it, simulator processes that import the module themselves, the bad ids refused
before Ray, and a one-step PPO run of the shipped Pendulum config on the local backend."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rlinf.config.env import EnvConfig
from rlinf.engines.simulators import make_vector_env
from rlinf.engines.simulators.base import SimulatorError
from rlinf.engines.simulators.gymnasium_env import GymnasiumSingleEnv
from rlinf.utils.eval_episodes import EpisodeLog, episode_metrics
from rlinf.utils.typed_config import ConfigError, parse_section
from rlinf.workers.env.messages import EpisodeStats

ROOT = Path(__file__).resolve().parents[2]
BOX = "rlinf_gym_test_envs:RlinfTestBoxReach-v0"
DICT = "rlinf_gym_test_envs:RlinfTestDictGoal-v0"


def group(env_id: str, **keys) -> EnvConfig:
    return parse_section(EnvConfig, {"env_type": "gymnasium", "init_params": {"id": env_id},
                                     "max_episode_steps": 6, **keys}, "env.train")


def test_box_env_scales_the_policy_range_to_the_bounds_and_seeds_its_resets():
    env = GymnasiumSingleEnv(BOX)  # imports rlinf_gym_test_envs, which registers the id
    spec = env.spec()
    assert spec.action_low.tolist() == [-1.0, -1.0] and spec.action_high.tolist() == [1.0, 1.0]
    assert spec.default_max_episode_steps == 10  # the registered limit
    first = env.reset(5)
    assert first.state.shape == (4,) and first.state.dtype == np.float32 and first.images == {}
    assert np.array_equal(env.reset(5).state, first.state) and not np.array_equal(env.reset(6).state, first.state)
    env.reset(5)
    # Box [-2, 2] x [0, 10]: -1 -> low, +1 -> high, 0 -> the middle; out-of-range numbers are clipped
    for action, received in (([-1, 1], [-2, 10]), ([0, 0], [0, 5]), ([1, -1], [2, 0]), ([3, -3], [2, 0])):
        step = env.step(np.array(action, np.float32))
        assert step.obs.state[2:].tolist() == received  # the env echoes what it got
    assert step.success is False and step.extras == {"success_reported": 0.0}
    env.close()


def test_dict_observations_flatten_in_sorted_key_order_with_images_apart_and_success_is_read():
    env = GymnasiumSingleEnv(DICT)
    obs = env.reset(3)
    raw, _ = gym.make("RlinfTestDictGoal-v0").reset(seed=3)
    # sorted keys: a_vel, cam (an image: kept apart), goal, pos
    assert obs.state.tolist() == [*raw["a_vel"], *raw["goal"], *raw["pos"]]
    assert list(obs.images) == ["cam"] and obs.images["cam"].shape == (8, 8, 3) and obs.images["cam"][0, 0, 0] == 200
    state, successes = obs.state, []
    for _ in range(8):  # head for the goal: 0.5 * action per step
        step = env.step(np.clip((state[1:3] - state[3:5]) / 0.5, -1, 1).astype(np.float32))
        state = step.obs.state
        successes.append(step.success)
        assert step.extras == {"success_reported": 1.0}
        if step.success:
            break
    assert successes[-1] and not any(successes[:-1]) and step.terminated
    with pytest.raises(SimulatorError, match="renders no frame .*set env.<split>.video_cfg.save_video"):
        env.render()  # built without render_mode
    env.close()
    videos = GymnasiumSingleEnv(DICT, render=True)  # video_cfg.save_video: render_mode rgb_array
    videos.reset(0)
    frame = videos.render()
    assert frame.shape == (16, 16, 3) and frame.dtype == np.uint8 and frame[0, 0, 1] == 100
    videos.close()


def test_simulator_processes_import_the_module_and_match_the_in_worker_envs():
    """One spawned process of two envs: it imports rlinf_gym_test_envs itself (spawned, it
    inherits no registry); same seed, same first observations as the envs in this process."""
    with make_vector_env(group(BOX, envs_per_process=2, auto_reset=True), num_envs=2) as env:
        assert env.sim.num_processes == 1
        obs = env.reset(seed=11)
        res = env.step(torch.tensor([[1.0, 0.0], [-1.0, 1.0]]))
        assert res.obs.states[:, 2:].tolist() == [[2.0, 5.0], [-2.0, 10.0]]
        assert res.infos["success_reported"].tolist() == [0.0, 0.0]
    with make_vector_env(group(BOX, sim_in_worker=True), num_envs=2) as local:
        assert torch.equal(local.reset(seed=11).states, obs.states)


def test_bad_ids_and_keys_are_one_line_before_ray():
    from rlinf.runners.embodied.sim_probe import probe_obs_spec

    cases = [("RlinfTestBoxReech-v0", r"'RlinfTestBoxReech-v0' is not a registered gymnasium env; did you mean "
                                      r"RlinfTestBoxReach-v0"),
             ("CartPole-v1", r"gymnasium env 'CartPole-v1' has a Discrete action space; env_type gymnasium takes "
                             r"Box action spaces only"),
             ("rlinf_no_such_module:Env-v0", r"gymnasium env 'rlinf_no_such_module:Env-v0': its module "
                                             r"rlinf_no_such_module does not import: ModuleNotFoundError")]
    for env_id, message in cases:
        with pytest.raises(ConfigError, match=r"^env\.train\.init_params\.id: " + message) as info:
            probe_obs_spec(group(env_id), "env.train")
        assert "\n" not in str(info.value)
    spec = probe_obs_spec(group(DICT), "env.train")
    assert (spec.state_dim, spec.image_shape, spec.action_low) == (5, (8, 8, 3), (-1.0, -1.0))
    with pytest.raises(ConfigError, match=r"env\.train\.max_episode_steps: env_type gymnasium needs the episode"):
        parse_section(EnvConfig, {"env_type": "gymnasium", "init_params": {"id": BOX}}, "env.train")
    with pytest.raises(ConfigError, match=r"env\.train\.init_params\.id: env_type gymnasium needs a registered id"):
        group(None)
    with pytest.raises(ConfigError, match=r"env\.train\.init_params\.control_mode: has no effect on a gymnasium"):
        parse_section(EnvConfig, {"env_type": "gymnasium", "init_params": {"id": BOX, "control_mode": "x"},
                                  "max_episode_steps": 5}, "env.train")


def test_success_metrics_say_not_reported_instead_of_zero():
    stats = EpisodeStats()
    stats.add(torch.tensor([1.0, 2.0]), torch.tensor([4.0, 4.0]), torch.tensor([False, False]),
              reported=torch.tensor([0.0, 0.0]))
    m = stats.metrics("env")
    assert "env/success_rate" not in m and m["env/success_reported"] == 0.0 and m["env/episode_return"] == 1.5
    mixed = stats.merge(EpisodeStats([0.0], [4.0], [True], [], [True])).metrics("env")
    assert mixed["env/success_rate"] == 1.0 and mixed["env/success_reported"] == pytest.approx(1 / 3)
    every = EpisodeStats([0.0, 0.0], [1.0, 1.0], [True, False], [], [True, True]).metrics("env")
    assert every["env/success_rate"] == 0.5 and "env/success_reported" not in every
    none = episode_metrics([{"success": None, "return": 1.0, "length": 3}] * 2)
    assert "eval/success_rate" not in none and "eval/success_rate_low" not in none
    assert none["eval/success_reported"] == 0.0 and none["eval/episodes"] == 2.0


def test_the_pendulum_config_runs_one_ppo_step_on_the_local_backend_with_success_not_reported(tmp_path):
    from rlinf.config.resolvers import register_resolvers
    from rlinf.runners.embodied.recipe import EMBODIED_RECIPE
    from rlinf.runners.entry import run_entry
    from rlinf.utils.metric_logger import read_metrics

    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    overrides = ["cluster.backend=local", "cluster.accelerators_per_node=1",
                 "cluster.component_placement={env: 0, rollout: 0, actor: 0}", "runner.max_steps=1",
                 "runner.val_check_interval=1", f"runner.output_dir={tmp_path}", "runner.logger.logger_backends=[]",
                 "+runner.plot_curves=false", "env.train.total_num_envs=2", "env.eval.total_num_envs=2",
                 "env.train.max_episode_steps=4", "env.eval.max_episode_steps=4", "actor.global_batch_size=8",
                 "actor.micro_batch_size=8", "algorithm.update_epochs=1"]
    with initialize_config_dir(str(ROOT / "examples" / "embodiment" / "config"), version_base="1.3"):
        raw = OmegaConf.to_container(compose("gymnasium_pendulum_ppo_mlp_cpu", overrides=overrides), resolve=True)
    lines: list[str] = []
    summary = run_entry(EMBODIED_RECIPE, raw, print_fn=lambda *a: lines.append(" ".join(map(str, a))))
    log_path = raw["runner"]["logger"]["log_path"]
    metrics = {int(m["step"]): m for m in read_metrics(os.path.join(log_path, "metrics.jsonl"))}
    last = metrics[1]
    assert "eval/success_rate" not in last and last["eval/success_reported"] == 0.0
    assert last["env/success_reported"] == 0.0 and last["eval/episodes"] == 2.0
    assert -16.3 * 0.1 * 4 <= last["eval/episode_return"] < 0  # reward_coef 0.1, 4 steps of -16.3..0
    assert summary["val/success_rate_reported"] == 0.0 and "val/first_success_rate" not in summary
    assert "[rlinf] eval success rate: not reported (the environment reports no success)" in lines
    episodes = EpisodeLog(log_path).read()
    assert episodes and all(e["success"] is None and e["task"] == "Pendulum-v1" for e in episodes)


def test_the_extras_check_asks_for_the_extra_that_brings_gymnasium():
    from rlinf.runners.embodied.recipe import EmbodiedRecipe

    raw = {"env": {"train": {"env_type": "gymnasium"}, "eval": {"env_type": "toy"}}}
    assert EmbodiedRecipe().needed_extras(raw) == [("embodied", "gymnasium (env.train.env_type: gymnasium)")]
