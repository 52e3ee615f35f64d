"""Tiny randomly initialised VLA configs and folders, for CPU tests and smoke runs.

Default sizes (64 x 64 images, patch 8 -> 64 patches per image; SigLIP width 128, 2 layers; Llama
width 128, 2 layers, 4 heads / 2 KV heads, MLP 384; vocabulary 512 text tokens + 256 action bins):
about 0.95M parameters with a value head (945,409 at A = 7, K = 8).

Default normalisation statistics (``unnorm_key = "tiny"``): ``q01 = -1``, ``q99 = 1`` on every
dimension and the last one (the gripper) masked out, i.e. un-normalisation is the identity on
[-1, 1] (env actions stay in ManiSkill's / LIBERO's normalised bounds).

Example:
    >>> cfg = tiny_vla_config(action_dim=7, num_action_chunks=8, image_size=64)
    >>> cfg.text_config.vocab_size, cfg.vision_config.image_size, cfg.num_action_tokens
    (768, 64, 56)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlinf.models.embodied.openvla_oft.configuration import OpenVLAOFTConfig
from rlinf.models.embodied.openvla_oft.text_tokenizer import DEFAULT_VOCAB_SIZE, build_instruction_tokenizer

TINY_UNNORM_KEY = "tiny"


def default_norm_stats(action_dim: int, proprio_dim: int | None = None) -> dict[str, Any]:
    """Identity-on-[-1, 1] statistics under :data:`TINY_UNNORM_KEY` (gripper = last dim masked)."""
    entry: dict[str, Any] = {"action": {"q01": [-1.0] * action_dim, "q99": [1.0] * action_dim,
                                        "mask": [True] * (action_dim - 1) + [False]}}
    if proprio_dim:
        entry["proprio"] = {"q01": [-1.0] * proprio_dim, "q99": [1.0] * proprio_dim, "mask": [True] * proprio_dim}
    return {TINY_UNNORM_KEY: entry}


def tiny_vla_config(action_dim: int = 7, num_action_chunks: int = 8, image_size: int = 64, patch_size: int = 8,
                    lm: str = "llama", hidden_size: int = 128, num_layers: int = 2, vision_hidden_size: int = 128,
                    vision_layers: int = 2, num_images_in_input: int = 1, use_proprio: bool = False,
                    proprio_dim: int = 8, use_dino: bool = False, value_type: str = "chunk_level",
                    action_attention: str = "causal", n_action_bins: int = 256,
                    text_vocab_size: int = DEFAULT_VOCAB_SIZE, norm_stats: dict | None = None) -> OpenVLAOFTConfig:
    """A small :class:`OpenVLAOFTConfig` (see the module docstring for the defaults).

    Args:
        action_dim, num_action_chunks: ``A`` and ``K``.
        image_size, patch_size: square input size and ViT patch size.
        lm: ``llama`` or ``qwen2``.
        hidden_size, num_layers: LM width and depth (heads: ``hidden_size // 32``).
        vision_hidden_size, vision_layers: SigLIP width and depth.
        num_images_in_input: 1 or 2 (wrist camera).
        use_proprio, proprio_dim: proprio token.
        use_dino: add a DINOv2 tower fused with SigLIP.
        value_type, action_attention, n_action_bins: see :class:`OpenVLAOFTConfig`.
        text_vocab_size: size of the instruction tokenizer the model is paired with.
        norm_stats: action statistics; None = :func:`default_norm_stats`.

    Returns:
        The config.
    """
    heads = max(1, hidden_size // 32)
    vheads = max(1, vision_hidden_size // 32)
    text = dict(model_type=lm, vocab_size=text_vocab_size + n_action_bins, hidden_size=hidden_size,
                intermediate_size=3 * hidden_size, num_hidden_layers=num_layers, num_attention_heads=heads,
                num_key_value_heads=max(1, heads // 2), max_position_embeddings=2048, tie_word_embeddings=False,
                rms_norm_eps=1e-6)
    vision = dict(hidden_size=vision_hidden_size, intermediate_size=2 * vision_hidden_size,
                  num_hidden_layers=vision_layers, num_attention_heads=vheads, image_size=image_size,
                  patch_size=patch_size, vision_use_head=False)
    dino = (dict(hidden_size=vision_hidden_size // 2, num_hidden_layers=vision_layers,
                 num_attention_heads=max(1, vheads // 2), mlp_ratio=2, image_size=image_size,
                 patch_size=patch_size, use_mask_token=False)
            if use_dino else None)
    return OpenVLAOFTConfig(
        vision_config=vision, dino_config=dino, text_config=text, action_dim=action_dim,
        num_action_chunks=num_action_chunks, n_action_bins=n_action_bins, num_images_in_input=num_images_in_input,
        use_proprio=use_proprio, proprio_dim=proprio_dim, value_type=value_type, action_attention=action_attention,
        norm_stats=norm_stats if norm_stats is not None else default_norm_stats(
            action_dim, proprio_dim if use_proprio else None),
    )


def build_tiny_vla(seed: int = 0, **config_kwargs: Any):
    """A randomly initialised tiny :class:`~rlinf.models.embodied.openvla_oft.modeling.OpenVLAOFTPolicy`
    with its tokenizer.

    Args:
        seed: torch seed of the initialisation.
        **config_kwargs: passed to :func:`tiny_vla_config`.

    Returns:
        The policy (fp32, eval mode off).
    """
    from rlinf.models.embodied.openvla_oft.modeling import OpenVLAOFTPolicy

    tok = build_instruction_tokenizer(config_kwargs.get("text_vocab_size", DEFAULT_VOCAB_SIZE))
    cfg = tiny_vla_config(**config_kwargs)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        policy = OpenVLAOFTPolicy(cfg)
    finally:
        torch.random.set_rng_state(state)
    return policy.with_tokenizer(tok)


def save_tiny_vla(out_dir: str | Path, seed: int = 0, **config_kwargs: Any) -> Path:
    """Builds a tiny VLA and saves it (weights, config, tokenizer) to ``out_dir``.

    Returns:
        The folder.
    """
    out = Path(out_dir)
    build_tiny_vla(seed=seed, **config_kwargs).save_pretrained(out)
    return out
