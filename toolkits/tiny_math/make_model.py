"""Writes a randomly initialised ``Qwen2ForCausalLM`` folder with the tiny math tokenizer.

The folder loads offline with ``AutoModelForCausalLM.from_pretrained(dir)`` and
``AutoTokenizer.from_pretrained(dir)``; it holds ``config.json``, ``model.safetensors``,
``generation_config.json`` and the tokenizer files.

Sizes (parameter counts with the 384-token vocabulary, tied embeddings):

* ``tiny``: hidden 128, 3 layers, 4 heads (2 KV), MLP 384: 635,136 parameters; the warm start
  takes about a minute on two CPU cores.
* ``small``: hidden 512, 7 layers, 8 heads (2 KV), MLP 1536: 21,290,240 parameters; for
  benchmarks.

Example:
    python -m toolkits.tiny_math.make_model --out /tmp/tiny_math/base --size tiny
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rlinf.utils.hf_save import save_hf_model
from toolkits.tiny_math.tokenizer import build_tokenizer, save_tokenizer

SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
    "small": dict(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=7,
        num_attention_heads=8,
        num_key_value_heads=2,
    ),
}


def make_config(tokenizer: PreTrainedTokenizerFast, size: str = "tiny") -> Qwen2Config:
    """Builds the ``Qwen2Config`` for one of :data:`SIZES`.

    Args:
        tokenizer: The tokenizer whose vocabulary and special ids the model uses.
        size: Key of :data:`SIZES`.

    Returns:
        The model configuration.
    """
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {sorted(SIZES)}")
    return Qwen2Config(
        vocab_size=len(tokenizer),
        max_position_embeddings=512,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_sliding_window=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
        **SIZES[size],
    )


def generation_config(tokenizer: PreTrainedTokenizerFast) -> GenerationConfig:
    """Returns the default generation settings saved next to the model."""
    return GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=64,
    )


def save_model(
    model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerFast, out: str | Path
) -> Path:
    """Saves ``model`` (safetensors), its generation config and ``tokenizer`` into ``out``.

    Args:
        model: The model to save.
        tokenizer: Its tokenizer.
        out: Output folder (created if missing).

    Returns:
        The output folder.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = generation_config(tokenizer)
    save_hf_model(model, out, safe_serialization=True)  # (without importing DeepSpeed: rlinf.utils.hf_save)
    save_tokenizer(tokenizer, out)
    return out


def make_model(out: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Creates a randomly initialised model folder.

    Args:
        out: Output folder.
        size: Key of :data:`SIZES`.
        seed: Seed of the weight initialisation.

    Returns:
        The output folder.
    """
    tokenizer = build_tokenizer()
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(make_config(tokenizer, size))
    return save_model(model, tokenizer, out)


def num_params(model: torch.nn.Module) -> int:
    """Counts distinct parameters (tied weights once)."""
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Write a random-weight tiny Qwen2 model folder.")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--size", default="tiny", choices=sorted(SIZES))
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    out = make_model(a.out, a.size, a.seed)
    n = num_params(Qwen2ForCausalLM.from_pretrained(out))
    print(f"wrote {a.size} model ({n / 1e6:.2f}M params) -> {out}")


if __name__ == "__main__":
    main()
