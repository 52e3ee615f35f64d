"""OpenVLA's vision towers (timm ViTs in the checkpoint) as transformers' own classes.

A real OpenVLA folder stores its vision backbone under timm's parameter names
(``vision_backbone.featurizer.*``, and ``vision_backbone.fused_featurizer.*`` for the fused
DINOv2 + SigLIP backbone). We run them as ``Dinov2WithRegistersModel`` / ``SiglipVisionModel``
(no timm: it needs torchvision, which breaks beside the CPU torch). The mapping:

* ``attn.qkv`` (one ``[3D, D]`` Linear) is split in three along dim 0 into ``q_proj`` /
  ``k_proj`` / ``v_proj``; ``attn.proj`` is ``o_proj`` (DINOv2) / ``out_proj`` (SigLIP).
* ``ls1.scale_factor`` / ``ls2.scale_factor`` (OpenVLA renames timm's ``gamma``) are
  ``layer_scale1.lambda1`` / ``layer_scale2.lambda1``; ``reg_token`` is ``register_tokens``.
* DINOv2's ``pos_embed`` ``[1, P, D]`` has no slot for the class token (timm's
  ``no_embed_class``): transformers adds position embeddings before inserting the registers and
  expects ``[1, P + 1, D]``, so a zero row is prepended (the class token then gets no position
  term, exactly as in timm). SigLIP's ``pos_embed[0]`` is ``position_embedding.weight``.
* SigLIP uses exact GELU (``hidden_act="gelu"``).

OpenVLA reads the features of the PENULTIMATE block, before the final norm, with the prefix
tokens (class + registers) dropped (timm's ``get_intermediate_layers(n={depth - 2})``). So each
tower is built with ``depth - 1`` layers and no final norm; the last block, ``norm`` and
SigLIP's ``attn_pool`` are never used and are carried through unchanged
(:func:`split_tower_state` returns them separately, :func:`join_tower_state` puts them back).

Sizes come from the tensors (width, depth, patch, MLP width, registers, layer scale) and the
config (image size). Heads are not in the tensors: the two towers OpenVLA ships (ViT-L/14
DINOv2 and SigLIP so400m/14) both have 16; a tiny checkpoint of the same layout keeps 16 heads
(its widths must be divisible by 16).

Example:
    >>> import torch
    >>> shapes = {"pos_embed": (1, 4, 32), "patch_embed.proj.weight": (32, 3, 8, 8),
    ...           "blocks.0.mlp.fc1.weight": (64, 32), "blocks.1.mlp.fc1.weight": (64, 32)}
    >>> spec = tower_spec("vit_so400m_patch14_siglip_224", 16, shapes)
    >>> spec.kind, spec.depth, spec.heads, spec.num_patches
    ('siglip', 2, 16, 4)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

#: Heads of the towers OpenVLA ships (not stored in the weights).
TOWER_HEADS = 16

#: Per-channel normalisation of each tower's input (OpenVLA's preprocessor_config.json).
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
SIGLIP_MEAN, SIGLIP_STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class TowerSpec:
    """One ViT tower as the checkpoint describes it.

    Attributes:
        kind: ``dinov2`` or ``siglip`` (from the timm id).
        timm_id: the id in ``config.json`` (``timm_model_ids``).
        width, depth, heads, mlp, patch, image_size: ViT sizes (depth as stored, incl. the
            unused last block).
        registers: register tokens (DINOv2 ``reg_token``; 0 without).
        layer_scale: blocks carry ``ls1`` / ``ls2`` scale factors.
        class_token: a class token precedes the patches.
    """

    kind: str
    timm_id: str
    width: int
    depth: int
    heads: int
    mlp: int
    patch: int
    image_size: int
    registers: int
    layer_scale: bool
    class_token: bool

    @property
    def num_patches(self) -> int:
        """Patch tokens per image."""
        return (self.image_size // self.patch) ** 2

    @property
    def num_prefix_tokens(self) -> int:
        """Class + register tokens before the patches."""
        return int(self.class_token) + self.registers

    @property
    def mean_std(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Input normalisation of this tower."""
        return (IMAGENET_MEAN, IMAGENET_STD) if self.kind == "dinov2" else (SIGLIP_MEAN, SIGLIP_STD)


def tower_kind(timm_id: str) -> str:
    """``dinov2`` or ``siglip`` from a timm model id; ValueError for anything else."""
    tid = timm_id.lower()
    if "dinov2" in tid:
        return "dinov2"
    if "siglip" in tid:
        return "siglip"
    raise ValueError(f"unsupported vision tower {timm_id!r} (supported: timm DINOv2 and SigLIP ViTs)")


def tower_spec(timm_id: str, image_size: int, shapes: Mapping[str, tuple[int, ...]]) -> TowerSpec:
    """Reads a tower's sizes from its parameter shapes (names relative to the tower).

    Args:
        timm_id: the tower's timm id (decides DINOv2 vs SigLIP).
        image_size: input side in pixels (``config.json`` ``image_sizes``).
        shapes: ``name -> shape`` of the tower's tensors.

    Returns:
        The spec.

    Raises:
        ValueError: a tensor the layout needs is missing or the sizes disagree.
    """
    kind = tower_kind(timm_id)
    need = ("patch_embed.proj.weight", "pos_embed")
    for key in need:
        if key not in shapes:
            raise ValueError(f"vision tower {timm_id!r}: missing tensor {key!r}")
    width, _, patch, patch_w = shapes["patch_embed.proj.weight"]
    if patch != patch_w:
        raise ValueError(f"vision tower {timm_id!r}: non-square patches {patch}x{patch_w}")
    blocks = {int(k.split(".")[1]) for k in shapes if k.startswith("blocks.")}
    if not blocks or sorted(blocks) != list(range(len(blocks))):
        raise ValueError(f"vision tower {timm_id!r}: blocks must be numbered 0..n-1, found {sorted(blocks)}")
    depth = len(blocks)
    if depth < 2:
        raise ValueError(f"vision tower {timm_id!r}: needs >= 2 blocks (features come from the penultimate)")
    mlp = shapes["blocks.0.mlp.fc1.weight"][0]
    registers = shapes["reg_token"][1] if "reg_token" in shapes else 0
    spec = TowerSpec(kind=kind, timm_id=timm_id, width=int(width), depth=depth, heads=TOWER_HEADS, mlp=int(mlp),
                     patch=int(patch), image_size=int(image_size), registers=int(registers),
                     layer_scale="blocks.0.ls1.scale_factor" in shapes, class_token="cls_token" in shapes)
    if spec.width % spec.heads:
        raise ValueError(f"vision tower {timm_id!r}: width {spec.width} is not divisible by {spec.heads} heads")
    if tuple(shapes["pos_embed"]) != (1, spec.num_patches, spec.width):
        raise ValueError(f"vision tower {timm_id!r}: pos_embed {tuple(shapes['pos_embed'])} does not fit "
                         f"{spec.num_patches} patches of a {image_size}px image (patch {patch}) x width {width}")
    return spec


def build_tower(spec: TowerSpec) -> nn.Module:
    """The transformers model for ``spec`` with ``depth - 1`` layers and no final norm.

    Weights are random until loaded (:func:`split_tower_state` gives the state dict).
    """
    if spec.kind == "dinov2":
        # lazy: transformers (~2 s) only when a tower is built; the pre-Ray folder check imports this package
        from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

        if not spec.class_token:
            raise ValueError(f"{spec.timm_id}: a DINOv2 tower without a class token is not supported")
        if spec.mlp % spec.width:
            raise ValueError(f"{spec.timm_id}: MLP width {spec.mlp} is not a multiple of the width {spec.width}")
        cfg = Dinov2WithRegistersConfig(
            hidden_size=spec.width, num_hidden_layers=spec.depth - 1, num_attention_heads=spec.heads,
            mlp_ratio=spec.mlp // spec.width, image_size=spec.image_size, patch_size=spec.patch,
            num_register_tokens=spec.registers, layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True,
            layerscale_value=1.0, use_swiglu_ffn=False, drop_path_rate=0.0)
        model = Dinov2WithRegistersModel(cfg)
        model.layernorm = nn.Identity()
        if not spec.layer_scale:
            for layer in model.encoder.layer:
                layer.layer_scale1, layer.layer_scale2 = nn.Identity(), nn.Identity()
        return model
    # lazy: transformers (~2 s) only when a tower is built; the pre-Ray folder check imports this package
    from transformers import SiglipVisionConfig, SiglipVisionModel

    if spec.class_token or spec.registers or spec.layer_scale:
        raise ValueError(f"{spec.timm_id}: a SigLIP tower with class/register tokens or layer scale "
                         "is not supported")
    cfg = SiglipVisionConfig(hidden_size=spec.width, intermediate_size=spec.mlp, num_hidden_layers=spec.depth - 1,
                             num_attention_heads=spec.heads, image_size=spec.image_size, patch_size=spec.patch,
                             hidden_act="gelu", layer_norm_eps=1e-6, vision_use_head=False)
    model = SiglipVisionModel(cfg)
    getattr(model, "vision_model", model).post_layernorm = nn.Identity()
    return model


@functools.lru_cache(maxsize=1)
def _siglip_prefix() -> str:
    """``vision_model.`` where transformers nests SigLIP's modules (4.x), else ``""`` (5.x)."""
    # lazy: transformers (~2 s) only when a tower is built; the pre-Ray folder check imports this package
    from transformers import SiglipVisionConfig, SiglipVisionModel

    probe = SiglipVisionModel(SiglipVisionConfig(hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                                 num_attention_heads=1, image_size=8, patch_size=8))
    return "vision_model." if hasattr(probe, "vision_model") else ""


def _module_links(spec: TowerSpec) -> list[tuple[str, tuple[str, ...]]]:
    """``(timm module, our module(s))`` for every weight-bearing module the features use; three
    targets = the timm module is split in three along dim 0 (q, k, v)."""
    if spec.kind == "dinov2":
        links = [("patch_embed.proj", ("embeddings.patch_embeddings.projection",))]
        block = "encoder.layer.{i}."
        names = {"norm1": "norm1", "attn.proj": "attention.o_proj", "norm2": "norm2",
                 "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
        qkv = ("attention.q_proj", "attention.k_proj", "attention.v_proj")
    else:
        links = [("patch_embed.proj", (_siglip_prefix() + "embeddings.patch_embedding",))]
        block = _siglip_prefix() + "encoder.layers.{i}."
        names = {"norm1": "layer_norm1", "attn.proj": "self_attn.out_proj", "norm2": "layer_norm2",
                 "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
        qkv = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    for i in range(spec.depth - 1):
        pre = block.format(i=i)
        links.append((f"blocks.{i}.attn.qkv", tuple(pre + q for q in qkv)))
        links += [(f"blocks.{i}.{src}", (pre + dst,)) for src, dst in names.items()]
    return links


def tower_module_links(spec: TowerSpec) -> list[tuple[str, tuple[str, ...]]]:
    """Public view of the module mapping (the LoRA converter maps adapters with it)."""
    return _module_links(spec)


def _param_links(spec: TowerSpec) -> list[tuple[str, str]]:
    """``(timm tensor, our tensor)`` for the tensors that are not module weights / biases."""
    if spec.kind == "dinov2":
        out = [("cls_token", "embeddings.cls_token"), ("pos_embed", "embeddings.position_embeddings")]
        if spec.registers:
            out.append(("reg_token", "embeddings.register_tokens"))
        if spec.layer_scale:
            for i in range(spec.depth - 1):
                out += [(f"blocks.{i}.ls1.scale_factor", f"encoder.layer.{i}.layer_scale1.lambda1"),
                        (f"blocks.{i}.ls2.scale_factor", f"encoder.layer.{i}.layer_scale2.lambda1")]
        return out
    return [("pos_embed", _siglip_prefix() + "embeddings.position_embedding.weight")]


def split_tower_state(state: Mapping[str, torch.Tensor], spec: TowerSpec
                      ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """timm-named tower tensors -> (our state dict, unused tensors carried through).

    Every input tensor lands in exactly one of the two outputs.

    Raises:
        KeyError: a tensor the used blocks need is missing.
    """
    left = dict(state)
    ours: dict[str, torch.Tensor] = {}

    def take(name: str) -> torch.Tensor:
        if name not in left:
            raise KeyError(f"missing tensor {name!r}")
        return left.pop(name)

    for src, dsts in _module_links(spec):
        for suffix in ("weight", "bias"):
            key = f"{src}.{suffix}"
            if key not in left and suffix == "bias":
                continue
            t = take(key)
            parts = t.chunk(len(dsts), dim=0) if len(dsts) > 1 else (t,)
            for dst, part in zip(dsts, parts):
                ours[f"{dst}.{suffix}"] = part
    for src, dst in _param_links(spec):
        t = take(src)
        if spec.kind == "dinov2" and src == "pos_embed":  # class-token slot: zero (timm's no_embed_class)
            t = torch.cat([torch.zeros_like(t[:, :1]), t], dim=1)
        elif spec.kind == "siglip" and src == "pos_embed":
            t = t[0]
        ours[dst] = t
    return ours, left


def join_tower_state(ours: Mapping[str, torch.Tensor], carried: Mapping[str, torch.Tensor], spec: TowerSpec
                     ) -> dict[str, torch.Tensor]:
    """Inverse of :func:`split_tower_state`: our tensors (+ the carried ones) -> timm names."""
    out = dict(carried)
    for src, dsts in _module_links(spec):
        for suffix in ("weight", "bias"):
            keys = [f"{d}.{suffix}" for d in dsts]
            if keys[0] not in ours:
                continue
            out[f"{src}.{suffix}"] = torch.cat([ours[k] for k in keys], 0) if len(keys) > 1 else ours[keys[0]]
    for src, dst in _param_links(spec):
        t = ours[dst]
        if spec.kind == "dinov2" and src == "pos_embed":
            t = t[:, 1:]
        elif spec.kind == "siglip" and src == "pos_embed":
            t = t.unsqueeze(0)
        out[src] = t
    return out


def model_only_keys(spec: TowerSpec) -> set[str]:
    """Our tower's state-dict keys that have no counterpart in the checkpoint (set at build)."""
    return {"embeddings.mask_token"} if spec.kind == "dinov2" else set()


def tower_features(tower: nn.Module, spec: TowerSpec, pixel_values: torch.Tensor) -> torch.Tensor:
    """Penultimate-block patch features ``[N, num_patches, width]`` (prefix tokens dropped).

    Args:
        tower: from :func:`build_tower` (loaded).
        spec: its spec.
        pixel_values: ``[N, 3, H, W]`` normalised for this tower.
    """
    hidden = tower(pixel_values=pixel_values).last_hidden_state
    return hidden[:, spec.num_prefix_tokens:]
