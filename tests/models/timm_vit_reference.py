"""A small plain-torch reference of the original OpenVLA vision path, written from timm's ViT
semantics, reading the checkpoint's own (timm / Prismatic) tensor names directly. Test-only.

timm ViT forward: ``patch_embed.proj`` conv -> position embeddings (DINOv2-reg:
``no_embed_class``, added to the patches BEFORE the class + register tokens are prepended;
SigLIP: no class token) -> blocks ``x += ls1(attn(norm1(x))); x += ls2(mlp(norm2(x)))`` with
``attn.qkv`` reshaped ``[B, N, 3, heads, head_dim]`` -> OpenVLA reads
``get_intermediate_layers(n={depth - 2})``: the output of the penultimate block, prefix tokens
dropped, no final norm. Projector ``fused-gelu-mlp``: ``fc3(gelu(fc2(gelu(fc1(x)))))``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def _ln(x, state, prefix):
    return F.layer_norm(x, x.shape[-1:], state[prefix + ".weight"], state[prefix + ".bias"], eps=1e-6)


def vit_penultimate_features(state: dict, pixels: torch.Tensor, heads: int = 16) -> torch.Tensor:
    """``state``: one tower's tensors (timm names); ``pixels`` ``[B, 3, H, W]`` normalised."""
    w, b = state["patch_embed.proj.weight"], state["patch_embed.proj.bias"]
    x = F.conv2d(pixels, w, b, stride=w.shape[-1]).flatten(2).transpose(1, 2)
    x = x + state["pos_embed"]
    prefix = []
    if "cls_token" in state:
        prefix.append(state["cls_token"].expand(x.shape[0], -1, -1))
    if "reg_token" in state:
        prefix.append(state["reg_token"].expand(x.shape[0], -1, -1))
    x = torch.cat(prefix + [x], dim=1)
    depth = len({k.split(".")[1] for k in state if k.startswith("blocks.")})
    for i in range(depth - 1):  # blocks 0 .. depth-2: the penultimate block's output
        p = f"blocks.{i}."
        h = _ln(x, state, p + "norm1")
        bsz, n, d = h.shape
        qkv = F.linear(h, state[p + "attn.qkv.weight"], state[p + "attn.qkv.bias"])
        qkv = qkv.reshape(bsz, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.softmax((q @ k.transpose(-2, -1)) * (d // heads) ** -0.5, dim=-1)
        a = (att @ v).transpose(1, 2).reshape(bsz, n, d)
        a = F.linear(a, state[p + "attn.proj.weight"], state[p + "attn.proj.bias"])
        if p + "ls1.scale_factor" in state:
            a = a * state[p + "ls1.scale_factor"]
        x = x + a
        h = _ln(x, state, p + "norm2")
        m = F.linear(F.gelu(F.linear(h, state[p + "mlp.fc1.weight"], state[p + "mlp.fc1.bias"])),
                     state[p + "mlp.fc2.weight"], state[p + "mlp.fc2.bias"])
        if p + "ls2.scale_factor" in state:
            m = m * state[p + "ls2.scale_factor"]
        x = x + m
    return x[:, len(prefix) and sum(t.shape[1] for t in prefix):]


def fused_projector(state: dict, feats: torch.Tensor) -> torch.Tensor:
    """``projector.fc1 / fc2 / fc3`` with GELUs between (OpenVLA's fused-gelu-mlp)."""
    x = F.gelu(F.linear(feats, state["projector.fc1.weight"], state["projector.fc1.bias"]))
    x = F.gelu(F.linear(x, state["projector.fc2.weight"], state["projector.fc2.bias"]))
    return F.linear(x, state["projector.fc3.weight"], state["projector.fc3.bias"])


def original_decode(token_ids: np.ndarray, base_vocab: int, n_bins: int = 256) -> np.ndarray:
    """OpenVLA's ``predict_action`` decode, in numpy."""
    bins = np.linspace(-1, 1, n_bins)
    centers = (bins[:-1] + bins[1:]) / 2.0
    d = np.clip(base_vocab - token_ids - 1, a_min=0, a_max=centers.shape[0] - 1)
    return centers[d]


def original_encode(actions: np.ndarray, base_vocab: int, n_bins: int = 256) -> np.ndarray:
    """OpenVLA's ``ActionTokenizer.__call__``: ``V - digitize(clip(a, -1, 1), bins)``."""
    bins = np.linspace(-1, 1, n_bins)
    return base_vocab - np.digitize(np.clip(actions, -1.0, 1.0), bins)


def original_unnormalize(x: np.ndarray, stats: dict) -> np.ndarray:
    """OpenVLA's BOUNDS_Q99 un-normalisation."""
    mask = np.array(stats.get("mask", np.ones_like(stats["q01"], dtype=bool)))
    high, low = np.array(stats["q99"]), np.array(stats["q01"])
    return np.where(mask, 0.5 * (x + 1) * (high - low + 1e-8) + low, x)
