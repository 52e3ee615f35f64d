"""MLPPolicy / CNNPolicy: shapes, act <-> evaluate consistency, gradients, entropy, clipping,
save / load and a PPO step that moves log-probs the right way."""

from __future__ import annotations

import math

import pytest
import torch
from ppo_check import ppo_logprob_change

from rlinf.models.embodied import CNNPolicy, CNNPolicyConfig, MLPPolicy, MLPPolicyConfig, PolicyOutput

N, K, A, D = 8, 3, 2, 5


def _mlp(value_type="chunk_level", **kw) -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(MLPPolicyConfig(state_dim=D, action_dim=A, num_action_chunks=K, hidden_sizes=(32, 32),
                                     value_type=value_type, **kw))


def _cnn(value_type="chunk_level", **kw) -> CNNPolicy:
    torch.manual_seed(0)
    base = dict(action_dim=A, num_action_chunks=K, image_size=(36, 36), feature_dim=32, hidden_sizes=(32,),
                value_type=value_type)
    base.update(kw)
    return CNNPolicy(CNNPolicyConfig(**base))


def _obs(seed=1):
    g = torch.Generator().manual_seed(seed)
    return dict(states=torch.randn(N, D, generator=g),
                images=torch.randint(0, 256, (N, 48, 40, 3), dtype=torch.uint8, generator=g),
                wrist_images=torch.randint(0, 256, (N, 48, 40, 3), dtype=torch.uint8, generator=g))


POLICIES = {
    "mlp": _mlp,
    "cnn": _cnn,
    "cnn_state_wrist_separate": lambda vt: _cnn(vt, num_images=2, state_dim=D, shared_encoder=False, center_crop=True),
}


@pytest.mark.parametrize("value_type,vshape", [("chunk_level", (N,)), ("action_level", (N, K))])
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_shapes_and_act_evaluate_agree(name, value_type, vshape):
    policy = POLICIES[name](value_type)
    obs = _obs()
    out = policy.act(**obs, generator=torch.Generator().manual_seed(0))
    assert isinstance(out, PolicyOutput)
    for t in (out.actions, out.raw_actions, out.logprobs, out.entropy):
        assert t.shape == (N, K, A) and t.dtype == torch.float32
    assert out.values.shape == vshape
    ev = policy.evaluate(out.raw_actions, **obs)
    torch.testing.assert_close(ev.logprobs, out.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ev.values, out.values, atol=1e-6, rtol=0)
    torch.testing.assert_close(policy.value(**obs), out.values, atol=1e-6, rtol=0)
    # same generator -> same sample; deterministic -> the mean, independent of the generator
    again = policy.act(**obs, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.raw_actions, out.raw_actions)
    det = policy.act(**obs, deterministic=True)
    torch.testing.assert_close(det.raw_actions, policy._distribution(policy.features(**obs)[0])[0])


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_gradients_reach_actor_and_critic(name):
    policy = POLICIES[name]("action_level")
    obs = _obs()
    with torch.no_grad():
        out = policy.act(**obs)
    ev = policy.evaluate(out.raw_actions, **obs)
    (ev.logprobs.mean() + ev.values.pow(2).mean()).backward()
    missing = [n for n, p in policy.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
    assert missing == []


def test_mlp_logprob_and_entropy_by_hand():
    policy = _mlp()
    with torch.no_grad():
        policy.log_std.copy_(torch.linspace(-1.0, 0.5, K * A))
    obs = _obs()
    raw = torch.randn(N, K, A)
    ev = policy.evaluate(raw, states=obs["states"])
    mean = policy.actor_mean(obs["states"]).view(N, K, A)
    std = policy.log_std.exp().view(1, K, A)
    expected = torch.distributions.Normal(mean, std).log_prob(raw)
    torch.testing.assert_close(ev.logprobs, expected, atol=1e-5, rtol=0)
    log_std = policy.log_std.view(K, A)
    analytic = 0.5 * math.log(2 * math.pi * math.e) + log_std
    torch.testing.assert_close(ev.entropy, analytic.expand(N, K, A), atol=1e-6, rtol=0)


def test_actions_are_clipped_raw_actions():
    policy = _mlp(init_log_std=1.5, action_low=(-0.5, 0.0), action_high=(0.5, 2.0))
    out = policy.act(states=_obs()["states"], generator=torch.Generator().manual_seed(3))
    low, high = torch.tensor([-0.5, 0.0]), torch.tensor([0.5, 2.0])
    assert torch.equal(out.actions, torch.maximum(torch.minimum(out.raw_actions, high), low))
    assert (out.raw_actions < low).any() and (out.raw_actions > high).any()  # clipping was exercised


def test_no_value_head():
    policy = _mlp(add_value_head=False)
    out = policy.act(states=_obs()["states"])
    assert out.values is None
    with pytest.raises(RuntimeError, match="no value head"):
        policy.value(states=_obs()["states"])


@pytest.mark.parametrize("name", ["mlp", "cnn_state_wrist_separate"])
def test_save_load_round_trip(name, tmp_path):
    policy = POLICIES[name]("action_level")
    obs = _obs()
    out = policy.act(**obs)
    policy.save_pretrained(tmp_path / "p")
    loaded = type(policy).from_pretrained(tmp_path / "p")
    ev = loaded.evaluate(out.raw_actions, **obs)
    assert torch.equal(ev.logprobs, out.logprobs) and torch.equal(ev.values, out.values)
    with pytest.raises(ValueError, match="not a"):
        (CNNPolicy if name == "mlp" else MLPPolicy).from_pretrained(tmp_path / "p")


def test_cnn_rejects_tiny_images_and_missing_inputs():
    with pytest.raises(ValueError, match="36 x 36"):
        _cnn(image_size=(32, 32))
    policy = _cnn(num_images=2)
    with pytest.raises(ValueError, match="wrist_images"):
        policy.act(images=_obs()["images"])


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_ppo_step_raises_logprob_of_positive_advantage(name):
    delta = ppo_logprob_change(POLICIES[name]("chunk_level"), _obs(), lr=3e-3, steps=5)
    assert (delta[0::2] > 0).all() and (delta[1::2] < 0).all(), delta
