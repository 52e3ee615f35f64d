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

GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(path: str):
    """The tokenizer saved in HF folder ``path`` (see the module docstring)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = os.path.join(path, "tokenizer_config.json")
    if os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            tokenizer_class = json.load(f).get("tokenizer_class")
        if tokenizer_class in GENERIC_CLASSES:
            return PreTrainedTokenizerFast.from_pretrained(path)
    return AutoTokenizer.from_pretrained(path)
