"""Qwen-VL image preprocessing without torchvision (see docs/vlm.md, "Image preprocessing").

transformers 5.19 ships two backends of the Qwen2-VL image processor (Qwen2.5-VL and Qwen3-VL use
the same one, Qwen3-VL with 16-pixel patches): ``Qwen2VLImageProcessor`` (torchvision; its module
imports ``torchvision.transforms.v2`` at the top) and ``Qwen2VLImageProcessorPil`` (PIL + numpy).
Here torchvision cannot be imported, and where it can, the two backends resize with different code
(PIL's bicubic vs torch's), so rollout and actor could see different pixels. This module always uses the
PIL backend, loaded from the folder's ``preprocessor_config.json``, whatever that file names as its
``image_processor_type``: every worker computes the same ``pixel_values`` on every machine.

What the processor does (the facts the rest of the code relies on, tested in
tests/models/test_vlm.py): the image is converted to RGB and resized (bicubic) to the nearest
multiple of ``patch_size * merge_size`` on each side, with its area brought into
``[min_pixels, max_pixels]`` (:func:`resized_size`); scaled by 1/255, normalised by
``image_mean`` / ``image_std``; cut into ``grid_h x grid_w`` patches of ``patch_size`` pixels,
ordered by 2 x 2 merge window, each repeated ``temporal_patch_size`` times in time:
``pixel_values`` is ``[grid_t * grid_h * grid_w, 3 * temporal_patch_size * patch_size**2]`` and
``image_grid_thw`` is ``[[1, grid_h, grid_w]]`` per image. The language model sees
``grid_h * grid_w / merge_size**2`` image tokens per image (:func:`num_image_tokens`).

Example:
    >>> from PIL import Image
    >>> proc = make_image_processor(patch_size=14, min_pixels=56 * 56, max_pixels=28 * 28 * 16)
    >>> out = preprocess_images(proc, [Image.new("RGB", (100, 70))])
    >>> tuple(out["pixel_values"].shape), out["image_grid_thw"].tolist()
    ((32, 1176), [[1, 4, 8]])
    >>> num_image_tokens(proc, height=70, width=100)
    8
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

PREPROCESSOR_FILE = "preprocessor_config.json"


def _pil_class():
    # lazy: transformers (~2 s) only when an image processor is built; config checks import this package
    from transformers import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil


def make_image_processor(patch_size: int, min_pixels: int, max_pixels: int, merge_size: int = 2,
                         temporal_patch_size: int = 2) -> Any:
    """A new PIL/numpy Qwen-VL image processor with CLIP mean/std (the Qwen-VL defaults).

    Args:
        patch_size: Vision patch side in pixels (14 for Qwen2.5-VL, 16 for Qwen3-VL).
        min_pixels: Smallest resized area.
        max_pixels: Largest resized area (bigger images are scaled down).
        merge_size: Patches merged per side into one language-model token.
        temporal_patch_size: Frames per patch (an image is repeated this many times).

    Returns:
        A ``Qwen2VLImageProcessorPil``; ``save_pretrained(dir)`` writes ``preprocessor_config.json``.
    """
    return _pil_class()(patch_size=patch_size, merge_size=merge_size, temporal_patch_size=temporal_patch_size,
                        min_pixels=min_pixels, max_pixels=max_pixels)


def load_image_processor(path: str | os.PathLike) -> Any:
    """The PIL/numpy image processor of the model folder ``path`` (never the torchvision one).

    Args:
        path: A Qwen-VL folder holding ``preprocessor_config.json``.

    Returns:
        A ``Qwen2VLImageProcessorPil`` with the folder's sizes, mean/std and pixel budget.

    Raises:
        FileNotFoundError: The folder has no ``preprocessor_config.json`` (one line naming it).
    """
    file = Path(path) / PREPROCESSOR_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file}: missing; a VLM folder needs its processor files "
                                "(save the processor with save_pretrained next to the model)")
    settings = json.loads(file.read_text(encoding="utf-8"))
    # a folder saved by another backend ("Qwen2VLImageProcessorFast") holds the same settings
    settings.pop("image_processor_type", None)
    settings.pop("processor_class", None)
    return _pil_class()(**settings)


def resized_size(image_processor: Any, height: int, width: int) -> tuple[int, int]:
    """The (height, width) ``image_processor`` resizes an image of this size to.

    Example:
        >>> proc = make_image_processor(patch_size=14, min_pixels=56 * 56, max_pixels=28 * 28 * 16)
        >>> resized_size(proc, 700, 1000)  # scaled down into the pixel budget
        (84, 112)
    """
    # lazy: transformers (~2 s) only when an image is measured; config checks import this package
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    size = image_processor.size
    return smart_resize(height, width, factor=image_processor.patch_size * image_processor.merge_size,
                        min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"])


def num_image_tokens(image_processor: Any, height: int, width: int) -> int:
    """Language-model tokens of one image of ``height`` x ``width`` pixels (after resizing)."""
    h, w = resized_size(image_processor, height, width)
    return (h // image_processor.patch_size) * (w // image_processor.patch_size) // image_processor.merge_size ** 2


def open_image(source: Any) -> Any:
    """An RGB ``PIL.Image`` from a path, raw bytes or a ``PIL.Image``.

    Raises:
        ValueError: The source is missing or not a readable image (one line naming it).
    """
    # lazy: Pillow only when an image is opened; config checks import this package
    from PIL import Image, UnidentifiedImageError

    if isinstance(source, Image.Image):
        return source.convert("RGB")
    name = "<bytes>" if isinstance(source, (bytes, bytearray)) else str(source)
    try:
        if isinstance(source, (bytes, bytearray)):
            image = Image.open(io.BytesIO(source))
        else:
            image = Image.open(source)
        image.load()
    except (OSError, UnidentifiedImageError) as e:
        raise ValueError(f"image {name}: cannot be read ({type(e).__name__}: {e})") from None
    return image.convert("RGB")


def preprocess_images(image_processor: Any, images: list[Any]) -> dict[str, Any]:
    """``pixel_values`` (float32 tensor) and ``image_grid_thw`` (int64 tensor) of ``images``.

    Args:
        image_processor: From :func:`load_image_processor` or :func:`make_image_processor`.
        images: Paths, bytes or ``PIL.Image`` objects.

    Returns:
        ``{"pixel_values": [n_patches, C*T*P*P], "image_grid_thw": [n_images, 3]}``.
    """
    out = image_processor(images=[open_image(i) for i in images], return_tensors="pt")
    return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}
