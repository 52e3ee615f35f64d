"""π0 / π0.5 model math: masks, the Gemma stack against transformers, adaRMS, time features,
the Euler loop and the prefix cache."""

from __future__ import annotations

import math

import pytest
import torch

from rlinf.models.embodied.pi0 import Pi0Options, load_pi0
from rlinf.models.embodied.pi0.layers import AdaRMSNorm, additive_mask, joint_forward, time_features
from rlinf.models.embodied.pi0.modeling import Pi0Inputs, Pi0Model, gemma_config
from rlinf.models.embodied.pi0.tiny import tiny_spec, write_tiny_pi0

INSTR = ["pick up the mug", "open the drawer"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pi0_model")
    return {name: write_tiny_pi0(root / name, pi05=pi05, **kw) for name, pi05, kw in (
        ("pi0", False, {}), ("pi05", True, {}), ("pi05_zero", True, {"adarms_scale": 0.0}))}


def _images(n=2, seed=0):
    return torch.randint(0, 256, (n, 20, 24, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _states(n=2, seed=3):
    return torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))


def test_joint_mask_equals_the_hand_built_layout():
    spec = tiny_spec(False, vocab=50, action_horizon=2, image_size=4, patch=4)  # 1 token per camera
    model = Pi0Model(spec)
    inputs = Pi0Inputs(images=torch.zeros(1, 2, 3, 4, 4), image_masks=torch.tensor([[True, False]]),
                       tokens=torch.tensor([[2, 7, 0]]), token_mask=torch.tensor([[True, True, False]]),
                       state=torch.zeros(1, 32))
    _, p_pad, p_ar = model.embed_prefix(inputs)
    _, s_pad, s_ar, _ = model.embed_suffix(inputs.state, torch.zeros(1, 2, 32), torch.ones(1))
    allowed, pos = model.joint_layout(p_pad, p_ar, s_pad, s_ar)
    # tokens: img0, img1 (absent), txt, txt, pad | state, act0, act1
    want = torch.tensor([
        [1, 0, 1, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [1, 0, 1, 1, 0, 0, 0, 0],
        [1, 0, 1, 1, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [1, 0, 1, 1, 0, 1, 0, 0],   # the state sees the prefix and itself
        [1, 0, 1, 1, 0, 1, 1, 1],   # actions see prefix, state and the whole chunk
        [1, 0, 1, 1, 0, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(allowed[0], want)
    assert pos[0].tolist() == [0, 0, 1, 2, 2, 3, 4, 5]
    spec5 = tiny_spec(True, vocab=50, action_horizon=2, image_size=4, patch=4)
    _, s_pad, s_ar, cond = Pi0Model(spec5).embed_suffix(inputs.state, torch.zeros(1, 2, 32), torch.ones(1))
    assert s_ar.tolist() == [1, 0] and cond.shape == (1, spec5.expert.width)  # no state token in π0.5


def test_vlm_stack_equals_transformers_gemma():
    from transformers import GemmaModel

    spec = tiny_spec(False, vocab=64)
    stack = Pi0Model(spec).paligemma_with_expert.vlm.eval()
    for name, p in stack.named_parameters():
        if name.endswith("norm.weight"):
            p.data = 0.2 * torch.randn_like(p)
    ref = GemmaModel(gemma_config(spec.vlm)).eval()
    ref.load_state_dict(stack.state_dict())
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(0))
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None].expand(2, -1, -1)
    emb = stack.embed_tokens(ids) * math.sqrt(spec.vlm.width)  # transformers scales inside, openpi outside
    with torch.no_grad():
        (ours,), _ = joint_forward([stack], [emb], [None], additive_mask(causal, emb.dtype),
                                   torch.arange(6)[None].expand(2, -1))
        want = ref(input_ids=ids).last_hidden_state
    assert torch.allclose(ours, want, atol=1e-5), (ours - want).abs().max()


def test_adarms_zero_dense_is_plain_rmsnorm_with_zero_gate():
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm

    norm = AdaRMSNorm(8, 4)
    x, cond = torch.randn(2, 3, 8), torch.randn(2, 4)
    y, gate = norm(x, cond)
    assert torch.allclose(y, GemmaRMSNorm(8)(x), atol=1e-6) and torch.count_nonzero(gate) == 0
    norm.dense.bias.data[8:16] = 0.5  # shift
    y2, _ = norm(x, cond)
    assert torch.allclose(y2, y + 0.5, atol=1e-6)


def test_time_features_by_hand():
    t = torch.tensor([0.25])
    got = time_features(t, 6)[0].tolist()
    periods = [4e-3 * 1000 ** f for f in (0.0, 0.5, 1.0)]
    want = [math.sin(2 * math.pi * 0.25 / p) for p in periods] + [math.cos(2 * math.pi * 0.25 / p) for p in periods]
    assert got == pytest.approx(want, abs=1e-6)


@pytest.mark.parametrize("name", ["pi0", "pi05"])
def test_prefix_cache_equals_the_full_forward_at_each_step(folders, name):
    policy = load_pi0(folders[name])
    inputs = policy.prepare([_images(), None, _images(seed=1)], INSTR, _states())
    noise = policy.model.initial_noise(2, torch.Generator().manual_seed(0))
    trace = {True: [], False: []}
    for cached in (True, False):
        policy.model.sample_actions(inputs, noise=noise, num_steps=3, use_cache=cached,
                                    on_step=lambda k, t, x, v, c=cached: trace[c].append((t.clone(), x.clone(), v)))
    assert len(trace[True]) == 3
    for (t1, x1, v1), (t2, x2, v2) in zip(trace[True], trace[False]):
        assert torch.equal(t1, t2) and torch.allclose(x1, x2, atol=1e-5)
        assert torch.allclose(v1, v2, atol=1e-5), (v1 - v2).abs().max()
    times = [round(float(t[0]), 6) for t, _, _ in trace[True]]
    assert times == [1.0, pytest.approx(2 / 3, abs=1e-6), pytest.approx(1 / 3, abs=1e-6)]
    (_, x0, v0), (_, x1, _) = trace[True][0], trace[True][1]
    assert torch.allclose(x1, x0 - v0 / 3, atol=1e-6)  # Euler step x + dt v, dt = -1/N


def test_pi05_adarms_weights_change_the_actions(folders):
    policy = load_pi0(folders["pi05"])
    args = ([_images()], INSTR, _states())
    base = policy.predict_action(*args, generator=torch.Generator().manual_seed(0))
    dense = policy.model.paligemma_with_expert.expert.layers[1].post_attention_layernorm.dense
    dense.weight.data.mul_(3.0)
    changed = policy.predict_action(*args, generator=torch.Generator().manual_seed(0))
    assert (changed - base).abs().max() > 1e-3


def test_zero_adarms_gates_the_expert_off(folders):
    """openpi's zero-initialised dense layers give gate 0: every expert residual branch is off, so
    the actions no longer depend on the prefix (the images)."""
    policy = load_pi0(folders["pi05_zero"])
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    a = policy.predict_action([_images(seed=0)], INSTR, _states(), generator=gen())
    b = policy.predict_action([_images(seed=5)], INSTR, _states(), generator=gen())
    assert torch.allclose(a, b, atol=1e-6)
    c = load_pi0(folders["pi05"]).predict_action([_images(seed=5)], INSTR, _states(), generator=gen())
    d = load_pi0(folders["pi05"]).predict_action([_images(seed=0)], INSTR, _states(), generator=gen())
    assert (c - d).abs().max() > 1e-4


def test_state_use_pi0_vs_pi05(folders):
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    pi0 = load_pi0(folders["pi0"])
    assert pi0.prompt_format == "pi0"
    s1, s2 = _states(seed=3), _states(seed=4)
    # π0: the state token changes the actions
    assert (pi0.predict_action([_images()], INSTR, s1, generator=gen())
            - pi0.predict_action([_images()], INSTR, s2, generator=gen())).abs().max() > 1e-4
    # π0.5 without the state prompt (pi05_libero): the state is not read
    plain = load_pi0(folders["pi05"], Pi0Options(discrete_state_input=False))
    assert plain.prompt_format == "pi0"
    assert torch.equal(plain.predict_action([_images()], INSTR, s1, generator=gen()),
                       plain.predict_action([_images()], INSTR, s2, generator=gen()))
    # π0.5 with it: the state reaches the prompt tokens
    prompt = load_pi0(folders["pi05"])
    t1 = prompt.prepare([_images()], INSTR, s1).tokens
    t2 = prompt.prepare([_images()], INSTR, s2).tokens
    assert not torch.equal(t1, t2)
    with pytest.raises(ValueError, match="needs the robot state"):
        prompt.prepare([_images()], INSTR, None)


def test_absent_camera_and_padding_do_not_leak(folders):
    policy = load_pi0(folders["pi0"])
    gen = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    a = policy.predict_action([_images(), None], INSTR, _states(), generator=gen())
    inputs = policy.prepare([_images(), None], INSTR, _states())
    inputs.images[:, 1] = torch.rand_like(inputs.images[:, 1])  # content of a masked camera
    inputs.tokens[~inputs.token_mask] = 5  # content of padded text
    noise = policy.model.initial_noise(2, gen())
    b = policy.stats.unnormalize_actions(policy.model.sample_actions(inputs, noise=noise))
    assert torch.allclose(a, b, atol=1e-6)
    one = policy.predict_action([_images()[:1]], INSTR[:1], _states()[:1], noise=noise[:1])
    assert torch.allclose(one, a[:1], atol=1e-5)  # a sample does not depend on its batch


def _real_shapes(pi05: bool) -> dict[str, tuple[int, ...]]:
    """The shapes a released π0 / π0.5 holds (openpi's gemma_2b + gemma_300m + SigLIP So400m/14)."""
    v = "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
    s = {v + "embeddings.patch_embedding.weight": (1152, 3, 14, 14),
         v + "embeddings.position_embedding.weight": (256, 1152),
         "paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight": (2048, 1152),
         "paligemma_with_expert.paligemma.lm_head.weight": (257152, 2048),
         "action_in_proj.weight": (1024, 32), "action_out_proj.weight": (32, 1024)}
    s.update({v + f"encoder.layers.{i}.mlp.fc1.weight": (4304, 1152) for i in range(27)})
    for prefix, w, mlp in (("paligemma_with_expert.paligemma.model.language_model.", 2048, 16384),
                           ("paligemma_with_expert.gemma_expert.model.", 1024, 4096)):
        for i in range(18):
            s.update({f"{prefix}layers.{i}.self_attn.q_proj.weight": (2048, w),
                      f"{prefix}layers.{i}.self_attn.k_proj.weight": (256, w),
                      f"{prefix}layers.{i}.self_attn.o_proj.weight": (w, 2048),
                      f"{prefix}layers.{i}.mlp.gate_proj.weight": (mlp, w),
                      f"{prefix}layers.{i}.mlp.down_proj.weight": (w, mlp)})
    e = "paligemma_with_expert.gemma_expert.model."
    if pi05:
        s.update({e + "norm.dense.weight": (3072, 1024), e + "layers.17.input_layernorm.dense.weight": (3072, 1024),
                  "time_mlp_in.weight": (1024, 1024), "time_mlp_out.weight": (1024, 1024)})
    else:
        s.update({"state_proj.weight": (1024, 32), "action_time_mlp_in.weight": (1024, 2048),
                  "action_time_mlp_out.weight": (1024, 1024), e + "norm.weight": (1024,),
                  e + "layers.3.post_attention_layernorm.weight": (1024,)})
    return s


@pytest.mark.parametrize("pi05", [False, True])
def test_release_sizes_build_openpi_names_and_shapes(pi05):
    from rlinf.models.embodied.openvla.loading import params_on_meta
    from rlinf.models.embodied.pi0.spec import spec_from_shapes

    shapes = _real_shapes(pi05)
    spec = spec_from_shapes(shapes, action_horizon=50)
    assert (spec.vlm.heads, spec.vlm.kv_heads, spec.vlm.head_dim, spec.vlm.depth) == (8, 1, 256, 18)
    assert (spec.expert.width, spec.vision.image_size, spec.vision.tokens, spec.pi05) == (1024, 224, 256, pi05)
    with params_on_meta():
        model = Pi0Model(spec)
    ours = {k: tuple(t.shape) for k, t in model.state_dict().items()}
    ours[LM_HEAD := "paligemma_with_expert.paligemma.lm_head.weight"] = ours.pop(
        "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight")
    assert {k: ours.get(k) for k in shapes} == shapes
    plain_expert_norms = any(k.endswith("layernorm.weight") and "gemma_expert" in k for k in ours)
    assert plain_expert_norms == (not pi05)  # π0.5: adaRMS ``.dense`` only
    assert LM_HEAD in ours and not any("lm_head" in k for k in ours if k != LM_HEAD)
