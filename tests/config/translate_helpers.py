"""Shared by the translator tests: a tiny HF Qwen2 folder, data files, and a copy of a test-data
config with its placeholders (@MODEL@, @TRAIN@, @VAL@) pointed at them."""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).parent / "data" / "translate"


def make_tiny_qwen(path: Path) -> str:
    """A tiny Qwen2 model with a word-level tokenizer (a real HF folder, saved once per test module)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)}, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="w0", eos_token="w1").save_pretrained(path)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=True, eos_token_id=1, pad_token_id=0)
    Qwen2ForCausalLM(cfg).save_pretrained(path)
    return str(path)


def write_jsonl(path: Path, rows: int = 8) -> str:
    path.write_text("".join(json.dumps({"prompt": f"w{i} w3", "instruction": f"w{i}", "answer": "3"}) + "\n"
                            for i in range(rows)))
    return str(path)


def materialise(name: str, folder: Path, **values: str) -> Path:
    """tests/config/data/translate/<name> with @KEY@ placeholders replaced, written to ``folder``."""
    text = (DATA / name).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    out = folder / name
    out.write_text(text)
    return out


def compose_user_config(path: Path) -> dict:
    """Load a written config the way the Hydra entry loads a user's config (``-cd DIR -cn NAME``)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlinf.config.resolvers import register_resolvers

    register_resolvers()
    with initialize_config_dir(config_dir=str(path.parent), version_base=None):
        cfg = compose(config_name=path.stem)
    return OmegaConf.to_container(cfg, resolve=True)
