"""``OpenVLAOFTConfig``: the HF config (``model_type = "rlinf_openvla_oft"``) of the VLA policy."""

from __future__ import annotations

from typing import Any

from transformers import AutoConfig, Dinov2Config, PretrainedConfig, SiglipVisionConfig
from transformers.models.auto import CONFIG_MAPPING

from rlinf.models.embodied.openvla_oft.text_tokenizer import PROMPT_TEMPLATE

MODEL_TYPE = "rlinf_openvla_oft"


class OpenVLAOFTConfig(PretrainedConfig):
    """Config of :class:`~rlinf.models.embodied.openvla_oft.modeling.OpenVLAOFTPolicy`.

    Attributes:
        vision_config: the SigLIP vision tower (``SiglipVisionConfig`` or its dict).
        dino_config: optional second tower (``Dinov2Config``), fused patch-wise with SigLIP as in
            OpenVLA's DINO-SigLIP backbone; None = SigLIP only. Same image and patch size.
        text_config: the causal LM (``llama`` or ``qwen2`` config or dict); its ``vocab_size`` is
            the text tokenizer's plus ``n_action_bins``.
        action_dim: ``A``.
        num_action_chunks: ``K``; the model predicts ``K * A`` action tokens per forward pass.
        n_action_bins: bins per action dimension (the last ids of the vocabulary).
        num_images_in_input: 1 (main camera) or 2 (+ wrist camera).
        use_proprio: project the proprioceptive state into one extra LM input token.
        proprio_dim: length of that state.
        value_type: default level of the value head (chunk_level ``[N]`` / action_level ``[N, K]``).
        add_value_head: build the value head (actor-critic).
        action_attention: ``causal`` (plain causal LM attention) or ``bidirectional`` (the action
            positions also see each other, as in OpenVLA-OFT; needs eager / sdpa attention).
        center_crop: centre-crop 90% of the image area before resizing.
        image_mean, image_std: SigLIP input normalisation (DINOv2 uses ImageNet's).
        norm_stats: ``{unnorm_key: {"action": {"q01", "q99", "mask"}, "proprio": {...}?}}``; a
            flat ``{unnorm_key: {"q01", "q99", "mask"}}`` is accepted too.
        prompt_template: the text prompt, with ``{instruction}``.
    """

    model_type = MODEL_TYPE
    sub_configs = {"vision_config": SiglipVisionConfig, "dino_config": Dinov2Config, "text_config": AutoConfig}

    vision_config: dict | PretrainedConfig | None = None
    dino_config: dict | PretrainedConfig | None = None
    text_config: dict | PretrainedConfig | None = None
    action_dim: int = 7
    num_action_chunks: int = 8
    n_action_bins: int = 256
    num_images_in_input: int = 1
    use_proprio: bool = False
    proprio_dim: int = 8
    value_type: str = "chunk_level"
    add_value_head: bool = True
    action_attention: str = "causal"
    center_crop: bool = False
    image_mean: list | tuple = (0.5, 0.5, 0.5)
    image_std: list | tuple = (0.5, 0.5, 0.5)
    norm_stats: dict | None = None
    prompt_template: str = PROMPT_TEMPLATE
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs: Any):
        if isinstance(self.vision_config, dict):
            self.vision_config = SiglipVisionConfig(**self.vision_config)
        elif self.vision_config is None:
            self.vision_config = SiglipVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                                    num_attention_heads=2, image_size=32, patch_size=8,
                                                    vision_use_head=False)
        if isinstance(self.dino_config, dict):
            self.dino_config = Dinov2Config(**self.dino_config)
        if isinstance(self.text_config, dict):
            cfg = dict(self.text_config)
            self.text_config = CONFIG_MAPPING[cfg.pop("model_type", "llama")](**cfg)
        elif self.text_config is None:
            self.text_config = CONFIG_MAPPING["llama"](
                vocab_size=512 + self.n_action_bins, hidden_size=64, intermediate_size=128,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                max_position_embeddings=1024, tie_word_embeddings=False)
        self.image_mean = list(self.image_mean)
        self.image_std = list(self.image_std)
        if self.num_images_in_input not in (1, 2):
            raise ValueError(f"num_images_in_input must be 1 or 2, got {self.num_images_in_input}")
        if self.action_attention not in ("causal", "bidirectional"):
            raise ValueError(f"action_attention must be causal or bidirectional, got {self.action_attention!r}")
        if self.value_type not in ("chunk_level", "action_level"):
            raise ValueError(f"value_type must be chunk_level or action_level, got {self.value_type!r}")
        super().__post_init__(**kwargs)

    @property
    def num_action_tokens(self) -> int:
        """``K * A``."""
        return self.action_dim * self.num_action_chunks
