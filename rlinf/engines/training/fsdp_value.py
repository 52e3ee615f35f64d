"""The FSDP2 value model of LLM PPO: an HF backbone with a scalar head on every token.

The model is ``AutoModelForTokenClassification`` with one label, built from any causal-LM
checkpoint of a supported architecture (Qwen2, Llama, ...): the backbone weights load, the head
(``score``) is new and zero-initialised, so every value starts at 0; a checkpoint that already
has the head (a saved critic) keeps it. Classifier dropout is off (values are regression targets).

The value of response token ``t`` is read at position ``P - 1 + t``, the same position whose
logits give that token's log-prob: it estimates the return from the state before the token.
Everything else (sharding, micro-batch weights, optimizer, LR schedule, checkpoints, offload) is
:class:`~rlinf.engines.training.fsdp.FSDPEngine`'s: :meth:`compute_logprobs` returns values and
:meth:`train_minibatch` passes them to the loss in place of log-probs.

Example (one process; ``model_dir`` is an HF causal-LM folder)::

    engine = FSDPValueEngine(model_dir, actor_cfg, device=torch.device("cpu"))   # doctest: +SKIP
    values, _ = engine.compute_logprobs(batch, micro_batch_size=4)                # doctest: +SKIP
"""

from __future__ import annotations

import torch

from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.training.fsdp import FSDPEngine


def response_values(model: torch.nn.Module, batch: RolloutBatch,
                    autocast_dtype: torch.dtype | None = None) -> torch.Tensor:
    """fp32 values ``[b, R]`` of the response tokens (position ``P - 1 + t`` for token ``t``), 0
    outside ``response_mask``."""
    P, R = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    if P < 1:
        raise ValueError("the batch needs at least one prompt column (position P-1 values response token 0)")
    input_ids, attention_mask, position_ids = batch.model_inputs()
    with torch.autocast(input_ids.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    values = out.logits[:, P - 1:P - 1 + R, 0].float()
    return torch.where(batch.response_mask.bool(), values, torch.zeros_like(values))


class FSDPValueEngine(FSDPEngine):
    """:class:`FSDPEngine` over a value model (see the module docstring)."""

    def _load_model(self, model_path: str, **kwargs) -> torch.nn.Module:
        # lazy: transformers (~2 s) only when the model is built; importing the engine does not
        from transformers import AutoConfig, AutoModelForTokenClassification

        config = AutoConfig.from_pretrained(model_path, num_labels=1,
                                            trust_remote_code=self.cfg.model.trust_remote_code)
        config.classifier_dropout = 0.0
        model, info = AutoModelForTokenClassification.from_pretrained(
            model_path, config=config, output_loading_info=True, **kwargs)
        head = getattr(model, "score", None) or getattr(model, "classifier", None)
        if head is None:
            raise ValueError(f"{type(model).__name__} has no score / classifier head to use as the value head")
        fresh = [k for k in info["missing_keys"] if k.split(".")[0] in ("score", "classifier")]
        if fresh:
            with torch.no_grad():
                for p in head.parameters():
                    p.zero_()
        return model

    def _response_forward(self, mb: RolloutBatch, with_entropy: bool) -> tuple[torch.Tensor, None]:
        return response_values(self.model, mb, self.autocast_dtype), None
