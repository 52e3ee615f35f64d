"""WebAgentConfig: seed 000's Hydra hierarchy composes and parses, children override parents as the
seed shows, and every bad value is refused with its key named."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rlinf.config.reference_doc import render_reference
from rlinf.config.web import WebAgentConfig
from rlinf.config.web_env import OPERATIONS, HttpPools, WebEnvConfig
from rlinf.config.web_train import DEEPSPEED_DIR, load_deepspeed_config
from rlinf.utils.typed_config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "examples" / "web_agent" / "config"
NAMES = ("default", "rollout", "rollout_train", "rollout_test", "update_online", "web_agent_tiny_cpu")
_COMPOSED: dict[str, dict] = {}


def composed(name: str) -> dict:
    """The resolved tree of one shipped config, composed by Hydra (cached; copies handed out)."""
    if name not in _COMPOSED:
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(name)
        _COMPOSED[name] = OmegaConf.to_container(cfg, resolve=True)
    return copy.deepcopy(_COMPOSED[name])


def parse(raw, check_paths=False) -> WebAgentConfig:
    return WebAgentConfig.from_hydra(OmegaConf.create(raw), check_paths=check_paths)


def changed(changes: dict, base: str = "web_agent_tiny_cpu") -> dict:
    """``base`` with dotted keys set (``None`` as a value sets YAML null)."""
    raw = composed(base)
    for path, value in changes.items():
        node = raw
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return raw


# ---------------------------------------------------------------- the hierarchy


@pytest.mark.parametrize("name", NAMES)
def test_every_shipped_config_composes_and_parses(name):
    cfg = parse(composed(name))
    assert cfg.env_config.max_vllm_sessions is None
    assert "env" in cfg.components and cfg.plan().components


def test_children_override_parents_as_the_seed_shows():
    default, train, test = (parse(composed(n)) for n in ("default", "rollout_train", "rollout_test"))
    tiny = parse(composed("web_agent_tiny_cpu"))
    # temperature and max_new_tokens come from default.yaml, server_size from rollout.yaml
    assert default.policy_config.temperature == train.policy_config.temperature == test.policy_config.temperature == 1.0
    assert train.policy_config.max_new_tokens == 3072 and train.env_config.server_size == 64
    assert test.env_config.server_size == 64 and test.env_config.operation_timeout == 120
    # split and pools per file
    assert (train.env_config.split, test.env_config.split) == ("train", "test")
    assert train.env_config.http_pools.as_dict() == {op: (4 if op in ("allocate", "release") else 128)
                                                     for op in OPERATIONS}
    assert test.env_config.http_pools.as_dict() == {"metadata": 32, "navigate": 32, "allocate": 4, "release": 4,
                                                    "screenshot": 128, "ac_tree": 64, "page_metadata": 64,
                                                    "execute": 64}
    assert (train.env_config.test_tasks_rollout_size, train.env_config.test_tasks_repeat_times) == (0, 0)
    assert (test.env_config.test_tasks_rollout_size, test.env_config.test_tasks_repeat_times) == (-1, 1)
    assert test.env_config.train_tasks_rollout_size == 1024 and test.evaluates and not train.evaluates
    # the tiny loop overrides server_size and max steps, inherits temperature, split and update keys
    assert tiny.env_config.server_size == 4 and tiny.policy_config.temperature == 1.0
    assert tiny.env_config.split == "train" and tiny.env_config.max_steps("train", "easy") == 4
    assert tiny.algorithm_config.positive_samples_to_train == 1800  # from update_online.yaml
    assert (tiny.algorithm_config.method, tiny.algorithm_config.group_size) == ("grpo", 4)
    assert (tiny.policy_config.base_model == "results/tiny_web/warm"
            and tiny.save_path == "results/web_agent/web-tiny-cpu")


def test_components_decide_what_runs():
    assert parse(composed("rollout_train")).components == ("env", "rollout")
    online = parse(composed("update_online"))
    assert online.trains and online.components == ("env", "rollout", "actor")
    tiny = parse(composed("web_agent_tiny_cpu"))
    plan = tiny.plan()
    assert plan.mode("rollout", "actor").value == "collocated" and plan.component("env").world_size == 1
    assert tiny.needed_splits() == ("train", "test")
    external = parse(changed({"env_config.vllm_server_url": "http://127.0.0.1:8999",
                              "cluster.component_placement": {"env": 0}}, "rollout_test"))
    assert external.external_server and not external.trains and external.needed_splits() == ("test",)


def test_seed_defaults_and_openai_overrides():
    env = WebEnvConfig()
    assert (env.wait_timeout, env.operation_timeout, env.vllm_timeout, env.evaluation_workers,
            env.screenshot_comparison_workers, env.completion_threshold, env.completion_grace_period,
            env.instance_lifetime_max, env.task_timeout_minutes, env.server_size, env.max_retries) == (
        2400, 120, 240, 16, 32, 0.95, 30, 50, 300, 64, 2)
    assert (env.save_fraction, env.max_steps("test", "medium"), env.max_steps("train", "hard")) == (0.25, 50, 30)
    assert tuple(f for f in HttpPools.__dataclass_fields__) == OPERATIONS
    cfg = parse(composed("default"))
    algo = parse(composed("update_online")).algorithm_config
    assert (algo.learning_rate, algo.deepspeed_config_filename, algo.report_to) == (1e-6, "ds_config_b200_zero1.json",
                                                                                    "wandb")
    kp = cfg.openai_config.endpoint("keypoint_detection")
    assert (kp.model, kp.openai_api_key_env_var) == ("gemini-2.5-flash-lite", "GEMINI_API_KEY")
    assert kp.base_url == "https://generativelanguage.googleapis.com/v1beta/openai/"
    assert cfg.openai_config.evaluator == "rule" and any("evaluator is rule" in n for n in cfg.notes())


def test_every_key_is_documented_in_the_reference():
    text = render_reference(WebAgentConfig, title="Web-agent config")
    for key in ("env_config.http_pools", "env_config.site_server", "algorithm_config", "openai_config"):
        assert f"`{key}`" in text


# ---------------------------------------------------------------- bad values


BAD = [
    ({"env_confg": {}}, "env_confg: unknown key"),
    ({"env_config.http_pools.click": 4}, "env_config.http_pools.click: unknown key; allowed keys are ac_tree"),
    ({"env_config.http_pools.navigate": 0}, "env_config.http_pools.navigate: must be >= 1"),
    ({"env_config.max_vllm_sessions": 64}, "env_config.max_vllm_sessions: 64 is refused: experimental"),
    ({"env_config.completion_threshold": 1.5}, "env_config.completion_threshold: must be in (0, 1]"),
    ({"env_config.completion_threshold": 0}, "env_config.completion_threshold: must be in (0, 1]"),
    ({"env_config.instance_lifetime_max": 0}, "env_config.instance_lifetime_max: must be > 0"),
    ({"env_config.wait_timeout": "long"}, "env_config.wait_timeout: expected a number"),
    ({"env_config.train_tasks_sampler": "random"}, "env_config.train_tasks_sampler: 'random' is not allowed"),
    ({"env_config.train_tasks_sampler": "uniform"},
     "env_config.train_tasks_ratio: is read by train_tasks_sampler: ratio only"),
    ({"env_config.train_tasks_ratio": None}, "env_config.train_tasks_ratio: missing: train_tasks_sampler ratio needs"),
    ({"env_config.train_tasks_ratio.hard": 0.5}, "env_config.train_tasks_ratio: the fractions must sum to 1, got 1.5"),
    ({"env_config.train_difficulty_max_steps.xhard": 5}, "env_config.train_difficulty_max_steps.xhard: unknown key"),
    ({"env_config.test_difficulty_max_steps.easy": 0}, "env_config.test_difficulty_max_steps.easy: must be >= 1"),
    ({"env_config.checkpoint_interval": 0.5},
     "env_config.checkpoint_interval: 0.5 disagrees with env_config.save_every_percent 25"),
    ({"env_config.save_every_percent": 0}, "env_config.save_every_percent: must be in 1..100"),
    ({"env_config.split": "val"}, "env_config.split: 'val' is not allowed"),
    ({"env_config.split": "test"}, "env_config.split: the online loop (actor placed) trains on train rollouts"),
    ({"env_config.train_tasks_rollout_size": 0},
     "env_config.train_tasks_rollout_size: must be -1 (every task) or >= 1"),
    ({"env_config.test_tasks_rollout_size": -2}, "env_config.test_tasks_rollout_size: must be -1"),
    ({"env_config.test_tasks_repeat_times": 0},
     "env_config.test_tasks_repeat_times: 0 with test_tasks_rollout_size -1"),
    ({"env_config.test_tasks_rollout_size": 0}, "env_config.test_tasks_repeat_times: 4 has no effect"),
    ({"env_config.test_tasks_rollout_size": 0, "env_config.test_tasks_repeat_times": 0},
     "runner.test_interval: 2 has no effect: env_config.test_tasks_rollout_size is 0"),
    ({"env_config.vllm_server_url": "http://127.0.0.1:8999"},
     "env_config.vllm_server_url: 'http://127.0.0.1:8999', but rollout is placed"),
    ({"env_config.vllm_server_url": "localhost:8999"},
     "env_config.vllm_server_url: expected null or an http(s):// URL"),
    ({"env_config.rank_load_weight": [1.0, 2.0]},
     "env_config.rank_load_weight: gives 2 weights for 1 env worker ranks"),
    ({"env_config.rank_load_weight": [0.0]}, "env_config.rank_load_weight[0]: must be > 0"),
    ({"env_config.browser.viewport": [1280]}, "env_config.browser.viewport: expected [width, height]"),
    ({"env_config.blocked_domains": [""]}, "env_config.blocked_domains[0]: expected a domain name"),
    ({"env_config.server_size": 1, "cluster.component_placement.env": "0:0-1"},
     "env_config.server_size: 1 browser instances cannot be split over 2 env worker ranks"),
    ({"algorithm_config.method": "filtered_sft"},
     "algorithm_config.group_size: 4 has no effect with method filtered_sft"),
    ({"algorithm_config.group_size": 1},
     "algorithm_config.group_size: grpo compares episodes of the same task: needs >= 2"),
    ({"algorithm_config.method": "ppo"},
     "algorithm_config.method: 'ppo' is not allowed; expected one of 'filtered_sft', 'grpo'"),
    ({"algorithm_config.method": "filtered_sft", "algorithm_config.group_size": 1, "algorithm_config.clip_ratio": 0.3},
     "algorithm_config.clip_ratio: 0.3 has no effect with method filtered_sft"),
    ({"algorithm_config.positive_samples_to_train": 100},
     "algorithm_config.positive_samples_to_train: 100 has no effect with method grpo"),
    ({"algorithm_config.warmup_steps": 30},
     "algorithm_config.warmup_steps: 30 has no effect with lr_scheduler_type constant"),
    ({"algorithm_config.lr_scheduler_type": "exponential"},
     "algorithm_config.lr_scheduler_type: 'exponential' is not allowed"),
    ({"algorithm_config.val_split_ratio": 1.0}, "algorithm_config.val_split_ratio: must be in [0, 1)"),
    ({"algorithm_config.training_backend": "megatron"}, "algorithm_config.training_backend: 'megatron' is not allowed"),
    ({"algorithm_config.report_to": "mlflow"}, "algorithm_config.report_to: 'mlflow' is not allowed"),
    ({"policy_config.temperature": -0.5}, "policy_config.temperature: must be >= 0"),
    ({"policy_config.top_p": 0}, "policy_config.top_p: must be in (0, 1]"),
    ({"policy_config.top_k": 0}, "policy_config.top_k: must be -1 (no limit) or >= 1"),
    ({"policy_config.min_p": 1.0}, "policy_config.min_p: must be in [0, 1)"),
    ({"policy_config.max_new_tokens": 0}, "policy_config.max_new_tokens: must be >= 1"),
    ({"policy_config.max_new_tokens": 4096},
     "policy_config.max_new_tokens: 4096 leaves no room for the prompt in algorithm_config.cutoff_len 2048"),
    ({"policy_config.rollout_backend": "sglang"}, "policy_config.rollout_backend: 'sglang' is not allowed"),
    ({"model_config.model_type": "llama"}, "model_config.model_type: 'llama' is not allowed"),
    ({"context_config.interaction_mode": "pixels"}, "context_config.interaction_mode: 'pixels' is not allowed"),
    ({"context_config.max_observation_chars": 100}, "context_config.max_observation_chars: must be >= 200"),
    ({"context_config.history_length": -1}, "context_config.history_length: must be >= 0"),
    ({"openai_config.evaluator": "llm", "openai_config.base_url": None},
     "openai_config.keypoint_detection.base_url: evaluator llm needs an endpoint"),
    ({"openai_config.evaluation.url": "x"}, "openai_config.evaluation.url: unknown key"),
    ({"cluster.component_placement.reward": 0}, "cluster.component_placement.reward: unknown component"),
    ({"cluster.component_placement": {"rollout": 0, "actor": 0}},
     "cluster.component_placement: missing component 'env'"),
    ({"runner.iterations": 0}, "runner.iterations: must be >= 1"),
    ({"runner.resume": "always"}, "runner.resume: 'always' is not allowed"),
    ({"runner.max_minutes": 0}, "runner.max_minutes: must be > 0 or null"),
    ({"log_config.run_name": " "}, "log_config.run_name: expected a name"),
]


@pytest.mark.parametrize("changes, message", BAD, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(BAD)])
def test_bad_values_are_refused_naming_the_key(changes, message):
    with pytest.raises(ConfigError) as err:
        parse(changed(changes))
    assert str(err.value).startswith(message), str(err.value)


def test_rollout_only_placements():
    base = "rollout_train"
    with pytest.raises(ConfigError, match=r"^cluster\.component_placement: missing component 'rollout': place it"):
        parse(changed({"cluster.component_placement": {"env": 0}}, base))
    with pytest.raises(ConfigError,
                       match=r"^cluster\.component_placement: missing component 'rollout': the online loop"):
        parse(changed({"cluster.component_placement": {"env": 0, "actor": 0},
                       "env_config.vllm_server_url": "http://h:1"}, "update_online"))
    with pytest.raises(ConfigError, match=r"^policy_config\.rollout_backend: 'vllm' has no effect"):
        parse(changed({"cluster.component_placement": {"env": 0}, "env_config.vllm_server_url": "http://h:1",
                       "policy_config.rollout_backend": "vllm"}, base))
    with pytest.raises(ConfigError, match=r"^env_config\.test_tasks_rollout_size: 0 with split test"):
        parse(changed({"env_config.test_tasks_rollout_size": 0, "env_config.test_tasks_repeat_times": 0},
                      "rollout_test"))
    with pytest.raises(ConfigError, match=r"^runner\.test_interval: 2 has no effect: a rollout-only run of split test"):
        parse(changed({"runner.test_interval": 2}, "rollout_test"))


# ---------------------------------------------------------------- files


def write_tasks(path: Path, tasks: list[dict]) -> None:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))


@pytest.fixture()
def files(tmp_path):
    """A data folder with both task files and an HF-looking model folder."""
    data, model = tmp_path / "data", tmp_path / "model"
    data.mkdir()
    model.mkdir()
    (model / "config.json").write_text("{}")
    task = {"task_id": "t1", "instruction": "?", "start_url": "/shop/", "difficulty": "easy",
            "reference_answer": "1", "domain": "shop"}
    write_tasks(data / "train.jsonl", [task])
    write_tasks(data / "test.jsonl", [task])
    return {"data_path": str(data), "policy_config.base_model": str(model), "save_path": str(tmp_path / "out"),
            "env_config.train_tasks": "train.jsonl", "env_config.test_tasks": "test.jsonl"}


def test_paths_checked_when_asked(files, tmp_path):
    cfg = parse(changed(files), check_paths=True)
    assert cfg.task_path("train") == files["data_path"] + "/train.jsonl"
    (Path(files["data_path"]) / "test.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"^env_config\.test_tasks: '.*test\.jsonl' does not exist"):
        parse(changed(files), check_paths=True)
    parse(changed({**files, "env_config.test_tasks_rollout_size": 0, "env_config.test_tasks_repeat_times": 0,
                   "runner.test_interval": 1}), check_paths=True)  # no evaluation: no test file needed
    (Path(files["data_path"]) / "test.jsonl").write_text((Path(files["data_path"]) / "train.jsonl").read_text())
    with pytest.raises(ConfigError, match=r"^policy_config\.base_model: '.*' is not an HF model folder"):
        parse(changed({**files, "policy_config.base_model": str(tmp_path)}), check_paths=True)
    with pytest.raises(ConfigError, match=r"^policy_config\.base_model: missing"):
        parse(changed({**files, "policy_config.base_model": None}), check_paths=True)
    with pytest.raises(ConfigError, match=r"^policy_config\.checkpoint_path: '.*nowhere' is not an HF model folder"):
        parse(changed({**files, "policy_config.checkpoint_path": str(tmp_path / "nowhere")}), check_paths=True)
    with pytest.raises(ConfigError,
                       match=r"^env_config\.browser\.executable_path: '/no/chromium' is not an executable"):
        parse(changed({**files, "env_config.browser.executable_path": "/no/chromium"}), check_paths=True)
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"^save_path: '.*file' is a file"):
        parse(changed({**files, "save_path": str(tmp_path / "file")}), check_paths=True)


def test_shipped_deepspeed_files():
    for gpu in ("h100", "b200"):
        for stage in (1, 2, 3):
            s = load_deepspeed_config(DEEPSPEED_DIR / f"ds_config_{gpu}_zero{stage}.json")
            assert (s.stage, s.bf16, s.fp16, s.overlap_comm, s.activation_checkpointing) == (stage, True, False, True,
                                                                                             True)
            offload = "cpu" if (gpu, stage) == ("h100", 3) else None
            assert (s.offload_param, s.offload_optimizer) == (offload, offload)
            assert s.micro_batch_size is None and s.gradient_accumulation_steps is None  # "auto"


@pytest.mark.parametrize("content, message", [
    ('{"zero_optimization": {"stage": 1,}}',
     "not valid JSON: Expecting property name enclosed in double quotes at line 1"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('{"zero_optimization": {"stage": 4}}', "zero_optimization.stage must be 0, 1, 2 or 3, got 4"),
    ('{"zero_optimization": {"stage": "1"}}', "zero_optimization.stage must be 0, 1, 2 or 3, got '1'"),
    ('{"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}',
     "zero_optimization.offload_param needs stage 3"),
    ('{"bf16": {"enabled": true}, "fp16": {"enabled": true}}', "bf16.enabled and fp16.enabled are both true"),
    ('{"bf16": {"enabled": "yes"}}', 'bf16.enabled must be true, false or "auto"'),
    ('{"zero_optimization": 3}', "zero_optimization must be a JSON object, got 3"),
    ('{"train_micro_batch_size_per_gpu": 0}', 'train_micro_batch_size_per_gpu must be "auto" or an int >= 1'),
])
def test_bad_deepspeed_files_name_the_file(files, tmp_path, content, message):
    path = tmp_path / "ds.json"
    path.write_text(content)
    raw = changed({**files, "algorithm_config.training_backend": "deepspeed",
                   "algorithm_config.deepspeed_config_filename": str(path)})
    with pytest.raises(ConfigError) as err:
        parse(raw, check_paths=True)
    assert str(err.value).startswith(f"algorithm_config.deepspeed_config_filename: {path}: {message}"), str(err.value)


def test_deepspeed_batch_counts_and_package(files, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}')
    raw = changed({**files, "algorithm_config.training_backend": "deepspeed",
                   "algorithm_config.deepspeed_config_filename": str(path)})
    with pytest.raises(ConfigError,
                       match=r"^algorithm_config\.per_device_train_batch_size: 8 disagrees with .*ds\.json \(2\)"):
        parse(raw, check_paths=True)
    with pytest.raises(ConfigError,
                       match=r"^algorithm_config\.deepspeed_config_filename: .*missing\.json: no such file"):
        parse({**raw, "algorithm_config": {**raw["algorithm_config"], "deepspeed_config_filename": "missing.json"}},
              check_paths=True)
    raw["algorithm_config"]["deepspeed_config_filename"] = "ds_config_h100_zero3.json"
    cfg = parse(raw)
    assert cfg.deepspeed_settings().offload_param == "cpu"
    if importlib.util.find_spec("deepspeed") is None:
        with pytest.raises(ConfigError,
                           match=r"^algorithm_config\.training_backend: 'deepspeed' needs the deepspeed package"):
            parse(raw, check_paths=True)
    else:
        parse(raw, check_paths=True)


# ---------------------------------------------------------------- the task hook


def test_check_tasks():
    shop = {"task_id": "a", "start_url": "/shop/", "difficulty": "easy", "domain": "shop"}
    wiki = {"task_id": "b", "start_url": "http://127.0.0.1:9/wiki/", "difficulty": "medium", "domain": "wiki"}
    tiny = parse(composed("web_agent_tiny_cpu"))
    tiny.check_tasks([shop, wiki], "train")
    off = parse(changed({"env_config.site_server.enabled": False}))
    off.check_tasks([wiki], "test")
    with pytest.raises(ConfigError, match=r"^env_config\.site_server\.enabled: false, but task 'a' of "
                                          r".*train(_shop_category)?\.jsonl has the relative start_url '/shop/'"):
        off.check_tasks([wiki, shop], "train")
    blocked = parse(changed({"env_config.blocked_domains": ["shop", "wiki"]}))
    with pytest.raises(ConfigError, match=r"^env_config\.blocked_domains: \['shop', 'wiki'\] leaves none of the 2"):
        blocked.check_tasks([shop, wiki], "train")
    blocked.check_tasks([shop, wiki], "test")  # test tasks are never filtered
    with pytest.raises(ConfigError, match=r"^env_config\.train_tasks_ratio\.easy: 1\.0, but .* has no easy task"):
        tiny.check_tasks([wiki], "train")
    with pytest.raises(ConfigError, match=r"^env_config\.test_tasks: .*test(_shop_category)?\.jsonl holds no task"):
        tiny.check_tasks([], "test")


def test_a_zero_file_under_fsdp_is_mapped_and_noted():
    """training_backend fsdp with a DeepSpeed file: its ZeRO stage / offload / bf16 map onto FSDP2,
    and the start-up notes say how; null training_backend with a file means deepspeed."""
    from rlinf.runners.web_agent.groups import actor_section

    cfg = parse(changed({"algorithm_config.deepspeed_config_filename": "ds_config_h100_zero3.json",
                         "algorithm_config.training_backend": "fsdp"}))
    (note,) = [n for n in cfg.notes() if n.startswith("algorithm_config.deepspeed_config_filename")]
    assert "ZeRO-3" in note and "full_shard" in note and "cpu_offload true" in note
    actor = actor_section(cfg, "m")
    assert actor.fsdp_config.sharding_strategy == "full_shard" and actor.fsdp_config.cpu_offload
    assert actor.fsdp_config.mixed_precision.param_dtype == "bf16" and actor.model.gradient_checkpointing
    assert parse(changed({"algorithm_config.deepspeed_config_filename": "ds_config_h100_zero2.json",
                          "algorithm_config.training_backend": None})).algorithm_config.backend == "deepspeed"
    assert parse(changed({})).algorithm_config.backend == "fsdp"  # the tiny config: no file


def test_env_ranks_on_a_cpu_only_node_group_and_their_shares():
    """Browser servers need no accelerator: env may sit on a CPU-only node group (one rank per
    node), and rank_load_weight splits server_size and every pool over those ranks."""
    from rlinf.engines.web.client import split_for_rank

    cfg = parse(changed({
        "cluster": {"num_nodes": 3, "accelerators_per_node": 2,
                    "node_groups": [{"label": "gpu", "node_ranks": "0", "accelerators_per_node": 2},
                                    {"label": "web", "node_ranks": "1-2", "accelerators_per_node": 0}],
                    "component_placement": {"env": {"node_group": "web", "placement": "0-1"},
                                            "rollout": {"node_group": "gpu", "placement": "0"},
                                            "actor": {"node_group": "gpu", "placement": "1"}}},
        "env_config.rank_load_weight": [1.0, 3.0], "env_config.server_size": 8}))
    env = cfg.plan().component("env")
    assert env.world_size == 2 and {p.node for p in env.processes} == {1, 2}
    assert all(not p.accelerators for p in env.processes)
    pools = cfg.env_config.http_pools.as_dict()
    shares = [split_for_rank(pools, 8, [1.0, 3.0], r) for r in range(2)]
    assert [s for _, s in shares] == [2, 6]
    assert all(shares[0][0][op] + shares[1][0][op] == pools[op] for op in pools)
    with pytest.raises(ConfigError, match=r"^env_config\.rank_load_weight: gives 3 weights for 2 env worker ranks"):
        parse(changed({"cluster": cfg_cluster_dict(cfg), "env_config.rank_load_weight": [1.0, 1.0, 1.0]}))


def cfg_cluster_dict(cfg):
    c = cfg.cluster
    return {"num_nodes": c.num_nodes, "accelerators_per_node": c.accelerators_per_node,
            "node_groups": [dict(g) for g in c.node_groups], "component_placement": dict(c.component_placement)}
