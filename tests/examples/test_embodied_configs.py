"""Every examples/embodiment config composes with Hydra (env groups from config/env/ through the
search path) and parses into a valid EmbodiedConfig (OffPolicyEmbodiedConfig for the SAC / CrossQ /
RLPD configs) that fits its placement; the VLA configs' tiny
CPU variants differ from their GPU configs only in scale and run end to end."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import ray.cloudpickle
from hydra import compose, initialize_config_dir

from rlinf.config.embodied import EmbodiedConfig
from rlinf.config.embodied_offpolicy import embodied_config_class
from rlinf.config.resolvers import register_resolvers
from rlinf.utils.metric_logger import read_metrics
from rlinf.utils.typed_config import ConfigError, walk_fields

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "examples" / "embodiment" / "config"
NAMES = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def load(name: str, overrides=()) -> EmbodiedConfig:
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        composed = compose(name, overrides=list(overrides))
        return embodied_config_class(composed).from_hydra(composed)


@pytest.mark.parametrize("name", NAMES)
def test_config_parses_and_fits_its_placement(name):
    cfg = load(name)
    cfg.check_against_plan(cfg.cluster.plan())
    assert cfg.env.train.total_num_envs and cfg.actor.model.model_type


def test_errors_name_the_key():
    with pytest.raises(ConfigError, match="actor.micro_batch_size"):
        load("toy_ppo_mlp", ["actor.micro_batch_size=48"])
    with pytest.raises(ConfigError, match="env.train.total_num_envs"):
        load("toy_ppo_mlp", ["env.train.total_num_envs=5"])
    with pytest.raises(ConfigError, match="critic.use_critic_model"):
        load("toy_ppo_mlp", ["critic.use_critic_model=false"])
    with pytest.raises(ConfigError, match="env.train.init_params.instruction"):  # toy tasks have their own
        load("toy_ppo_mlp", ["+env.train.init_params.instruction=go"])
    with pytest.raises(ConfigError, match="env.train.use_fixed_reset_state_ids"):
        load("toy_ppo_mlp", ["algorithm.adv_type=grpo", "++algorithm.group_size=2", "env.train.group_size=2",
                             "critic.use_critic_model=false"])


# The GPU configs and their tiny CPU variants: the variant may change the scale (devices, env
# counts, episode length, steps, batch sizes), the checkpoint and its sizes, and the simulator task
# (ManiSkill's bridge twin needs assets that are not on any package index), nothing else.
TINY_VARIANTS = {"maniskill_ppo_openvlaoft": "maniskill_ppo_openvlaoft_tiny_cpu",
                 "libero_grpo_openvlaoft": "libero_grpo_openvlaoft_tiny_cpu"}
SCALE_KEYS = ("cluster.accelerators_per_node", "runner.max_epochs", "runner.val_check_interval",
              "runner.save_interval", "runner.experiment_name", "runner.logger.", "algorithm.group_size",
              "env.train.total_num_envs", "env.eval.total_num_envs", "env.train.max_episode_steps",
              "env.eval.max_episode_steps", "env.train.group_size", "env.train.video_cfg.video_base_dir",
              "env.eval.video_cfg.video_base_dir",
              "env.train.init_params.camera_", "env.eval.init_params.camera_", "env.train.task_ids",
              "env.eval.task_ids", "rollout.pipeline_stage_num", "actor.micro_batch_size",
              "actor.global_batch_size", "actor.model.model_path", "actor.model.lora_path",
              "actor.model.lora_rank", "actor.model.num_action_chunks", "actor.model.unnorm_key",
              "actor.model.precision", "actor.model.vocab_size", "actor.model.hidden_size",
              "actor.model.image_size", "actor.model.attn_implementation")


def _flat(cfg):
    """YAML key path -> value of every leaf (``actor.model``'s sections by their YAML paths)."""
    out = {}
    for path, _, value in walk_fields(cfg):
        if isinstance(value, dict):
            out.update({f"{path}.{k}": v for k, v in _flat_dict(value).items()})
        elif not dataclasses.is_dataclass(value):
            out[path] = value
    return out


def _flat_dict(tree, prefix=""):
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _flat_dict(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


@pytest.mark.parametrize("gpu", sorted(TINY_VARIANTS))
def test_tiny_cpu_variant_changes_only_the_scale_of_its_gpu_config(gpu):
    big, tiny = _flat(load(gpu)), _flat(load(TINY_VARIANTS[gpu]))
    changed = sorted(k for k in big.keys() | tiny.keys() if big.get(k) != tiny.get(k))
    allowed = SCALE_KEYS + (("env.",) if gpu.startswith("maniskill") else ())
    assert [k for k in changed if not k.startswith(allowed)] == []
    assert big["actor.model.model_type"] == tiny["actor.model.model_type"] == "openvla_oft"


def _tiny_run(name, tmp_path, lora: bool, extra=()):
    from rlinf.models.embodied.openvla.tiny import write_tiny_lora, write_tiny_openvla
    from rlinf.runners.embodied.recipe import run_embodied

    base = write_tiny_openvla(tmp_path / "vla", identity_stats=True)
    # env.enable_offload=false: offload rebuilds the simulators before every rollout (seconds of
    # simulator start-up each, on CPU); these runs check the plumbing end to end, offload has its own
    # test (tests/runners/test_embodied_runner.py::test_env_offload_releases_simulators_...)
    overrides = [f"runner.output_dir={tmp_path / 'out'}", f"actor.model.model_path={base}",
                 "runner.max_epochs=1", "runner.val_check_interval=1", "runner.save_interval=1",
                 "env.enable_offload=false", *extra]
    if lora:
        overrides.append(f"actor.model.lora_path={write_tiny_lora(base, tmp_path / 'lora')}")
    cfg = load(name, overrides)
    os.environ.setdefault("REPO_PATH", str(ROOT))
    register_resolvers()
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        summary = run_embodied(compose(name, overrides=overrides), print_fn=lambda *_: None)
    return cfg, summary, Path(cfg.runner.logger.log_path)


def _train_step(log: Path) -> dict:
    return next(m for m in read_metrics(str(log / "metrics.jsonl")) if "env/episodes" in m)


def _check_saved_policy(folder: Path, name: str):
    """The exported policy is a real-format folder the checkpoint CLI reads back."""
    from PIL import Image

    from toolkits.embodied import vla_predict

    assert json.loads((folder / "config.json").read_text())["model_type"] == "openvla"
    Image.fromarray(np.full((32, 32, 3), 128, np.uint8)).save(folder.parent / "frame.png")
    args = ["--model-path", str(folder), "--model-type", "openvla_oft", "--num-action-chunks", "2",
            "--image", str(folder.parent / "frame.png"), "--instruction", "go", "--json"]
    if (folder / "lora_adapter").is_dir():
        args += ["--lora-path", str(folder / "lora_adapter")]
    assert vla_predict.main(args) == 0, name


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mani_skill") is None, reason="mani-skill is not installed")
def test_maniskill_openvlaoft_tiny_cpu_runs_end_to_end(tmp_path, capsys):
    """On the local backend (every group in this process): OpenVLA-OFT with LoRA under Ray is the
    tiny VLA PPO step of tests/runners/test_embodied_runner.py, ManiSkill under Ray the PushCube
    PPO run of tests/runners/test_embodied_simulators_e2e.py."""
    from rlinf.engines.simulators.maniskill import vulkan_unavailable_reason

    if problem := vulkan_unavailable_reason():
        pytest.skip(f"ManiSkill cannot render here: {problem}")
    name = "maniskill_ppo_openvlaoft_tiny_cpu"
    cfg, summary, log = _tiny_run(name, tmp_path, lora=True, extra=["cluster.backend=local"])
    assert summary["steps"] == 1 and "val/last_success_rate" in summary
    step = _train_step(log)
    assert step["env/episodes"] == 2 and step["actor/grad_norm"] > 0 and "actor/value_loss" in step
    _check_saved_policy(log / "policy", name)
    assert len(json.loads(capsys.readouterr().out.strip().splitlines()[-1])) == 2  # K = 2 chunks


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("libero") is None,
                    reason="LIBERO is not installed (the libero extra of scripts/setup_env.sh)")
def test_libero_grpo_openvlaoft_tiny_cpu_runs_end_to_end(tmp_path):
    """On the local backend, as the ManiSkill run above; LIBERO under Ray is test_pi0_configs' π0
    PPO run; here the LIBERO + OpenVLA-OFT pair."""
    from rlinf.engines.simulators.libero_setup import bundled_assets_dir

    if bundled_assets_dir() is None:
        pytest.skip("LIBERO assets are not installed")
    name = "libero_grpo_openvlaoft_tiny_cpu"
    cfg, summary, log = _tiny_run(name, tmp_path, lora=False, extra=["cluster.backend=local"])
    assert summary["steps"] == 1 and "val/last_success_rate" in summary
    step = _train_step(log)
    assert step["env/episodes"] == 2 and "actor/policy_loss" in step and "actor/value_loss" not in step
    assert list(Path(cfg.env.eval.video_cfg.video_base_dir).rglob("*.mp4"))
    _check_saved_policy(log / "policy", name)
