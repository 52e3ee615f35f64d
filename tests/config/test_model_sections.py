"""``actor.model`` is one YAML mapping parsed into three sections (rlinf/config/model.py)."""

import dataclasses

import pytest

from rlinf.config.model import ActorModelConfig, LLMModelConfig, PolicyModelConfig
from rlinf.utils.typed_config import ConfigError, check_scopes, parse_section, walk_fields


def parse(raw):
    return parse_section(ActorModelConfig, raw, "actor.model")


def test_each_key_lands_in_the_section_that_reads_it():
    m = parse({"model_path": "/m", "precision": "bf16", "seq_length": 256, "tensor_model_parallel_size": 2,
               "lora_alpha": 16, "action_dim": 7, "policy_hidden_sizes": [32, 32]})
    assert (m.model_path, m.precision) == ("/m", "bf16")
    assert (m.llm.seq_length, m.llm.tensor_model_parallel_size, m.llm.lora_alpha) == (256, 2, 16.0)
    assert (m.policy.action_dim, m.policy.policy_hidden_sizes) == (7, (32, 32))
    assert parse({}).llm == LLMModelConfig() and parse({}).policy == PolicyModelConfig()


def test_the_three_sections_share_no_key():
    names = [{f.name for f in dataclasses.fields(c) if not f.metadata.get("flat")}
             for c in (ActorModelConfig, LLMModelConfig, PolicyModelConfig)]
    assert not (names[0] & names[1]) and not (names[0] & names[2]) and not (names[1] & names[2])
    # every actor.model key of before the split (54) + the flow policy's 10 (noise_method, noise_level,
    # noise_anneal, noise_params, noise_logvar_range, num_steps, action_chunk, joint_logprob, ignore_last,
    # detach_critic_input)
    # + sac_mlp's 2 (num_q_heads, q_head_type) + π0's 7 (action_env_dim, action_horizon, value_after_vlm,
    # train_expert_only, discrete_state_input, tokenizer_path, extra_delta_transform) + flow_mlp's
    # residual_velocity + the vision-language models' vision_tower
    assert len(names[0] | names[1] | names[2]) == 75


@pytest.mark.parametrize("raw, key, text", [
    ({"action_dim": 0}, "actor.model.action_dim", "must be >= 1 or null, got 0"),
    ({"tensor_model_parallel_size": 0}, "actor.model.tensor_model_parallel_size", "must be >= 1, got 0"),
    ({"lora_rank": 0}, "actor.model.lora_rank", "must be >= 1, got 0"),
    ({"image_size": [64, 0]}, "actor.model.image_size[1]", "must be >= 1, got 0"),
    ({"activation": "relu"}, "actor.model.activation", "'relu' is not allowed"),
    ({"seq_lenght": 8}, "actor.model.seq_lenght",
     "unknown key; allowed keys are action_chunk, action_dim, action_env_dim, action_horizon, activation"),
    ({"llm": {"seq_length": 8}}, "actor.model.llm", "unknown key"),
    ({"policy": {"action_dim": 7}}, "actor.model.policy", "unknown key"),
])
def test_errors_name_the_yaml_key(raw, key, text):
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert err.value.key == key and text in str(err.value)


def test_rules_and_walks_use_yaml_paths():
    paths = [p for p, _, _ in walk_fields(parse({}), "actor.model")]
    assert "actor.model.seq_length" in paths and "actor.model.action_dim" in paths
    assert not any(p.startswith(("actor.model.llm.", "actor.model.policy.")) for p in paths)
    with pytest.raises(ConfigError) as err:
        check_scopes(parse({"action_dim": 7}), {"math", "fsdp"}, "actor.model", soft=frozenset({"megatron"}))
    assert err.value.key == "actor.model.action_dim" and "read by embodied runs only" in str(err.value)
    notes = check_scopes(parse({"seq_length": 64}), {"embodied", "fsdp"}, "actor.model", soft=frozenset({"megatron"}))
    assert notes == ["actor.model.seq_length: 64: not read: read by the Megatron backend only "
                     "(actor.training_backend: megatron)"]
