"""``python -m rlinf.config.translate --from areal``: AReaL's allocation grammar, the mapped values
of AReaL's GSM8K GRPO example and of a config built from seed 002's tables, --explain, --check and
bad input."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from rlinf.config.translate.__main__ import main
from rlinf.config.translate.allocation import AllocationError, lay_out, parse_allocation
from rlinf.config.translate.areal import translate_areal
from rlinf.config.translate.common import check_result, flatten, load_source, result_tree
from rlinf.utils.typed_config import ConfigError
from tests.config.translate_helpers import compose_user_config, make_tiny_qwen, materialise, write_jsonl


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("areal")
    model = make_tiny_qwen(root / "tiny")
    return {"MODEL": model, "TRAIN": write_jsonl(root / "train.jsonl"), "VAL": write_jsonl(root / "val.jsonl")}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("text, placement, rollout_procs", [
    ("sglang.d4p1t1+d4p1t1", {"rollout": [0, 1, 2, 3], "actor": [4, 5, 6, 7]}, 4),       # legacy, seed 002 era
    ("vllm.d2t2+d4", {"rollout": [0, 1, 2, 3], "actor": [4, 5, 6, 7]}, 2),               # legacy, TP 2 engines
    ("sglang:d2t4+fsdp:d4t2", {"rollout": list(range(8)), "actor": list(range(8, 16))}, 2),  # backend:dims
    ("sglang[rollout]:d8p1t1|fsdp[actor]:d8p1t1", {"rollout": list(range(8)), "actor": list(range(8))}, 8),
    ("sglang[r]:d2+fsdp[a]:d4|fsdp[c]:d4", {"rollout": [0, 1], "actor": [2, 3, 4, 5], "critic": [2, 3, 4, 5]}, 2),
    ("d8", {"actor": list(range(8)), "rollout": list(range(8))}, 8),                    # one backend: colocated
    ("sglang:d4+eval", {"rollout": [0, 1, 2, 3]}, 4),
])
def test_allocation_forms(text, placement, rollout_procs):
    layout = lay_out(parse_allocation(text))
    assert {name: p.gpus for name, p in layout.items()} == placement
    assert len(layout["rollout"].gpus) // layout["rollout"].per_process == rollout_procs


@pytest.mark.parametrize("text, message", [
    ("megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)", "MoE form"),
    ("sglang:d4+vllm:d4", "several inference components"),
    ("tpu:d4", "unknown backend"),
    ("sglang:d4d2", "twice"),
    ("sglang:d4+fsdp[judge]:d4", "component name 'judge'"),
    ("sglang:d4|fsdp[actor]:d2", "colocated"),
])
def test_allocation_refusals(text, message):
    with pytest.raises(AllocationError, match=message):
        lay_out(parse_allocation(text))


def test_gsm8k_grpo_example_maps(files, tmp_path, capsys):
    src = materialise("areal_gsm8k_grpo.yaml", tmp_path, **files)
    code, out, _ = run(capsys, "--from", "areal", str(src), "--out", str(tmp_path / "ours.yaml"))
    assert code == 0 and out == ""
    text = (tmp_path / "ours.yaml").read_text()
    assert text.startswith(f"# Translated from {src} (AReaL config)") and "--explain" in text.splitlines()[2]
    cfg = yaml.safe_load(text)
    assert cfg["cluster"] == {"num_nodes": 1, "accelerators_per_node": 8,
                              "component_placement": {"actor": "4-7", "rollout,reward": "0-3"}}
    assert cfg["rollout"]["backend"] == "sglang" and cfg["rollout"]["gpu_memory_utilization"] == 0.8
    assert cfg["actor"]["training_backend"] == "fsdp"
    assert cfg["actor"]["model"] == {"model_path": files["MODEL"], "gradient_checkpointing": False,
                                     "precision": "bf16"}
    optim = cfg["actor"]["optim"]
    assert (optim["lr"], optim["weight_decay"], optim["adam_eps"], optim["clip_grad"]) == (1.7e-5, 0.017, 1e-8, 1.0)
    assert cfg["actor"]["lr_sched"] == {"lr_decay_style": "constant", "lr_warmup_fraction": 0.001}
    alg = cfg["algorithm"]
    assert (alg["group_size"], alg["ratio_clip_eps"], alg["kl_beta"], alg["n_minibatches"]) == (4, 0.4, 0.0, 1)
    assert (alg["loss_type"], alg["behav_imp_weight_cap"], alg["max_head_offpolicyness"]) == ("decoupled_ppo", 5.0, 2)
    assert alg["reward_norm"] == {"mean_level": "group", "std_level": "group"} and alg["adv_type"] == "grpo"
    assert alg["sampling_params"]["max_new_tokens"] == 1024 and cfg["runner"]["seq_length"] == 2048
    assert cfg["reward"]["reward_scale"] == 5.0  # (r - 0.5) x 10 with r in {0, 1}
    runner = cfg["runner"]
    assert (runner["save_interval"], runner["save_interval_secs"], runner["val_check_interval"]) == (-1, 3600, -1)
    assert (runner["recover_mode"], runner["max_epochs"], runner["seed"]) == ("disabled", 10, 1)
    assert (runner["experiment_name"], runner["output_dir"]) == ("gsm8k-grpo_trial0", "/tmp/areal/experiments")
    assert cfg["data"]["train_data_paths"] == [files["TRAIN"]] and cfg["data"]["rollout_batch_size"] == 256
    # async_training true on a disaggregated allocation; AReaL's 256 episodes of 4 samples each
    assert runner["rollout_mode"] == "fully_async" and cfg["rollout"]["max_concurrent_rollouts"] == 1024
    assert "queue_size" not in cfg["rollout"].get("channel", {})  # null: rlinf's default
    # loadable by the Hydra entry as a user config, and --check passes with the paths checked
    assert compose_user_config(tmp_path / "ours.yaml")["runner"]["experiment_name"] == "gsm8k-grpo_trial0"
    code, _, err = run(capsys, "--from", "areal", str(src), "--check", "--out", str(tmp_path / "ours.yaml"))
    assert code == 0 and "model and data paths checked" in err


def test_seed002_tables_megatron_colocated(files, tmp_path, capsys):
    src = materialise("areal_megatron_colocated.yaml", tmp_path, **files)
    code, out, err = run(capsys, "--from", "areal", str(src), "--check")
    assert code == 0, err
    cfg = yaml.safe_load(out)
    assert cfg["cluster"]["component_placement"] == {"actor": "all", "rollout,reward": "0-7:0-3"}
    assert cfg["cluster"]["num_nodes"] == 1  # AReaL's n_nodes is the cluster size; the allocation uses one
    assert cfg["rollout"] == {"backend": "vllm", "tensor_parallel_size": 2, "gpu_memory_utilization": 0.7,
                              "enforce_eager": False, "max_running_requests": 128, "recompute_logprobs": True}
    actor = cfg["actor"]
    assert actor["training_backend"] == "megatron" and actor["megatron"] == {"use_hf_ckpt": True}
    assert (actor["model"]["tensor_model_parallel_size"], actor["model"]["pipeline_model_parallel_size"]) == (2, 2)
    assert actor["optim"]["bf16"] is True and actor["optim"]["min_lr"] == pytest.approx(2e-7)
    assert actor["lr_sched"] == {"lr_decay_style": "cosine", "lr_warmup_fraction": 0.02}
    alg = cfg["algorithm"]
    assert (alg["clip_ratio_high"], alg["clip_ratio_c"], alg["kl_beta"], alg["kl_penalty_type"]) == (0.28, 3.0, 0.001,
                                                                                                     "k3")
    assert alg["normalize_advantages"] is True and alg["sampling_params"]["stop_token_ids"] == [151645]
    runner = cfg["runner"]
    assert (runner["save_interval"], runner["val_check_interval"], runner["max_steps"]) == (50, 25, 400)
    assert (runner["recover_mode"], runner["recover_retries"]) == ("auto", 5)
    assert "reward" not in cfg  # reward_scaling 2 / bias 0 is not symmetric: not translated


def test_explain_lists_every_key_once_with_reasons(files, tmp_path, capsys):
    src = materialise("areal_gsm8k_grpo.yaml", tmp_path, **files)
    code, _, err = run(capsys, "--from", "areal", str(src), "--explain")
    assert code == 0
    rows = {}
    for line in err.split("\n\nnotes:")[0].splitlines()[2:]:
        key, _, result = line.partition("  ")
        assert key not in rows
        rows[key] = result.strip()
    assert list(rows) == [key for key, _ in flatten(load_source(str(src), "AReaL"))] and len(rows) == 114
    assert all(rows.values())
    assert rows["launcher.trainer_mem_per_gpu"].startswith("no counterpart: Ray starts every process")
    assert rows["actor.adv_norm.mean_level"].startswith("different meaning: rlinf normalises advantages per group")
    assert rows["saver.freq_epochs"].startswith("no counterpart:")
    assert rows["recover.mode"] == "runner.recover_mode = disabled"
    assert rows["actor.eps_clip"] == "algorithm.ratio_clip_eps = 0.4"
    assert rows["async_training"] == "runner.rollout_mode = fully_async"
    assert rows["rollout.max_concurrent_rollouts"].startswith("rollout.max_concurrent_rollouts = 1024 (AReaL's 256 "
                                                              "episodes x gconfig.n_samples 4")
    assert rows["rollout.consumer_batch_size"].startswith("same as train_dataset.batch_size: data.rollout_batch_size")
    assert rows["rollout.queue_size"].startswith("null: rollout.channel.queue_size keeps rlinf's 0")


def test_check_refuses_a_translation_our_config_refuses(files, tmp_path, capsys):
    src = materialise("areal_gsm8k_grpo.yaml", tmp_path, **files)
    bad = tmp_path / "bad.yaml"
    bad.write_text(src.read_text().replace("use_decoupled_loss: true", "use_decoupled_loss: false"))
    code, out, err = run(capsys, "--from", "areal", str(bad), "--check")
    assert code == 2 and out == ""
    assert err.splitlines() == ["error: algorithm.loss_type: async rollout (max_head_offpolicyness > 0) "
                                "needs decoupled_ppo"]


ASYNC_SOURCE = {"experiment_name": "x", "trial_name": "y", "allocation_mode": "sglang:d2+fsdp:d2",
                "cluster": {"n_nodes": 1, "n_gpus_per_node": 4}, "gconfig": {"n_samples": 4},
                "train_dataset": {"batch_size": 8, "path": "train.jsonl"},
                "actor": {"path": "models/tiny", "use_decoupled_loss": True},
                "rollout": {"max_head_offpolicyness": 2, "max_concurrent_rollouts": 6, "queue_size": 32,
                            "consumer_batch_size": 4, "pause_grace_period": 0.5, "request_timeout": 3600,
                            "request_retries": 3, "setup_timeout": 120.0, "schedule_policy": "round_robin",
                            "check_trajectory_format": False}}

#: a value that removes the key from ASYNC_SOURCE
DROP = object()


def areal_async(changes: dict):
    """ASYNC_SOURCE with ``changes`` (dotted keys), translated: (translation, explain rows)."""
    src = copy.deepcopy(ASYNC_SOURCE)
    for path, value in changes.items():
        node = src
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        if value is DROP:
            node.pop(last)
        else:
            node[last] = value
    t = translate_areal(src)
    return t, dict(t.rows())


def test_async_training_and_the_rollout_queue_keys_map_to_fully_async():
    t, rows = areal_async({"async_training": True})
    assert t.out["runner"]["rollout_mode"] == "fully_async" and t.out["algorithm"]["max_head_offpolicyness"] == 2
    assert t.out["rollout"]["max_concurrent_rollouts"] == 24  # 6 episodes x 4 samples
    assert t.out["rollout"]["pause_grace_period"] == 0.5 and t.out["rollout"]["channel"] == {"queue_size": 32}
    assert t.out["data"]["rollout_batch_size"] == 8  # train_dataset.batch_size; consumer_batch_size differs
    assert rows["rollout.consumer_batch_size"].startswith("different meaning: AReaL's staleness capacity counts 4")
    assert rows["rollout.queue_size"].startswith("rollout.channel.queue_size = 32 (items per queue: fully_async's")
    assert rows["rollout.request_timeout"].startswith("no counterpart: rlinf's rollout engines run inside its rollout "
                                                      "workers, so no generation is an HTTP request")
    assert rows["rollout.request_retries"].startswith("different meaning: ") and \
        "the nearest is runner.recover_retries" in rows["rollout.request_retries"]
    for key in ("rollout.setup_timeout", "rollout.schedule_policy", "rollout.check_trajectory_format"):
        assert rows[key].startswith("no counterpart: ") and "server setting" not in rows[key], rows[key]
    cfg = check_tree(t)
    assert (cfg.rollout_mode, cfg.max_concurrent_rollouts, cfg.max_groups_in_flight) == ("fully_async", 24, 6)
    # without train_dataset.batch_size the consumer batch is the step's groups
    t, rows = areal_async({"async_training": True, "train_dataset.batch_size": DROP})
    assert t.out["data"]["rollout_batch_size"] == 4 and rows["rollout.consumer_batch_size"].startswith(
        "data.rollout_batch_size = 4 (the groups one step trains on")


def test_async_training_false_or_unplaceable_is_not_fully_async():
    t, rows = areal_async({"async_training": False})
    assert t.out["runner"]["rollout_mode"] == "sync" and "max_head_offpolicyness" not in t.out.get("algorithm", {})
    assert rows["rollout.max_head_offpolicyness"].startswith("not read with async_training false")
    for key in ("rollout.max_concurrent_rollouts", "rollout.pause_grace_period"):
        assert rows[key].startswith("no counterpart: read only by runner.rollout_mode fully_async"), rows[key]
    assert rows["rollout.queue_size"].startswith("different meaning: outside fully_async")
    assert check_tree(t).rollout_mode == "sync"
    # a colocated allocation cannot run fully_async: the mode stays derived (async, from k = 2)
    t, rows = areal_async({"async_training": True, "allocation_mode": "sglang:d4|fsdp:d4"})
    assert "rollout_mode" not in t.out.get("runner", {})
    assert rows["async_training"].startswith("different meaning: rlinf's runner.rollout_mode fully_async needs actor "
                                             "and rollout on separate accelerators; this allocation makes them "
                                             "collocated")
    # not set: AReaL's default is true; said in a note, rlinf's default kept
    t, rows = areal_async({})
    assert "rollout_mode" not in t.out.get("runner", {}) and any(n.startswith("async_training is not set") for n in
                                                                 t.notes)


def test_async_training_with_plain_ppo_is_translated_and_refused_by_check():
    t, _ = areal_async({"async_training": True, "actor.use_decoupled_loss": False,
                        "rollout.max_head_offpolicyness": 0})
    assert t.out["runner"]["rollout_mode"] == "fully_async" and t.out["algorithm"]["loss_type"] == "ppo"
    assert any("set actor.use_decoupled_loss: true" in n for n in t.notes)
    with pytest.raises(ConfigError) as err:
        check_tree(t)
    assert err.value.key == "algorithm.loss_type" and "ppo cannot correct samples" in str(err.value)


def check_tree(t):
    """The translated tree parsed as --check parses it (paths not on disk: not checked)."""
    from rlinf.config.math import MathConfig

    assert check_result(result_tree(t)) is False
    return MathConfig.from_dict(OmegaConf.to_container(OmegaConf.create(result_tree(t)), resolve=True),
                                check_paths=False)


def test_per_engine_backend_strings(files):
    t = translate_areal({"experiment_name": "x", "trial_name": "y",
                         "actor": {"path": files["MODEL"], "backend": "fsdp:d4"},
                         "rollout": {"backend": "sglang:d2t2"},
                         "ref": {"backend": "fsdp:d4",
                                 "scheduling_strategy": {"type": "colocation", "target": "actor"}}})
    assert t.out["cluster"]["component_placement"] == {"actor": "4-7", "rollout,reward": "0-3:0-1"}
    assert t.out["rollout"]["tensor_parallel_size"] == 2


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"),
    ("- a\n- b\n", "expected a YAML mapping"),
    ("a: [1, 2\n", "not valid YAML"),
    ("runner: {max_steps: 2}\ncluster: {component_placement: {actor: all}}\n", "rlinf config"),
    ("foo: 1\n", "not an AReaL config"),
    ("allocation_mode: sglang:d4+tpu:d4\n", "unknown backend"),
])
def test_bad_input_is_one_error_line(tmp_path, capsys, content, message):
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "--from", "areal", str(path))
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"error: {path}: ") and message in err


def test_cli_process(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "rlinf.config.translate", "--from", "areal", str(tmp_path / "no.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [f"error: {tmp_path / 'no.yaml'}: cannot read it "
                                                                       "(No such file or directory)"]
    unknown = subprocess.run([sys.executable, "-m", "rlinf.config.translate", "--from", "verl", "x.yaml"],
                             capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "invalid choice: 'verl'" in unknown.stderr
