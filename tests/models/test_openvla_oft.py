"""OpenVLAOFTPolicy: shapes, act <-> evaluate consistency, gradients, categorical entropy by hand,
action tokens and un-normalisation, save / load, LoRA and a PPO step."""

from __future__ import annotations

import json

import pytest
import torch
from ppo_check import ppo_logprob_change

from rlinf.models.embodied.openvla_oft import ActionTokenizer, OpenVLAOFTPolicy, normalize_actions, unnormalize_actions
from rlinf.models.embodied.openvla_oft.text_tokenizer import build_instruction_tokenizer
from rlinf.models.embodied.openvla_oft.tiny import tiny_vla_config

N, K, A = 4, 2, 3
INSTRUCTIONS = ["pick up the red cube", "put the carrot on the plate", "open the drawer", "x"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_instruction_tokenizer()


def _vla(tokenizer, seed=0, **kw) -> OpenVLAOFTPolicy:
    base = dict(action_dim=A, num_action_chunks=K, image_size=32, patch_size=8, hidden_size=64, num_layers=1,
                vision_hidden_size=64, vision_layers=1)
    base.update(kw)
    torch.manual_seed(seed)
    return OpenVLAOFTPolicy(tiny_vla_config(**base)).with_tokenizer(tokenizer)


def _obs(seed=1, state_dim=8):
    g = torch.Generator().manual_seed(seed)
    return dict(images=torch.randint(0, 256, (N, 40, 48, 3), dtype=torch.uint8, generator=g),
                wrist_images=torch.randint(0, 256, (N, 40, 48, 3), dtype=torch.uint8, generator=g),
                states=torch.rand(N, state_dim, generator=g) * 2 - 1, instructions=list(INSTRUCTIONS))


VARIANTS = {
    "llama_causal": {},
    "qwen2_bidirectional_wrist_proprio_dino": dict(lm="qwen2", action_attention="bidirectional", num_images_in_input=2,
                                                   use_proprio=True, use_dino=True),
}


@pytest.mark.parametrize("value_type,vshape", [("chunk_level", (N,)), ("action_level", (N, K))])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_shapes_and_act_evaluate_agree(tokenizer, variant, value_type, vshape):
    policy = _vla(tokenizer, value_type=value_type, **VARIANTS[variant])
    obs = _obs()
    out = policy.act(**obs, generator=torch.Generator().manual_seed(0))
    for t in (out.actions, out.raw_actions, out.logprobs, out.entropy):
        assert t.shape == (N, K, A) and t.dtype == torch.float32
    assert out.values.shape == vshape
    first = policy.action_tokenizer.first_id
    assert out.raw_actions.min() >= first and out.raw_actions.max() < policy.config.text_config.vocab_size
    assert torch.equal(out.raw_actions, out.raw_actions.round())
    ev = policy.evaluate(out.raw_actions, **obs)
    torch.testing.assert_close(ev.logprobs, out.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(ev.values, out.values, atol=1e-6, rtol=0)
    torch.testing.assert_close(policy.value(**obs), out.values, atol=1e-6, rtol=0)
    assert torch.equal(ev.actions, out.actions)
    # a sample's outputs do not depend on the rest of its batch (prompt padding is invisible)
    one = policy.evaluate(out.raw_actions[3:], **{k: v[3:] for k, v in obs.items()})
    torch.testing.assert_close(one.logprobs, out.logprobs[3:], atol=1e-5, rtol=0)
    # reproducible with a generator; deterministic picks the argmax
    assert torch.equal(policy.act(**obs, generator=torch.Generator().manual_seed(0)).raw_actions, out.raw_actions)
    det = policy.act(**obs, deterministic=True)
    logits, _ = policy._forward(**obs)
    assert torch.equal(det.raw_actions.view(N, -1), (logits.argmax(-1) + first).float())


def test_gradients_reach_every_parameter(tokenizer):
    policy = _vla(tokenizer, value_type="action_level", **VARIANTS["qwen2_bidirectional_wrist_proprio_dino"])
    obs = _obs()
    with torch.no_grad():
        out = policy.act(**obs)
    ev = policy.evaluate(out.raw_actions, **obs)
    (ev.logprobs.mean() + ev.values.pow(2).mean()).backward()
    no_grad = [n for n, p in policy.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
    # the LM's embedding rows of unused ids get zero gradient; the rest must all be reached
    assert [n for n in no_grad if "embed_tokens" not in n] == []
    assert any(n.startswith("vla.value_head") for n, _ in policy.named_parameters())


def test_logprob_and_entropy_by_hand_with_temperature(tokenizer):
    policy = _vla(tokenizer)
    policy.temperature = 0.7
    obs = _obs()
    out = policy.act(**obs, generator=torch.Generator().manual_seed(2))
    logits, _ = policy._forward(**obs)
    probs = torch.softmax(logits.double() / 0.7, -1)
    bins = (out.raw_actions.view(N, -1) - policy.action_tokenizer.first_id).long()
    expected_lp = probs.gather(-1, bins.unsqueeze(-1)).squeeze(-1).log()
    torch.testing.assert_close(out.logprobs.view(N, -1).double(), expected_lp, atol=1e-5, rtol=0)
    expected_h = -(probs * probs.log()).sum(-1)
    torch.testing.assert_close(out.entropy.view(N, -1).double(), expected_h, atol=1e-5, rtol=0)
    assert out.entropy.max() <= torch.log(torch.tensor(256.0)) + 1e-5


def test_action_tokens_round_trip_and_bins():
    tok = ActionTokenizer(n_bins=256, vocab_size=768)
    centres = tok.bin_centers()
    assert centres[0] == pytest.approx(-1 + 1 / 256) and centres[-1] == pytest.approx(1 - 1 / 256)
    ids = tok.encode(centres)
    assert torch.equal(ids, torch.arange(512, 768))
    assert torch.equal(tok.decode(ids), centres)
    # edges: -1 -> bin 0, +1 -> last bin, out-of-range clipped
    assert tok.encode(torch.tensor([-1.0, 1.0, -7.0, 7.0])).tolist() == [512, 767, 512, 767]
    # any action decodes to within half a bin width
    x = torch.rand(1000) * 2 - 1
    assert (tok.decode(tok.encode(x)) - x).abs().max() <= 1 / 256 + 1e-6
    with pytest.raises(ValueError, match="action bins"):
        tok.decode(torch.tensor([511]))


def test_unnormalisation_by_hand():
    stats = {"q01": [0.0, -2.0, 10.0], "q99": [1.0, 2.0, 20.0], "mask": [True, True, False]}
    x = torch.tensor([[-1.0, 0.5, 0.3], [1.0, -0.5, -0.7]])
    expected = torch.tensor([[0.0, 1.0, 0.3], [1.0, -1.0, -0.7]])
    assert torch.allclose(unnormalize_actions(x, stats), expected)
    assert torch.allclose(normalize_actions(expected, stats), x)
    assert torch.equal(unnormalize_actions(x, None), x)


def test_policy_unnormalises_and_clips(tokenizer):
    stats = {"bridge": {"action": {"q01": [0.0, -2.0, 10.0], "q99": [1.0, 2.0, 20.0], "mask": [True, True, False]}},
             "other": {"action": {"q01": [0.0] * 3, "q99": [4.0] * 3, "mask": [True] * 3}}}
    policy = _vla(tokenizer, norm_stats=stats)
    obs = _obs()
    with pytest.raises(KeyError, match="set unnorm_key"):
        policy.act(**obs)
    policy.unnorm_key = "bridge"
    out = policy.act(**obs)
    centres = policy.action_tokenizer.decode(out.raw_actions)
    expected = torch.stack([(centres[..., 0] + 1) / 2, (centres[..., 1] + 1) * 2 - 2, centres[..., 2]], -1)
    torch.testing.assert_close(out.actions, expected)
    policy.set_action_bounds([0.1, -0.5, -0.2], [0.2, 0.5, 0.2])
    clipped = policy.evaluate(out.raw_actions, **obs).actions
    assert torch.equal(clipped, expected.clamp(torch.tensor([0.1, -0.5, -0.2]), torch.tensor([0.2, 0.5, 0.2])))


def test_save_pretrained_round_trip(tokenizer, tmp_path):
    policy = _vla(tokenizer, value_type="action_level", **VARIANTS["qwen2_bidirectional_wrist_proprio_dino"])
    obs = _obs()
    out = policy.act(**obs)
    policy.save_pretrained(tmp_path / "vla")
    cfg = json.loads((tmp_path / "vla" / "config.json").read_text())
    assert cfg["model_type"] == "rlinf_openvla_oft" and "tiny" in cfg["norm_stats"]
    loaded = OpenVLAOFTPolicy.from_pretrained(tmp_path / "vla")
    assert loaded.tokenizer is not None and loaded.config.norm_stats == policy.config.norm_stats
    ev = loaded.evaluate(out.raw_actions, **obs)
    assert torch.equal(ev.logprobs, out.logprobs) and torch.equal(ev.values, out.values)
    assert torch.equal(ev.actions, out.actions)


def test_lora_trains_adapters_only_and_reloads(tokenizer, tmp_path):
    pytest.importorskip("peft")
    base = _vla(tokenizer)
    base.save_pretrained(tmp_path / "base")
    obs = _obs()
    ref = base.act(**obs, deterministic=True)

    policy = OpenVLAOFTPolicy.from_pretrained(tmp_path / "base")
    policy.enable_lora(rank=4)
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n or ".value_head.modules_to_save." in n for n in trainable), trainable
    assert any(".lora_" in n and "language_model" in n for n in trainable)
    assert any(".lora_" in n and "vision_tower" in n for n in trainable)
    torch.testing.assert_close(policy.evaluate(ref.raw_actions, **obs).logprobs, ref.logprobs, atol=1e-6, rtol=0)

    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):
        ev = policy.evaluate(ref.raw_actions, **obs)
        loss = -ev.logprobs.mean() + ev.values.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = policy.evaluate(ref.raw_actions, **obs)
    assert not torch.allclose(out.logprobs, ref.logprobs)

    policy.save_lora_adapter(tmp_path / "lora")
    again = OpenVLAOFTPolicy.from_pretrained(tmp_path / "base")
    again.enable_lora(lora_path=str(tmp_path / "lora"))
    ev = again.evaluate(ref.raw_actions, **obs)
    torch.testing.assert_close(ev.logprobs, out.logprobs, atol=1e-6, rtol=0)
    torch.testing.assert_close(ev.values, out.values, atol=1e-6, rtol=0)
    assert {n for n, p in again.named_parameters() if p.requires_grad} == set(trainable)

    policy.save_pretrained(tmp_path / "merged")  # LoRA merged into plain weights
    merged = OpenVLAOFTPolicy.from_pretrained(tmp_path / "merged")
    ev = merged.evaluate(ref.raw_actions, **obs)
    torch.testing.assert_close(ev.logprobs, out.logprobs, atol=1e-4, rtol=0)
    torch.testing.assert_close(ev.values, out.values, atol=1e-4, rtol=0)


def test_ppo_step_raises_logprob_of_positive_advantage(tokenizer):
    delta = ppo_logprob_change(_vla(tokenizer), _obs(), lr=1e-3, steps=3)
    assert (delta[0::2] > 0).all() and (delta[1::2] < 0).all(), delta


def test_input_errors(tokenizer):
    policy = _vla(tokenizer, num_images_in_input=2, use_proprio=True)
    obs = _obs()
    with pytest.raises(ValueError, match="wrist_images"):
        policy.act(images=obs["images"], states=obs["states"], instructions=obs["instructions"])
    with pytest.raises(ValueError, match="pass states"):
        policy.act(images=obs["images"], wrist_images=obs["wrist_images"])
    with pytest.raises(ValueError, match="instructions"):
        policy.act(**{**obs, "instructions": ["a"]})
    with pytest.raises(ValueError, match="raw_actions must be"):
        policy.evaluate(torch.zeros(N, K, A + 1), **obs)
    with pytest.raises(RuntimeError, match="no tokenizer"):
        _vla(None).act(images=obs["images"])
