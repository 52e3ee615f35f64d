"""Load a Qwen2.5-VL / Qwen3-VL folder (model, tokenizer, image processor) on CPU and render
multimodal prompts with the model's own chat template and processor.

A folder is what transformers' ``save_pretrained`` writes for the model plus its processor:
``config.json`` (``model_type`` ``qwen2_5_vl`` or ``qwen3_vl``), ``*.safetensors``, the tokenizer
files with a chat template, and ``preprocessor_config.json``. Sizes do not matter: the tiny
checkpoints of ``python -m toolkits.vlm.make_tiny_vlm`` and the released ones load the same way.

transformers' ``AutoProcessor.from_pretrained`` fails here (it builds the video processor, which
needs torchvision: ``ImportError: Qwen2VLVideoProcessor requires the Torchvision library but it
was not found in your environment``), and constructing ``Qwen2_5_VLProcessor`` with
``video_processor=None`` fails too (its class check looks the video processor class up in a
mapping that is a dummy without torchvision: ``AttributeError: type object
'VIDEO_PROCESSOR_MAPPING' has no attribute '_extra_content'``). :func:`load_processor` builds the
model's own processor class for images only: the class check is skipped for the absent video
processor, everything else (placeholder expansion, ``mm_token_type_ids``) is transformers' code.

Example:
    >>> vlm = load_vlm("/tmp/tiny_vlm")  # doctest: +SKIP
    >>> batch = render_prompt(vlm.processor, "What colour is the square?", ["/tmp/red.png"])  # doctest: +SKIP
    >>> vlm.model.generate(**batch, max_new_tokens=4)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from rlinf.data.tokenizer import load_tokenizer
from rlinf.models.vlm.image_processing import load_image_processor, open_image

#: model_type of config.json -> transformers' processor class name
PROCESSOR_CLASSES = {"qwen2_5_vl": "Qwen2_5_VLProcessor", "qwen3_vl": "Qwen3VLProcessor"}
IMAGE_TOKEN = "<|image_pad|>"


@dataclass
class LoadedVLM:
    """A loaded vision-language model and its image-only processor."""

    model: Any
    processor: Any
    model_type: str


def read_model_type(path: str | os.PathLike) -> str:
    """``model_type`` of the folder's ``config.json``, checked to be a supported VLM.

    Raises:
        FileNotFoundError: No ``config.json`` (one line naming it).
        ValueError: Not a supported VLM architecture (one line naming the file and the type).
    """
    file = Path(path) / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"{file}: missing; not a model folder")
    model_type = json.loads(file.read_text(encoding="utf-8")).get("model_type")
    if model_type not in PROCESSOR_CLASSES:
        raise ValueError(f"{file}: model_type {model_type!r} is not a supported vision-language model "
                         f"(supported: {', '.join(sorted(PROCESSOR_CLASSES))})")
    return model_type


def is_vlm_folder(path: str | os.PathLike) -> bool:
    """Whether the model folder ``path`` holds a supported vision-language model (its
    ``config.json`` ``model_type``); False for a text model or a folder without ``config.json``.

    >>> is_vlm_folder("/nowhere")
    False
    """
    file = Path(path) / "config.json"
    try:
        return json.loads(file.read_text(encoding="utf-8")).get("model_type") in PROCESSOR_CLASSES
    except (OSError, ValueError):
        return False


@cache
def _image_only_class(model_type: str) -> type:
    """transformers' processor class for ``model_type``, accepting ``video_processor=None``."""
    # lazy: transformers (~2 s) only when a processor is built; config checks import this package
    import transformers

    base = getattr(transformers, PROCESSOR_CLASSES[model_type])

    def check_argument_for_proper_class(self, argument_name, argument):
        if argument_name == "video_processor" and argument is None:
            return None  # images only: the video processor needs torchvision
        return base.check_argument_for_proper_class(self, argument_name, argument)

    return type(f"ImageOnly{base.__name__}", (base,), {
        "check_argument_for_proper_class": check_argument_for_proper_class,
        "__doc__": f"{base.__name__} for images only (no video processor: it needs torchvision).",
    })


def _chat_template(path: Path, tokenizer: Any) -> str:
    """The folder's chat template: ``chat_template.jinja``, ``chat_template.json``, else the
    tokenizer's (a released Qwen-VL folder keeps it in the first two)."""
    jinja = path / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    js = path / "chat_template.json"
    if js.is_file():
        return json.loads(js.read_text(encoding="utf-8"))["chat_template"]
    if not tokenizer.chat_template:
        raise ValueError(f"{path}: no chat template (chat_template.jinja, chat_template.json or "
                         "tokenizer_config.json's chat_template)")
    return tokenizer.chat_template


def load_processor(path: str | os.PathLike) -> Any:
    """The image-only processor of the Qwen-VL folder ``path``: its tokenizer, chat template and
    the PIL/numpy image processor (:mod:`rlinf.models.vlm.image_processing`).

    Example:
        >>> proc = load_processor("/tmp/tiny_vlm")  # doctest: +SKIP
        >>> proc.image_processor.size["longest_edge"]  # max_pixels  # doctest: +SKIP
        50176
    """
    model_type = read_model_type(path)
    path = Path(path)
    image_processor = load_image_processor(path)
    tokenizer = load_tokenizer(str(path))
    if tokenizer.convert_tokens_to_ids(IMAGE_TOKEN) in (None, tokenizer.unk_token_id):
        raise ValueError(f"{path}: the tokenizer has no {IMAGE_TOKEN} token; not a Qwen-VL tokenizer")
    return _image_only_class(model_type)(image_processor=image_processor, tokenizer=tokenizer,
                                         video_processor=None, chat_template=_chat_template(path, tokenizer))


def load_vlm(path: str | os.PathLike, dtype: Any = None) -> LoadedVLM:
    """Model (eval mode, CPU) and processor of the Qwen-VL folder ``path``.

    Args:
        path: The folder.
        dtype: torch dtype of the weights (default: float32).
    """
    # lazy: torch + transformers (~3 s) only when a model is loaded
    import torch
    from transformers import AutoModelForImageTextToText

    model_type = read_model_type(path)
    processor = load_processor(path)
    model = AutoModelForImageTextToText.from_pretrained(str(path), dtype=dtype or torch.float32)
    model.eval()
    return LoadedVLM(model=model, processor=processor, model_type=model_type)


def messages_for(text: str, num_images: int, system: str | None = None) -> list[dict]:
    """Chat messages of one user turn: ``num_images`` images, then ``text``."""
    content = [{"type": "image"} for _ in range(num_images)] + [{"type": "text", "text": text}]
    messages = [{"role": "user", "content": content}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": [{"type": "text", "text": system}]})
    return messages


def render_prompt(processor: Any, text: str, images: list[Any], system: str | None = None) -> Any:
    """Token ids and pixel inputs of a one-turn prompt (images first, then ``text``), rendered by
    the model's chat template with the generation prompt, each image's placeholder expanded to its
    ``grid_h * grid_w / merge_size**2`` image tokens.

    Args:
        processor: From :func:`load_processor`.
        text: The user's text.
        images: Paths, bytes or ``PIL.Image`` objects (may be empty).
        system: Optional system message.

    Returns:
        A ``BatchFeature`` with ``input_ids``, ``attention_mask``, ``mm_token_type_ids`` and, with
        images, ``pixel_values`` and ``image_grid_thw`` (torch tensors, batch 1): the keyword
        arguments of the model's ``forward`` and ``generate``.
    """
    prompt = processor.apply_chat_template(messages_for(text, len(images), system), tokenize=False,
                                           add_generation_prompt=True)
    return render_text(processor, prompt, images)


def render_text(processor: Any, prompt: str, images: list[Any]) -> Any:
    """Like :func:`render_prompt` for a prompt already rendered to text, whose image placeholders
    (``<|vision_start|><|image_pad|><|vision_end|>``) must match ``images`` one for one.

    Raises:
        ValueError: The prompt has a different number of placeholders than images (one line).
    """
    placeholders = prompt.count(processor.image_token)
    if placeholders != len(images):
        raise ValueError(f"prompt has {placeholders} image placeholder(s) but {len(images)} image(s) were given")
    kwargs = {"images": [open_image(i) for i in images]} if images else {}
    return processor(text=[prompt], return_tensors="pt", **kwargs)


def vlm_prompt_encoder(processor: Any, system_prompt: str | None = None):
    """A function ``(text, images) -> prompt token ids``: the user turn (its images, then the
    text) rendered by the model's chat template with the generation prompt, each image's
    placeholder expanded to its image tokens (:func:`render_prompt`): the ids a vision-language
    prompt dataset holds (``rlinf.data.prompt_dataset.PromptDataset(encode_images=...)``).

    >>> encode = vlm_prompt_encoder(load_processor("/tmp/tiny_vlm"))  # doctest: +SKIP
    >>> ids = encode("How many shapes?", (png_bytes,))  # doctest: +SKIP
    """

    def encode(text: str, images: tuple) -> list[int]:
        return render_prompt(processor, text, list(images), system=system_prompt)["input_ids"][0].tolist()

    return encode

