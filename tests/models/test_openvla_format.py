"""Real-format OpenVLA / OpenVLA-OFT checkpoints: strict loading, vision features and actions
against a plain-torch reference of the original code, the original action formulas, save back."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from rlinf.models.embodied.openvla import CheckpointError, OpenVLAOptions, load_openvla, save_openvla
from rlinf.models.embodied.openvla.action_tokens import ActionTokens, normalize_proprio, unnormalize_actions
from rlinf.models.embodied.openvla.checkpoint import inspect_folder
from rlinf.models.embodied.openvla.tiny import TINY_UNNORM_KEY, write_tiny_openvla
from rlinf.models.embodied.openvla.vision import IMAGENET_MEAN, IMAGENET_STD
from tests.models.timm_vit_reference import (
    fused_projector,
    original_decode,
    original_encode,
    original_unnormalize,
    vit_penultimate_features,
)

INSTR = ["Pick up the red cube", "put the mug in the basket"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_tiny_openvla(tmp_path_factory.mktemp("openvla"), proprio_dim=5, action_head=True)


def _images(n=2, size=32, seed=0):
    return torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _source(ckpt):
    return inspect_folder(ckpt).tensors(torch.float32)


def test_strict_coverage_every_tensor_used_or_carried(ckpt):
    policy = load_openvla(ckpt, OpenVLAOptions(model_type="openvla"))
    src = _source(ckpt)
    # carried = exactly the tensors the original forward never touches
    unused = tuple(f"vision_backbone.{t}.{part}" for t in ("featurizer", "fused_featurizer")
                   for part in ("blocks.2.", "norm.", "attn_pool."))
    expect = {k for k in src if k.startswith(unused)}
    assert set(policy.carried) == expect
    assert len(policy.carried) < len(src)
    # nothing of the model comes from nowhere except DINOv2's mask token (unused)
    loaded = sum(p.numel() for p in policy.parameters())
    assert loaded > 0 and torch.count_nonzero(policy.vision_backbone.featurizer.embeddings.mask_token) == 0


def test_vision_features_match_the_timm_reference(ckpt):
    policy = load_openvla(ckpt, OpenVLAOptions(model_type="openvla"))
    img = _images()
    ref = _reference_patches(_source(ckpt), img)
    with torch.no_grad():
        ours = policy.patch_embeddings(img)
    assert ours.shape == ref.shape == (2, 16, 64)
    assert torch.allclose(ours, ref, atol=2e-5), (ours - ref).abs().max()


def _reference_patches(src, img):
    """Projected patches from the raw timm-named tensors (images already at the tower size)."""
    x = img.permute(0, 3, 1, 2).float() / 255.0
    feats = []
    for name, (mean, std) in (("featurizer", (IMAGENET_MEAN, IMAGENET_STD)),
                              ("fused_featurizer", ((0.5,) * 3, (0.5,) * 3))):
        px = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
        tower = {k.split(f"vision_backbone.{name}.", 1)[1]: v for k, v in src.items()
                 if k.startswith(f"vision_backbone.{name}.")}
        feats.append(vit_penultimate_features(tower, px))
    return fused_projector(src, torch.cat(feats, -1))


def _reference_predict(ckpt, img, instructions, model_type, k, a):
    """OpenVLA's predict_action, re-done from the checkpoint with the reference towers and a
    plain LlamaForCausalLM: [BOS, patches, prompt ids, ▁] -> greedy over the whole vocabulary."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlinf.models.embodied.openvla.prompt import load_tokenizer

    cfg = json.loads((ckpt / "config.json").read_text())
    src = _source(ckpt)
    text = {k_: v for k_, v in cfg["text_config"].items() if k_ != "model_type"}
    lm = LlamaForCausalLM(LlamaConfig(**text))
    lm.load_state_dict({k_[len("language_model."):]: v for k_, v in src.items() if k_.startswith("language_model.")})
    lm.eval()
    tok = load_tokenizer(ckpt)
    space = tok.convert_tokens_to_ids("\u2581")
    patches = _reference_patches(src, img)
    base_vocab = cfg["text_config"]["vocab_size"] - cfg["pad_to_multiple_of"]
    stats = json.loads((ckpt / "dataset_statistics.json").read_text())[TINY_UNNORM_KEY]["action"]
    out = []
    for i, instruction in enumerate(instructions):  # batch size 1, as the original
        prompt = f"In: What action should the robot take to {instruction.lower()}?\nOut:"
        ids = [tok.bos_token_id] + tok(prompt, add_special_tokens=False)["input_ids"]
        if ids[-1] != space:
            ids.append(space)
        emb = lm.get_input_embeddings()(torch.tensor([ids]))
        seq = torch.cat([emb[:, :1], patches[i:i + 1], emb[:, 1:]], 1)
        with torch.no_grad():
            if model_type == "openvla_oft":
                seq = torch.cat([seq, torch.zeros(1, k * a, seq.shape[-1])], 1)
                logits = lm(inputs_embeds=seq).logits[0]
                start = len(ids) + patches.shape[1] - 1
                tokens = logits[start:start + k * a].argmax(-1).numpy()
            else:
                tokens = []
                for _ in range(k * a):
                    nxt = lm(inputs_embeds=seq).logits[0, -1].argmax().item()
                    tokens.append(nxt)
                    seq = torch.cat([seq, lm.get_input_embeddings()(torch.tensor([[nxt]]))], 1)
                tokens = np.array(tokens)
        values = original_decode(tokens, base_vocab).reshape(k, a)
        out.append(original_unnormalize(values, stats))
    return np.stack(out)


@pytest.mark.parametrize("model_type,k", [("openvla", 1), ("openvla_oft", 2)])
def test_predict_action_equals_the_reference(ckpt, model_type, k):
    policy = load_openvla(ckpt, OpenVLAOptions(model_type=model_type, num_action_chunks=k))
    img = _images()
    ours = policy.predict_action(img, INSTR).numpy()
    ref = _reference_predict(ckpt, img, INSTR, model_type, k, 7)
    assert ours.shape == (2, k, 7)
    np.testing.assert_allclose(ours, ref, atol=1e-5)


def test_act_evaluate_agree_and_restrict_to_action_ids(ckpt):
    for model_type, k in (("openvla", 1), ("openvla_oft", 3)):
        policy = load_openvla(ckpt, OpenVLAOptions(model_type=model_type, num_action_chunks=k, add_value_head=True))
        img = _images(3)
        out = policy.act(images=img, instructions=INSTR + ["x"], generator=torch.Generator().manual_seed(0))
        assert out.actions.shape == (3, k, 7) and out.values.shape == (3,)
        t = policy.tokens
        assert t.first_id == 512 - 256 and bool((out.raw_actions >= t.first_id).all())
        assert bool((out.raw_actions < t.base_vocab).all())
        ev = policy.evaluate(out.raw_actions, images=img, instructions=INSTR + ["x"])
        assert torch.allclose(ev.logprobs, out.logprobs, atol=1e-5)
        assert torch.allclose(ev.values, out.values, atol=1e-5)
        # a sample's outputs do not depend on its batch (left padding inside the prompt block)
        one = policy.evaluate(out.raw_actions[:1], images=img[:1], instructions=INSTR[:1])
        assert torch.allclose(one.logprobs, out.logprobs[:1], atol=1e-5)


def test_action_tokens_follow_the_original_formulas():
    rng = np.random.default_rng(0)
    acts = np.concatenate([rng.uniform(-1.2, 1.2, 500), [-1.0, 0.0, 1.0]])
    tok = ActionTokens(256, 32000)
    ids = tok.encode(torch.tensor(acts)).numpy()
    np.testing.assert_array_equal(ids, original_encode(acts, 32000))
    every = np.arange(32000 - 256, 32000 + 3)  # incl. ids past the action range (clipped as the original)
    np.testing.assert_allclose(tok.decode(torch.tensor(every)).numpy(), original_decode(every, 32000), atol=1e-7)
    inner = torch.arange(32000 - 255, 32000)  # each of these ids is the encoding of its own value
    assert torch.equal(tok.encode(tok.decode(inner)), inner)
    assert int(tok.encode(tok.decode(torch.tensor([32000 - 256])))[0]) == 32000 - 255  # two ids share a centre


def test_unnormalise_and_proprio_by_hand():
    stats = {"q01": [0.0, -2.0, 10.0], "q99": [2.0, 2.0, 20.0], "mask": [True, True, False]}
    x = torch.tensor([[-1.0, 0.5, 0.25], [1.0, -1.0, -0.5]])
    got = unnormalize_actions(x, stats)
    want = torch.tensor([[0.0, 1.0, 0.25], [2.0, -2.0, -0.5]])
    assert torch.allclose(got, want, atol=1e-6)
    np.testing.assert_allclose(got.numpy(), original_unnormalize(x.numpy(), stats), atol=1e-6)
    # OFT's proprio normalisation: 2 (p - q01) / (q99 - q01) - 1, clipped; unmasked passes
    p = normalize_proprio(torch.tensor([[1.0, 3.0, 15.0]]), stats)
    assert torch.allclose(p, torch.tensor([[0.0, 1.0, 1.0]]), atol=1e-6)  # 15 unmasked -> clip to 1


def test_save_writes_the_same_format_back(ckpt, tmp_path):
    policy = load_openvla(ckpt, OpenVLAOptions(model_type="openvla_oft", num_action_chunks=2, use_proprio=True,
                                               proprio_dim=5, add_value_head=True))
    out = save_openvla(policy, tmp_path / "saved")
    a, b = inspect_folder(ckpt), inspect_folder(out)
    src, dst = a.tensors(), b.tensors()
    value_keys = {k for k in dst if k.startswith("value_head.")}
    assert value_keys and set(dst) - value_keys == set(src)
    for key, t in src.items():
        assert dst[key].dtype == t.dtype == torch.bfloat16
        assert torch.equal(dst[key], t), key
    assert b.config == a.config
    for name in ("action_head--100_checkpoint.pt", "dataset_statistics.json", "tokenizer.json",
                 "preprocessor_config.json"):
        assert (out / name).read_bytes() == (ckpt / name).read_bytes(), name
    src_p = torch.load(ckpt / "proprio_projector--100_checkpoint.pt", weights_only=True)
    dst_p = torch.load(out / "proprio_projector--100_checkpoint.pt", weights_only=True)
    assert {f"module.{k}" for k in dst_p} == set(src_p)
    assert all(torch.equal(dst_p[k.removeprefix("module.")], v) for k, v in src_p.items())
    again = load_openvla(out, OpenVLAOptions(model_type="openvla_oft", num_action_chunks=2, use_proprio=True,
                                             add_value_head=True))
    assert torch.equal(again.value_head.mlp[0].weight, policy.value_head.mlp[0].weight.to(torch.bfloat16).float())


def _copy(ckpt, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(ckpt, dst)
    return dst


def test_bad_folders_fail_with_one_line(ckpt, tmp_path):
    d = _copy(ckpt, tmp_path)
    shard = sorted(p for p in os.listdir(d) if p.startswith("model-"))[1]
    os.remove(d / shard)
    with pytest.raises(CheckpointError, match=f"missing weight shard.*{shard}"):
        load_openvla(d, OpenVLAOptions())
    shutil.rmtree(d)
    d = _copy(ckpt, tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "model_type": "llama"}))
    with pytest.raises(CheckpointError, match="model_type is 'llama'"):
        load_openvla(d, OpenVLAOptions())
    with pytest.raises(KeyError, match="unnorm_key 'bridge_orig' not in"):
        load_openvla(ckpt, OpenVLAOptions(unnorm_key="bridge_orig"))


def test_an_unknown_or_missing_tensor_is_refused(ckpt, tmp_path):
    from safetensors.torch import load_file, save_file

    d = _copy(ckpt, tmp_path)
    shard = sorted(p for p in os.listdir(d) if p.startswith("model-"))[0]
    part = load_file(str(d / shard))
    save_file({**part, "projector.extra.weight": torch.zeros(2)}, str(d / shard))
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"]["projector.extra.weight"] = shard
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="fit no part of the model.*projector.extra.weight"):
        load_openvla(d, OpenVLAOptions())
    victim = next(k for k in part if "language_model" in k)
    save_file({k: v for k, v in part.items() if k != victim}, str(d / shard))
    index["weight_map"].pop("projector.extra.weight")
    index["weight_map"].pop(victim)
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="missing"):
        load_openvla(d, OpenVLAOptions())


def test_runner_max_prompt_length_stops_a_longer_task_prompt(ckpt):
    policy = load_openvla(ckpt, OpenVLAOptions(model_type="openvla", num_action_chunks=1))
    img = _images(2)
    policy.act(images=img, instructions=INSTR, generator=torch.Generator().manual_seed(0))  # no limit
    policy.max_prompt_length = 4
    with pytest.raises(ValueError, match=r"runner.max_prompt_length: the prompt of task .* tokens, more than 4"):
        policy.act(images=img, instructions=INSTR, generator=torch.Generator().manual_seed(0))
