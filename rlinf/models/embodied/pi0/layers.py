"""The pieces of π0 / π0.5 that transformers does not have: adaptive RMSNorm, the joint
prefix/suffix attention of the VLM and the action expert, the attention masks and the time
features.

Two Gemma stacks (:class:`GemmaStack`) run layer by layer side by side: each stream (the VLM's
prefix tokens, the expert's suffix tokens) has its own norms, projections and MLP, but one
attention over the concatenated tokens (``q``/``k``/``v`` of both streams joined along the
sequence). So both stacks need the same heads, key/value heads and head width, which
:func:`joint_forward` checks. Any subset of the streams can run: the prefix alone (returning
its per-layer keys / values, the cache), or the suffix alone against a cached prefix.

Masks follow big_vision's ``make_att_2d_masks``: token ``i`` attends ``j`` iff
``cumsum(ar)[j] <= cumsum(ar)[i]`` and both are valid.

Example:
    >>> import torch
    >>> make_att_2d_masks(torch.ones(1, 3, dtype=torch.bool), torch.tensor([[0, 1, 0]])).int().tolist()
    [[[1, 0, 0], [1, 1, 1], [1, 1, 1]]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

#: The additive value of a blocked attention entry (openpi's ``-2.3819763e38``).
MASK_VALUE = -2.3819763e38


def make_att_2d_masks(pad_masks: torch.Tensor, ar_masks: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` bool: query ``i`` may attend key ``j`` (see the module docstring).

    Args:
        pad_masks: ``[B, N]`` bool, True for real tokens.
        ar_masks: ``[B, N]`` (or ``[N]``) int/bool, 1 where later tokens start a new block.
    """
    if ar_masks.dim() == 1:
        ar_masks = ar_masks[None].expand(pad_masks.shape[0], -1)
    cum = torch.cumsum(ar_masks.long(), dim=1)
    att = cum[:, None, :] <= cum[:, :, None]
    pad = pad_masks[:, None, :] & pad_masks[:, :, None]
    return att & pad


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, Q, K]`` bool -> ``[B, 1, Q, K]`` additive mask (0 or :data:`MASK_VALUE`)."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed[:, None], zero, torch.tensor(MASK_VALUE, dtype=dtype, device=allowed.device))


def time_features(t: torch.Tensor, dim: int, min_period: float = 4e-3, max_period: float = 4.0) -> torch.Tensor:
    """Sine-cosine features ``[B, dim]`` of the flow times ``t`` ``[B]`` (computed in float64,
    returned in ``t``'s dtype): periods ``min_period * (max_period / min_period) ** linspace(0, 1,
    dim / 2)``, ``[sin(2 pi t / p), cos(2 pi t / p)]``.

    >>> time_features(torch.zeros(2), 4).tolist()
    [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]]
    """
    if dim % 2:
        raise ValueError(f"time feature width must be even, got {dim}")
    if t.dim() != 1:
        raise ValueError(f"times must be [B], got shape {tuple(t.shape)}")
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    arg = (2 * math.pi / period)[None, :] * t.double()[:, None]
    return torch.cat([torch.sin(arg), torch.cos(arg)], dim=1).to(t.dtype)


class AdaRMSNorm(nn.Module):
    """π0.5's adaptive RMSNorm: ``dense(cond)`` -> ``(scale, shift, gate)``;
    ``y = rms(x) * (1 + scale) + shift``; the layer's residual becomes ``x + y' * gate``.

    The only parameters are ``dense.{weight, bias}`` (``[3 D, C]``, zero-initialised as in
    openpi). With a zero ``dense`` the output is plain RMSNorm of unit scale and the gate is 0.

    >>> norm = AdaRMSNorm(4, 2)
    >>> y, gate = norm(torch.ones(1, 3, 4), torch.ones(1, 2))
    >>> y.shape, gate.abs().sum().item()
    (torch.Size([1, 3, 4]), 0.0)
    """

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        nn.init.zeros_(self.dense.weight)
        nn.init.zeros_(self.dense.bias)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(normalised x, gate)``; ``cond`` is ``[B, C]`` (one modulation per sample)."""
        var = x.float().pow(2).mean(-1, keepdim=True)
        normed = x.float() * torch.rsqrt(var + self.eps)
        mod = self.dense(cond)
        if x.dim() == 3:
            mod = mod[:, None, :]
        scale, shift, gate = mod.chunk(3, dim=-1)
        out = normed * (1 + scale.float()) + shift.float()
        return out.to(x.dtype), gate.to(x.dtype)


def apply_norm(norm: nn.Module, x: torch.Tensor, cond: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Runs a plain (``GemmaRMSNorm``) or adaptive norm; returns ``(y, gate or None)``."""
    if isinstance(norm, AdaRMSNorm):
        if cond is None:
            raise ValueError("an adaRMS stack needs its time condition")
        return norm(x, cond)
    return norm(x), None


def gated_residual(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    """``x + y`` (plain) or ``x + y * gate`` (adaRMS)."""
    return x + y if gate is None else x + y * gate


class GemmaBlock(nn.Module):
    """One decoder layer's parameters under Gemma's names: ``self_attn.{q,k,v,o}_proj``
    (transformers' ``GemmaAttention``), ``mlp`` (``GemmaMLP``), ``input_layernorm``,
    ``post_attention_layernorm`` (``GemmaRMSNorm``, or :class:`AdaRMSNorm` with ``cond_dim``)."""

    def __init__(self, config, layer_idx: int, cond_dim: int | None = None):
        super().__init__()
        # lazy: transformers' Gemma (~2 s) only when a model is built; the pre-Ray checks import the pi0 package
        from transformers.models.gemma.modeling_gemma import GemmaAttention, GemmaMLP, GemmaRMSNorm

        self.self_attn = GemmaAttention(config, layer_idx)
        self.mlp = GemmaMLP(config)
        make = (lambda: AdaRMSNorm(config.hidden_size, cond_dim, config.rms_norm_eps)) if cond_dim else (
            lambda: GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps))
        self.input_layernorm = make()
        self.post_attention_layernorm = make()


class GemmaStack(nn.Module):
    """A Gemma decoder (``layers``, final ``norm``, rotary embedding, optional ``embed_tokens``)
    whose layers :func:`joint_forward` runs.

    Args:
        config: a transformers ``GemmaConfig`` (sizes).
        cond_dim: adaRMS condition width (π0.5's expert), or None for plain RMSNorm.
        with_embedding: build ``embed_tokens`` (the VLM; the expert has none).
    """

    def __init__(self, config, cond_dim: int | None = None, with_embedding: bool = False):
        super().__init__()
        # lazy: transformers' Gemma (~2 s) only when a model is built; the pre-Ray checks import the pi0 package
        from transformers.models.gemma.modeling_gemma import GemmaRMSNorm, GemmaRotaryEmbedding

        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size) if with_embedding else None
        self.layers = nn.ModuleList(GemmaBlock(config, i, cond_dim) for i in range(config.num_hidden_layers))
        self.norm = (AdaRMSNorm(config.hidden_size, cond_dim, config.rms_norm_eps) if cond_dim
                     else GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps))
        self.rotary_emb = GemmaRotaryEmbedding(config)

    @property
    def adaptive(self) -> bool:
        """The norms are adaRMS (π0.5's expert)."""
        return isinstance(self.norm, AdaRMSNorm)


def _heads(stack: GemmaStack) -> tuple[int, int, int]:
    c = stack.config
    return c.num_attention_heads, c.num_key_value_heads, c.head_dim


def joint_forward(stacks: Sequence[GemmaStack], hiddens: Sequence[torch.Tensor | None],
                  conds: Sequence[torch.Tensor | None], mask: torch.Tensor, position_ids: torch.Tensor,
                  past_kv: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
                  return_kv: bool = False) -> tuple[list[torch.Tensor | None], list | None]:
    """Runs the layers of several Gemma stacks with one attention over their joined tokens.

    Args:
        stacks: the stacks (VLM, expert).
        hiddens: ``[B, T_i, D_i]`` input embeddings per stack, or None to skip a stack.
        conds: adaRMS condition ``[B, C]`` per stack (None for plain norms).
        mask: ``[B, 1, Q, K]`` additive mask; ``Q`` = the active tokens, ``K`` = cached + active.
        position_ids: ``[B, Q]`` RoPE positions of the active tokens.
        past_kv: per layer ``(k, v)`` ``[B, KV, P, hd]`` (after RoPE) prepended to the keys.
        return_kv: also return the per-layer ``(k, v)`` of the active tokens (a cache).

    Returns:
        ``(outputs, kv)``: per stack the final-norm output (None where skipped) and the cache.
    """
    active = [i for i, h in enumerate(hiddens) if h is not None]
    if not active:
        raise ValueError("joint_forward needs at least one stream")
    heads = {_heads(stacks[i]) for i in active}
    if len(heads) != 1:
        raise ValueError(f"joint attention needs equal (heads, kv heads, head_dim) in both stacks, got {sorted(heads)}")
    n_heads, n_kv, hd = heads.pop()
    depth = {len(stacks[i].layers) for i in active}
    if len(depth) != 1:
        raise ValueError(f"joint attention needs stacks of equal depth, got {sorted(depth)}")
    xs = {i: hiddens[i] for i in active}
    first = stacks[active[0]]
    cos, sin = first.rotary_emb(xs[active[0]], position_ids)
    cos, sin = cos[:, None], sin[:, None]
    lengths = [xs[i].shape[1] for i in active]
    cache = [] if return_kv else None
    # lazy: transformers' Gemma (~2 s) only when a model is built; the pre-Ray checks import the pi0 package
    from transformers.models.gemma.modeling_gemma import rotate_half

    for li in range(depth.pop()):
        qs, ks, vs, gates = [], [], [], {}
        for i in active:
            layer = stacks[i].layers[li]
            h, gates[i] = apply_norm(layer.input_layernorm, xs[i], conds[i])
            b, t = h.shape[:2]
            qs.append(layer.self_attn.q_proj(h).view(b, t, n_heads, hd).transpose(1, 2))
            ks.append(layer.self_attn.k_proj(h).view(b, t, n_kv, hd).transpose(1, 2))
            vs.append(layer.self_attn.v_proj(h).view(b, t, n_kv, hd).transpose(1, 2))
        q, k, v = torch.cat(qs, 2), torch.cat(ks, 2), torch.cat(vs, 2)
        q = q * cos.to(q.dtype) + rotate_half(q) * sin.to(q.dtype)
        k = k * cos.to(k.dtype) + rotate_half(k) * sin.to(k.dtype)
        if return_kv:
            cache.append((k, v))
        if past_kv is not None:
            k = torch.cat([past_kv[li][0].to(k.dtype), k], 2)
            v = torch.cat([past_kv[li][1].to(v.dtype), v], 2)
        att = _attention(q, k, v, mask, hd ** -0.5, n_heads // n_kv)
        start = 0
        for i, length in zip(active, lengths):
            layer = stacks[i].layers[li]
            part = att[:, start:start + length]
            start += length
            out = layer.self_attn.o_proj(part.to(layer.self_attn.o_proj.weight.dtype))
            x = gated_residual(xs[i], out, gates[i])
            h, gate = apply_norm(layer.post_attention_layernorm, x, conds[i])
            xs[i] = gated_residual(x, layer.mlp(h), gate)
    outputs: list[torch.Tensor | None] = [None] * len(stacks)
    for i in active:
        outputs[i] = apply_norm(stacks[i].norm, xs[i], conds[i])[0]
    return outputs, cache


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scaling: float,
               groups: int) -> torch.Tensor:
    """Eager attention with grouped key/value heads; softmax in fp32. Returns ``[B, Q, H * hd]``."""
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * scaling
    scores = scores + mask[..., : k.shape[2]].to(scores.dtype)
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs, v).transpose(1, 2)
    return out.reshape(out.shape[0], out.shape[1], -1)
