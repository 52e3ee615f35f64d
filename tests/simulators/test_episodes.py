"""Episode rules of EpisodeVectorEnv, on the pure-numpy toy simulator (no simulator library)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlinf.config.env import EnvConfig, EnvInitParams
from rlinf.engines.simulators import EpisodeVectorEnv, make_vector_env
from rlinf.engines.simulators.single import SerialBatchSim
from rlinf.envs.toy_reach import ToyReachEnv


def toy(n=4, **kw) -> EpisodeVectorEnv:
    return EpisodeVectorEnv(SerialBatchSim([ToyReachEnv() for _ in range(n)]), **kw)


def greedy(obs) -> torch.Tensor:
    """Head straight for the target: reaches it within a few steps."""
    s = obs.states
    return torch.clamp((s[:, 2:] - s[:, :2]) / ToyReachEnv.STEP, -1, 1)


def test_reset_and_step_shapes():
    env = toy(3, max_episode_steps=5)
    obs = env.reset(seed=0)
    assert obs.states.shape == (3, 4) and obs.states.dtype == torch.float32
    assert env.action_dim == 2 and env.action_low.tolist() == [-1, -1] and env.max_episode_steps == 5
    res = env.step(np.zeros((3, 2), np.float32))
    assert res.rewards.shape == (3,) and res.rewards.dtype == torch.float32
    for t in (res.terminations, res.truncations, res.successes, res.dones):
        assert t.shape == (3,) and t.dtype == torch.bool
    assert set(res.infos) >= {"elapsed_steps", "episode_return", "episode_length", "success_once", "distance"}
    assert res.final_obs is None
    with pytest.raises(ValueError, match=r"actions must be \[num_envs=3, action_dim=2\], got \[3, 7\]"):
        env.step(torch.zeros(3, 7))


def test_termination_auto_reset_keeps_final_obs():
    env = toy(4, max_episode_steps=50, auto_reset=True)
    obs = env.reset(seed=1)
    for _ in range(20):
        res = env.step(greedy(obs))
        if res.terminations.any():
            break
        obs = res.obs
    done = res.terminations
    assert done.any() and (res.successes[done]).all() and not res.truncations.any()
    assert res.final_obs is not None
    # the finished episode's last observation: agent on the target; the new one starts elsewhere
    final, new = res.final_obs.states[done], res.obs.states[done]
    assert (torch.linalg.norm(final[:, :2] - final[:, 2:], dim=1) < ToyReachEnv.SUCCESS_RADIUS).all()
    assert not torch.equal(final, new)
    assert torch.equal(res.final_obs.states[~done], res.obs.states[~done])
    assert (res.infos["episode_return"][done] > 0.9).all() and res.infos["success_once"][done].all()
    # counters restart for the reset envs only
    nxt = env.step(torch.zeros(4, 2))
    assert (nxt.infos["elapsed_steps"][done] == 1).all()
    assert (nxt.infos["elapsed_steps"][~done] == res.infos["elapsed_steps"][~done] + 1).all()


def test_truncation_without_auto_reset():
    env = toy(2, max_episode_steps=3)
    env.reset(seed=0)
    results = [env.step(torch.zeros(2, 2)) for _ in range(3)]
    assert [bool(r.truncations.all()) for r in results] == [False, False, True]
    assert all(r.final_obs is None for r in results)


def test_ignore_terminations_reports_success_but_runs_to_the_limit():
    env = toy(2, max_episode_steps=8, ignore_terminations=True, auto_reset=True)
    obs = env.reset(seed=2)
    seen_success = False
    for t in range(8):
        res = env.step(greedy(obs))
        obs = res.obs
        seen_success |= bool(res.successes.any())
        assert not res.terminations.any()
        assert bool(res.truncations.all()) == (t == 7)
    assert seen_success and res.infos["success_once"].all() and res.final_obs is not None


def test_reward_coef_and_relative_reward():
    env = toy(1, max_episode_steps=50, reward_coef=5.0, use_rel_reward=True)
    obs = env.reset(seed=3)
    rewards = []
    for _ in range(20):
        res = env.step(greedy(obs))
        obs = res.obs
        rewards.append(float(res.rewards[0]))
        if res.terminations.any():
            break
    # relative rewards telescope: their sum is the last scaled reward (5 * 1.0 on success)
    assert sum(rewards) == pytest.approx(5.0, abs=1e-5)


def test_fixed_reset_states_are_shared_by_groups_and_reproducible():
    kw = dict(max_episode_steps=2, use_fixed_reset_state_ids=True, group_size=2, seed=7, auto_reset=True)
    a, b = toy(4, **kw), toy(4, **kw)
    oa, ob = a.reset(), b.reset()
    assert torch.equal(oa.states, ob.states)                      # same seed, same initial states
    assert torch.equal(oa.states[0], oa.states[1]) and torch.equal(oa.states[2], oa.states[3])
    assert not torch.equal(oa.states[0], oa.states[2])
    ids = a.reset_state_ids
    a.step(torch.zeros(4, 2))
    res = a.step(torch.zeros(4, 2))                              # all truncate and auto-reset
    assert res.truncations.all() and torch.equal(res.obs.states, oa.states)
    assert (a.reset_state_ids == ids).all()
    assert not (a.reset().states == oa.states).all()              # the next reset draws new states
    assert torch.equal(a.reset(seed=7).states, oa.states)         # re-seeding replays them


def test_random_reset_states_and_explicit_ids():
    env = toy(3, max_episode_steps=1, auto_reset=True, seed=0)
    obs = env.reset()
    assert len(set(env.reset_state_ids.tolist())) == 3
    before = env.reset_state_ids
    env.step(torch.zeros(3, 2))
    assert (env.reset_state_ids != before).all()                  # each episode draws a new state
    obs = env.reset(reset_state_ids=[5, 5, 6])
    assert torch.equal(obs.states[0], obs.states[1]) and not torch.equal(obs.states[0], obs.states[2])
    with pytest.raises(ValueError, match="reset_state_ids has 2 entries for 3 envs"):
        env.reset(reset_state_ids=[1, 2])


def test_make_vector_env_toy_with_images_and_ranks():
    cfg = EnvConfig(env_type="toy", seed=3, max_episode_steps=4, init_params=EnvInitParams(camera_heights=16))
    with make_vector_env(cfg, num_envs=2) as env:
        obs = env.reset(seed=0)
        assert obs.images["top"].shape == (2, 16, 16, 3) and obs.images["top"].dtype == torch.uint8
        assert env.render().shape == (2, 16, 16, 3)
        assert env.max_episode_steps == 4
    r0, r1 = make_vector_env(cfg, 2, rank=0), make_vector_env(cfg, 2, rank=1)
    r0.reset()
    r1.reset()
    assert not np.array_equal(r0.reset_state_ids, r1.reset_state_ids)  # workers draw different states
