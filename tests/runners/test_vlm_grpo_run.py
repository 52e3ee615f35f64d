"""Vision-language GRPO on the math run layer (issue 47): a tiny random Qwen2.5-VL on the seeded
image task (``data.image_key``), two steps through ``run_math`` on the local backend (Ray is
not the subject): the images reach the rollout and the actor, the actor's recomputed log-probs
are the rollout's, the frozen vision tower stays as loaded while the language weights move, and
the export is a loadable VLM folder with its processor files. Keys that need a vision-language
model, or that it cannot take yet, are one line before any worker starts."""

from __future__ import annotations

import sys

import pytest
import ray.cloudpickle
import torch
from safetensors.torch import load_file

from rlinf.utils.metric_logger import read_metrics
from rlinf.utils.typed_config import ConfigError
from toolkits.autoplace.ranking import set_dotted
from toolkits.vlm.make_tiny_vlm import make_tiny_vlm
from toolkits.vlm.make_vlm_task import write_task

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm_run")
    model = make_tiny_vlm("qwen2_5_vl", root / "model", seed=0)
    task = write_task(root / "task", {"train": 12, "val": 4, "heldout": 0}, seed=0)
    return root, model, task


def vlm_config(root, model, task, **changes) -> dict:
    cfg = {
        "cluster": {"backend": "local", "num_nodes": 1, "accelerators_per_node": 2,
                    "component_placement": {"actor": 0, "rollout,reward": 1}},
        "runner": {"task_type": "math", "seq_length": 72, "max_steps": 2, "val_check_interval": 2,
                   "save_interval": -1, "export_hf": True, "plot_curves": False, "output_dir": str(root / "out"),
                   "experiment_name": "vlm", "logger": {"log_path": str(root / "out" / "vlm"),
                                                        "logger_backends": ["tensorboard"]}},
        "algorithm": {"group_size": 2, "n_minibatches": 1, "training_batch_size_per_gpu": 4,
                      "entropy_bonus": 0.01, "calculate_entropy": True,
                      "sampling_params": {"max_new_tokens": 4, "min_new_tokens": 1}},
        "data": {"train_data_paths": [str(task / "train.jsonl")], "val_data_paths": [str(task / "val.jsonl")],
                 "image_key": "images", "rollout_batch_size": 2, "max_prompt_length": 64},
        "actor": {"model": {"model_path": str(model)}, "optim": {"lr": 1e-2}},
        "rollout": {"backend": "huggingface", "model": {"model_path": str(model)}, "recompute_logprobs": False},
        "reward": {"reward_type": "exact_match", "reward_scale": 1.0, "verify_processes": 1},
    }
    for dotted, value in changes.items():
        set_dotted(cfg, dotted, value)
    return cfg


@pytest.mark.slow  # an end-to-end run (two steps, a validation, the export)
def test_two_grpo_steps_with_images_keep_the_frozen_tower_and_export_a_vlm(assets):
    from rlinf.models.vlm import load_vlm
    from rlinf.runners.math.recipe import run_math

    root, model, task = assets
    summary = run_math(vlm_config(root, model, task), print_fn=lambda *_: None)
    assert summary["steps"] == 2 and "val/last_accuracy" in summary
    metrics = {int(m["step"]): m for m in read_metrics(str(root / "out" / "vlm" / "metrics.jsonl"))}
    assert "val/accuracy" in metrics[0] and "val/accuracy" in metrics[2]
    # old log-probs = the rollout's (recompute off), one optimizer step per batch: the update's
    # ratio is exp(actor's log-prob from the same pixels - rollout's), 1 up to float rounding
    assert abs(metrics[1]["actor/ratio_max"] - 1) < 1e-4 and abs(metrics[1]["actor/ratio_min"] - 1) < 1e-4
    export = root / "out" / "vlm" / "huggingface"
    before, after = load_file(str(model / "model.safetensors")), load_file(str(next(export.rglob("*.safetensors"))))
    tower = [k for k in before if ".visual." in k or k.startswith("visual.") or "vision" in k]
    language = [k for k in before if "layers" in k and k not in tower]
    assert tower and language
    assert all(torch.equal(before[k], after[k]) for k in tower)
    assert any(not torch.equal(before[k], after[k]) for k in language)
    assert (export / "preprocessor_config.json").is_file()
    load_vlm(export)  # the export is a loadable VLM folder


def test_keys_that_need_a_vision_language_model_are_refused_before_start(assets, tmp_path):
    from rlinf.runners.math.preflight import prepare_math

    root, model, task = assets
    text_model = tmp_path / "text"
    text_model.mkdir()
    (text_model / "config.json").write_text('{"model_type": "qwen2"}')
    with pytest.raises(ConfigError, match=r"^data.image_key: .*text-only model"):
        from rlinf.config.math import MathConfig
        from rlinf.runners.math.preflight import vlm_encoder

        raw = vlm_config(root, str(text_model), task)
        vlm_encoder(MathConfig.load(raw, check_paths=False))
    with pytest.raises(ConfigError, match=r"^rollout.backend: a vision-language model rolls out on huggingface"):
        prepare_math(vlm_config(root, model, task, **{"rollout.backend": "vllm"}), print_fn=lambda *_: None)
    with pytest.raises(ConfigError, match=r"^runner.rollout_mode: a vision-language rollout cannot be "):
        fully_async = {"runner.rollout_mode": "fully_async", "algorithm.loss_type": "decoupled_ppo"}
        prepare_math(vlm_config(root, model, task, **fully_async), print_fn=lambda *_: None)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "How many shapes?", "answer": "2", "images": ["gone.png"]}\n')
    with pytest.raises(ConfigError, match=r"^data.train_data_paths: .*bad.jsonl:1: images\[0\]: .*gone.png"):
        prepare_math(vlm_config(root, model, task, **{"data.train_data_paths": [str(bad)]}), print_fn=lambda *_: None)
