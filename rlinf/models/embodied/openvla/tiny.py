"""Tiny OpenVLA / OpenVLA-OFT checkpoints in the REAL on-disk format, for tests and CPU runs.

:func:`write_tiny_openvla` writes what a released folder holds, with tiny sizes and random
weights: ``config.json`` (``model_type: "openvla"``, the fused ``dinosiglip-vit-so-224px``
backbone ids, ``arch_specifier``, ``text_config``, ``pad_to_multiple_of``, ``norm_stats``, ...),
bf16 safetensors shards + ``model.safetensors.index.json`` under the timm / Prismatic names
(DINOv2 with 4 registers and layer scale, SigLIP with ``attn_pool``, the fused-GELU projector,
``language_model.*``), ``dataset_statistics.json``, ``preprocessor_config.json`` and a
Llama-style tokenizer trained here (``▁`` pieces, ``<s>`` / ``</s>`` / ``<unk>``, ``<PAD>`` added
at id ``V``). Optional OFT extras (proprio projector, L1 action head) and
:func:`write_tiny_lora` (a PEFT adapter in RLinf's layout: its target list, original module
names) complete the set.

Default sizes: 32 x 32 images, patch 8 (16 patches), DINOv2 width 32 / SigLIP width 48, 3 blocks
each (16 heads as the real towers), Llama width 64, 2 layers, base vocabulary 512
(``text_config.vocab_size`` 576 with ``pad_to_multiple_of`` 64).

Example:
    >>> import tempfile, json
    >>> tmp = tempfile.TemporaryDirectory()
    >>> d = write_tiny_openvla(tmp.name)
    >>> json.loads((d / "config.json").read_text())["model_type"]
    'openvla'
    >>> tmp.cleanup()
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from rlinf.models.embodied.openvla.checkpoint import STATS_FILE, inspect_folder, write_weights

DINO_ID = "vit_large_patch14_reg4_dinov2.lvd142m"
SIGLIP_ID = "vit_so400m_patch14_siglip_224"
TINY_UNNORM_KEY = "tiny_dataset"
RLINF_LORA_TARGETS = ["proj", "qkv", "fc1", "fc2", "q", "kv", "fc3", "out_proj", "q_proj", "k_proj", "v_proj",
                      "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]

_VERBS = ["pick up", "put", "place", "push", "move", "open", "close", "stack", "lift", "slide", "turn on"]
_OBJECTS = ["cube", "bowl", "plate", "mug", "carrot", "spoon", "drawer", "basket", "book", "box", "cup"]
_PLACES = ["on the plate", "in the basket", "into the drawer", "to the goal", "on the stove", "in the bowl"]


def instruction_corpus(n: int = 400, seed: int = 0) -> list[str]:
    """Generated robot instructions in OpenVLA's prompt (deterministic)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        text = f"{rng.choice(_VERBS)} the {rng.choice(_OBJECTS)}"
        if rng.random() < 0.6:
            text += f" {rng.choice(_PLACES)}"
        out.append(f"In: What action should the robot take to {text}?\nOut: ")
    letters = "abcdefghijklmnopqrstuvwxyz"
    for _ in range(4 * n):  # filler words, so a 512-piece vocabulary fills up
        out.append(" ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 6))) for _ in range(8)))
    return out


def build_llama_style_tokenizer(vocab_size: int = 512):
    """A SentencePiece-style BPE (``▁`` marks word starts, the lone ``▁`` is a piece) with
    ``<unk>`` = 0, ``<s>`` = 1, ``</s>`` = 2 and ``<PAD>`` added at id ``vocab_size``."""
    # lazy: transformers (~2 s) only for writing a tiny checkpoint
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Strip(" ", 1, 0)])
    alphabet = [chr(c) for c in range(32, 127)] + ["\n", "\u2581"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(instruction_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=2048, padding_side="right", clean_up_tokenization_spaces=False)
    if len(fast) != vocab_size:
        raise ValueError(f"trained {len(fast)} pieces, wanted {vocab_size}")
    fast.add_special_tokens({"pad_token": "<PAD>"})
    return fast


def _tower_shapes(kind: str, width: int, depth: int, mlp: int, patches: int, patch: int) -> dict[str, tuple]:
    s: dict[str, tuple] = {"patch_embed.proj.weight": (width, 3, patch, patch), "patch_embed.proj.bias": (width,),
                           "pos_embed": (1, patches, width), "norm.weight": (width,), "norm.bias": (width,)}
    if kind == "dinov2":
        s.update({"cls_token": (1, 1, width), "reg_token": (1, 4, width)})
    else:
        s.update({"attn_pool.latent": (1, 1, width), "attn_pool.q.weight": (width, width),
                  "attn_pool.q.bias": (width,), "attn_pool.kv.weight": (2 * width, width),
                  "attn_pool.kv.bias": (2 * width,), "attn_pool.proj.weight": (width, width),
                  "attn_pool.proj.bias": (width,), "attn_pool.norm.weight": (width,),
                  "attn_pool.norm.bias": (width,), "attn_pool.mlp.fc1.weight": (mlp, width),
                  "attn_pool.mlp.fc1.bias": (mlp,), "attn_pool.mlp.fc2.weight": (width, mlp),
                  "attn_pool.mlp.fc2.bias": (width,)})
    for i in range(depth):
        b = f"blocks.{i}."
        s.update({b + "norm1.weight": (width,), b + "norm1.bias": (width,), b + "attn.qkv.weight": (3 * width, width),
                  b + "attn.qkv.bias": (3 * width,), b + "attn.proj.weight": (width, width),
                  b + "attn.proj.bias": (width,), b + "norm2.weight": (width,), b + "norm2.bias": (width,),
                  b + "mlp.fc1.weight": (mlp, width), b + "mlp.fc1.bias": (mlp,), b + "mlp.fc2.weight": (width, mlp),
                  b + "mlp.fc2.bias": (width,)})
        if kind == "dinov2":
            s.update({b + "ls1.scale_factor": (width,), b + "ls2.scale_factor": (width,)})
    return s


def _random(shapes: dict[str, tuple], gen: torch.Generator) -> dict[str, torch.Tensor]:
    out = {}
    for name, shape in shapes.items():
        if (name.endswith(("norm1.weight", "norm2.weight", "norm.weight"))
                or ".norm." in name and name.endswith("weight")):
            t = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        elif "scale_factor" in name:
            t = 0.5 + 0.1 * torch.randn(shape, generator=gen)
        elif name.endswith("bias"):
            t = 0.02 * torch.randn(shape, generator=gen)
        else:
            fan_in = shape[1] if len(shape) >= 2 and name.endswith("weight") else shape[-1]
            if len(shape) == 4:
                fan_in = shape[1] * shape[2] * shape[3]
            std = 0.5 / max(fan_in, 1) ** 0.5 if name.endswith("weight") else 0.5
            t = std * torch.randn(shape, generator=gen)
        out[name] = t
    return out


def tiny_norm_stats(action_dim: int = 7, proprio_dim: int = 8, identity: bool = False) -> dict[str, Any]:
    """Statistics in ``dataset_statistics.json``'s layout under :data:`TINY_UNNORM_KEY`; the
    gripper (last dimension) is masked. ``identity``: q01 = -1, q99 = 1 (env actions stay in
    [-1, 1])."""
    gen = torch.Generator().manual_seed(1)
    if identity:
        q01, q99 = [-1.0] * action_dim, [1.0] * action_dim
    else:
        q01 = (-0.5 - torch.rand(action_dim, generator=gen)).tolist()
        q99 = (0.5 + torch.rand(action_dim, generator=gen)).tolist()
    action = {"mean": [0.0] * action_dim, "std": [1.0] * action_dim, "max": [x + 0.1 for x in q99],
              "min": [x - 0.1 for x in q01], "q01": q01, "q99": q99,
              "mask": [True] * (action_dim - 1) + [False]}
    proprio = {"mean": [0.0] * proprio_dim, "std": [1.0] * proprio_dim, "max": [2.0] * proprio_dim,
               "min": [-2.0] * proprio_dim, "q01": [-1.5] * proprio_dim, "q99": [1.5] * proprio_dim,
               "mask": [True] * proprio_dim}
    return {TINY_UNNORM_KEY: {"action": action, "proprio": proprio, "num_transitions": 1000, "num_trajectories": 10}}


def write_tiny_openvla(out_dir: str | Path, seed: int = 0, image_size: int = 32, patch: int = 8,
                       dino_width: int = 32, siglip_width: int = 48, tower_depth: int = 3, llm_width: int = 64,
                       llm_layers: int = 2, base_vocab: int = 512, action_dim: int = 7, identity_stats: bool = False,
                       fused: bool = True, proprio_dim: int | None = None, action_head: bool = False,
                       shard_bytes: int = 200_000) -> Path:
    """Writes a tiny real-format folder (see the module docstring); returns its path.

    Args:
        out_dir: destination folder (created).
        seed: weights' random seed.
        image_size, patch: tower input side and patch size.
        dino_width, siglip_width, tower_depth: tower sizes (widths divisible by 16).
        llm_width, llm_layers: Llama sizes.
        base_vocab: tokenizer vocabulary ``V`` without ``<PAD>``.
        action_dim: length of the statistics' vectors.
        identity_stats: q01 = -1 / q99 = 1 (for simulators whose actions live in [-1, 1]).
        fused: DINOv2 + SigLIP (else SigLIP alone, ``siglip-vit-so400m``).
        proprio_dim: also write an OFT ``proprio_projector--100_checkpoint.pt`` reading this many values.
        action_head: also write an OFT ``action_head--100_checkpoint.pt`` (L1 head, carried only).
        shard_bytes: shard size (small, so the index has several shards).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    patches = (image_size // patch) ** 2
    tok = build_llama_style_tokenizer(base_vocab)
    tok.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(cfg_path.read_text())
    tcfg["tokenizer_class"] = "LlamaTokenizer"
    cfg_path.write_text(json.dumps(tcfg, indent=2))
    towers = [("featurizer", "dinov2", dino_width), ("fused_featurizer", "siglip", siglip_width)] if fused else [
        ("featurizer", "siglip", siglip_width)]
    state: dict[str, torch.Tensor] = {}
    for name, kind, width in towers:
        shapes = _tower_shapes(kind, width, tower_depth, 2 * width, patches, patch)
        state.update({f"vision_backbone.{name}.{k}": v for k, v in _random(shapes, gen).items()})
    vdim = sum(w for _, _, w in towers)
    vocab = -(-(base_vocab + 1) // 64) * 64
    proj = ({"projector.fc1.weight": (4 * vdim, vdim), "projector.fc1.bias": (4 * vdim,),
             "projector.fc2.weight": (llm_width, 4 * vdim), "projector.fc2.bias": (llm_width,),
             "projector.fc3.weight": (llm_width, llm_width), "projector.fc3.bias": (llm_width,)} if fused else
            {"projector.fc1.weight": (llm_width, vdim), "projector.fc1.bias": (llm_width,),
             "projector.fc2.weight": (llm_width, llm_width), "projector.fc2.bias": (llm_width,)})
    state.update(_random(proj, gen))
    text_config = {"model_type": "llama", "vocab_size": vocab, "hidden_size": llm_width,
                   "intermediate_size": 2 * llm_width, "num_hidden_layers": llm_layers, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                   "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
                   "pad_token_id": base_vocab, "torch_dtype": "bfloat16"}
    # lazy: transformers (~2 s) only for writing a tiny checkpoint
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    lm = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in text_config.items() if k != "model_type"}))
    for k, v in lm.state_dict().items():
        state[f"language_model.{k}"] = v.detach().clone() if "norm" in k else 2.0 * v.detach().clone()
    write_weights(state, out, max_shard_bytes=shard_bytes, dtype=torch.bfloat16)
    stats = tiny_norm_stats(action_dim, proprio_dim or 8, identity_stats)
    config = {
        "model_type": "openvla", "architectures": ["OpenVLAForActionPrediction"],
        "auto_map": {"AutoConfig": "configuration_prismatic.OpenVLAConfig",
                     "AutoModelForVision2Seq": "modeling_prismatic.OpenVLAForActionPrediction"},
        "vision_backbone_id": "dinosiglip-vit-so-224px" if fused else "siglip-vit-so400m",
        "llm_backbone_id": "llama2-7b-pure", "arch_specifier": "no-align+fused-gelu-mlp" if fused else
        "no-align+gelu-mlp", "use_fused_vision_backbone": fused,
        "image_resize_strategy": "resize-naive", "timm_model_ids": [DINO_ID, SIGLIP_ID] if fused else [SIGLIP_ID],
        "timm_override_act_layers": [None, None] if fused else [None],
        "image_sizes": [image_size, image_size] if fused else [image_size], "llm_max_length": 2048,
        "pad_token_id": base_vocab, "pad_to_multiple_of": 64, "text_config": text_config, "n_action_bins": 256,
        "norm_stats": stats, "output_projector_states": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.40.1",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / STATS_FILE).write_text(json.dumps(stats, indent=2))
    pre = {"image_processor_type": "PrismaticImageProcessor", "image_resize_strategy": "resize-naive",
           "input_sizes": [[3, image_size, image_size]] * len(towers), "interpolations": ["bicubic"] * len(towers),
           "means": ([[0.485, 0.456, 0.406]] if fused else []) + [[0.5, 0.5, 0.5]],
           "stds": ([[0.229, 0.224, 0.225]] if fused else []) + [[0.5, 0.5, 0.5]],
           "use_fused_vision_backbone": fused, "processor_class": "PrismaticProcessor"}
    (out / "preprocessor_config.json").write_text(json.dumps(pre, indent=2))
    if proprio_dim:
        p = _random({"fc1.weight": (llm_width, proprio_dim), "fc1.bias": (llm_width,),
                     "fc2.weight": (llm_width, llm_width), "fc2.bias": (llm_width,)}, gen)
        torch.save({f"module.{k}": v.to(torch.bfloat16) for k, v in p.items()},
                   out / "proprio_projector--100_checkpoint.pt")
    if action_head:
        h = _random({"model.fc1.weight": (llm_width, llm_width * action_dim),
                     "model.fc2.weight": (action_dim, llm_width)}, gen)
        torch.save({f"module.{k}": v.to(torch.bfloat16) for k, v in h.items()}, out / "action_head--100_checkpoint.pt")
    return out


def original_lora_modules(folder: str | Path) -> list[tuple[str, tuple[int, ...]]]:
    """``(module name, weight shape)`` of the modules RLinf's LoRA target list matches in a
    checkpoint (Linear and Conv2d weights, original names)."""
    shapes = inspect_folder(folder).shapes()
    out = []
    for key, shape in sorted(shapes.items()):
        if not key.endswith(".weight") or len(shape) not in (2, 4):
            continue
        module = key[: -len(".weight")]
        if module.rsplit(".", 1)[-1] in RLINF_LORA_TARGETS:
            out.append((module, tuple(shape)))
    return out


def write_tiny_lora(folder: str | Path, out_dir: str | Path, rank: int = 4, alpha: float | None = None,
                    seed: int = 0, scale: float = 0.05) -> Path:
    """A PEFT LoRA adapter for a (tiny) checkpoint in RLinf's layout: ``adapter_config.json``
    with RLinf's target list and ``adapter_model.safetensors`` keyed
    ``base_model.model.<original module>.lora_{A,B}.weight``; both A and B random (non-zero), so
    the adapter changes the outputs."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for module, shape in original_lora_modules(folder):
        if len(shape) == 2:
            a, b = (rank, shape[1]), (shape[0], rank)
        else:
            a, b = (rank, shape[1], shape[2], shape[3]), (shape[0], rank, 1, 1)
        tensors[f"base_model.model.{module}.lora_A.weight"] = scale * torch.randn(a, generator=gen)
        tensors[f"base_model.model.{module}.lora_B.weight"] = scale * torch.randn(b, generator=gen)
    save_file(tensors, str(out / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "task_type": None, "r": rank, "lora_alpha": alpha if alpha is not None else rank,
              "lora_dropout": 0.0, "target_modules": RLINF_LORA_TARGETS, "bias": "none", "fan_in_fan_out": False,
              "init_lora_weights": "gaussian", "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {},
              "use_rslora": False, "use_dora": False, "base_model_name_or_path": str(folder)}
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return out
