"""Batches of rendered multimodal prompts for a Qwen-VL model: token ids left-padded as the text
path pads them, and the pixel inputs of every row in Qwen's layout (``pixel_values`` of all
images concatenated along the patch dimension in row order, one ``image_grid_thw`` row per image).

The same :class:`PixelInputs` go to the rollout's ``generate`` and to the actor's / reference's
log-prob forward (:mod:`rlinf.engines.training.vlm_logprobs`), so both see identical pixels.

Example (pixels of two rows: one image of 4 patches, then none; each row twice)::

    >>> import torch
    >>> pixels = PixelInputs(torch.arange(4.0).view(4, 1), torch.tensor([[1, 2, 2]]), [1, 0])
    >>> twice = pixels.repeat(2)
    >>> twice.images_per_row, twice.pixel_values.view(-1).tolist(), twice.image_grid_thw.tolist()
    ([1, 1, 0, 0], [0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0], [[1, 2, 2], [1, 2, 2]])
    >>> pixels.select([1]).model_kwargs()
    {}

With a model folder (``python -m toolkits.vlm.make_tiny_vlm``)::

    >>> vlm = load_vlm("/tmp/tiny_vlm")  # doctest: +SKIP
    >>> rows = [render_prompt(vlm.processor, q, [img]) for q, img in questions]  # doctest: +SKIP
    >>> prompts = collate_prompts(rows, pad_token_id=0).repeat(4)  # 4 samples per prompt  # doctest: +SKIP
    >>> vlm.model.generate(**prompts.model_inputs(), max_new_tokens=8)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class PixelInputs:
    """Pixel inputs of a batch's rows.

    Attributes:
        pixel_values: ``[sum of patches, patch_dim]``, images in row order (None: no image at all).
        image_grid_thw: ``[num_images, 3]`` (None: no image at all).
        images_per_row: how many images each row has (0 for a text-only row).
    """

    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    images_per_row: list[int]

    def _patch_spans(self) -> list[tuple[int, int, int, int]]:
        """Per row: (first image, end image, first patch, end patch)."""
        patches = ([] if self.image_grid_thw is None else self.image_grid_thw.prod(-1).tolist())
        spans, image, patch = [], 0, 0
        for count in self.images_per_row:
            n = sum(patches[image:image + count])
            spans.append((image, image + count, patch, patch + n))
            image, patch = image + count, patch + n
        return spans

    def select(self, rows: Sequence[int]) -> PixelInputs:
        """The pixel inputs of ``rows`` (in that order; a row may repeat)."""
        spans = self._patch_spans()
        counts = [self.images_per_row[r] for r in rows]
        if self.pixel_values is None or sum(counts) == 0:
            return PixelInputs(None, None, counts)
        values = torch.cat([self.pixel_values[spans[r][2]:spans[r][3]] for r in rows])
        grids = torch.cat([self.image_grid_thw[spans[r][0]:spans[r][1]] for r in rows])
        return PixelInputs(values, grids, counts)

    def repeat(self, n: int) -> PixelInputs:
        """Each row ``n`` times in a row (the ``n`` samples of one prompt next to each other)."""
        return self.select([r for r in range(len(self.images_per_row)) for _ in range(n)])

    def model_kwargs(self) -> dict[str, torch.Tensor]:
        """``pixel_values`` / ``image_grid_thw`` for the model's forward (empty without images)."""
        if self.pixel_values is None:
            return {}
        return {"pixel_values": self.pixel_values, "image_grid_thw": self.image_grid_thw}


@dataclass
class VLMPromptBatch:
    """Left-padded prompt token ids (``[B, P]``) and their pixel inputs."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    pixels: PixelInputs

    @property
    def batch_size(self) -> int:
        return self.input_ids.shape[0]

    def token_lists(self) -> list[list[int]]:
        """Each row's prompt tokens without the padding."""
        return [ids[mask.bool()].tolist() for ids, mask in zip(self.input_ids, self.attention_mask)]

    def repeat(self, n: int) -> VLMPromptBatch:
        """Each row ``n`` times in a row (token ids and pixels)."""
        return VLMPromptBatch(self.input_ids.repeat_interleave(n, 0), self.attention_mask.repeat_interleave(n, 0),
                              self.pixels.repeat(n))

    def model_inputs(self, image_token_id: int) -> dict[str, torch.Tensor]:
        """Keyword arguments of the model's ``forward`` / ``generate`` (``mm_token_type_ids``: 1 at
        the image tokens, which the model's rope index needs)."""
        mm = (self.input_ids == image_token_id).to(torch.int32)
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask, "mm_token_type_ids": mm,
                **self.pixels.model_kwargs()}


def collate_prompts(rendered: Sequence[Mapping[str, Any]], pad_token_id: int) -> VLMPromptBatch:
    """One batch of prompts rendered one by one (``render_prompt``'s batch-1 outputs): token ids
    left-padded to the longest, pixel inputs concatenated in row order.

    Raises:
        ValueError: No prompts, or a row that is not batch 1 (one line naming the row).
    """
    if not rendered:
        raise ValueError("collate_prompts: no prompts")
    length = max(r["input_ids"].shape[1] for r in rendered)
    ids = torch.full((len(rendered), length), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rendered), length), dtype=torch.long)
    values, grids, counts = [], [], []
    for i, row in enumerate(rendered):
        if row["input_ids"].shape[0] != 1:
            raise ValueError(f"collate_prompts: prompt {i} has batch size {row['input_ids'].shape[0]}, expected 1")
        n = row["input_ids"].shape[1]
        ids[i, length - n:] = row["input_ids"][0]
        mask[i, length - n:] = row["attention_mask"][0] if "attention_mask" in row else 1
        grid = row.get("image_grid_thw")
        counts.append(0 if grid is None else int(grid.shape[0]))
        if grid is not None:
            values.append(row["pixel_values"])
            grids.append(grid)
    pixels = PixelInputs(torch.cat(values) if values else None, torch.cat(grids) if grids else None, counts)
    return VLMPromptBatch(ids, mask, pixels)


def pixel_inputs(image_processor: Any, images_per_row: Sequence[Sequence[Any]]) -> PixelInputs:
    """The :class:`PixelInputs` of rows given as their images (encoded files such as PNG bytes,
    paths or ``PIL`` images; a text-only row has none): the same images always give the same
    pixels, so the rollout, the actor and the reference, each running this on a batch's
    ``images``, feed the model identical inputs.

    >>> from rlinf.models.vlm.image_processing import make_image_processor
    >>> from PIL import Image
    >>> proc = make_image_processor(patch_size=14, min_pixels=56 * 56, max_pixels=56 * 56)
    >>> px = pixel_inputs(proc, [[Image.new("RGB", (56, 56))], []])
    >>> px.images_per_row, px.image_grid_thw.tolist(), tuple(px.pixel_values.shape)
    ([1, 0], [[1, 4, 4]], (16, 1176))
    """
    # lazy: the image processor's imports (PIL, transformers) only when pixels are made
    from rlinf.models.vlm.image_processing import preprocess_images

    counts = [len(row) for row in images_per_row]
    flat = [image for row in images_per_row for image in row]
    if not flat:
        return PixelInputs(None, None, counts)
    out = preprocess_images(image_processor, flat)
    return PixelInputs(out["pixel_values"], out["image_grid_thw"], counts)

