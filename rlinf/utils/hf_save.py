"""Save an HF model without importing DeepSpeed (:func:`save_hf_model`).

transformers' ``save_pretrained`` unwraps the model through accelerate's
``extract_model_from_parallel``, which imports ``deepspeed`` whenever the package is installed,
only to test ``isinstance(model, DeepSpeedEngine)``. That first import of DeepSpeed logs its
accelerator detection (``Setting accelerator to CPU. If you have GPU or other accelerator, we
were unable to detect it.``) in every process that saves a model, and costs seconds. A model can
only be wrapped in a ``DeepSpeedEngine`` in a process that has imported DeepSpeed already, so
while saving, accelerate's "is DeepSpeed available" asks exactly that: DeepSpeed is imported
where a DeepSpeed engine is built (:mod:`rlinf.engines.training.deepspeed_engine`) and nowhere
else.

Example:
    >>> import sys, tempfile
    >>> from transformers import Qwen2Config, Qwen2ForCausalLM
    >>> model = Qwen2ForCausalLM(Qwen2Config(vocab_size=32, hidden_size=8, intermediate_size=16,
    ...                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    >>> out = tempfile.mkdtemp()
    >>> save_hf_model(model, out)
    >>> sorted(f for f in os.listdir(out) if f.endswith((".json", ".safetensors")))
    ['config.json', 'generation_config.json', 'model.safetensors']
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Any


@contextmanager
def deepspeed_only_if_imported():
    """Within the block, accelerate's model unwrapping treats DeepSpeed as available only when
    ``deepspeed`` is already imported in this process (so it never imports it itself)."""
    try:
        # lazy: accelerate (~0.3 s beyond torch + transformers; optional) only around a save
        import accelerate.utils.other as unwrap_module
    except ImportError:  # no accelerate: transformers unwraps without it (and without DeepSpeed)
        yield
        return
    original = unwrap_module.is_deepspeed_available
    unwrap_module.is_deepspeed_available = lambda: "deepspeed" in sys.modules and original()
    try:
        yield
    finally:
        unwrap_module.is_deepspeed_available = original


def save_hf_model(model: Any, path: str | os.PathLike, **kwargs: Any) -> None:
    """``model.save_pretrained(path, **kwargs)`` (an HF ``PreTrainedModel``) without importing
    DeepSpeed; see the module docstring."""
    with deepspeed_only_if_imported():
        model.save_pretrained(path, **kwargs)
