"""The tiny web policy's tokenizer: byte-level BPE trained on the demonstration chats.

The same design as :mod:`toolkits.tiny_math.tokenizer` (whose wrapper, special tokens, ChatML
template and save / load helpers are reused): byte-level BPE, so any page text encodes; every
digit is its own token, so marks (``[12]``) and prices (``$12.50``) are spelled digit by digit,
and ``$`` is always a token of its own, so a price reads the same on the page (``Price: $12.50``)
and in the reply (``answer "$12.50"``) and a small model can copy it token by token;
``<|endoftext|>`` pads, ``<|im_end|>`` ends a reply.

Entity names given as ``names`` (:mod:`.prepare` passes the shop's product names, all of which
are on the category pages the demonstrations visit) become single tokens wherever they stand as
whole words: the task line (``... price of the Olive Kettle?``) and the link that leads to the
product (``[5] link "Olive Kettle"``) then hold the same token, and the mark sits a fixed five
tokens before it, so finding the link a task asks for is a one-token lookup for a small model
(spelled out, the first word even tokenizes differently after ``"`` than after a space).

The merges are learned from the demonstrations' rendered chats (prompt + expert action, exactly
as :func:`rlinf.runners.web_agent.policy.chat_ids` renders them), the action grammar of both
interaction modes, and a few number / price strings. Training is deterministic: same texts,
same vocabulary.

Example:
    >>> tok = build_tokenizer(["Task: What is the price of the Blue Kettle?\\nAction:"],
    ...                       vocab_size=300)
    >>> ids = tok("click [12]", add_special_tokens=False).input_ids
    >>> tok.decode(ids), tok.convert_ids_to_tokens(ids)[-3:]
    ('click [12]', ['1', '2', ']'])
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rlinf.runners.web_agent.prompts import GRAMMAR
from toolkits.tiny_math.tokenizer import (  # noqa: F401 - re-exported for callers
    CHAT_TEMPLATE,
    EOS_TOKEN,
    IM_END,
    IM_START,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    load_tokenizer,
    save_tokenizer,
    wrap,
)

DEFAULT_VOCAB_SIZE = 768


def chat_text(prompt: str, response: str | None = None) -> str:
    """One user turn (and optionally the assistant reply) in the ChatML form of the template.

    Example:
        >>> chat_text("hi", "goback")
        '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\ngoback<|im_end|>\\n'
    """
    text = f"{IM_START}user\n{prompt}{IM_END}\n{IM_START}assistant\n"
    return text if response is None else f"{text}{response}{IM_END}\n"


def extra_texts() -> list[str]:
    """Texts every vocabulary sees besides the demonstrations: the grammar, numbers, prices."""
    texts = [GRAMMAR["set_of_marks"], GRAMMAR["coordinates"], "Previous actions: none", "Steps left: 4"]
    texts += [f"click [{n}] type [{n}] " for n in range(1, 40)]
    texts += [f'answer "${d}.{c:02d}"' for d in range(0, 200, 7) for c in (0, 25, 49, 50, 75, 95, 99)]
    texts += ["scroll up", "scroll down", "goback", 'type [3] "text" enter']
    return texts


def train_backend(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    """Trains the raw ``tokenizers.Tokenizer`` on ``texts`` (plus :func:`extra_texts`).

    Args:
        texts: Training texts (rendered chats of the demonstrations).
        vocab_size: Final vocabulary size, including the 256 byte symbols and the special tokens.

    Returns:
        The trained backend tokenizer.
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (bytes + specials), "
                         f"got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("$", behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([*texts, *extra_texts()], trainer=trainer)
    return tok


def build_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE,
                    model_max_length: int = 1024, names: Iterable[str] = ()) -> PreTrainedTokenizerFast:
    """Trains and wraps the tokenizer (left padding, ChatML template).

    Args:
        texts: Training texts.
        vocab_size: Vocabulary size of the trained BPE (bytes and special tokens included).
        model_max_length: The longest sequence the model takes (prompt + reply).
        names: Entity names (e.g. the shop's product names) that become one token each, wherever
            they stand as whole words; added after the BPE vocabulary.
    """
    tok = wrap(train_backend(texts, vocab_size))
    tok.model_max_length = model_max_length
    tok.add_tokens([AddedToken(n, single_word=True, normalized=False) for n in sorted(set(names))])
    return tok


def tokenizer_from_demos(rows: Iterable[dict], vocab_size: int = DEFAULT_VOCAB_SIZE,
                         model_max_length: int = 1024, names: Iterable[str] = ()) -> PreTrainedTokenizerFast:
    """The tokenizer trained on demonstration rows (dicts with ``prompt`` and ``response``).

    Example:
        >>> tok = tokenizer_from_demos([{"prompt": "Task: x", "response": "goback"}], vocab_size=300,
        ...                            names=["Olive Kettle"])
        >>> len(tok), tok.tokenize('the Olive Kettle? [3] link "Olive Kettle"')[-2:]
        (301, ['Olive Kettle', '"'])
    """
    return build_tokenizer([chat_text(r["prompt"], r["response"]) for r in rows], vocab_size, model_max_length,
                           names)


def write_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: str | Path) -> Path:
    """Saves ``tokenizer`` into ``out_dir`` (class pinned, template kept); returns the folder."""
    save_tokenizer(tokenizer, out_dir)
    return Path(out_dir)
