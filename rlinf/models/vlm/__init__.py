"""Vision-language models (Qwen2.5-VL, Qwen3-VL) with transformers' own classes, on CPU without
torchvision: the PIL/numpy image processor (:mod:`.image_processing`) and loading + prompt
rendering (:mod:`.load`); batches of rendered prompts with their pixel inputs (:mod:`.batch`) and
freezing the vision tower (:mod:`.freeze`), imported from their modules (they import torch). See
docs/vlm.md.

Layering: models (layer 3); imports ``rlinf.data`` and ``rlinf.utils`` only. transformers is
imported when a processor or model is built, not on import.
"""

from rlinf.models.vlm.image_processing import (
    load_image_processor,
    make_image_processor,
    num_image_tokens,
    open_image,
    preprocess_images,
    resized_size,
)
from rlinf.models.vlm.load import (
    LoadedVLM,
    is_vlm_folder,
    load_processor,
    load_vlm,
    read_model_type,
    render_prompt,
    render_text,
    vlm_prompt_encoder,
)

__all__ = ["LoadedVLM", "is_vlm_folder", "load_image_processor", "load_processor", "load_vlm", "make_image_processor",
           "num_image_tokens", "open_image", "preprocess_images", "read_model_type", "render_prompt",
           "render_text", "resized_size", "vlm_prompt_encoder"]
