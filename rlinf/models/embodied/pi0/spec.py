"""Sizes of a π0 / π0.5 checkpoint, read from its tensor shapes (openpi names, no ``model.``
prefix) and a few config values.

openpi builds every model from named variants (``gemma_2b``, ``gemma_300m``: 8 heads, 1 key/value
head, head width 256; SigLIP So400m/14 with 16 heads) and hard-codes them; here the widths,
depths, MLP widths, head width, vocabulary, patch size and image size come from the shapes, so a
tiny checkpoint under the real names loads too. What shapes cannot tell: the number of key/value
heads (1 in every openpi variant: ``head_dim = rows of k_proj``, ``heads = rows of q_proj /
head_dim``) and SigLIP's heads (16 unless given).

Example:
    >>> shapes = tiny_shapes_example()
    >>> spec = spec_from_shapes(shapes, action_horizon=4)
    >>> spec.pi05, spec.vlm.heads, spec.vlm.head_dim, spec.vision.image_size, spec.action_dim
    (False, 2, 8, 8, 6)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

P = "paligemma_with_expert."
VISION = P + "paligemma.model.vision_tower.vision_model."
PROJECTOR = P + "paligemma.model.multi_modal_projector.linear."
LM = P + "paligemma.model.language_model."
LM_HEAD = P + "paligemma.lm_head.weight"
EMBED = LM + "embed_tokens.weight"
EXPERT = P + "gemma_expert.model."
EXPERT_LM_HEAD = P + "gemma_expert.lm_head.weight"

#: SigLIP So400m's heads (openpi and LeRobot fix them; not visible in the tensors).
SIGLIP_HEADS = 16


class SpecError(ValueError):
    """Shapes that do not make a π0 / π0.5 model (one-line message naming the tensor)."""


@dataclass(frozen=True)
class GemmaSize:
    """One Gemma stack: width, depth, MLP width, heads, key/value heads, head width, vocabulary
    (0 for the expert, which has no embedding)."""

    width: int
    depth: int
    mlp: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int = 0


@dataclass(frozen=True)
class VisionSize:
    """The SigLIP tower: width, depth, MLP width, heads, patch and (square) image size."""

    width: int
    depth: int
    mlp: int
    heads: int
    patch: int
    image_size: int

    @property
    def tokens(self) -> int:
        """Image tokens per camera."""
        return (self.image_size // self.patch) ** 2


@dataclass(frozen=True)
class Pi0Spec:
    """Everything needed to build the modules.

    Attributes:
        pi05: adaRMS time conditioning in the expert (``time_mlp_*``) instead of π0's
            ``state_proj`` + ``action_time_mlp_*``.
        vlm, expert: the two Gemma stacks.
        vision: the SigLIP tower.
        action_dim: padded action width (32 in the releases).
        state_dim: π0's ``state_proj`` input width (= action_dim in openpi); 0 for π0.5.
        action_horizon: ``H``, actions per chunk.
    """

    pi05: bool
    vlm: GemmaSize
    expert: GemmaSize
    vision: VisionSize
    action_dim: int
    state_dim: int
    action_horizon: int


def _shape(shapes: Mapping[str, tuple[int, ...]], key: str) -> tuple[int, ...]:
    if key not in shapes:
        raise SpecError(f"missing tensor {key}")
    return tuple(shapes[key])


def _depth(shapes: Mapping[str, tuple[int, ...]], prefix: str) -> int:
    pat = re.compile(re.escape(prefix) + r"(\d+)\.")
    idx = {int(m.group(1)) for k in shapes if (m := pat.match(k))}
    if not idx:
        raise SpecError(f"no layers under {prefix}")
    if idx != set(range(len(idx))):
        raise SpecError(f"layers under {prefix} are not numbered 0..{len(idx) - 1}: {sorted(idx)[:8]}")
    return len(idx)


def _gemma(shapes, prefix: str, vocab: int, kv_heads: int) -> GemmaSize:
    layer = prefix + "layers.0."
    q = _shape(shapes, layer + "self_attn.q_proj.weight")
    k = _shape(shapes, layer + "self_attn.k_proj.weight")
    mlp = _shape(shapes, layer + "mlp.gate_proj.weight")
    if k[0] % kv_heads:
        raise SpecError(f"{layer}self_attn.k_proj.weight has {k[0]} rows, not a multiple of {kv_heads} kv heads")
    head_dim = k[0] // kv_heads
    if q[0] % head_dim:
        raise SpecError(f"{layer}self_attn.q_proj.weight has {q[0]} rows, not a multiple of head_dim {head_dim}")
    return GemmaSize(width=q[1], depth=_depth(shapes, prefix + "layers."), mlp=mlp[0], heads=q[0] // head_dim,
                     kv_heads=kv_heads, head_dim=head_dim, vocab=vocab)


def spec_from_shapes(shapes: Mapping[str, tuple[int, ...]], action_horizon: int, kv_heads: int = 1,
                     vision_heads: int = SIGLIP_HEADS) -> Pi0Spec:
    """Reads the sizes (see the module docstring).

    Args:
        shapes: tensor name (openpi naming) -> shape.
        action_horizon: ``H`` (config.json's ``action_horizon`` / LeRobot's ``chunk_size``).
        kv_heads: key/value heads of both Gemma stacks.
        vision_heads: SigLIP heads.

    Raises:
        SpecError: a tensor is missing or the shapes disagree.
    """
    if EMBED in shapes:
        vocab, _ = _shape(shapes, EMBED)
    else:
        vocab, _ = _shape(shapes, LM_HEAD)
    vlm = _gemma(shapes, LM, vocab, kv_heads)
    expert = _gemma(shapes, EXPERT, 0, kv_heads)
    patch_w = _shape(shapes, VISION + "embeddings.patch_embedding.weight")
    pos = _shape(shapes, VISION + "embeddings.position_embedding.weight")
    side = round(pos[0] ** 0.5)
    if side * side != pos[0]:
        raise SpecError(f"{VISION}embeddings.position_embedding.weight: {pos[0]} positions is not a square grid")
    width = patch_w[0]
    if width % vision_heads:
        raise SpecError(f"SigLIP width {width} is not divisible by {vision_heads} heads")
    vision = VisionSize(width=width, depth=_depth(shapes, VISION + "encoder.layers."),
                        mlp=_shape(shapes, VISION + "encoder.layers.0.mlp.fc1.weight")[0], heads=vision_heads,
                        patch=patch_w[2], image_size=side * patch_w[2])
    proj = _shape(shapes, PROJECTOR + "weight")
    if proj != (vlm.width, vision.width):
        raise SpecError(f"{PROJECTOR}weight is {proj}, expected {(vlm.width, vision.width)}")
    a_in = _shape(shapes, "action_in_proj.weight")
    if a_in[0] != expert.width:
        raise SpecError(f"action_in_proj.weight is {a_in}; the expert is {expert.width} wide")
    pi05 = (EXPERT + "norm.dense.weight") in shapes
    state_dim = 0 if pi05 else _shape(shapes, "state_proj.weight")[1]
    if action_horizon < 1:
        raise SpecError(f"action_horizon must be >= 1, got {action_horizon}")
    return Pi0Spec(pi05=pi05, vlm=vlm, expert=expert, vision=vision, action_dim=a_in[1], state_dim=state_dim,
                   action_horizon=int(action_horizon))


def tiny_shapes_example() -> dict[str, tuple[int, ...]]:
    """The shapes of a minimal π0 (2 heads of 8, one layer each, 8 px images of 4 px patches);
    for the docstring example."""
    s: dict[str, tuple[int, ...]] = {LM_HEAD: (50, 16), PROJECTOR + "weight": (16, 16), PROJECTOR + "bias": (16,),
                                     VISION + "embeddings.patch_embedding.weight": (16, 3, 4, 4),
                                     VISION + "embeddings.position_embedding.weight": (4, 16),
                                     VISION + "encoder.layers.0.mlp.fc1.weight": (32, 16),
                                     "action_in_proj.weight": (8, 6), "state_proj.weight": (8, 6)}
    for prefix, w in ((LM, 16), (EXPERT, 8)):
        s.update({prefix + "layers.0.self_attn.q_proj.weight": (16, w),
                  prefix + "layers.0.self_attn.k_proj.weight": (8, w),
                  prefix + "layers.0.mlp.gate_proj.weight": (2 * w, w)})
    return s
