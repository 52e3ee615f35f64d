"""Idle environments (episode over in a rollout without auto-reset) are no longer simulated:
in-process and in worker processes, and through the env worker's chunk logic."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from rlinf.engines.simulators import EpisodeVectorEnv
from rlinf.engines.simulators.single import SerialBatchSim
from rlinf.engines.simulators.subproc import SubprocBatchSim
from rlinf.envs.toy_reach import ToyReachEnv
from rlinf.workers.env.env_worker import _ChunkRun
from rlinf.workers.env.messages import EpisodeStats


class CountingToy(ToyReachEnv):
    """ToyReachEnv that counts its physics steps."""

    def __init__(self):
        super().__init__()
        self.steps = 0

    def step(self, action):
        self.steps += 1
        return super().step(action)


def _towards_target(states: torch.Tensor) -> torch.Tensor:
    return torch.clamp((states[:, 2:] - states[:, :2]) / ToyReachEnv.STEP, -1, 1)


@pytest.mark.parametrize("kind", ["serial", "subproc"])
def test_idle_env_is_frozen_with_zero_reward_until_its_next_reset(kind):
    sim = (SerialBatchSim([ToyReachEnv() for _ in range(3)]) if kind == "serial"
           else SubprocBatchSim([partial(ToyReachEnv)] * 3, envs_per_process=2))
    try:
        env = EpisodeVectorEnv(sim, max_episode_steps=50)
        env.reset(reset_state_ids=[1, 2, 3])
        env.set_idle(np.array([False, True, False]))  # no step since the reset: env 1 steps once more
        first = env.step(torch.full((3, 2), 0.5))
        frozen = first.obs.states[1].clone()
        for _ in range(3):
            res = env.step(torch.full((3, 2), 0.5))
            assert torch.equal(res.obs.states[1], frozen) and float(res.rewards[1]) == 0.0
            assert not bool(res.terminations[1]) and not bool(res.successes[1])
        assert not torch.equal(res.obs.states[0], first.obs.states[0])  # the others keep moving
        with pytest.raises(ValueError, match="idle must be"):
            env.set_idle(np.zeros(2, dtype=bool))
        env.reset(reset_state_ids=[1, 2, 3])  # a reset wakes it
        start = env.step(torch.full((3, 2), 0.5)).obs.states[1].clone()
        assert not torch.equal(env.step(torch.full((3, 2), 0.5)).obs.states[1], start)
    finally:
        sim.close()


def test_chunks_without_auto_reset_stop_simulating_finished_episodes():
    envs = [CountingToy() for _ in range(2)]
    env = EpisodeVectorEnv(SerialBatchSim(envs), max_episode_steps=30, auto_reset=False)
    obs = env.reset(reset_state_ids=[5, 6])
    finished, stats = torch.zeros(2, dtype=torch.bool), EpisodeStats()
    for _ in range(30):
        actions = _towards_target(obs.states)
        actions[1] = 0.0  # env 1 never moves: its episode runs to the time limit
        run = _ChunkRun(env, 0, 1, finished, stats, None)
        run.start(actions.unsqueeze(1))
        obs = run.finish().obs
    assert bool(finished.all())
    assert envs[1].steps == 30
    assert envs[0].steps < 10  # reached its target within a few steps, then stopped being simulated
    assert stats.metrics("eval")["eval/success_rate"] == 0.5
