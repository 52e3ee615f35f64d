"""The π0 / π0.5 example configs: the GPU configs' model keys fit a real-format folder of their
shape (a tiny stand-in with the same layout, asset id and ``H``; no weights read, no GPU); each tiny
CPU variant differs from its GPU config only in scale and checkpoint; three of them run end to end
(π0 PPO on LIBERO through Ray, π0.5 GRPO on LIBERO and π0 Flow-Noise PPO on ManiSkill in one
process); bad π0 input through the real entry script: one line naming the key, exit 2, before Ray.

The other two tiny variants (π0 GRPO, π0.5 PPO on LIBERO) pass the same pre-Ray checks here; their
code paths (π0 with GRPO, π0.5 with a value head on the VLM) are the end-to-end runs' and
tests/models/test_pi0_rl_policy.py's. Each LIBERO run costs a few seconds of simulator start-up per
process on an idle 2-core machine, so the end-to-end set is kept to three.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import ray.cloudpickle

from rlinf.config.resolvers import register_resolvers
from rlinf.models.embodied.base import ObsSpec
from rlinf.utils.typed_config import ConfigError
from tests.examples.test_embodied_configs import CONFIG_DIR, ROOT, SCALE_KEYS, _flat, _train_step, load

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

LIBERO_ID = "physical-intelligence/libero"
#: GPU config -> (model type, H, asset id, statistics' (action, state) widths, the env it sees)
GPU = {
    "libero_ppo_pi0": ("pi0", 50, LIBERO_ID, (7, 8), "libero"),
    "libero_grpo_pi0": ("pi0", 50, LIBERO_ID, (7, 8), "libero"),
    "libero_ppo_pi05": ("pi05", 10, LIBERO_ID, (7, 8), "libero"),
    "libero_grpo_pi05": ("pi05", 10, LIBERO_ID, (7, 8), "libero"),
    "maniskill_ppo_pi0": ("pi0", 8, "tiny/robot", (7, 8), "maniskill"),
}
#: what the simulators report (LIBERO: two 256 px cameras, 8 state values; the bridge twin: one
#: camera; its state width is the checkpoint's)
OBS = {"libero": ObsSpec(state_dim=8, image_shape=(256, 256, 3), has_wrist=True, action_low=(-1.0,) * 7,
                         action_high=(1.0,) * 7),
       "maniskill": ObsSpec(state_dim=8, image_shape=(480, 640, 3), action_low=(-1.0,) * 7, action_high=(1.0,) * 7)}
#: the keys a tiny variant may change besides SCALE_KEYS (its rollout / update epochs and the tokenizer
#: that comes with the tiny folder); the ManiSkill variant also its task
PI0_SCALE_KEYS = SCALE_KEYS + ("algorithm.rollout_epoch", "algorithm.update_epochs", "actor.model.tokenizer_path")
PICKCUBE_STATE = 29  # PickCube-v1's state values in rgb mode (agent qpos / qvel, tcp pose, goal)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One tiny RLinf-layout folder per GPU config (same type, H and asset id), one for the
    ManiSkill tiny variant (PickCube's state width) and the bad folders of the entry cases."""
    from rlinf.models.embodied.pi0.tiny import write_tiny_pi0

    root = tmp_path_factory.mktemp("pi0cfg")
    out = {}
    for name, (kind, h, asset, dims, _) in GPU.items():
        key = (kind, h, asset, dims)
        if key not in out:
            out[key] = write_tiny_pi0(root / f"{kind}_{h}_{asset.replace('/', '_')}", pi05=kind == "pi05",
                                      layout="rlinf", action_horizon=h, asset_id=asset, stats_dims=dims,
                                      value_after_vlm=kind == "pi05")  # RLinf's π0.5 critic reads the VLM
        out[name] = out[key]
    out["maniskill_tiny"] = write_tiny_pi0(root / "pi0_maniskill", layout="rlinf", action_horizon=8,
                                           stats_dims=(7, PICKCUBE_STATE))
    no_stats = root / "no_stats"
    shutil.copytree(out["libero_ppo_pi0"], no_stats)
    shutil.rmtree(no_stats / "physical-intelligence")
    out["no_stats"] = no_stats
    lerobot = write_tiny_pi0(root / "lerobot_bare", layout="lerobot", action_horizon=50)
    for p in lerobot.glob("policy_*"):
        p.unlink()
    out["lerobot_bare"] = lerobot
    return out


@pytest.mark.parametrize("name", sorted(GPU))
def test_gpu_config_fits_a_real_format_folder_of_its_shape(name, checkpoints):
    """Every π0 key of the GPU config against a folder with the real names, layout, asset id and H:
    the same metadata checks the preflight makes before a weight is read."""
    from rlinf.models.embodied.factory import check_policy_fits

    kind, h, _, _, env = GPU[name]
    folder = [f"actor.model.model_path={checkpoints[name]}", "actor.model.tokenizer_path=null"]
    cfg = load(name, folder)
    assert cfg.actor.model.model_type == kind and cfg.actor.model.policy.action_horizon == h
    check_policy_fits(cfg.actor.model, OBS[env], env_label=f"env.train ({name})")
    # and the same keys refuse the other model type's weights
    other = ["actor.model.model_type=pi0", "~actor.model.discrete_state_input"] if kind == "pi05" else [
        "actor.model.model_type=pi05"]
    with pytest.raises(ConfigError) as err:
        check_policy_fits(load(name, folder + other).actor.model, OBS[env])
    assert err.value.key == "actor.model.model_type"


@pytest.mark.parametrize("gpu", sorted(GPU))
def test_tiny_cpu_variant_changes_only_the_scale_of_its_gpu_config(gpu):
    big, tiny = _flat(load(gpu)), _flat(load(f"{gpu}_tiny_cpu"))
    changed = sorted(k for k in big.keys() | tiny.keys() if big.get(k) != tiny.get(k))
    allowed = PI0_SCALE_KEYS + (("env.",) if gpu.startswith("maniskill") else ())
    assert [k for k in changed if not k.startswith(allowed)] == []
    assert big["actor.model.model_type"] == tiny["actor.model.model_type"] == GPU[gpu][0]


def _libero_ready() -> str | None:
    if importlib.util.find_spec("libero") is None:
        return "LIBERO is not installed (the libero extra of scripts/setup_env.sh)"
    from rlinf.engines.simulators.libero_setup import bundled_assets_dir

    return None if bundled_assets_dir() is not None else "LIBERO assets are not installed"


@pytest.mark.parametrize("name", ["libero_grpo_pi0", "libero_ppo_pi05"])
def test_tiny_variants_pass_the_pre_ray_checks(name, checkpoints, tmp_path, monkeypatch):
    if problem := _libero_ready():
        pytest.skip(problem)
    import ray
    from hydra import compose, initialize_config_dir

    from rlinf.runners.embodied.preflight import prepare_embodied

    monkeypatch.setattr(ray, "init", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ray.init")))
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        raw = compose(f"{name}_tiny_cpu", overrides=[f"runner.output_dir={tmp_path / 'out'}",
                                                     f"actor.model.model_path={checkpoints[name]}"])
    start = prepare_embodied(raw)
    assert start.obs_specs["train"].state_dim == 8 and start.obs_specs["train"].has_wrist
    assert not (tmp_path / "out").exists()


# ---- end to end ----------------------------------------------------------------------------------
def _run(name, folder, tmp_path, extra=()):
    from hydra import compose, initialize_config_dir

    from rlinf.runners.embodied.recipe import run_embodied

    # env.enable_offload=false: offload rebuilds the simulators before every rollout (seconds of
    # start-up each on CPU); offload has its own test
    overrides = [f"runner.output_dir={tmp_path / 'out'}", f"actor.model.model_path={folder}",
                 "runner.max_epochs=1", "runner.save_interval=1", "env.enable_offload=false", *extra]
    cfg = load(f"{name}_tiny_cpu", overrides)
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        summary = run_embodied(compose(f"{name}_tiny_cpu", overrides=overrides), print_fn=lambda *_: None)
    return cfg, summary, Path(cfg.runner.logger.log_path)


def _check_saved_policy(folder: Path):
    """The exported π0 policy is a real-format folder that vla_predict reads back, heads included."""
    from PIL import Image

    from toolkits.embodied import vla_predict

    assert any(k.startswith("value_head.mlp.") for k in _safetensor_keys(folder / "model.safetensors"))
    Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(folder.parent / "frame.png")
    frame = str(folder.parent / "frame.png")
    assert vla_predict.main(["--model-path", str(folder), "--model-type", "pi0", "--image", frame, "--wrist-image",
                             frame, "--instruction", "go", "--state", ",".join(["0.1"] * 8), "--unnorm-key",
                             LIBERO_ID, "--num-steps", "2", "--json"]) == 0


def _safetensor_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


@pytest.mark.slow
def test_libero_ppo_pi0_tiny_cpu_runs_end_to_end(checkpoints, tmp_path, capsys):
    if problem := _libero_ready():
        pytest.skip(problem)
    # one evaluation, after the last step (a run always evaluates then); not also before the first.
    # The local backend: Ray is not this test's subject (the embodied PPO path under Ray is
    # tests/runners/test_embodied_runner.py's), and Ray's start and worker imports were ~40 % of it
    cfg, summary, log = _run("libero_ppo_pi0", checkpoints["libero_ppo_pi0"], tmp_path,
                             ["runner.val_check_interval=-1", "cluster.backend=local"])
    assert summary["steps"] == 1 and "val/last_success_rate" in summary  # eval: the ODE from random noise
    step = _train_step(log)
    assert step["env/episodes"] == 2 and step["actor/grad_norm"] > 0 and "actor/value_loss" in step
    # the first minibatch recomputes the rollout's log-probs: ratio 1, nothing clipped
    assert abs(step["actor/approx_kl"]) < 1e-3 and step["actor/clip_frac"] == 0.0
    assert list(Path(cfg.env.eval.video_cfg.video_base_dir).rglob("*.mp4"))
    _check_saved_policy(log / "policy")
    assert len(json.loads(capsys.readouterr().out.strip().splitlines()[-1])) == 50  # H rows


@pytest.mark.slow
def test_libero_grpo_pi05_tiny_cpu_runs_end_to_end(checkpoints, tmp_path):
    if problem := _libero_ready():
        pytest.skip(problem)
    _, summary, log = _run("libero_grpo_pi05", checkpoints["libero_grpo_pi05"], tmp_path,
                           ["runner.val_check_interval=-1", "cluster.backend=local"])
    assert summary["steps"] == 1
    step = _train_step(log)
    assert step["env/episodes"] == 2 and "actor/policy_loss" in step and "actor/value_loss" not in step
    assert (log / "policy" / "model.safetensors").is_file()


@pytest.mark.slow
def test_maniskill_ppo_pi0_flow_noise_tiny_cpu_runs_end_to_end(checkpoints, tmp_path):
    if importlib.util.find_spec("mani_skill") is None:
        pytest.skip("mani-skill is not installed")
    from rlinf.engines.simulators.maniskill import vulkan_unavailable_reason

    if problem := vulkan_unavailable_reason():
        pytest.skip(f"ManiSkill cannot render here: {problem}")
    _, summary, log = _run("maniskill_ppo_pi0", checkpoints["maniskill_tiny"], tmp_path,
                           ["runner.val_check_interval=-1", "cluster.backend=local"])
    assert summary["steps"] == 1
    step = _train_step(log)
    assert step["env/episodes"] >= 0 and step["actor/grad_norm"] > 0 and "actor/value_loss" in step
    # Flow-Noise: the noise head's Gaussian entropy, summed over the 5 x 7 chunk (entropy_type
    # chunk_level), each element's std inside noise_logvar_range [0.08, 0.16]
    per_element = [0.5 * math.log(2 * math.pi * math.e * s ** 2) for s in (0.08, 0.16)]
    assert 35 * per_element[0] - 1e-3 <= step["actor/entropy"] <= 35 * per_element[1] + 1e-3
    keys = _safetensor_keys(log / "policy" / "model.safetensors")
    assert any(k.startswith("noise_head.mlp_logvar.") for k in keys) and "noise_head.logvar_min" in keys


# ---- bad input through the entry script -----------------------------------------------------------
ENTRY = ROOT / "examples" / "embodiment" / "main_embodied.py"
#: (overrides, the key the one line names); {x} names a folder of the ``checkpoints`` fixture
BAD = [
    (["actor.model.model_path={no_stats}"], "actor.model.model_path"),                       # no norm_stats.json
    (["actor.model.unnorm_key=franka/kitchen"], "actor.model.unnorm_key"),                    # unknown asset id
    (["actor.model.model_path={lerobot_bare}", "actor.model.unnorm_key=null"],                # no normaliser files
     "actor.model.model_path"),
    (["actor.model.model_type=pi05"], "actor.model.model_type"),                              # pi05 over π0 weights
    (["actor.model.model_path={libero_ppo_pi05}"], "actor.model.model_type"),                 # pi0 over π0.5
    (["actor.model.action_dim=33"], "actor.model.action_dim"),                                # above the padded 32
    (["actor.model.num_steps=0"], "actor.model.num_steps"),
    (["actor.model.noise_level=0"], "actor.model.noise_level"),                               # with flow_sde
]


@pytest.mark.slow
def test_bad_pi0_input_is_one_line_exit_2_before_ray(checkpoints, tmp_path):
    if problem := _libero_ready():
        pytest.skip(problem)
    paths = {k: v for k, v in checkpoints.items() if isinstance(k, str)}
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = tmp_path / "out"
    base = [f"runner.output_dir={out}", f"actor.model.model_path={checkpoints['libero_ppo_pi0']}"]
    procs, t0 = [], time.monotonic()
    for i, (overrides, key) in enumerate(BAD):  # a few at a time: each is a fresh Python
        args = [sys.executable, str(ENTRY), "--config-name", "libero_ppo_pi0_tiny_cpu", *base,
                *[o.format(**paths) for o in overrides]]
        procs.append((overrides, key, subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                       stderr=subprocess.PIPE, text=True)))
        if len(procs) % 4 == 0 or i == len(BAD) - 1:
            for overrides, key, proc in procs[-4:]:
                stdout, stderr = proc.communicate(timeout=300)
                lines = [line for line in stderr.splitlines() if line.strip()]
                assert proc.returncode == 2, (overrides, stderr[-2000:])
                assert len(lines) == 1 and lines[0].startswith(f"config error: {key}: "), (overrides, stderr[-2000:])
                assert "Traceback" not in stdout + stderr and "Ray" not in stdout
    assert not out.exists()
    print(f"{len(BAD)} refusals in {time.monotonic() - t0:.1f} s")


def test_the_memory_estimate_counts_the_checkpoints_parameters(checkpoints):
    """The pre-Ray memory estimate reads a π0 folder's parameter count from its headers: the
    rollout holds all weights, the actor its FSDP share, gradients and AdamW state of the trained
    part (the expert and heads under train_expert_only)."""
    from rlinf.runners.embodied.recipe import EMBODIED_RECIPE
    from rlinf.runners.memory_check import estimate
    from rlinf.scheduler.memory import Capacity

    cfg = load("libero_ppo_pi0", [f"actor.model.model_path={checkpoints['libero_ppo_pi0']}"])
    est = estimate(EMBODIED_RECIPE, cfg, cfg.cluster.plan(), Capacity(80 * 2**30, 512 * 2**30, "test", kind="gpu"))
    rollout, actor = est.components["rollout"], est.components["actor"]
    weights = next(i for i in rollout.items if i.name == "weights")
    assert "B params (bf16)" in weights.note and weights.bytes > 0
    grads = next(i for i in actor.items if i.name == "gradients")
    shard = next(i for i in actor.items if i.name == "weights")
    assert shard.bytes == weights.bytes // 8 and 0 < grads.bytes < shard.bytes  # 8 ranks, the VLM frozen
