"""SubprocBatchSim: environments in worker processes; crashes, hangs and errors name the env."""

from __future__ import annotations

import os
import signal
import time
from functools import partial

import numpy as np
import pytest
import torch

from rlinf.engines.simulators import EpisodeVectorEnv, SimulatorError
from rlinf.engines.simulators.subproc import SubprocBatchSim
from rlinf.envs.toy_reach import ToyReachEnv


def toy_sim(n=2, **kw) -> SubprocBatchSim:
    return SubprocBatchSim([partial(ToyReachEnv, image_size=8)] * n, labels=["toy"] * n, **kw)


def test_processes_match_in_process_results():
    sim = toy_sim(2)
    try:
        env = EpisodeVectorEnv(sim, max_episode_steps=3, auto_reset=True)
        obs = env.reset(reset_state_ids=[4, 9])
        ref = [ToyReachEnv(image_size=8) for _ in range(2)]
        expected = np.stack([ref[0].reset(4).state, ref[1].reset(9).state])
        assert np.allclose(obs.states.numpy(), expected)
        assert obs.images["top"].shape == (2, 8, 8, 3) and obs.task_descriptions == ["reach the target"] * 2
        res = env.step(torch.full((2, 2), 0.5))
        assert np.allclose(res.obs.states[:, :2].numpy(), np.clip(expected[:, :2] + 0.1, -1, 1), atol=1e-6)
        assert sim.task_names == ["toy-reach", "toy-reach"] and all(sim.pids)
    finally:
        sim.close()
    assert not any(p.is_alive() for p in sim._procs)


def test_killed_process_is_reported_with_env_index_and_task():
    sim = toy_sim(2)
    sim.reset(np.arange(2), np.arange(2))
    os.kill(sim.pids[1], signal.SIGKILL)
    with pytest.raises(SimulatorError, match=r"env 1 \(toy-reach\): step failed: process \d+ was killed by SIGKILL"):
        sim.step(np.zeros((2, 2), np.float32))
    assert not any(p.is_alive() for p in sim._procs)  # the whole batch is stopped


def test_hung_process_is_reported_within_the_timeout():
    sim = toy_sim(2, step_timeout_s=2.0)
    sim.reset(np.arange(2), np.arange(2))
    os.kill(sim.pids[0], signal.SIGSTOP)  # frozen: alive but never answers
    start = time.monotonic()
    with pytest.raises(SimulatorError, match=r"env 0 \(toy-reach\): step failed: no answer within 2 s "
                                             r"\(process \d+ is alive but unresponsive\)"):
        sim.step(np.zeros((2, 2), np.float32))
    assert time.monotonic() - start < 10
    assert not any(p.is_alive() for p in sim._procs)  # even the stopped one is gone


@pytest.mark.slow
def test_exceptions_in_the_simulator_carry_its_traceback():
    sim = toy_sim(2)
    sim.reset(np.arange(2), np.arange(2))
    with pytest.raises(SimulatorError, match=r"(?s)env 0 \(toy-reach\): step failed: raised in the simulator "
                                             r"process:.*ValueError"):
        sim.step(np.zeros((2, 3), np.float32))  # wrong action size
    with pytest.raises(SimulatorError, match=r"(?s)env 0 \(toy\): start failed: .*TypeError"):
        SubprocBatchSim([partial(ToyReachEnv, no_such_argument=1)], labels=["toy"])


@pytest.mark.slow
def test_step_async_returns_while_the_processes_step_and_step_wait_gives_the_step_result():
    a, b = toy_sim(2), toy_sim(2)
    try:
        env_a = EpisodeVectorEnv(a, max_episode_steps=5, auto_reset=True)
        env_b = EpisodeVectorEnv(b, max_episode_steps=5, auto_reset=True)
        env_a.reset(reset_state_ids=[3, 7])
        env_b.reset(reset_state_ids=[3, 7])
        actions = torch.tensor([[0.5, -0.25], [-1.0, 0.75]])
        os.kill(a.pids[0], signal.SIGSTOP)  # env 0 of batch a cannot answer until resumed
        start = time.monotonic()
        env_a.step_async(actions)           # hands out the actions and returns
        assert time.monotonic() - start < 1.0
        os.kill(a.pids[0], signal.SIGCONT)
        got, want = env_a.step_wait(), env_b.step(actions)
        assert torch.equal(got.obs.states, want.obs.states) and torch.equal(got.rewards, want.rewards)
        with pytest.raises(ValueError, match="actions must be"):
            env_a.step_async(torch.zeros(2, 3))
    finally:
        a.close()
        b.close()


@pytest.mark.slow
def test_several_envs_per_process_give_the_same_results_as_one_each():
    one, grouped = toy_sim(3), toy_sim(3, envs_per_process=2)
    try:
        assert grouped.num_processes == 2 and len(set(grouped.pids)) == 2 and grouped.pids[0] == grouped.pids[1]
        ids, seeds = np.arange(3), np.array([4, 5, 6])
        a, b = one.reset(ids, seeds), grouped.reset(ids, seeds)
        assert torch.equal(a.states, b.states)
        acts = np.full((3, 2), 0.3, dtype=np.float32)
        sa, sb = one.step(acts), grouped.step(acts)
        assert torch.equal(sa.obs.states, sb.obs.states) and torch.equal(sa.rewards, sb.rewards)
        # resetting only env 2 (the second process) keeps envs 0 and 1 where they are
        again = grouped.reset(np.array([2]), np.array([4, 5, 4]))
        assert torch.equal(again.states[:2], sb.obs.states[:2]) and torch.equal(again.states[2], a.states[0])
        assert grouped.render().shape[0] == 3
    finally:
        one.close()
        grouped.close()
