"""Load a model folder's tokenizer the way it was saved.

``AutoTokenizer`` picks the tokenizer class from ``config.json``'s model type, so a locally
trained tokenizer saved as a generic fast tokenizer next to a qwen2 model comes back as a
``Qwen2Tokenizer`` with different ids. When ``tokenizer_config.json`` names a generic class
(``PreTrainedTokenizerFast`` / ``TokenizersBackend``), that class is used; otherwise
``AutoTokenizer`` as usual.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(path: str, settings=None):
    """The tokenizer saved in HF folder ``path`` (see the module docstring).

    ``settings`` (``actor.tokenizer``, a :class:`~rlinf.config.actor.TokenizerConfig`) adds
    ``use_fast`` (false: the slow tokenizer, which the folder must provide), ``trust_remote_code``
    and ``padding_side``."""
    # lazy: transformers (~2 s) only when a tokenizer is loaded
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    use_fast = True if settings is None else settings.use_fast
    remote = False if settings is None else settings.trust_remote_code
    config_file = os.path.join(path, "tokenizer_config.json")
    tokenizer = None
    if use_fast and os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            tokenizer_class = json.load(f).get("tokenizer_class")
        if tokenizer_class in GENERIC_CLASSES:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(path, use_fast=use_fast, trust_remote_code=remote)
    if not use_fast and getattr(tokenizer, "is_fast", False):
        raise ValueError(f"actor.tokenizer.use_fast is false but {path} has no slow (Python) tokenizer "
                         "for its class; set use_fast: true")
    if settings is not None:
        tokenizer.padding_side = settings.padding_side
    return tokenizer


def prompt_encoder(tokenizer, apply_chat_template: bool, system_prompt: str | None = None,
                   tools: list[dict] | None = None):
    """A function text -> prompt token ids: the user turn rendered with the tokenizer's chat
    template plus the assistant generation prompt (``data.apply_chat_template``), or the raw text.
    With the template, ``system_prompt`` comes first as a system turn (unless the prompt is a chat
    that has one) and ``tools`` (function schemas) go to the template as ``tools=``.

    Raises:
        ValueError: the chat template is asked for but the tokenizer has none.
    """
    if apply_chat_template and not getattr(tokenizer, "chat_template", None):
        raise ValueError("data.apply_chat_template is true but the tokenizer has no chat template")

    def encode(text) -> list[int]:
        if apply_chat_template:
            chat = text if isinstance(text, list) else [{"role": "user", "content": text}]
            if system_prompt is not None and not (chat and chat[0].get("role") == "system"):
                chat = [{"role": "system", "content": system_prompt}, *chat]
            extra = {"tools": tools} if tools else {}
            text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False, **extra)
        return list(tokenizer(text, add_special_tokens=not apply_chat_template)["input_ids"])

    return encode


def save_tokenizer_pinned(tokenizer, out_dir, chat_template: str | None = None) -> None:
    """Save ``tokenizer`` to ``out_dir`` (created) and pin ``tokenizer_class`` to
    ``PreTrainedTokenizerFast`` in its ``tokenizer_config.json``, so :func:`load_tokenizer` never
    falls back to the class of the model folder's ``config.json``; ``chat_template`` is written
    into the same file when given."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if chat_template is not None:
        cfg["chat_template"] = chat_template
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
