"""π0 / π0.5 with πRL (``model_type: pi0`` / ``pi05``) on tiny checkpoints in the real layouts: the
log-probs the update recomputes from ``raw_actions`` equal those recorded at rollout (Flow-SDE and
Flow-Noise, π0 and π0.5, critic on the expert or the VLM); the Flow-SDE step's log-prob against
``torch.distributions.Normal`` at the model's own velocity; env actions un-normalised (and LIBERO's
delta transform); RLinf's heads loaded and written back; ``train_expert_only``; the factory's
refusals, each naming its key, before any weight is read."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from rlinf.algorithms.flow_logprob import sde_step_moments, time_grid, unpack_chain
from rlinf.models.embodied.base import ObsSpec
from rlinf.models.embodied.factory import build_policy, check_model_folder, check_policy_fits
from rlinf.models.embodied.pi0 import Pi0Options, load_pi0
from rlinf.models.embodied.pi0.rl_policy import Pi0RLConfig, Pi0RLPolicy
from rlinf.models.embodied.pi0.tiny import TINY_ASSET_ID, write_tiny_pi0
from rlinf.utils.typed_config import ConfigError

SPEC = ObsSpec(state_dim=8, image_shape=(24, 24, 3), has_wrist=True, action_low=(-1.0,) * 7,
               action_high=(1.0,) * 7)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Tiny checkpoints: π0 in RLinf's layout (with RLinf's heads), π0.5 in openpi's, π0 in LeRobot's."""
    root = tmp_path_factory.mktemp("pi0rl")
    return {"pi0": write_tiny_pi0(root / "pi0_rlinf", layout="rlinf", action_horizon=4),
            "pi05": write_tiny_pi0(root / "pi05_openpi", pi05=True, layout="openpi", action_horizon=3),
            "lerobot": write_tiny_pi0(root / "pi0_lerobot", layout="lerobot", action_horizon=4),
            "root": root}


def _obs(n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    img = lambda: torch.randint(0, 256, (n, 24, 24, 3), generator=g, dtype=torch.uint8)  # noqa: E731
    return dict(states=torch.randn(n, 8, generator=g), images=img(), wrist_images=img(),
                instructions=["put the bowl on the plate"] * n)


def _policy(folder, **kw) -> Pi0RLPolicy:
    pi0 = load_pi0(folder, Pi0Options(asset_id=None if "lerobot" in str(folder) else TINY_ASSET_ID,
                                      discrete_state_input=kw.pop("discrete_state_input", None)))
    base = dict(action_chunk=2, action_env_dim=7, num_steps=3, num_images=2)
    return Pi0RLPolicy(pi0, Pi0RLConfig(**{**base, **kw}))


CASES = [("pi0", dict(noise_method="flow_sde", ignore_last=True)),
         ("pi0", dict(noise_method="flow_noise", joint_logprob=True, detach_critic_input=True)),
         ("pi05", dict(noise_method="flow_sde", value_after_vlm=True, train_expert_only=True)),
         ("pi05", dict(noise_method="flow_noise", joint_logprob=True, discrete_state_input=False))]


@pytest.mark.parametrize("kind, kw", CASES, ids=[f"{k}-{v['noise_method']}" for k, v in CASES])
def test_the_update_recomputes_the_rollout_logprobs_and_values(folders, kind, kw):
    torch.manual_seed(0)
    policy = _policy(folders[kind], **kw)
    obs = _obs()
    out = policy.act(**obs, generator=torch.Generator().manual_seed(1))
    h = policy.horizon
    assert out.actions.shape == (3, 2, 7) and out.logprobs.shape == (3, 2, 7) and out.values.shape == (3,)
    assert out.raw_actions.shape[:2] == (3, 2)
    chain, mask = unpack_chain(out.raw_actions, 3, h, 32)
    assert chain.shape == (3, 4, h, 32)
    if kw["noise_method"] == "flow_sde":
        assert mask.sum(1).tolist() == [1] * 3 and (not kw.get("ignore_last") or not bool(mask[:, -1].any()))
        assert out.entropy is None
    else:
        assert bool(mask.all())
        lo, hi = 0.08, 0.16  # the entropy of stds inside noise_logvar_range
        assert bool((out.entropy >= 0.5 * torch.log(torch.tensor(2 * torch.pi * torch.e * lo ** 2)) - 1e-5).all())
        assert bool((out.entropy <= 0.5 * torch.log(torch.tensor(2 * torch.pi * torch.e * hi ** 2)) + 1e-5).all())
    policy.train()
    again = policy.evaluate(out.raw_actions, **obs)
    assert torch.allclose(again.logprobs, out.logprobs, atol=1e-4), (again.logprobs - out.logprobs).abs().max()
    assert torch.allclose(again.values, out.values, atol=1e-5)
    assert torch.equal(again.actions, out.actions)
    if out.entropy is not None:
        assert torch.allclose(again.entropy, out.entropy, atol=1e-5)
    (again.logprobs.sum() + again.values.sum()).backward()
    expert = policy.pi0.model.paligemma_with_expert.gemma_expert.model.layers[0].mlp.up_proj.weight
    vlm = policy.pi0.model.paligemma_with_expert.paligemma.model.language_model.layers[0].mlp.up_proj.weight
    assert expert.grad is not None and expert.grad.abs().sum() > 0
    assert policy.value_head.mlp[0].weight.grad.abs().sum() > 0
    if kw.get("train_expert_only"):
        assert not vlm.requires_grad and vlm.grad is None
    if kw["noise_method"] == "flow_noise":
        assert policy.noise_head.mlp_logvar.moduleList[0].linear_1.weight.grad.abs().sum() > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind, kw", [("pi0", dict(noise_method="flow_sde", ignore_last=True)),
                                      ("pi0", dict(noise_method="flow_noise", joint_logprob=True))],
                         ids=["flow_sde", "flow_noise"])
def test_a_minibatch_mixing_rollout_calls_recomputes_as_step_by_step(folders, kind, kw):
    """A minibatch gathers rows of rollout calls whose Flow-SDE step differs (here 0 and 1): the
    gathered recompute (one expert pass over the stochastic (row, step) pairs, then the t = 1 pass
    for the rows whose step 0 was not sampled) gives each call's recorded log-probs and values, and
    the step-by-step ``chain_logprob``'s values and gradients."""
    from rlinf.algorithms.flow_logprob import chain_logprob

    torch.manual_seed(0)
    policy = _policy(folders[kind], **kw)
    obs = [_obs(2, seed=s) for s in (0, 1)]
    outs, seed = [], 0
    while len(outs) < 2:  # two calls whose stochastic steps differ (Flow-Noise: every step)
        seed += 1
        out = policy.act(**obs[len(outs)], generator=torch.Generator().manual_seed(seed))
        step = unpack_chain(out.raw_actions, 3, policy.horizon, 32)[1].float().argmax(1)[0]
        if not outs or kw["noise_method"] == "flow_noise" or step != outs[0][1]:
            outs.append((out, step))
    both = {k: (torch.cat([obs[0][k], obs[1][k]]) if k != "instructions" else obs[0][k] + obs[1][k])
            for k in obs[0]}
    raw = torch.cat([outs[0][0].raw_actions, outs[1][0].raw_actions])
    policy.train()
    again = policy.evaluate(raw, **both)
    recorded = torch.cat([outs[0][0].logprobs, outs[1][0].logprobs])
    assert torch.allclose(again.logprobs, recorded, atol=1e-4), (again.logprobs - recorded).abs().max()
    assert torch.allclose(again.values, torch.cat([outs[0][0].values, outs[1][0].values]), atol=1e-5)
    expert = policy.pi0.model.paligemma_with_expert.gemma_expert.model.layers[0].mlp.up_proj.weight
    again.logprobs.sum().backward()
    gathered_grad, expert.grad = expert.grad.clone(), None
    inputs, _ = policy._inputs(both["states"], both["images"], both["wrist_images"], both["instructions"])
    kv, pad, _ = policy._prefix(inputs)
    chain, mask = unpack_chain(raw, 3, policy.horizon, 32)
    if kw["noise_method"] == "flow_sde":
        assert mask[:2].float().argmax(1).tolist() != mask[2:].float().argmax(1).tolist()
    ref, _ = chain_logprob(policy._velocity_fn(kv, pad, inputs.state, {}), chain, mask, policy.config.noise_method,
                           policy.config.noise_level, policy.config.joint_logprob)
    assert torch.allclose(policy._cut(ref), again.logprobs, atol=1e-4)
    policy._cut(ref).sum().backward()
    assert torch.allclose(expert.grad, gathered_grad, rtol=1e-3, atol=1e-5)


def test_the_flow_sde_logprob_is_the_sampled_step_under_normal(folders):
    """The recorded log-prob is, element by element, ``Normal(mean, std).log_prob`` of the step
    that sampled, its mean and std written from the model's own velocity at that step."""
    policy = _policy(folders["pi0"], noise_method="flow_sde", noise_level=0.7)
    obs = _obs(2, seed=3)
    out = policy.act(**obs, generator=torch.Generator().manual_seed(5))
    chain, mask = unpack_chain(out.raw_actions, 3, policy.horizon, 32)
    k = int(mask[0].nonzero())
    inputs, _ = policy._inputs(obs["states"], obs["images"], obs["wrist_images"], obs["instructions"])
    kv, pad, _ = policy.pi0.model.prefix_cache(inputs)
    grid = time_grid(3)
    t = grid[k]
    v, _ = policy.pi0.model.velocity_cached(kv, pad, inputs.state, chain[:, k], t.expand(2))
    x, dt = chain[:, k], float(grid[k] - grid[k + 1])
    sigma = 0.7 * torch.sqrt(t / (1 - (grid[1] if t >= 1 else t)))  # a sqrt(t / (1 - t)), t_1 at t = 1
    mean = x - dt * v - (sigma ** 2 * dt / (2 * t)) * (x + (1 - t) * v)
    std = sigma * dt ** 0.5
    m2, s2 = sde_step_moments(x, v, t, dt, 0.7, float(grid[1]))
    assert torch.allclose(mean, m2, atol=1e-5) and torch.allclose(std.expand_as(s2), s2)
    expected = torch.distributions.Normal(mean, std).log_prob(chain[:, k + 1])[:, :2, :7]
    assert torch.allclose(out.logprobs, expected, atol=1e-4)
    # chunk-level ratios sum the elements (algorithm.logprob_type: chunk_level)
    from rlinf.algorithms.embodied import aggregate_logprobs

    assert torch.allclose(aggregate_logprobs(out.logprobs, "chunk_level"), expected.sum((1, 2)), atol=1e-3)


def test_noise_anneal_levels_are_stored_and_the_update_recomputes_them(folders):
    """π0 with noise_anneal: calls at global steps 0 and 4 sample at 0.9 and 0.3 and store them;
    one minibatch of both, evaluated at another step, gives the recorded log-probs, and the
    second call's are its step's density at 0.3 (``chain_logprob`` at that level), not at 0.9."""
    from rlinf.algorithms.flow_logprob import chain_logprob, unpack_step_levels

    torch.manual_seed(0)
    policy = _policy(folders["pi0"], noise_method="flow_sde", noise_anneal=True, noise_params=(0.9, 0.3, 4))
    obs = [_obs(2, seed=s) for s in (0, 1)]
    outs = []
    for step, o in zip((0, 4), obs):
        policy.set_global_step(step)
        outs.append(policy.act(**o, generator=torch.Generator().manual_seed(6)))
    levels = [unpack_step_levels(o.raw_actions, 3).amax(1).tolist() for o in outs]
    assert levels == [[pytest.approx(0.9)] * 2, [pytest.approx(0.3)] * 2]
    policy.set_global_step(2)
    both = {k: (torch.cat([obs[0][k], obs[1][k]]) if k != "instructions" else obs[0][k] + obs[1][k])
            for k in obs[0]}
    again = policy.evaluate(torch.cat([o.raw_actions for o in outs]), **both)
    assert torch.allclose(again.logprobs, torch.cat([o.logprobs for o in outs]), atol=1e-4)
    inputs, _ = policy._inputs(obs[1]["states"], obs[1]["images"], obs[1]["wrist_images"], obs[1]["instructions"])
    kv, pad, _ = policy._prefix(inputs)
    chain, mask = unpack_chain(outs[1].raw_actions, 3, policy.horizon, 32)
    at = {a: policy._cut(chain_logprob(policy._velocity_fn(kv, pad, inputs.state, {}), chain, mask, "flow_sde",
                                       a, False)[0]) for a in (0.3, 0.9)}
    assert torch.allclose(at[0.3], outs[1].logprobs, atol=1e-4)
    assert not torch.allclose(at[0.9], outs[1].logprobs, atol=1e-2)


def test_deterministic_act_samples_no_step(folders):
    policy = _policy(folders["pi0"], noise_method="flow_sde")
    out = policy.act(**_obs(), deterministic=True, generator=torch.Generator().manual_seed(0))
    assert not bool(unpack_chain(out.raw_actions, 3, policy.horizon, 32)[1].any())
    assert bool((out.logprobs == 0).all())


def test_env_actions_are_unnormalised_cut_and_clipped(folders):
    policy = _policy(folders["pi0"], action_low=(-50.0,) * 7, action_high=(50.0,) * 7)
    stats = policy.pi0.stats
    final = torch.randn(2, policy.horizon, 32)
    states = torch.randn(2, 8)
    expected = stats.unnormalize_actions(final[:, :2])[..., :7]
    assert torch.allclose(policy.env_actions(final, states), expected)
    delta = _policy(folders["pi0"], extra_delta_transform=True, action_low=(-50.0,) * 7, action_high=(50.0,) * 7)
    got = delta.env_actions(final, states)
    assert torch.allclose(got[..., :6], expected[..., :6] + states[:, None, :6]) and torch.equal(got[..., 6],
                                                                                                expected[..., 6])
    clipped = _policy(folders["pi0"]).env_actions(final * 100, states)
    assert float(clipped.abs().max()) == 1.0


def test_rlinf_heads_are_loaded_and_written_back(folders, tmp_path):
    policy = _policy(folders["pi0"], noise_method="flow_noise", joint_logprob=True)
    stored = policy.pi0.extras
    assert torch.equal(policy.value_head.mlp[0].weight, stored["value_head.mlp.0.weight"].float())
    assert torch.equal(policy.noise_head.mlp_logvar.moduleList[1].linear_1.bias,
                       stored["noise_head.mlp_logvar.moduleList.1.linear_1.bias"].float())
    assert tuple(policy.value_head.mlp[0].weight.shape) == (8, 16)  # the stored head's sizes, not RLinf's default
    with torch.no_grad():
        policy.value_head.mlp[0].weight.add_(1.0)
        policy.pi0.model.action_out_proj.bias.add_(0.5)
    policy.save_pretrained(tmp_path / "out")
    again = _policy(tmp_path / "out", noise_method="flow_noise", joint_logprob=True)
    assert torch.allclose(again.value_head.mlp[0].weight, policy.value_head.mlp[0].weight)
    assert torch.allclose(again.pi0.model.action_out_proj.bias, policy.pi0.model.action_out_proj.bias, atol=1e-2)
    assert again.pi0.layout == "rlinf" and (tmp_path / "out" / TINY_ASSET_ID / "norm_stats.json").is_file()
    # an openpi folder has no heads: they start fresh, with RLinf's widths for π0.5 on the VLM
    fresh = _policy(folders["pi05"], value_after_vlm=True, noise_method="flow_noise")
    assert [m.out_features for m in fresh.value_head.mlp if isinstance(m, torch.nn.Linear)] == [1024, 512, 256, 1]
    assert fresh.value_head.mlp[0].in_features == fresh.pi0.model.spec.vlm.width


def test_lerobot_folders_act_too(folders):
    policy = _policy(folders["lerobot"], noise_method="flow_sde", num_images=1)
    obs = _obs(2)
    out = policy.act(**{**obs, "wrist_images": None}, generator=torch.Generator().manual_seed(0))
    again = policy.evaluate(out.raw_actions, **{**obs, "wrist_images": None})
    assert torch.allclose(again.logprobs, out.logprobs, atol=1e-4)


# ---- the factory ------------------------------------------------------------------------------
def _cfg(folder, **kw):
    return {"model_type": "pi0", "model_path": str(folder), "unnorm_key": TINY_ASSET_ID, "action_dim": 7,
            "num_action_chunks": 2, "num_steps": 3, "num_images_in_input": 2, **kw}


def test_factory_builds_from_actor_model_keys(folders):
    cfg = _cfg(folders["pi0"], noise_method="flow_noise", joint_logprob=True, noise_logvar_range=[0.1, 0.2],
               train_expert_only=True, detach_critic_input=True, extra_delta_transform=True, action_chunk=2)
    check_policy_fits(cfg, SPEC)
    policy = build_policy(cfg, SPEC)
    c = policy.config
    assert (c.noise_method, c.joint_logprob, c.noise_logvar_range, c.train_expert_only, c.extra_delta_transform,
            c.action_chunk, c.action_env_dim, c.num_images) == ("flow_noise", True, (0.1, 0.2), True, True, 2, 7, 2)
    assert policy.training and policy.value_head is not None
    five = build_policy({**_cfg(folders["pi05"], model_type="pi05", action_env_dim=7, discrete_state_input=False,
                                add_value_head=False), "action_dim": None}, SPEC)
    assert five.pi0.prompt_format == "pi0" and not five.reads_state and not hasattr(five, "value_head")


def _refused(cfg, key, match=None, spec=SPEC):
    with pytest.raises(ConfigError) as err:
        check_policy_fits(cfg, spec)
    assert err.value.key == f"actor.model.{key}", str(err.value)
    assert "\n" not in str(err.value)
    if match:
        assert match in str(err.value), str(err.value)


def test_factory_refusals_name_the_key_before_any_weight_is_read(folders, tmp_path, monkeypatch):
    import rlinf.models.embodied.pi0.checkpoint as ckpt

    def no_weights(self):
        raise AssertionError("a check read the weights")

    monkeypatch.setattr(ckpt.Pi0Folder, "tensors", no_weights)
    pi0, pi05 = folders["pi0"], folders["pi05"]
    _refused(_cfg(pi0, model_type="pi05"), "model_type", "π0 (state_proj")
    _refused(_cfg(pi05, unnorm_key=TINY_ASSET_ID), "model_type", "π0.5")
    _refused(_cfg(pi0, unnorm_key="physical-intelligence/libero"), "unnorm_key", "tiny/robot")
    no_stats = tmp_path / "no_stats"
    shutil.copytree(pi0, no_stats)
    shutil.rmtree(no_stats / "tiny")
    _refused(_cfg(no_stats, unnorm_key=None), "model_path", "norm_stats.json")
    bare = tmp_path / "lerobot_bare"
    shutil.copytree(folders["lerobot"], bare)
    for p in bare.glob("policy_*"):
        p.unlink()
    _refused(_cfg(bare, unnorm_key=None), "model_path", "normaliser")
    _refused(_cfg(pi0, action_dim=33), "action_dim", "padded action width (32)", spec=ObsSpec(
        state_dim=8, image_shape=(24, 24, 3), has_wrist=True))
    _refused({**_cfg(pi0, action_env_dim=9), "action_dim": None}, "action_env_dim", spec=ObsSpec(
        state_dim=8, image_shape=(24, 24, 3), has_wrist=True))  # the statistics hold 7
    _refused(_cfg(pi0, num_action_chunks=5), "num_action_chunks", "4 actions")
    _refused(_cfg(pi0, tokenizer_path=str(tmp_path / "nope.model")), "tokenizer_path")
    _refused(_cfg(pi0, discrete_state_input=True), "discrete_state_input")
    _refused(_cfg(pi0, action_chunk=3), "action_chunk")
    _refused(_cfg(pi0), "model_type", "images", spec=ObsSpec(state_dim=8, action_low=(-1.0,) * 7,
                                                                   action_high=(1.0,) * 7))
    _refused(_cfg(pi0), "num_images_in_input", spec=ObsSpec(state_dim=8, image_shape=(24, 24, 3),
                                                            action_low=(-1.0,) * 7, action_high=(1.0,) * 7))
    for width in (29, 7):  # longer or shorter than the statistics (8): both lengths named
        _refused(_cfg(pi0), "model_path", f"the env gives {width} state values; the checkpoint's state statistics "
                 f"({pi0 / TINY_ASSET_ID / 'norm_stats.json'}) have 8", spec=ObsSpec(
                     state_dim=width, image_shape=(24, 24, 3), has_wrist=True, action_low=(-1.0,) * 7,
                     action_high=(1.0,) * 7))
    _refused({"model_type": "pi0"}, "model_path")
    _refused({"model_type": "mlp", "action_dim": 7, "value_after_vlm": True}, "value_after_vlm", "pi0, pi05",
             spec=ObsSpec(state_dim=3, action_low=(-1.0,) * 7, action_high=(1.0,) * 7))
    with pytest.raises(ConfigError) as err:
        check_model_folder(_cfg(pi0, model_type="pi05"))
    assert err.value.key == "actor.model.model_type"


def test_a_stored_value_head_that_reads_the_other_stream_is_refused(folders, tmp_path):
    folder = tmp_path / "heads"
    shutil.copytree(folders["pi0"], folder)
    with pytest.raises(ConfigError) as err:
        build_policy(_cfg(folder, value_after_vlm=True), SPEC)  # the stored head reads the expert's 16
    assert err.value.key == "actor.model.value_after_vlm"
    assert json.loads((folder / "config.json").read_text())["action_horizon"] == 4


def _toy_run(folder, out) -> dict:
    """An embodied config on the toy env (4 state values, one 16 px camera) with a π0 policy."""
    toy = {"env_type": "toy", "total_num_envs": 2, "use_fixed_reset_state_ids": True, "group_size": 2,
           "init_params": {"camera_heights": 16, "camera_widths": 16}}
    return {"cluster": {"num_nodes": 1, "accelerators_per_node": 1, "backend": "local",
                        "component_placement": {"env,rollout,actor": "all"}},
            "runner": {"task_type": "embodied", "output_dir": str(out)},
            "algorithm": {"adv_type": "grpo", "group_size": 2}, "env": {"train": toy, "eval": toy},
            "actor": {"model": {"model_type": "pi0", "model_path": str(folder), "action_dim": 2,
                                "num_action_chunks": 2, "unnorm_key": TINY_ASSET_ID},
                      "micro_batch_size": 5, "global_batch_size": 10}}


def test_the_preflight_refuses_a_simulator_state_of_another_width_before_ray(folders, tmp_path, monkeypatch):
    """The toy env's probe (in this process) gives 4 state values; the folder's statistics hold 8:
    one line naming both, before Ray. The same folder with 4-wide state statistics passes."""
    import ray

    from rlinf.models.embodied.pi0.tiny import tiny_stats
    from rlinf.runners.embodied.preflight import prepare_embodied

    monkeypatch.setattr(ray, "init", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ray.init")))
    with pytest.raises(ConfigError) as err:
        prepare_embodied(_toy_run(folders["pi0"], tmp_path / "out"))
    where = folders["pi0"] / TINY_ASSET_ID / "norm_stats.json"
    assert str(err.value) == (f"actor.model.model_path: env.train (toy) gives 4 state values; the checkpoint's "
                              f"state statistics ({where}) have 8")
    fits = tmp_path / "state4"
    shutil.copytree(folders["pi0"], fits)
    (fits / TINY_ASSET_ID / "norm_stats.json").write_text(json.dumps({"norm_stats": tiny_stats(7, 4)}))
    start = prepare_embodied(_toy_run(fits, tmp_path / "out"))
    assert start.obs_specs["train"].state_dim == 4 and start.obs_specs["eval"].state_dim == 4
    assert not (tmp_path / "out").exists()
