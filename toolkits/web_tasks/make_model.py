"""Writes a randomly initialised tiny ``Qwen2ForCausalLM`` folder for the web policy.

The folder loads offline with ``AutoModelForCausalLM.from_pretrained(dir)`` and
:func:`rlinf.data.tokenizer.load_tokenizer` (the tokenizer class is pinned); it holds
``config.json``, ``model.safetensors``, ``generation_config.json`` (greedy, 24 new tokens: the
tiny web config's ``max_new_tokens``) and the tokenizer files. Saving reuses
:func:`toolkits.tiny_math.make_model.save_model`.

Sizes (parameters with a 768-token vocabulary, tied embeddings; see :mod:`.prepare` for the
timings that chose the default):

* ``tiny``: hidden 128, 3 layers, 4 heads (2 KV), MLP 384.
* ``small``: hidden 192, 4 layers, 6 heads (2 KV), MLP 576.
* ``base``: hidden 256, 4 layers, 8 heads (4 KV), MLP 768.

Example:
    >>> from toolkits.web_tasks.tokenizer import build_tokenizer
    >>> tok = build_tokenizer(["Task: x\\nAction: goback"], vocab_size=300)
    >>> cfg = make_config(tok, "tiny", max_positions=256)
    >>> cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size, cfg.max_position_embeddings
    (128, 3, 300, 256)
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from toolkits.tiny_math.make_model import num_params, save_model

SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2),
    "small": dict(hidden_size=192, intermediate_size=576, num_hidden_layers=4, num_attention_heads=6,
                  num_key_value_heads=2),
    "base": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=4),
}
#: replies of the tiny web config are at most this many tokens (``policy_config.max_new_tokens``)
MAX_NEW_TOKENS = 24


def make_config(tokenizer: PreTrainedTokenizerFast, size: str = "small", max_positions: int = 1024) -> Qwen2Config:
    """The ``Qwen2Config`` of one of :data:`SIZES`.

    Args:
        tokenizer: The tokenizer whose vocabulary and special ids the model uses.
        size: Key of :data:`SIZES`.
        max_positions: ``max_position_embeddings``: the longest prompt + reply, in tokens.
    """
    if size not in SIZES:
        raise ValueError(f"size: unknown model size {size!r}; expected one of {', '.join(sorted(SIZES))}")
    if max_positions < 16:
        raise ValueError(f"max_positions must be at least 16 tokens, got {max_positions}")
    return Qwen2Config(
        vocab_size=len(tokenizer), max_position_embeddings=max_positions, rope_theta=10000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, torch_dtype="float32", **SIZES[size])


def make_model(tokenizer: PreTrainedTokenizerFast, out: str | Path, size: str = "small", seed: int = 0,
               max_positions: int = 1024) -> Path:
    """Writes a random-weight model folder with ``tokenizer`` into ``out``; returns the folder.

    Example (writes a folder)::

        make_model(tok, "/tmp/web_policy/base", "small", max_positions=640)   # doctest: +SKIP
    """
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(make_config(tokenizer, size, max_positions))
    out = save_model(model, tokenizer, out)
    model.generation_config.max_new_tokens = MAX_NEW_TOKENS
    model.generation_config.save_pretrained(out)
    return out


def describe(model: torch.nn.Module) -> str:
    """One line: size of ``model`` (parameters, layers, hidden width)."""
    cfg = model.config
    return (f"{num_params(model) / 1e6:.2f}M params, hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers, "
            f"vocab {cfg.vocab_size}, {cfg.max_position_embeddings} positions")
