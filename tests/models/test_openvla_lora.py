"""LoRA adapters in RLinf's layout on real-format checkpoints: applied == merged, exact
round trip of the layout (qkv split / rank-3r re-fusion), fresh adapters, trainable set."""

from __future__ import annotations

import json

import pytest
import torch

from rlinf.models.embodied.openvla import OpenVLAOptions, enable_lora, load_openvla, save_lora_adapter, save_openvla
from rlinf.models.embodied.openvla.tiny import write_tiny_lora, write_tiny_openvla

INSTR = ["pick up the cube", "open the drawer"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    base = write_tiny_openvla(tmp_path_factory.mktemp("openvla"))
    lora = write_tiny_lora(base, tmp_path_factory.mktemp("lora"), rank=4)
    return base, lora


def _img():
    return torch.randint(0, 256, (2, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))


def _logits(policy):
    with torch.no_grad():
        logits, _ = policy._teacher_forced(None, _img(), None, INSTR, None)
    return logits


OPTS = OpenVLAOptions(model_type="openvla_oft", num_action_chunks=2)


def test_adapter_merged_into_the_base_gives_the_same_actions(ckpt, tmp_path):
    base, lora = ckpt
    applied = load_openvla(base, OPTS)
    plain = _logits(applied)
    enable_lora(applied, lora_path=lora)
    with_lora = _logits(applied)
    assert (with_lora - plain).abs().max() > 1e-2  # the adapter matters
    merged_dir = save_openvla(applied, tmp_path / "merged", dtype=torch.float32)
    merged = load_openvla(merged_dir, OPTS)
    assert torch.allclose(_logits(merged), with_lora, atol=1e-4)
    a = applied.act(images=_img(), instructions=INSTR, deterministic=True)
    m = merged.act(images=_img(), instructions=INSTR, deterministic=True)
    assert torch.equal(a.raw_actions, m.raw_actions) and torch.allclose(a.actions, m.actions)
    # every module of the adapter file was applied or carried (unused last block / attn_pool)
    assert applied.lora.carried and all(".blocks.2." in k or "attn_pool" in k for k in applied.lora.carried)


def test_adapter_layout_round_trips_exactly(ckpt, tmp_path):
    from safetensors.torch import load_file

    base, lora = ckpt
    policy = load_openvla(base, OPTS)
    enable_lora(policy, lora_path=lora)
    out = save_lora_adapter(policy, tmp_path / "same")
    src, dst = load_file(str(lora / "adapter_model.safetensors")), load_file(str(out / "adapter_model.safetensors"))
    assert set(src) == set(dst) and all(torch.equal(src[k], dst[k]) for k in src)
    # after training the split q / k / v adapters differ: qkv is written at rank 3r, same delta
    qkv = "vision_backbone.featurizer.encoder.layer.0.attention"
    with torch.no_grad():
        policy.get_submodule(f"{qkv}.k_proj").lora_A["default"].weight.add_(0.3)
    before = _logits(policy)
    out2 = save_lora_adapter(policy, tmp_path / "trained")
    cfg = json.loads((out2 / "adapter_config.json").read_text())
    name = "vision_backbone.featurizer.blocks.0.attn.qkv"
    assert cfg["rank_pattern"][name] == 12 and cfg["alpha_pattern"][name] == pytest.approx(12.0)
    again = load_openvla(base, OPTS)
    enable_lora(again, lora_path=out2)
    assert torch.allclose(_logits(again), before, atol=1e-5)


def test_fresh_adapter_is_a_no_op_and_trains_only_lora_and_value_head(ckpt):
    base, _ = ckpt
    policy = load_openvla(base, OpenVLAOptions(model_type="openvla_oft", num_action_chunks=2, add_value_head=True))
    plain = _logits(policy)
    enable_lora(policy, rank=4)
    assert torch.allclose(_logits(policy), plain, atol=1e-6)  # B = 0
    trainable = [n for n, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_" in n or n.startswith("value_head.") for n in trainable)
    assert any("featurizer" in n and "patch_embed" in n or "projection" in n for n in trainable)  # conv LoRA
    assert any("lm_head" in n for n in trainable)
    with pytest.raises(RuntimeError, match="already enabled"):
        enable_lora(policy, rank=4)
