"""ManiSkill3 PickCube-v1 on CPU: one env per worker process, real physics and rendering.

Needs a Vulkan driver (on CPU: Mesa >= 23 lavapipe; scripts/setup_system_sim.sh installs it as
root on Debian 12). Without one the module is skipped with the probe's error as the reason.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

if importlib.util.find_spec("mani_skill") is None:
    raise ImportError("ManiSkill3 is missing although scripts/setup_env.sh installs the `embodied` extra "
                      "by default: rerun `bash scripts/setup_env.sh`")

from rlinf.config.env import EnvConfig, EnvInitParams
from rlinf.engines.simulators import EpisodeVectorEnv, SimulatorError, make_vector_env
from rlinf.engines.simulators.episodes import BatchSim, SimStep
from rlinf.engines.simulators.maniskill import (
    MissingAssetsError,
    build_maniskill_sim,
    vulkan_unavailable_reason,
)

_NO_VULKAN = vulkan_unavailable_reason()
pytestmark = pytest.mark.skipif(_NO_VULKAN is not None, reason=f"no usable Vulkan device: {_NO_VULKAN}")

TASK = "PickCube-v1"


def cfg(**init) -> EnvConfig:
    return EnvConfig(env_type="maniskill", init_params=EnvInitParams(id=TASK, sim_backend="cpu", **init),
                     step_timeout_s=20.0, start_timeout_s=120.0)


@pytest.fixture(scope="module")
def sim():
    """Two PickCube state-obs processes shared by the tests (wrapped with different episode rules)."""
    s = build_maniskill_sim(cfg(), num_envs=2)
    yield s
    s.close()


class TerminateAt(BatchSim):
    """The real simulators, with env ``which`` forced to terminate (and succeed) at step ``at``."""

    def __init__(self, inner: BatchSim, which: int, at: int):
        self.inner, self.which, self.at, self.t = inner, which, at, 0
        self.device = inner.device

    num_envs = property(lambda self: self.inner.num_envs)
    spec = property(lambda self: self.inner.spec)

    def reset(self, env_ids, state_ids):
        if len(env_ids) == self.num_envs:
            self.t = 0
        return self.inner.reset(env_ids, state_ids)

    def step(self, actions) -> SimStep:
        out = self.inner.step(actions)
        self.t += 1
        if self.t == self.at:
            out.terminations[self.which] = True
            out.successes[self.which] = True
        return out

    def render(self):
        return self.inner.render()

    def close(self):
        pass


@pytest.mark.slow
def test_reset_and_step_shapes(sim):
    env = EpisodeVectorEnv(sim)
    obs = env.reset(seed=0)
    assert obs.states.shape == (2, 42) and obs.states.dtype == torch.float32
    assert obs.images == {} and obs.task_descriptions is None
    assert env.action_dim == 8 and env.max_episode_steps == 50  # the task's registered limit
    assert (env.action_low == -1).all() and (env.action_high == 1).all()
    res = env.step(torch.rand(2, 8) * 2 - 1)
    assert res.obs.states.shape == (2, 42) and torch.isfinite(res.rewards).all()
    assert res.terminations.shape == res.successes.shape == (2,)
    assert not torch.equal(res.obs.states, obs.states)


def test_sim_in_worker_steps_in_this_process_with_the_same_results(sim):
    import dataclasses

    from rlinf.engines.simulators.single import SerialBatchSim

    inproc = build_maniskill_sim(dataclasses.replace(cfg(), sim_in_worker=True), num_envs=2)
    try:
        assert isinstance(inproc, SerialBatchSim) and not inproc.steps_in_background
        assert sim.steps_in_background
        a, b = EpisodeVectorEnv(inproc), EpisodeVectorEnv(sim)
        assert torch.equal(a.reset(reset_state_ids=[4, 5]).states, b.reset(reset_state_ids=[4, 5]).states)
        actions = torch.rand(3, 2, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
        for act in actions:  # same physics: identical states and rewards step by step
            ra, rb = a.step(act), b.step(act)
            assert torch.equal(ra.obs.states, rb.obs.states) and torch.equal(ra.rewards, rb.rewards)
    finally:
        inproc.close()


def test_same_seed_same_initial_obs_and_shared_group_state(sim):
    env = EpisodeVectorEnv(sim, use_fixed_reset_state_ids=True, group_size=2, seed=3)
    a = env.reset(seed=11)
    env.step(torch.rand(2, 8))
    b = env.reset(seed=11)
    assert torch.equal(a.states, b.states)            # same seed, same initial observations
    assert torch.equal(a.states[0], a.states[1])      # one state per GRPO group
    c = env.reset(reset_state_ids=[1, 2])
    assert not torch.equal(c.states[0], c.states[1])
    assert torch.equal(env.reset(reset_state_ids=[1, 2]).states, c.states)


def test_auto_reset_after_truncation(sim):
    env = EpisodeVectorEnv(sim, max_episode_steps=3, auto_reset=True, use_fixed_reset_state_ids=True, seed=0)
    first = env.reset()
    for t in range(3):
        res = env.step(torch.ones(2, 8) * 0.5)
        assert bool(res.truncations.all()) == (t == 2)
    assert res.final_obs is not None and not torch.equal(res.final_obs.states, first.states)
    assert torch.equal(res.obs.states, first.states)  # restarted from the same fixed states
    assert res.infos["episode_length"].tolist() == [3.0, 3.0]
    assert env.step(torch.zeros(2, 8)).infos["elapsed_steps"].tolist() == [1, 1]


def test_auto_reset_after_termination_resets_only_that_env(sim):
    env = EpisodeVectorEnv(TerminateAt(sim, which=0, at=2), max_episode_steps=50, auto_reset=True,
                           use_fixed_reset_state_ids=True)
    first = env.reset(seed=5)
    env.step(torch.ones(2, 8) * 0.5)
    res = env.step(torch.ones(2, 8) * 0.5)
    assert res.terminations.tolist() == [True, False] and res.successes.tolist() == [True, False]
    assert torch.equal(res.obs.states[0], first.states[0])            # env 0 restarted
    assert not torch.equal(res.final_obs.states[0], first.states[0])  # its final obs kept apart
    assert torch.equal(res.final_obs.states[1], res.obs.states[1])    # env 1 untouched
    assert env.step(torch.zeros(2, 8)).infos["elapsed_steps"].tolist() == [1, 3]


def test_ignore_terminations(sim):
    env = EpisodeVectorEnv(TerminateAt(sim, which=1, at=1), max_episode_steps=2, auto_reset=True,
                           ignore_terminations=True)
    env.reset(seed=0)
    res = env.step(torch.zeros(2, 8))
    assert not res.terminations.any() and res.successes.tolist() == [False, True] and res.final_obs is None
    res = env.step(torch.zeros(2, 8))
    assert res.truncations.all() and res.infos["success_once"].tolist() == [False, True]


@pytest.mark.slow
def test_rgb_observations_and_render():
    with make_vector_env(cfg(obs_mode="rgb", camera_heights=64, camera_widths=64, instruction="pick up the cube",
                             human_render_camera_configs={"width": 96, "height": 64}), num_envs=1) as env:
        obs = env.reset(seed=0)
        assert obs.task_descriptions == ["pick up the cube"]  # PickCube has no instruction of its own
        assert set(obs.images) == {"base_camera"}
        img = obs.images["base_camera"]
        assert img.shape == (1, 64, 64, 3) and img.dtype == torch.uint8 and img.float().std() > 1
        assert obs.states.shape == (1, 29)  # agent qpos, qvel + extra entries, flattened
        res = env.step(torch.zeros(1, 8))
        assert res.obs.images["base_camera"].shape == (1, 64, 64, 3)
        frame = env.render()
        assert frame.shape == (1, 64, 96, 3) and frame.dtype == np.uint8


@pytest.mark.slow
def test_crash_and_hang_are_reported_with_env_index_and_task():
    env = make_vector_env(EnvConfig(env_type="maniskill", init_params=EnvInitParams(id=TASK, sim_backend="cpu"),
                                    step_timeout_s=3.0), num_envs=2)
    env.reset(seed=0)
    pids = env.sim.pids
    os.kill(pids[1], signal.SIGSTOP)
    start = time.monotonic()
    with pytest.raises(SimulatorError, match=rf"env 1 \({TASK}\): step failed: no answer within 3 s"):
        env.step(torch.zeros(2, 8))
    assert time.monotonic() - start < 15
    assert not any(p.is_alive() for p in env.sim._procs)

    env = EpisodeVectorEnv(build_maniskill_sim(cfg(), num_envs=1))
    env.reset(seed=0)
    os.kill(env.sim.pids[0], signal.SIGKILL)
    with pytest.raises(SimulatorError, match=rf"env 0 \({TASK}\): step failed: process \d+ was killed by SIGKILL"):
        env.step(torch.zeros(1, 8))


def test_task_needing_assets_fails_before_any_process_starts(monkeypatch):
    import rlinf.engines.simulators.subproc as subproc

    monkeypatch.setattr(subproc, "SubprocBatchSim", lambda *a, **k: pytest.fail("processes were started"))
    bridge = EnvConfig(env_type="maniskill", init_params=EnvInitParams(id="PutCarrotOnPlateInScene-v1",
                                                                       obs_mode="rgb+segmentation"))
    with pytest.raises(MissingAssetsError, match=r"PutCarrotOnPlateInScene-v1 needs assets that are not "
                                                 r"installed: bridge_v2_real2sim -> .*MS_ASSET_DIR"):
        make_vector_env(bridge, num_envs=2)


@pytest.mark.slow
def test_empty_asset_folder_under_ms_asset_dir_counts_as_missing(tmp_path):
    (tmp_path / "data" / "tasks" / "bridge_v2_real2sim_dataset").mkdir(parents=True)  # a failed download
    code = ("from rlinf.engines.simulators.maniskill import check_maniskill_assets as c; "
            "c('PutCarrotOnPlateInScene-v1')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MS_ASSET_DIR": str(tmp_path)})
    assert proc.returncode != 0
    assert f"bridge_v2_real2sim -> {tmp_path}/data/tasks/bridge_v2_real2sim_dataset" in proc.stderr
