"""build_policy from actor.model (typed or a plain mapping) and the tiny-VLA toolkit."""

from __future__ import annotations

import pytest
import torch

from rlinf.config.actor import ActorModelConfig
from rlinf.models import ObsSpec, build_policy
from rlinf.models.embodied import CNNPolicy, MLPPolicy
from rlinf.utils.typed_config import ConfigError, parse_section
from toolkits.embodied import make_tiny_vla


@pytest.fixture(scope="module")
def vla_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny_vla")
    make_tiny_vla.main(["--out", str(out), "--action-dim", "7", "--image-size", "32"])
    return out


def test_mlp_from_mapping_with_bounds_and_checkpoint(tmp_path):
    spec = ObsSpec(state_dim=6, action_low=(-2.0, 0.0), action_high=(2.0, 0.5))
    raw = {"model_type": "mlp", "action_dim": 2, "num_action_chunks": 4, "value_type": "action_level",
           "policy_hidden_sizes": [16, 16], "critic_hidden_sizes": [8], "init_log_std": -0.5, "do_sample": True}
    policy = build_policy(raw, spec)
    assert isinstance(policy, MLPPolicy) and policy.do_sample
    assert [m.out_features for m in policy.critic if isinstance(m, torch.nn.Linear)] == [8, 4]
    assert torch.allclose(policy.log_std, torch.full((8,), -0.5))
    out = policy.act(states=torch.randn(3, 6) * 10)
    assert out.values.shape == (3, 4)
    assert out.actions[..., 1].min() >= 0 and out.actions[..., 1].max() <= 0.5
    policy.save_pretrained(tmp_path / "mlp")
    again = build_policy({**raw, "model_path": str(tmp_path / "mlp")}, spec)
    states = torch.randn(3, 6)
    assert torch.equal(again.act(states=states, deterministic=True).actions,
                       policy.act(states=states, deterministic=True).actions)


def test_cnn_with_state_and_wrist():
    spec = ObsSpec(state_dim=4, image_shape=(48, 48, 3), has_wrist=True)
    cfg = parse_section(ActorModelConfig, dict(
        model_type="cnn", action_dim=3, num_action_chunks=2, image_size=[40, 40], hidden_size=32,
        policy_hidden_sizes=[16], use_proprio=True, num_images_in_input=2, shared_critic_encoder=False), "actor.model")
    policy = build_policy(cfg, spec)
    assert isinstance(policy, CNNPolicy) and policy.critic_encoder is not None
    imgs = torch.randint(0, 256, (2, 48, 48, 3), dtype=torch.uint8)
    out = policy.act(states=torch.zeros(2, 4), images=imgs, wrist_images=imgs)
    assert out.actions.shape == (2, 2, 3) and out.values.shape == (2,)


@pytest.mark.parametrize("raw,spec,key", [
    ({"model_type": "diffusion", "action_dim": 2}, ObsSpec(state_dim=3), "actor.model.model_type"),
    ({"model_type": "mlp"}, ObsSpec(state_dim=3), "actor.model.action_dim"),
    ({"model_type": "mlp", "action_dim": 2}, ObsSpec(), "actor.model.model_type"),
    ({"model_type": "mlp", "action_dim": 2, "value_type": "token_level"}, ObsSpec(state_dim=3),
     "actor.model.value_type"),
    ({"model_type": "mlp", "action_dim": 2, "is_lora": True}, ObsSpec(state_dim=3), "actor.model.is_lora"),
    ({"model_type": "cnn", "action_dim": 2}, ObsSpec(state_dim=3), "actor.model.model_type"),
    ({"model_type": "cnn", "action_dim": 2, "num_images_in_input": 2}, ObsSpec(image_shape=(64, 64, 3)),
     "actor.model.num_images_in_input"),
    ({"model_type": "cnn", "action_dim": 2, "image_size": [16, 16]}, ObsSpec(image_shape=(64, 64, 3)),
     "actor.model.image_size"),
    ({"model_type": "mlp", "action_dim": 2, "hiden_size": 3}, ObsSpec(state_dim=3), "actor.model.hiden_size"),
])
def test_config_errors_name_the_key(raw, spec, key):
    with pytest.raises(ConfigError) as err:
        build_policy(raw, spec)
    assert err.value.key == key


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["openvla", "openvla_oft"])
def test_openvla_from_real_format_folder(vla_dir, model_type):
    spec = ObsSpec(image_shape=(64, 64, 3), action_low=(-0.5,) * 7, action_high=(0.5,) * 7)
    raw = {"model_type": model_type, "model_path": str(vla_dir), "action_dim": 7, "num_action_chunks": 2,
           "unnorm_key": "tiny_dataset", "value_type": "action_level", "precision": "fp32", "image_size": [32, 32],
           "hidden_size": 64, "vocab_size": 576, "center_crop": True, "do_sample": True}
    policy = build_policy(raw, spec, temperature=0.5)
    assert policy.temperature == 0.5 and policy.value_type == "action_level" and policy.options.center_crop
    imgs = torch.randint(0, 256, (3, 64, 64, 3), dtype=torch.uint8)
    out = policy.act(images=imgs, instructions=["open the drawer"] * 3)
    assert out.values.shape == (3, 2) and out.actions.abs().max() <= 0.5
    ev = policy.evaluate(out.raw_actions, images=imgs, instructions=["open the drawer"] * 3)
    assert torch.allclose(ev.logprobs, out.logprobs, atol=1e-5)
    # seed 003's vocab_size is the tokenizer's (unpadded) vocabulary: 512 here, 32000 for Llama-2
    assert build_policy({**raw, "vocab_size": 512}, spec).tokens.base_vocab == 512


@pytest.mark.slow
def test_openvla_oft_lora_and_grpo(vla_dir, tmp_path):
    from rlinf.models.embodied.openvla import save_lora_adapter

    spec = ObsSpec(image_shape=(32, 32, 3))
    base = {"model_type": "openvla_oft", "model_path": str(vla_dir)}
    policy = build_policy({**base, "is_lora": True, "lora_rank": 2}, spec)
    assert policy.lora is not None
    save_lora_adapter(policy, tmp_path / "lora")
    again = build_policy({**base, "is_lora": True, "lora_rank": 2, "lora_path": str(tmp_path / "lora")}, spec)
    assert again.lora is not None
    with pytest.raises(ConfigError, match="set lora_rank: 2") as err:  # default 32 vs the adapter's 2
        build_policy({**base, "is_lora": True, "lora_path": str(tmp_path / "lora")}, spec)
    assert err.value.key == "actor.model.lora_rank"
    critic_free = build_policy({**base, "add_value_head": False}, spec)
    assert critic_free.act(images=torch.zeros(1, 32, 32, 3, dtype=torch.uint8)).values is None


@pytest.mark.parametrize("raw,key", [
    ({}, "actor.model.model_path"),
    ({"model_path": "/nonexistent/vla"}, "actor.model.model_path"),
    ({"action_dim": 6}, "actor.model.action_dim"),
    ({"unnorm_key": "bridge_orig"}, "actor.model.unnorm_key"),
    ({"image_size": [224, 224]}, "actor.model.image_size"),
    ({"use_proprio": True}, "actor.model.use_proprio"),
    ({"lora_path": "/x"}, "actor.model.lora_path"),
    ({"num_images_in_input": 2}, "actor.model.num_images_in_input"),
    ({"vocab_size": 32000}, "actor.model.vocab_size"),
    ({"hidden_size": 4096}, "actor.model.hidden_size"),
])
def test_openvla_oft_config_errors(vla_dir, raw, key):
    full = {"model_type": "openvla_oft", "model_path": str(vla_dir), **raw}
    if not raw:
        full.pop("model_path")
    with pytest.raises(ConfigError) as err:
        build_policy(full, ObsSpec(image_shape=(32, 32, 3)))
    assert err.value.key == key


def test_rollout_forward_batches_of_val_micro_batch_size_give_the_same_actions():
    from rlinf.workers.rollout.policy_worker import PolicyRolloutWorker

    spec = ObsSpec(state_dim=6, action_low=(-1.0, -1.0), action_high=(1.0, 1.0))
    policy = build_policy({"model_type": "mlp", "action_dim": 2, "num_action_chunks": 2,
                           "policy_hidden_sizes": [16]}, spec)
    worker = PolicyRolloutWorker.__new__(PolicyRolloutWorker)  # only the forward path, no Ray
    worker.policy = policy
    inputs = {"states": torch.randn(7, 6), "images": None, "wrist_images": None, "instructions": ["t"] * 7}
    worker.forward_batch = None
    whole = worker._act(inputs, True, None)
    worker.forward_batch = 3  # actor.model.val_micro_batch_size: 3 + 3 + 1 envs per forward
    calls = []
    original = policy.act
    policy.act = lambda **kw: calls.append(kw["states"].shape[0]) or original(**kw)
    chunked = worker._act(inputs, True, None)
    assert calls == [3, 3, 1]
    for field in ("actions", "raw_actions", "logprobs", "values"):
        assert torch.allclose(getattr(whole, field), getattr(chunked, field), atol=1e-6)
