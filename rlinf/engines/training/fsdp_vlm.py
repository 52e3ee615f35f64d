"""The FSDP2 training engine of a vision-language model (Qwen2.5-VL, Qwen3-VL): the text
engine's sharding, optimizer, checkpoints, offload and weight export, with the model loaded by its
image-text class, the vision tower frozen or trained (``actor.model.vision_tower``), and every
forward given the pixels of the batch's images (``RolloutBatch.images``), made by the model's own
image processor from the same encoded files the rollout used, so the recomputed log-probs are
the rollout's (:func:`rlinf.engines.training.vlm_logprobs.vlm_response_logprobs`).

:func:`training_engine_class` picks this engine or the text one from the model folder.

Example (torch.distributed initialised, world size 1 is fine)::

    engine = training_engine_class("/tmp/tiny_vlm")("/tmp/tiny_vlm", actor_cfg)   # doctest: +SKIP
    logp = engine.compute_logprobs(batch, micro_batch_size=8)                      # doctest: +SKIP
"""

from __future__ import annotations

import torch

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.fsdp import FSDPEngine
from rlinf.engines.training.vlm_logprobs import vlm_response_logprobs
from rlinf.models.vlm.batch import pixel_inputs
from rlinf.models.vlm.freeze import set_vision_trainable
from rlinf.models.vlm.image_processing import load_image_processor
from rlinf.models.vlm.load import is_vlm_folder

__all__ = ["VLMFSDPEngine", "training_engine_class"]


class VLMFSDPEngine(FSDPEngine):
    """:class:`~rlinf.engines.training.fsdp.FSDPEngine` for a Qwen-VL folder (module docstring)."""

    def _load_model(self, model_path: str, **kwargs) -> torch.nn.Module:
        # lazy: transformers (~2 s) only when the model is built
        from transformers import AutoModelForImageTextToText

        self.image_processor = load_image_processor(model_path)
        return AutoModelForImageTextToText.from_pretrained(model_path, **kwargs)

    def _set_trainable(self, model: torch.nn.Module) -> None:
        if self.cfg.model.llm.vision_tower == "frozen":
            set_vision_trainable(model, False)

    def _response_forward(self, mb: RolloutBatch, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        images = mb.images or [()] * mb.batch_size
        pixels = pixel_inputs(self.image_processor, images)
        return vlm_response_logprobs(self.model, mb, pixels, self.temperature, with_entropy, self.autocast_dtype)


def training_engine_class(model_path: str) -> type[FSDPEngine]:
    """:class:`VLMFSDPEngine` for a vision-language model folder, else :class:`FSDPEngine`.

    >>> training_engine_class("/nowhere").__name__
    'FSDPEngine'
    """
    return VLMFSDPEngine if is_vlm_folder(model_path) else FSDPEngine
