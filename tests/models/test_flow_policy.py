"""flow_mlp: act / evaluate log-prob equality for Flow-SDE and Flow-Noise, shapes, value head,
the factory keys, save / load, and a PPO step that raises the sampled chain's log-prob."""

from __future__ import annotations

import pytest
import torch

from rlinf.models.embodied.base import ObsSpec
from rlinf.models.embodied.factory import build_policy
from rlinf.models.embodied.flow_policy import FlowPolicy, FlowPolicyConfig, time_features
from rlinf.utils.typed_config import ConfigError

SPEC = ObsSpec(state_dim=5, action_low=(-1.0,) * 3, action_high=(1.0,) * 3)


def _policy(**kw) -> FlowPolicy:
    base = dict(state_dim=5, action_dim=3, num_action_chunks=2, encoder_sizes=(16, 16), hidden_sizes=(32,),
                critic_hidden_sizes=(16,), num_steps=4)
    return FlowPolicy(FlowPolicyConfig(**{**base, **kw}))


@pytest.mark.parametrize("kw", [dict(noise_method="flow_sde"), dict(noise_method="flow_sde", ignore_last=True),
                                dict(noise_method="flow_noise", joint_logprob=True),
                                dict(noise_method="flow_noise", joint_logprob=True, residual_velocity=True,
                                     separate_critic=True)])
def test_act_and_evaluate_give_the_same_logprobs(kw):
    torch.manual_seed(0)
    policy = _policy(**kw)
    states = torch.randn(6, 5)
    out = policy.act(states=states, generator=torch.Generator().manual_seed(1))
    assert out.actions.shape == (6, 2, 3) and out.logprobs.shape == (6, 2, 3) and out.values.shape == (6,)
    assert out.raw_actions.shape == (6, 2, 5 * 3 + 4)
    assert bool(out.actions.abs().max() <= 1)
    chain, mask = policy.unpack(out.raw_actions)
    assert chain.shape == (6, 5, 2, 3)
    assert torch.allclose(out.actions, chain[:, -1].clamp(-1, 1))
    if kw["noise_method"] == "flow_sde":
        assert mask.sum(1).tolist() == [1] * 6 and (not kw.get("ignore_last") or not bool(mask[:, -1].any()))
        assert out.logprobs.mean().item() != 0.0
    else:
        assert bool(mask.all())
        lo, hi = policy.config.noise_logvar_range
        ent = out.entropy  # 0.5 log(2 pi e std^2) with std in [lo, hi]
        assert bool((ent >= 0.5 * torch.log(torch.tensor(2 * torch.pi * torch.e * lo ** 2)) - 1e-5).all())
        assert bool((ent <= 0.5 * torch.log(torch.tensor(2 * torch.pi * torch.e * hi ** 2)) + 1e-5).all())
    again = policy.evaluate(out.raw_actions, states=states)
    assert torch.allclose(again.logprobs, out.logprobs, atol=1e-4)
    assert torch.allclose(again.values, out.values) and torch.allclose(again.entropy, out.entropy, atol=1e-5)
    again.logprobs.sum().backward()
    assert policy.velocity_out.weight.grad.abs().sum() > 0


def test_deterministic_act_is_the_euler_ode_from_its_initial_noise():
    policy = _policy()
    states = torch.randn(3, 5)
    a = policy.act(states=states, deterministic=True, generator=torch.Generator().manual_seed(2))
    b = policy.act(states=states, deterministic=True, generator=torch.Generator().manual_seed(2))
    chain, mask = policy.unpack(a.raw_actions)
    assert not bool(mask.any()) and torch.equal(a.actions, b.actions)
    assert torch.equal(chain[:, 0], torch.randn(3, 2, 3, generator=torch.Generator().manual_seed(2)))
    with torch.no_grad():  # a plain Euler loop from x_0, t = 1, 0.75, 0.5, 0.25
        velocity, x = policy._velocity_fn(policy.encoder(states)), chain[:, 0]
        for t in (1.0, 0.75, 0.5, 0.25):
            x = x - 0.25 * velocity(x, torch.full((3,), t))[0]
    assert torch.allclose(chain[:, -1], x, atol=1e-6) and torch.allclose(a.actions, x.clamp(-1, 1), atol=1e-6)


def test_value_head_and_detach_critic_input():
    states = torch.randn(4, 5)
    for detach, expect_grad in ((False, True), (True, False)):
        policy = _policy(detach_critic_input=detach)
        policy.value(states=states).sum().backward()
        grad = policy.encoder[0].weight.grad
        assert (grad is not None and grad.abs().sum().item() > 0) == expect_grad
    policy = _policy(add_value_head=False)
    assert policy.act(states=states).values is None
    with pytest.raises(ValueError, match="add_value_head"):
        policy.value(states=states)


def test_separate_critic_reads_the_state_and_leaves_the_encoder_to_the_actor():
    states = torch.randn(4, 5)
    policy = _policy(separate_critic=True)
    assert policy.critic[0].in_features == 5  # the state, not the encoder's 16 features
    assert isinstance(policy.critic[1], torch.nn.Tanh)
    values = policy.value(states=states)
    assert torch.allclose(values, policy.critic(states).squeeze(-1))
    values.sum().backward()
    assert policy.encoder[0].weight.grad is None  # the value loss never reaches the actor's encoder
    assert torch.allclose(policy.act(states=states).values, values)
    with pytest.raises(ValueError, match="detach_critic_input"):
        _policy(separate_critic=True, detach_critic_input=True)


def test_residual_velocity_contracts_the_initial_noise_by_hand():
    """With the MLP's output at 0 the field is ``v = x``: each Euler step multiplies by ``1 - 1/N``,
    so the ODE action is ``(3/4)^4 x_0`` for N = 4 (plain field: ``x_0`` itself)."""
    states = torch.randn(3, 5)
    for residual, factor in ((True, 0.75 ** 4), (False, 1.0)):
        policy = _policy(residual_velocity=residual)
        with torch.no_grad():
            policy.velocity_out.weight.zero_()
            policy.velocity_out.bias.zero_()
        out = policy.act(states=states, deterministic=True, generator=torch.Generator().manual_seed(6))
        chain, _ = policy.unpack(out.raw_actions)
        assert torch.allclose(chain[:, -1], factor * chain[:, 0], atol=1e-6)


def test_time_features_follow_pi0_periods():
    feats = time_features(torch.tensor([0.25]), 4)  # periods 4e-3 and 4: sin(2 pi 0.25 / 4) = sin(pi / 8)
    assert feats[0, 1].item() == pytest.approx(torch.sin(torch.tensor(torch.pi / 8)).item(), abs=1e-6)
    assert feats[0, 3].item() == pytest.approx(torch.cos(torch.tensor(torch.pi / 8)).item(), abs=1e-6)


def test_factory_builds_flow_mlp_and_refuses_misused_keys(tmp_path):
    cfg = {"model_type": "flow_mlp", "action_dim": 3, "num_action_chunks": 2, "noise_method": "flow_noise",
           "joint_logprob": True, "num_steps": 3, "noise_logvar_range": [0.1, 0.2], "hidden_size": 16,
           "policy_hidden_sizes": [16], "detach_critic_input": True, "action_chunk": 2}
    policy = build_policy(cfg, SPEC)
    c = policy.config
    assert (c.noise_method, c.joint_logprob, c.num_steps, c.noise_logvar_range, c.detach_critic_input) == \
        ("flow_noise", True, 3, (0.1, 0.2), True)
    policy.save_pretrained(tmp_path / "p")
    loaded = build_policy({**cfg, "model_path": str(tmp_path / "p")}, SPEC)
    assert all(torch.equal(a, b) for a, b in zip(policy.state_dict().values(), loaded.state_dict().values()))
    for bad, key in (({"action_chunk": 5}, "action_chunk"), ({"noise_logvar_range": [0.2, 0.1]}, "noise_logvar_range"),
                     ({"value_type": "action_level"}, "value_type"), ({"num_steps": 1, "ignore_last": True},
                                                                      "ignore_last")):
        with pytest.raises(ConfigError) as err:
            build_policy({**cfg, **bad}, SPEC)
        assert err.value.key == f"actor.model.{key}"
    with pytest.raises(ConfigError) as err:
        build_policy({"model_type": "mlp", "action_dim": 3, "num_steps": 8}, SPEC)
    assert err.value.key == "actor.model.num_steps" and "flow_mlp" in str(err.value)
    sep = build_policy({**cfg, "detach_critic_input": False, "shared_critic_encoder": False,
                        "residual_velocity": True}, SPEC)
    assert sep.config.separate_critic and sep.config.residual_velocity and sep.critic[0].in_features == 5
    with pytest.raises(ConfigError) as err:  # no encoder between the state and a separate critic
        build_policy({**cfg, "shared_critic_encoder": False}, SPEC)
    assert err.value.key == "actor.model.detach_critic_input"
    with pytest.raises(ConfigError) as err:  # flow_mlp's own key: refused for the Gaussian MLP
        build_policy({"model_type": "mlp", "action_dim": 3, "residual_velocity": True}, SPEC)
    assert err.value.key == "actor.model.residual_velocity" and "flow_mlp" in str(err.value)


def test_a_policy_gradient_step_raises_the_logprob_of_a_rewarded_chain():
    torch.manual_seed(3)
    policy = _policy(noise_method="flow_sde")
    states = torch.randn(8, 5)
    out = policy.act(states=states, generator=torch.Generator().manual_seed(4))
    opt = torch.optim.SGD(policy.parameters(), lr=0.05)
    before = policy.evaluate(out.raw_actions, states=states).logprobs.sum().item()
    for _ in range(5):
        opt.zero_grad()
        (-policy.evaluate(out.raw_actions, states=states).logprobs.sum()).backward()
        opt.step()
    assert policy.evaluate(out.raw_actions, states=states).logprobs.sum().item() > before + 1e-3


def test_noise_anneal_samples_at_the_global_steps_level_and_the_update_keeps_it():
    """With noise_anneal the rollout samples at the level of its ``global_step`` (0.9 at step 0,
    0.3 from step 10) and stores it beside the chain; a minibatch of both calls, evaluated while
    the policy's step is elsewhere, gives each call's recorded log-probs, which are the sampled
    step's density at that call's level and not at the other's."""
    from rlinf.algorithms.flow_logprob import chain_logprob, unpack_step_levels

    torch.manual_seed(0)
    policy = _policy(noise_method="flow_sde", noise_anneal=True, noise_params=(0.9, 0.3, 10))
    states = [torch.randn(3, 5), torch.randn(3, 5)]
    outs = []
    for step, obs in zip((0, 10), states):
        policy.set_global_step(step)
        outs.append(policy.act(states=obs, generator=torch.Generator().manual_seed(4)))
    assert [unpack_step_levels(o.raw_actions, 4).amax(1).tolist() for o in outs] == [
        [pytest.approx(0.9)] * 3, [pytest.approx(0.3)] * 3]
    policy.set_global_step(5)
    raw = torch.cat([o.raw_actions for o in outs])
    again = policy.evaluate(raw, states=torch.cat(states))
    recorded = torch.cat([o.logprobs for o in outs])
    assert torch.allclose(again.logprobs, recorded, atol=1e-5)
    features = policy.encoder(states[1])
    chain, mask = policy.unpack(outs[1].raw_actions)
    at = {a: chain_logprob(policy._velocity_fn(features), chain, mask, "flow_sde", a, False)[0] for a in (0.3, 0.9)}
    assert torch.allclose(at[0.3], outs[1].logprobs, atol=1e-5)
    assert not torch.allclose(at[0.9], outs[1].logprobs, atol=1e-2)


def test_noise_anneal_keys_reach_the_policy():
    policy = build_policy({"model_type": "flow_mlp", "action_dim": 3, "noise_anneal": True,
                           "noise_params": [0.8, 0.2, 50]}, SPEC)
    assert policy.config.noise_anneal and policy.config.noise_params == (0.8, 0.2, 50)


@pytest.mark.parametrize("keys, key, text", [
    ({"model_type": "mlp", "noise_anneal": True}, "actor.model.noise_anneal", "only model_type flow_mlp"),
    ({"noise_params": [0.8, 0.2, 300]}, "actor.model.noise_params", "has no effect without noise_anneal: true"),
    ({"noise_anneal": True, "noise_params": [0.8, 0.2]}, "actor.model.noise_params",
     "must be [start, end, anneal_steps] with levels > 0, got [0.8, 0.2]"),
    ({"noise_anneal": True, "noise_params": [0.8, 0.0, 300]}, "actor.model.noise_params", "levels > 0"),
    ({"noise_anneal": True, "noise_params": [0.8, 0.2, 2.5]}, "actor.model.noise_params",
     "anneal_steps (the third value) must be an integer >= 1, got 2.5"),
    ({"noise_anneal": True, "noise_method": "flow_noise"}, "actor.model.noise_anneal", "flow_noise learns its std"),
    ({"noise_anneal": True, "noise_level": 0.8}, "actor.model.noise_level", "noise_anneal replaces it"),
])
def test_noise_anneal_misuse_is_refused_naming_the_key(keys, key, text):
    with pytest.raises(ConfigError) as err:
        build_policy({"model_type": "flow_mlp", "action_dim": 3, **keys}, SPEC)
    assert err.value.key == key and text in str(err.value)
