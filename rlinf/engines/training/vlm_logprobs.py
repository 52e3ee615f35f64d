"""Response log-probs (and entropies) of a Qwen-VL model for the actor and the reference, computed
with the same pixel inputs the rollout sampled with.

The text path (:func:`rlinf.engines.training.common.response_logprobs`) passes position ids built
from the attention mask. A Qwen-VL model needs its multimodal rope positions instead (image
tokens get (t, h, w) positions from ``image_grid_thw``; the text after an image continues from
the image's largest position), so here no position ids are passed: the model's own forward
computes them (``get_rope_index``) from ``input_ids``, ``mm_token_type_ids``, ``image_grid_thw``
and the attention mask, exactly as ``generate`` did at the rollout's prefill, left padding
included. Same weights, same inputs: the log-probs equal the rollout's
(:func:`rlinf.engines.rollout.hf_vlm.generate_vlm`) up to float rounding.

Example:
    >>> gens = generate_vlm(model, prompts, sampling, n=2)  # doctest: +SKIP
    >>> batch = RolloutBatch.from_token_lists([prompts.token_lists()[g.prompt_index] for g in gens],
    ...                                       [g.token_ids for g in gens], pad_token_id=0)  # doctest: +SKIP
    >>> logp, ent = vlm_response_logprobs(model, batch, prompts.pixels.repeat(2), temperature=1.0,
    ...                                   with_entropy=True)  # doctest: +SKIP
"""

from __future__ import annotations

import torch

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.common import response_scores
from rlinf.models.vlm.batch import PixelInputs


def check_image_tokens(input_ids: torch.Tensor, pixels: PixelInputs, image_token_id: int, merge_size: int) -> None:
    """Each row's image tokens must number its images' ``t * h * w / merge_size**2``.

    Raises:
        ValueError: A row whose count differs (one line naming the row and both counts).
    """
    if len(pixels.images_per_row) != input_ids.shape[0]:
        raise ValueError(f"pixel inputs cover {len(pixels.images_per_row)} row(s), the batch has {input_ids.shape[0]}")
    per_image = ([] if pixels.image_grid_thw is None else
                 (pixels.image_grid_thw.prod(-1) // merge_size**2).tolist())
    first = 0
    for row, count in enumerate(pixels.images_per_row):
        expected = sum(per_image[first:first + count])
        first += count
        found = int((input_ids[row] == image_token_id).sum())
        if found != expected:
            raise ValueError(f"row {row}: {found} image token(s) in the ids but its {count} image(s) "
                             f"need {expected}; the pixel inputs are not this batch's")


def vlm_response_logprobs(model: torch.nn.Module, batch: RolloutBatch, pixels: PixelInputs, temperature: float,
                          with_entropy: bool, autocast_dtype: torch.dtype | None = None,
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward ``batch`` (prompt + response, on the model's device) with ``pixels`` (the rows'
    images in row order) and return fp32 ``(logprobs [B, R], entropy [B, R] or None)`` of the
    response tokens, 0 outside ``response_mask``; logits divided by ``temperature`` first.
    Gradients flow when called with grad enabled (the training forward).

    Raises:
        ValueError: Pixel inputs that do not match the batch's image tokens (:func:`check_image_tokens`).
    """
    P, R = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    if P < 1:
        raise ValueError("the batch needs at least one prompt column (position P-1 predicts response token 0)")
    image_token_id = model.config.image_token_id
    input_ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=1)
    attention_mask = torch.cat([batch.prompt_mask, batch.response_mask], dim=1)
    check_image_tokens(batch.prompt_ids, pixels, image_token_id, model.config.vision_config.spatial_merge_size)
    if int((batch.response_ids[batch.response_mask.bool()] == image_token_id).sum()):
        raise ValueError("a response contains the image token; its pixels would be missing")
    device = input_ids.device
    kwargs = {k: v.to(device) for k, v in pixels.model_kwargs().items()}
    with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    mm_token_type_ids=(input_ids == image_token_id).to(torch.int32),
                    use_cache=False, logits_to_keep=R + 1, **kwargs)
    return response_scores(out.logits, batch, temperature, with_entropy)
