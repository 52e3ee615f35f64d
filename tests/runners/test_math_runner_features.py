"""The math runner's schedule around a step, through ``run_math`` on the fake cluster:
checkpoint -> resume equality, HF export, logs and curves, async lookahead, DAPO refill with a
separate inference group."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
import ray.cloudpickle

from rlinf.runners.checkpoint import resolve_resume_dir
from rlinf.utils.metric_logger import read_metrics
from rlinf.utils.typed_config import ConfigError

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "workers"))
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from test_generation_worker import tiny_model_with_tokenizer
from test_math_grpo_runner import write_data

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
pytestmark = pytest.mark.slow  # end-to-end runs on the local backend (no Ray)


def base_config(tmp_path, model, placement, accelerators, **sections):
    """A small run: 4 prompts x 4 samples, 6 new tokens; the entropy bonus makes every step move
    the weights, the overlong penalty gives rewards that differ within groups."""
    cfg = {
        "cluster": {"num_nodes": 1, "accelerators_per_node": accelerators, "component_placement": placement},
        "runner": {"seq_length": 16, "max_steps": 3, "val_check_interval": -1, "save_interval": -1,
                   "output_dir": str(tmp_path / "out"), "experiment_name": "t",
                   "logger": {"log_path": str(tmp_path / "out" / "t"), "logger_backends": ["tensorboard"]}},
        "algorithm": {"group_size": 4, "n_minibatches": 1, "training_batch_size_per_gpu": 4,
                      "entropy_bonus": 0.01, "calculate_entropy": True, "overlong_buffer_len": 4,
                      "sampling_params": {"max_new_tokens": 6, "min_new_tokens": 1}},
        "data": {"train_data_paths": [write_data(tmp_path / "train.jsonl", 16)],
                 "val_data_paths": [write_data(tmp_path / "val.jsonl", 4)],
                 "rollout_batch_size": 4, "max_prompt_length": 8, "apply_chat_template": False},
        "actor": {"model": {"model_path": model}, "optim": {"lr": 1e-2}},
        "reward": {"reward_scale": 1.0, "verify_processes": 1},
    }
    for section, values in sections.items():
        for key, value in values.items():
            cfg.setdefault(section, {})
            if isinstance(value, dict) and isinstance(cfg[section].get(key), dict):
                cfg[section][key] = {**cfg[section][key], **value}
            else:
                cfg[section][key] = value
    return cfg


def with_dirs(cfg, out):
    cfg = json.loads(json.dumps(cfg))
    cfg["runner"]["output_dir"] = str(out)
    cfg["runner"]["logger"]["log_path"] = str(out / "t")
    return cfg


COMPARED = ("reward/mean", "reward/accuracy", "response/length_mean", "actor/policy_loss",
            "actor/grad_norm", "actor/lr", "actor/entropy")


def test_resume_gives_the_same_next_step_metrics(tmp_path):
    """Local backend (Ray is not the subject; a resume under Ray: tests/runners/test_recovery.py)."""
    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = base_config(tmp_path, model, {"actor,rollout,reward": "0-1"}, 2,
                      runner={"save_interval": 2, "val_check_interval": 3})
    cfg["cluster"]["backend"] = "local"
    summary = run_math(with_dirs(cfg, tmp_path / "a"), print_fn=lambda *_: None)
    assert summary["steps"] == 3 and "val/last_accuracy" in summary
    run_a = tmp_path / "a" / "t"
    full = {int(m["step"]): m for m in read_metrics(str(run_a / "metrics.jsonl"))}
    assert sorted(full) == [0, 1, 2, 3] and "val/accuracy" in full[0] and "val/accuracy" in full[3]
    assert os.listdir(run_a / "tensorboard") and (run_a / "curves.png").stat().st_size > 0
    assert sorted(os.listdir(run_a / "checkpoints")) == ["global_step_2", "global_step_3"]
    assert resolve_resume_dir(str(run_a / "checkpoints")).endswith("global_step_3")
    from transformers import AutoModelForCausalLM

    exported = AutoModelForCausalLM.from_pretrained(str(run_a / "huggingface"))
    assert exported.num_parameters() > 0

    # resume in the same run folder, as after a crash: step 3 is rolled back and logged once
    resumed_cfg = with_dirs(cfg, tmp_path / "a")
    resumed_cfg["runner"]["resume_dir"] = str(run_a / "checkpoints" / "global_step_2")
    assert run_math(resumed_cfg, print_fn=lambda *_: None)["steps"] == 3
    records = read_metrics(str(run_a / "metrics.jsonl"))
    assert [int(m["step"]) for m in records] == [0, 1, 2, 3]
    resumed = {int(m["step"]): m for m in records}
    assert sum(key in full[3] for key in COMPARED) == len(COMPARED)
    for key in COMPARED:
        if key in full[3]:
            assert math.isclose(resumed[3][key], full[3][key], rel_tol=1e-5, abs_tol=1e-7), key
    assert full[3]["actor/grad_norm"] > 0  # the compared step really trained


def test_async_rollout_runs_one_version_ahead(tmp_path):
    """Local backend (Ray is not the subject; each group folded to one process, placed apart)."""
    from rlinf.runners.math.recipe import run_math

    model = tiny_model_with_tokenizer(tmp_path / "model")
    cfg = base_config(tmp_path, model, {"actor": "0-1", "rollout": "2"}, 3,
                      algorithm={"max_head_offpolicyness": 1, "loss_type": "decoupled_ppo",
                                 "rollout_batch_size_per_gpu": 1})
    cfg["cluster"]["backend"] = "local"
    assert run_math(cfg, print_fn=lambda *_: None)["steps"] == 3
    metrics = read_metrics(str(tmp_path / "out" / "t" / "metrics.jsonl"))
    assert [m["rollout/staleness"] for m in metrics] == [0.0, 1.0, 1.0]
    assert all(m["reward/count"] == 16 for m in metrics)


def test_dynamic_sampling_with_a_separate_inference_group(tmp_path):
    """Local backend (Ray is not the subject; each group folded to one process, placed apart)."""
    from rlinf.config.math import MathConfig
    from rlinf.data.tokenizer import load_tokenizer
    from rlinf.runners.launch import start_cluster
    from rlinf.runners.math.groups import launch_math_groups
    from rlinf.runners.math.loop import MathRunner
    from rlinf.runners.math.preflight import build_loaders

    model = tiny_model_with_tokenizer(tmp_path / "model")
    raw = base_config(tmp_path, model, {"actor": "0-1", "inference": "2", "rollout,reward": "3"}, 4,
                      algorithm={"kl_beta": 0.05, "dynamic_sampling": True, "max_dynamic_sampling_rounds": 2})
    raw["cluster"]["backend"] = "local"
    cfg = MathConfig.from_dict(raw)
    tok = load_tokenizer(model)
    train, val = build_loaders(cfg, tok)
    cluster, plan = start_cluster(cfg, print_fn=lambda *_: None)
    groups = launch_math_groups(cfg, cluster, plan, total_steps=2)
    try:
        assert groups.inference is not None and groups.inference.world_size == 1
        runner = MathRunner(cfg, groups, train, val, tok.pad_token_id)
        for _ in range(2):
            # the actor holds no reference copy: the KL term's log-probs came from the inference group
            metrics = runner.train_step()
            assert metrics["reward/count"] == 16
            assert 0 <= metrics["dynamic_sampling/rounds"] <= 2
            assert 0 <= metrics["dynamic_sampling/kept_frac"] <= 1
            assert "actor/kl" in metrics
        runner.close()
    finally:
        groups.shutdown()


def test_a_damaged_trainer_state_is_a_config_error(tmp_path):
    from rlinf.runners.checkpoint import resume_point
    from rlinf.runners.manifest import write_manifest

    step_dir = tmp_path / "global_step_4"
    step_dir.mkdir()
    (step_dir / "trainer_state.json").write_text('{"step": 4, "rollo')
    with pytest.raises(ConfigError, match="runner.resume_dir.*trainer_state.json is not valid JSON"):
        resume_point(str(tmp_path))
    (step_dir / "trainer_state.json").write_text('{"rollouts": 4}')
    with pytest.raises(ConfigError, match="runner.resume_dir.*no step count"):
        resume_point(str(tmp_path))
    (step_dir / "trainer_state.json").write_text('{"step": 4}')
    with pytest.raises(ConfigError, match="runner.resume_dir.*no actor/ folder"):
        resume_point(str(tmp_path))
    (step_dir / "actor").mkdir()
    write_manifest(str(step_dir))  # a checkpoint as a run saves it (one without a manifest is refused)
    assert resume_point(str(tmp_path)) == (str(step_dir), 4)


def test_resume_dir_without_a_checkpoint_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="runner.resume_dir.*no complete checkpoint"):
        resolve_resume_dir(str(tmp_path))
    with pytest.raises(ConfigError, match="runner.resume_dir.*not a folder"):
        resolve_resume_dir(str(tmp_path / "missing"))


def test_a_chosen_logger_that_is_not_installed_names_the_key(tmp_path):
    from rlinf.utils.metric_logger import MetricLogger

    pytest.importorskip("torch")
    try:
        import wandb  # noqa: F401
        pytest.skip("wandb is installed here")
    except ImportError:
        pass
    with pytest.raises(ConfigError, match="runner.logger.logger_backends.*wandb"):
        MetricLogger(str(tmp_path), "p", "e", ["wandb"])
