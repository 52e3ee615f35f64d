"""π0 and π0.5 in plain PyTorch (no JAX, no patched transformers), under openpi's parameter names.

:class:`Pi0Model` holds what an openpi ``PI0Pytorch`` holds: ``paligemma_with_expert.paligemma``
(SigLIP ``vision_tower`` from transformers, ``multi_modal_projector.linear``, the Gemma
``language_model``) and ``paligemma_with_expert.gemma_expert`` (the action expert), plus
``action_in_proj`` / ``action_out_proj`` and either π0's ``state_proj`` +
``action_time_mlp_{in,out}`` or π0.5's ``time_mlp_{in,out}`` (adaRMS condition of every expert
norm).

Sequence: prefix = image tokens of each camera (SigLIP + projector, unscaled) then text tokens
(embedding x sqrt(width)); bidirectional among valid tokens. Suffix = π0: state token (its own
block), then the ``H`` action tokens (one block); π0.5: the action tokens only. The prefix never
sees the suffix; positions are ``cumsum(valid) - 1`` and the suffix continues after the valid
prefix.

Flow: ``t = 1`` is noise, ``t = 0`` data; :meth:`Pi0Model.sample_actions` runs ``N`` Euler steps
``x <- x + dt v`` with ``dt = -1/N``; the prefix keys/values are computed once and cached, so each
step runs only the expert. Outputs are normalised actions ``[B, H, action_dim]``.

Example:
    >>> import torch
    >>> from rlinf.models.embodied.pi0.spec import spec_from_shapes, tiny_shapes_example
    >>> model = Pi0Model(spec_from_shapes(tiny_shapes_example(), action_horizon=3)).eval()
    >>> inputs = Pi0Inputs(images=torch.zeros(1, 1, 3, 8, 8), image_masks=torch.ones(1, 1, dtype=torch.bool),
    ...                    tokens=torch.tensor([[2, 5, 7]]), token_mask=torch.ones(1, 3, dtype=torch.bool),
    ...                    state=torch.zeros(1, 6))
    >>> model.sample_actions(inputs, num_steps=2, generator=torch.Generator().manual_seed(0)).shape
    torch.Size([1, 3, 6])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from rlinf.models.embodied.pi0.layers import (
    GemmaStack,
    additive_mask,
    joint_forward,
    make_att_2d_masks,
    time_features,
)
from rlinf.models.embodied.pi0.spec import GemmaSize, Pi0Spec, VisionSize


@dataclass
class Pi0Inputs:
    """One batch of model inputs (already preprocessed, see :mod:`.processing`).

    Attributes:
        images: ``[B, C, 3, S, S]`` float in [-1, 1], one slot per camera.
        image_masks: ``[B, C]`` bool, False for an absent camera.
        tokens: ``[B, L]`` int64 prompt ids (right-padded).
        token_mask: ``[B, L]`` bool.
        state: ``[B, D]`` normalised, zero-padded state (π0's state token; unused by π0.5).
    """

    images: torch.Tensor
    image_masks: torch.Tensor
    tokens: torch.Tensor
    token_mask: torch.Tensor
    state: torch.Tensor

    def to(self, device) -> Pi0Inputs:
        """The same inputs on ``device``."""
        return Pi0Inputs(*(t.to(device) for t in (self.images, self.image_masks, self.tokens, self.token_mask,
                                                    self.state)))


def gemma_config(size: GemmaSize):
    """A transformers ``GemmaConfig`` of these sizes (tanh GELU, RoPE theta 10000, eps 1e-6)."""
    # lazy: transformers (~2 s) only when a model is built; the pre-Ray checks import the pi0 package
    from transformers import GemmaConfig

    return GemmaConfig(hidden_size=size.width, intermediate_size=size.mlp, num_hidden_layers=size.depth,
                       num_attention_heads=size.heads, num_key_value_heads=size.kv_heads, head_dim=size.head_dim,
                       vocab_size=max(size.vocab, 1), hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
                       pad_token_id=None, bos_token_id=None, eos_token_id=None)


def siglip_config(size: VisionSize):
    """A transformers ``SiglipVisionConfig`` of these sizes (no pooling head)."""
    # lazy: transformers (~2 s) only when a model is built; the pre-Ray checks import the pi0 package
    from transformers import SiglipVisionConfig

    return SiglipVisionConfig(hidden_size=size.width, intermediate_size=size.mlp, num_hidden_layers=size.depth,
                              num_attention_heads=size.heads, patch_size=size.patch, image_size=size.image_size,
                              hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, vision_use_head=False)


class _Projector(nn.Module):
    def __init__(self, vision_width: int, width: int):
        super().__init__()
        self.linear = nn.Linear(vision_width, width)


class _Namespace(nn.Module):
    """A plain container, so parameter names follow openpi's module tree."""


class PaliGemmaWithExpert(nn.Module):
    """``paligemma.model.{vision_tower, multi_modal_projector, language_model}`` and
    ``gemma_expert.model`` (openpi's names)."""

    def __init__(self, spec: Pi0Spec):
        super().__init__()
        # lazy: transformers (~2 s) only when a model is built; the pre-Ray checks import the pi0 package
        from transformers import SiglipVisionModel

        self.paligemma = _Namespace()
        self.paligemma.model = _Namespace()
        self.paligemma.model.vision_tower = _Namespace()  # transformers 5 flattened ``vision_model`` away
        self.paligemma.model.vision_tower.vision_model = SiglipVisionModel(siglip_config(spec.vision))
        self.paligemma.model.multi_modal_projector = _Projector(spec.vision.width, spec.vlm.width)
        self.paligemma.model.language_model = GemmaStack(gemma_config(spec.vlm), with_embedding=True)
        self.gemma_expert = _Namespace()
        self.gemma_expert.model = GemmaStack(gemma_config(spec.expert),
                                             cond_dim=spec.expert.width if spec.pi05 else None)

    @property
    def vlm(self) -> GemmaStack:
        """The PaliGemma language model."""
        return self.paligemma.model.language_model

    @property
    def expert(self) -> GemmaStack:
        """The action expert."""
        return self.gemma_expert.model


class Pi0Model(nn.Module):
    """π0 / π0.5 (see the module docstring). Build with random weights from a :class:`Pi0Spec`;
    load a checkpoint with :func:`rlinf.models.embodied.pi0.loading.load_pi0`."""

    def __init__(self, spec: Pi0Spec):
        super().__init__()
        if spec.vlm.heads != spec.expert.heads or spec.vlm.head_dim != spec.expert.head_dim or (
                spec.vlm.kv_heads != spec.expert.kv_heads) or spec.vlm.depth != spec.expert.depth:
            raise ValueError(f"the VLM ({spec.vlm}) and the expert ({spec.expert}) must share depth, heads and "
                             "head width for the joint attention")
        self.spec = spec
        self.paligemma_with_expert = PaliGemmaWithExpert(spec)
        w, a = spec.expert.width, spec.action_dim
        self.action_in_proj = nn.Linear(a, w)
        self.action_out_proj = nn.Linear(w, a)
        if spec.pi05:
            self.time_mlp_in = nn.Linear(w, w)
            self.time_mlp_out = nn.Linear(w, w)
        else:
            self.state_proj = nn.Linear(spec.state_dim, w)
            self.action_time_mlp_in = nn.Linear(2 * w, w)
            self.action_time_mlp_out = nn.Linear(w, w)

    # ------------------------------------------------------------------ embeddings

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the language model's weights."""
        return self.paligemma_with_expert.vlm.layers[0].self_attn.q_proj.weight.dtype

    def embed_image(self, pixels: torch.Tensor) -> torch.Tensor:
        """``[B, 3, S, S]`` in [-1, 1] -> ``[B, tokens, width]`` (SigLIP last hidden state,
        projected; no 1/sqrt(width) scaling, as openpi)."""
        pg = self.paligemma_with_expert.paligemma.model
        tower_dtype = pg.vision_tower.vision_model.embeddings.patch_embedding.weight.dtype
        feats = pg.vision_tower.vision_model(pixel_values=pixels.to(tower_dtype)).last_hidden_state
        return pg.multi_modal_projector.linear(feats.to(pg.multi_modal_projector.linear.weight.dtype))

    def embed_prefix(self, inputs: Pi0Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(embeddings [B, P, W], valid [B, P], ar [P])`` of the image and text tokens."""
        embs, pads = [], []
        b = inputs.tokens.shape[0]
        for c in range(inputs.images.shape[1]):
            emb = self.embed_image(inputs.images[:, c])
            embs.append(emb)
            pads.append(inputs.image_masks[:, c, None].expand(b, emb.shape[1]))
        lm = self.paligemma_with_expert.vlm
        text = lm.embed_tokens(inputs.tokens)
        text = text * math.sqrt(text.shape[-1])
        embs.append(text)
        pads.append(inputs.token_mask.bool())
        emb = torch.cat([e.to(self.dtype) for e in embs], 1)
        pad = torch.cat(pads, 1)
        return emb, pad, torch.zeros(emb.shape[1], dtype=torch.long, device=emb.device)

    def embed_suffix(self, state: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(embeddings [B, S, We], valid [B, S], ar [S], adaRMS condition or None)`` of the
        state token (π0) and the noisy actions ``x_t`` at times ``t`` ``[B]``."""
        w = self.spec.expert.width
        dt = self.action_in_proj.weight.dtype
        temb = time_features(t.float(), w).to(dt)
        act = self.action_in_proj(x_t.to(dt))
        b, h = act.shape[:2]
        if self.spec.pi05:
            cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(temb))))
            tokens = act
            ar = [1] + [0] * (h - 1)
        else:
            cond = None
            fused = torch.cat([act, temb[:, None].expand(b, h, w)], dim=2)
            fused = self.action_time_mlp_out(F.silu(self.action_time_mlp_in(fused)))
            st = self.state_proj(state[:, : self.spec.state_dim].to(dt))[:, None]
            tokens = torch.cat([st, fused], 1)
            ar = [1, 1] + [0] * (h - 1)
        pad = torch.ones(b, tokens.shape[1], dtype=torch.bool, device=tokens.device)
        return tokens.to(self.dtype), pad, torch.tensor(ar, dtype=torch.long, device=tokens.device), cond

    # ------------------------------------------------------------------ forwards

    def _stacks(self):
        pwe = self.paligemma_with_expert
        return [pwe.vlm, pwe.expert]

    def prefix_cache(self, inputs: Pi0Inputs) -> tuple[list, torch.Tensor, torch.Tensor]:
        """Runs the prefix through the VLM once: ``(per-layer (k, v), prefix valid mask [B, P],
        prefix output [B, P, W])``."""
        emb, pad, ar = self.embed_prefix(inputs)
        mask = additive_mask(make_att_2d_masks(pad, ar), emb.dtype)
        pos = torch.cumsum(pad.long(), 1) - 1
        (out, _), kv = joint_forward(self._stacks(), [emb, None], [None, None], mask, pos, return_kv=True)
        return kv, pad, out

    def velocity_cached(self, kv: list, prefix_pad: torch.Tensor, state: torch.Tensor, x_t: torch.Tensor,
                        t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One denoising velocity ``[B, H, A]`` (fp32) with only the expert running against the
        cached prefix; also returns the expert's output ``[B, S, We]``."""
        emb, pad, ar, cond = self.embed_suffix(state, x_t, t)
        b, s = pad.shape
        allowed = torch.cat([prefix_pad[:, None, :].expand(b, s, prefix_pad.shape[1]),
                             make_att_2d_masks(pad, ar)], dim=2)
        pos = prefix_pad.long().sum(-1, keepdim=True) + torch.cumsum(pad.long(), 1) - 1
        (_, out), _ = joint_forward(self._stacks(), [None, emb], [None, cond], additive_mask(allowed, emb.dtype),
                                    pos, past_kv=kv)
        return self._velocity(out), out

    def velocity_full(self, inputs: Pi0Inputs, x_t: torch.Tensor, t: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The velocity of one uncached joint forward over prefix + suffix (the training
        forward): ``(velocity [B, H, A] fp32, prefix output, suffix output)``."""
        p_emb, p_pad, p_ar = self.embed_prefix(inputs)
        s_emb, s_pad, s_ar, cond = self.embed_suffix(inputs.state, x_t, t)
        allowed, pos = self.joint_layout(p_pad, p_ar, s_pad, s_ar)
        (p_out, s_out), _ = joint_forward(self._stacks(), [p_emb, s_emb], [None, cond],
                                          additive_mask(allowed, p_emb.dtype), pos)
        return self._velocity(s_out), p_out, s_out

    @staticmethod
    def joint_layout(prefix_pad: torch.Tensor, prefix_ar: torch.Tensor, suffix_pad: torch.Tensor,
                     suffix_ar: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(allowed [B, P+S, P+S] bool, positions [B, P+S])`` of the joint forward."""
        pad = torch.cat([prefix_pad, suffix_pad], 1)
        return make_att_2d_masks(pad, torch.cat([prefix_ar, suffix_ar])), torch.cumsum(pad.long(), 1) - 1

    def _velocity(self, suffix_out: torch.Tensor) -> torch.Tensor:
        out = suffix_out[:, -self.spec.action_horizon:]
        return self.action_out_proj(out.to(self.action_out_proj.weight.dtype)).float()

    def flow_loss(self, inputs: Pi0Inputs, actions: torch.Tensor, noise: torch.Tensor | None = None,
                  t: torch.Tensor | None = None) -> torch.Tensor:
        """Element-wise flow-matching loss ``[B, H, A]``: ``x_t = t eps + (1 - t) a``, target
        ``eps - a`` (``t ~ Beta(1.5, 1) * 0.999 + 0.001`` when not given)."""
        b = actions.shape[0]
        if noise is None:
            noise = torch.randn_like(actions, dtype=torch.float32)
        if t is None:
            t = torch.distributions.Beta(1.5, 1.0).sample((b,)).to(actions.device) * 0.999 + 0.001
        x_t = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        v, _, _ = self.velocity_full(inputs, x_t, t)
        return F.mse_loss(v, (noise - actions).float(), reduction="none")

    def initial_noise(self, batch: int, generator: torch.Generator | None = None,
                      device: torch.device | str = "cpu") -> torch.Tensor:
        """``eps ~ N(0, I)`` of shape ``[B, H, A]`` (fp32; drawn on the CPU when a CPU generator is
        given, so a seed gives the same noise on every device)."""
        shape = (batch, self.spec.action_horizon, self.spec.action_dim)
        gen_device = generator.device if generator is not None else device
        return torch.randn(shape, generator=generator, dtype=torch.float32, device=gen_device).to(device)

    @torch.no_grad()
    def sample_actions(self, inputs: Pi0Inputs, noise: torch.Tensor | None = None, num_steps: int = 10,
                       generator: torch.Generator | None = None, use_cache: bool = True,
                       on_step: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None
                       ) -> torch.Tensor:
        """Euler integration from noise (``t = 1``) to actions (``t = 0``); normalised
        ``[B, H, A]`` fp32.

        Args:
            inputs: the preprocessed batch.
            noise: the initial ``x`` (default: :meth:`initial_noise` with ``generator``).
            num_steps: ``N``.
            generator: for the initial noise.
            use_cache: compute the prefix once (default); False runs the full joint forward at
                every step (the reference the cache must equal).
            on_step: called as ``on_step(k, t, x_t, v)`` at each step (tests, RL traces).
        """
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        device = inputs.tokens.device
        b = inputs.tokens.shape[0]
        x = (noise if noise is not None else self.initial_noise(b, generator, device)).float()
        dt = torch.tensor(-1.0 / num_steps, dtype=torch.float32, device=device)
        t = torch.tensor(1.0, dtype=torch.float32, device=device)
        kv = pad = None
        if use_cache:
            kv, pad, _ = self.prefix_cache(inputs)
        for k in range(num_steps):
            tb = t.expand(b)
            if use_cache:
                v, _ = self.velocity_cached(kv, pad, inputs.state, x, tb)
            else:
                v, _, _ = self.velocity_full(inputs, x, tb)
            if on_step is not None:
                on_step(k, tb, x, v)
            x = x + dt * v
            t = t + dt
        return x
