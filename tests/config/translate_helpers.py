"""Shared by the translator tests: a tiny HF Qwen2 folder, data files, and a copy of a test-data
config with its placeholders (@MODEL@, @TRAIN@, @VAL@) pointed at them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "translate"


def make_tiny_qwen(path: Path) -> str:
    """A tiny Qwen2 model with a word-level tokenizer (a real HF folder; the workers' tests' one)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workers"))
    from test_generation_worker import tiny_model_with_tokenizer

    return tiny_model_with_tokenizer(path)


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
