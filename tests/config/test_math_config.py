"""MathConfig: the reference's key names are accepted; every invalid setting names its key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlinf.config import ConfigError, MathConfig

REFERENCE = Path(__file__).parent / "data" / "reference_math.yaml"


def reference() -> dict:
    # loaded as Hydra loads YAML, interpolations left for MathConfig.from_hydra to resolve
    return OmegaConf.to_container(OmegaConf.load(REFERENCE), resolve=False)


def parse(raw, check_paths=False):
    return MathConfig.from_hydra(OmegaConf.create(raw), check_paths=check_paths)


def test_reference_keys_parse_and_resolvers_work():
    cfg = parse(reference())
    assert cfg.algorithm.sampling_params.max_new_tokens == 2048 - 1024  # ${subtract:...}
    assert cfg.actor.model.llm.seq_length == 2048 and cfg.actor.training_backend == "megatron"
    assert cfg.runner.logger.log_path == "../results/grpo-1.5b"
    assert cfg.reward.reward_scale == 5.0
    assert cfg.actor.fsdp_config.mixed_precision.param_dtype == "bf16"
    assert cfg.actor.megatron.ckpt["process_num"] == 16


def with_change(path: str, value):
    raw = reference()
    node = raw
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return raw


@pytest.mark.parametrize("path, value, message", [
    ("algorithm.adv_type", "ppo", "algorithm.adv_type: 'ppo' is not allowed"),
    ("algorithm.group_size", 1, "algorithm.group_size: grpo needs group_size > 1"),
    ("algorithm.sampling_params.top_p", 0, "algorithm.sampling_params.top_p: must be in (0, 1]"),
    ("algorithm.sampling_params.max_new_tokens", 4000,
     "algorithm.sampling_params.max_new_tokens: data.max_prompt_length (1024) + max_new_tokens (4000) "
     "exceeds runner.seq_length (2048)"),
    ("algorithm.adv_type", "gae", "critic.use_critic_model: adv_type gae needs a value model: set it to true"),
    ("algorithm.n_minibatches", 3,
     "algorithm.n_minibatches: each actor rank gets 16 samples per step, not divisible into 3 minibatches"),
    ("data.rollout_batch_size", 3,
     "data.rollout_batch_size: rollout_batch_size * algorithm.group_size = 6 is not divisible by the actor's "
     "data-parallel size 8"),
    ("actor.fsdp_config.sharding_strategy", "zero3", "actor.fsdp_config.sharding_strategy: 'zero3' is not allowed"),
    ("actor.optim.lr", "fast", "actor.optim.lr: expected a number"),
    ("reward.use_reward_model", True, "reward.model.model_path: use_reward_model needs the reward model's HF folder"),
    ("cluster.component_placement", {"actor": "all"}, "cluster.component_placement: missing component 'rollout'"),
    ("cluster.component_placement", {"actor,rollout": "all", "env": "0"},
     "cluster.component_placement.env: unknown component; a math run places actor, rollout, inference, reward"),
    ("cluster.component_placement", {"actor,rollout": "0-8"},
     "cluster.component_placement['actor,rollout']: accelerator rank 8"),
    ("runner.val_check_interval", 0, "runner.val_check_interval: must be -1 (off) or >= 1, got 0"),
])
def test_invalid_settings_name_their_key(path, value, message):
    with pytest.raises(ConfigError) as err:
        parse(with_change(path, value))
    assert str(err.value).startswith(message), str(err.value)


def test_unknown_keys_at_any_depth():
    for path in ("runner.max_epoch", "actor.fsdp_config.mixed_precision.param_type", "rollout.model.path"):
        raw = with_change(path, 1)
        with pytest.raises(ConfigError) as err:
            parse(raw)
        assert str(err.value).startswith(f"{path}: unknown key")


def test_missing_model_and_data_paths_are_reported(tmp_path):
    raw = reference()
    raw["rollout"]["model"]["model_path"] = None  # neither actor nor rollout names a model
    with pytest.raises(ConfigError, match=r"^actor\.model\.model_path: missing"):
        parse(raw)
    raw = copy.deepcopy(reference())
    raw["actor"]["model"]["model_path"] = str(tmp_path)
    with pytest.raises(ConfigError, match=r"^actor\.model\.model_path: .* is not an HF model folder"):
        parse(raw, check_paths=True)
    (tmp_path / "config.json").write_text("{}")
    raw["rollout"]["model"]["model_path"] = str(tmp_path)
    with pytest.raises(ConfigError, match=r"^data\.train_data_paths\[0\]: .* does not exist"):
        parse(raw, check_paths=True)
