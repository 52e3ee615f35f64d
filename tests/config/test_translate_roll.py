"""``python -m rlinf.config.translate --from roll``: device_mapping parsing, the mapped values of
ROLL's example config from seed 001, --explain, --check and bad input."""

from __future__ import annotations

import pytest
import yaml

from rlinf.config.translate.__main__ import main
from rlinf.config.translate.device_mapping import DeviceMappingError, parse_device_mapping
from rlinf.config.translate.roll import translate_roll
from tests.config.translate_helpers import DATA, compose_user_config, make_tiny_qwen, materialise, write_jsonl


@pytest.fixture(scope="module")
def seed001(tmp_path_factory):
    """Seed 001's example with pretrain at a tiny model and its data file at a real JSONL file."""
    root = tmp_path_factory.mktemp("roll")
    src = materialise("roll_seed001.yaml", root, MODEL=make_tiny_qwen(root / "tiny"))
    data = write_jsonl(root / "train.jsonl")
    src.write_text(src.read_text().replace("xxx/train.json", data))
    return src, data, str(root / "tiny")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("value, ranks", [
    ("list(range(0,16))", list(range(16))),
    ("list(range(8))", list(range(8))),
    ("list(range(0, 8, 2))", [0, 2, 4, 6]),
    ("[4]", [4]),
    ([0, 1, 2, 3], [0, 1, 2, 3]),
    ("list(range(0,4)) + [6, 7] + list(range(10,12))", [0, 1, 2, 3, 6, 7, 10, 11]),
])
def test_device_mapping_forms(value, ranks):
    assert parse_device_mapping(value) == ranks


@pytest.mark.parametrize("value", ["__import__('os').system('true')", "list(range(0,4)) * 2", "range(4)",
                                   "[0, 1] + [1]", "list(range(0, 8, 0))", "[-1]", "list(range(a, b))", "[0.5]"])
def test_device_mapping_refusals(value):
    with pytest.raises(DeviceMappingError) as err:
        parse_device_mapping(value)
    assert "\n" not in str(err.value)


def test_seed001_example_maps(seed001, tmp_path, capsys):
    src, data, model = seed001
    out_file = tmp_path / "ours.yaml"
    code, out, err = run(capsys, "--from", "roll", str(src), "--out", str(out_file), "--check")
    assert code == 0 and out == "" and "model and data paths checked" in err
    cfg = yaml.safe_load(out_file.read_text())
    # 16 GPUs shared by actor_train, actor_infer and reference: collocated on 2 nodes x 8 (ROLL's default)
    assert cfg["cluster"] == {"num_nodes": 2, "component_placement": {"actor,rollout,reward": "all"},
                              "accelerators_per_node": 8}
    assert cfg["rollout"] == {"backend": "vllm", "gpu_memory_utilization": 0.6}
    actor = cfg["actor"]
    assert actor["training_backend"] == "megatron" and actor["megatron"] == {"use_hf_ckpt": True}
    assert actor["model"] == {"precision": "bf16", "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                              "model_path": model}
    assert actor["optim"] == {"bf16": True, "lr": 1e-6, "weight_decay": 0}
    assert actor["lr_sched"] == {"lr_warmup_iters": 20}
    alg = cfg["algorithm"]
    assert (alg["group_size"], alg["n_minibatches"], alg["training_batch_size_per_gpu"]) == (8, 1, 1)
    assert alg["logprob_forward_micro_batch_size"] == 4
    assert alg["sampling_params"] == {"max_new_tokens": 4096, "temperature": 0.99}
    assert cfg["runner"]["seq_length"] == 2048 + 4096
    assert cfg["data"] == {"type": "math", "train_data_paths": [data], "apply_chat_template": True,
                           "rollout_batch_size": 64, "max_prompt_length": 2048, "prompt_key": "instruction"}
    assert compose_user_config(out_file)["actor"]["training_backend"] == "megatron"


def test_seed001_explain(seed001, capsys):
    code, _, err = run(capsys, "--from", "roll", str(seed001[0]), "--explain")
    assert code == 0
    table = err.split("\n\nnotes:")[0].splitlines()[2:]
    rows = dict(line.split(None, 1) for line in table)
    assert len(rows) == len(table) == 34
    assert rows["actor_infer.strategy_args.strategy_config.block_size"] == \
        "no counterpart: not an engine setting rlinf reads"
    assert rows["actor_train.model_args.disable_gradient_checkpointing"].startswith("different meaning: with Megatron")
    assert rows["reference.device_mapping"] == "the actor group computes the reference log-probs"
    assert rows["actor_train.training_args.learning_rate"] == "actor.optim.lr = 1e-06"


def test_disaggregated_sglang_with_reference_apart(tmp_path):
    t = translate_roll({
        "exp_name": "rlvr", "seed": 42, "output_dir": "./output", "num_gpus_per_node": 8, "max_steps": 1000,
        "save_steps": 100, "eval_steps": 50, "resume_from_checkpoint": True, "rollout_batch_size": 64,
        "prompt_length": 2048, "response_length": 1024, "num_return_sequences_in_group": 8, "ppo_epochs": 1,
        "adv_estimator": "grpo", "init_kl_coef": 0.05, "pg_clip": 0.2, "use_pg_clip_range": True,
        "pg_clip_low": 0.2, "pg_clip_high": 0.28, "loss_agg_mode": "seq-mean-token-mean", "reward_clip": 10,
        "norm_mean_type": "group", "norm_std_type": "group",
        "actor_train": {"strategy_args": {"strategy_name": "fsdp2_train",
                                          "strategy_config": {"fsdp_size": 4, "param_dtype": "bf16",
                                                              "reduce_dtype": "float32"}},
                        "training_args": {"learning_rate": 1e-6, "per_device_train_batch_size": 2,
                                          "gradient_accumulation_steps": 16},
                        "device_mapping": [0, 1, 2, 3]},
        "actor_infer": {"strategy_args": {"strategy_name": "sglang", "strategy_config": {"mem_fraction_static": 0.7}},
                        "num_gpus_per_worker": 2, "device_mapping": "list(range(4,8))"},
        "reference": {"strategy_args": {"strategy_name": "hf_infer"}, "device_mapping": "[8]"}})
    out = t.out
    assert out["cluster"] == {"num_nodes": 2, "component_placement": {"actor": "0-3", "rollout,reward": "4-7:0-1",
                                                                      "inference": "8"},
                              "accelerators_per_node": 8}
    assert out["rollout"] == {"backend": "sglang", "gpu_memory_utilization": 0.7, "tensor_parallel_size": 2}
    assert out["actor"]["fsdp_config"] == {"fsdp_size": 4, "mixed_precision": {"param_dtype": "bf16",
                                                                               "reduce_dtype": "fp32"}}
    alg = out["algorithm"]
    assert (alg["adv_type"], alg["kl_beta"], alg["kl_in_reward"]) == ("grpo", 0.05, True)
    assert (alg["ratio_clip_eps"], alg["clip_ratio_high"], alg["n_minibatches"]) == (0.2, 0.28, 4)
    assert alg["reward_norm"] == {"mean_level": "group", "std_level": "group"}
    runner = out["runner"]
    assert (runner["save_interval"], runner["val_check_interval"], runner["recover_mode"]) == (100, 50, "resume")


def test_check_refuses_what_our_config_refuses(seed001, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(seed001[0].read_text().replace("rollout_batch_size: 64", "rollout_batch_size: 1"))
    code, out, err = run(capsys, "--from", "roll", str(bad), "--check")
    assert code == 2 and out == ""
    assert err.splitlines() == ["error: data.rollout_batch_size: rollout_batch_size * algorithm.group_size = 8 is "
                                "not divisible by the actor's data-parallel size 16 (its placement)"]


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"),
    ("just a string\n", "expected a YAML mapping"),
    ("- 1\n- 2\n", "expected a YAML mapping"),
    ("rollout_batch_size: [1\n", "not valid YAML"),
    ("foo: 1\n", "no actor_train / actor_infer section"),
    ("actor_train: {device_mapping: 'list(range(0,4))'}\nactor_infer: {device_mapping: 'os.system(1)'}\n",
     "actor_infer.device_mapping: cannot read"),
])
def test_bad_input_is_one_error_line(tmp_path, capsys, content, message):
    path = tmp_path / "in.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "--from", "roll", str(path))
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"error: {path}: ") and message in err


def test_an_rlinf_config_given_as_roll_is_refused(capsys):
    path = "examples/math/config/grpo_tiny_cpu.yaml"
    code, out, err = run(capsys, "--from", "roll", path)
    assert code == 2 and out == ""
    assert err.strip() == (f"error: {path}: this is an rlinf config (it has runner / cluster.component_placement), "
                           "not a ROLL one")
    assert DATA.is_dir()
