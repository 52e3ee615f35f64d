"""``context_config.observation``: parsed and refused like the other keys, and a screenshot
observation refused before Ray while the policy cannot take images (a text-only model folder, an
external server sent text, and, until the VLM web policy exists, a vision-language folder)."""

from __future__ import annotations

import json

import pytest

from rlinf.config.web import WebAgentConfig
from rlinf.runners.web_agent.build import episode_settings
from rlinf.runners.web_agent.preflight import check_observation, prepare_web
from rlinf.utils.typed_config import ConfigError

PLACED = {"num_nodes": 1, "accelerators_per_node": 1, "component_placement": {"env": 0, "rollout": 0, "actor": 0}}


def model_folder(tmp_path, model_type: str):
    folder = tmp_path / model_type
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    return str(folder)


def config(observation=None, base_model="m", **extra):
    raw = {"save_path": "r", "policy_config": {"base_model": base_model}, "cluster": PLACED, **extra}
    if observation is not None:
        raw["context_config"] = {"observation": observation}
    return WebAgentConfig.from_dict(raw, check_paths=False)


def test_default_is_text_and_the_value_reaches_the_episodes():
    assert config().context_config.observation == "text"
    for value in ("text", "screenshot", "both"):
        cfg = config(value)
        assert episode_settings(cfg, "train").observation == value == episode_settings(cfg, "test").observation
    with pytest.raises(ConfigError, match=r"^context_config\.observation: 'image' is not allowed"):
        config("image")


@pytest.mark.parametrize("observation", ["screenshot", "both"])
def test_a_text_only_policy_is_refused_with_one_line(tmp_path, observation):
    cfg = config(observation, model_folder(tmp_path, "qwen2"))
    with pytest.raises(ConfigError) as err:
        check_observation(cfg)
    message = str(err.value)
    assert message.startswith(f"context_config.observation: '{observation}' gives the policy the page as an image, "
                              "but the policy model is text-only")
    assert "model_type 'qwen2'" in message and "\n" not in message
    check_observation(config("text", model_folder(tmp_path, "llama")))  # text: any model


def test_a_vision_language_folder_is_refused_until_the_web_policy_takes_images(tmp_path):
    for kind in ("qwen2_5_vl", "qwen3_vl"):
        with pytest.raises(ConfigError, match=r"^context_config\.observation: 'screenshot': the web rollout does "
                                              r"not hand images to a vision-language policy yet"):
            check_observation(config("screenshot", model_folder(tmp_path, kind)))


def test_an_external_server_is_sent_text_only():
    cfg = config("both", "served-name", cluster={**PLACED, "component_placement": {"env": 0}},
                 env_config={"vllm_server_url": "http://127.0.0.1:8999"})
    with pytest.raises(ConfigError, match=r"^context_config\.observation: 'both' needs a vision-language policy, "
                                          r"but the policy is the model on env_config\.vllm_server_url"):
        check_observation(cfg)


def test_prepare_web_refuses_before_ray(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    task = {"task_id": "t1", "instruction": "?", "start_url": "/shop/", "difficulty": "easy",
            "reference_answer": "1", "domain": "shop"}
    for split in ("train", "test"):
        (data / f"{split}.jsonl").write_text(json.dumps(task) + "\n")
    raw = {"save_path": str(tmp_path / "out"), "data_path": str(data), "cluster": PLACED,
           "policy_config": {"base_model": model_folder(tmp_path, "qwen2")},
           "context_config": {"observation": "screenshot"},
           "env_config": {"train_tasks": "train.jsonl", "test_tasks": "test.jsonl"}}
    with pytest.raises(ConfigError, match=r"^context_config\.observation: 'screenshot' gives the policy"):
        prepare_web(raw)
