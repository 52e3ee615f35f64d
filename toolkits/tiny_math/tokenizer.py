"""A small byte-level BPE tokenizer for the tiny math model, trained locally.

Design:

* Byte-level BPE (any text encodes, nothing maps to an unknown token), with a pre-tokenizer that
  splits every digit on its own, so numbers are always one token per digit.
* A few hundred tokens: the 256 byte symbols, three special tokens and merges learned from the
  task's own prompt / response / chat text (so ``\\boxed``, ``answer`` and the ChatML markers
  are short).
* Special tokens: ``<|endoftext|>`` (pad and bos), ``<|im_start|>``, ``<|im_end|>`` (eos).
* A ChatML chat template; ``apply_chat_template(..., add_generation_prompt=True)`` ends with
  ``<|im_start|>assistant\\n``.

The saved ``tokenizer_config.json`` names ``PreTrainedTokenizerFast`` as its class, so
``AutoTokenizer.from_pretrained`` returns exactly this tokenizer even when the folder's
``config.json`` says ``qwen2`` (otherwise a ``Qwen2Tokenizer`` with different ids may be built).
"""

from __future__ import annotations

import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from rlinf.data.tokenizer import save_tokenizer_pinned
from toolkits.tiny_math.make_dataset import make_prompt, make_response

PAD_TOKEN = "<|endoftext|>"
BOS_TOKEN = PAD_TOKEN
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
EOS_TOKEN = IM_END
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]
DEFAULT_VOCAB_SIZE = 384

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _corpus(n: int = 3000, seed: int = 0) -> list[str]:
    """Returns training text: rendered chats of random arithmetic problems plus role words."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        op = rng.choice("+-")
        hi = rng.choice([9, 99, 999])
        a, b = rng.randint(0, hi), rng.randint(0, hi)
        if op == "-" and b > a:
            a, b = b, a
        worked = op == "+" and rng.random() < 0.5
        texts.append(
            f"{IM_START}user\n{make_prompt(a, op, b)}{IM_END}\n"
            f"{IM_START}assistant\n{make_response(a, op, b, worked)}{IM_END}\n"
        )
    texts += [f"{IM_START}system\nYou are a helpful assistant.{IM_END}\n"] * 10
    return texts


def train_backend(vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    """Trains the raw ``tokenizers.Tokenizer`` (deterministic: fixed corpus, fixed settings).

    Args:
        vocab_size: Final vocabulary size, including the 256 byte symbols and special tokens.

    Returns:
        The trained backend tokenizer.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def wrap(backend: Tokenizer) -> PreTrainedTokenizerFast:
    """Wraps a backend tokenizer as a ``PreTrainedTokenizerFast`` with specials and template."""
    hf = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=512,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Trains and wraps the tokenizer.

    Args:
        vocab_size: Final vocabulary size.

    Returns:
        A ready ``PreTrainedTokenizerFast`` (left padding, ChatML template).
    """
    return wrap(train_backend(vocab_size))


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: str | Path) -> None:
    """Saves ``tokenizer`` to ``out_dir`` and pins its class in ``tokenizer_config.json``.

    Args:
        tokenizer: Tokenizer to save.
        out_dir: Folder (created if missing); may already hold a model's ``config.json``.
    """
    save_tokenizer_pinned(tokenizer, out_dir, chat_template=CHAT_TEMPLATE)


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerFast:
    """Loads a tokenizer saved by :func:`save_tokenizer` (no hub access).

    Args:
        path: Folder holding ``tokenizer.json`` and ``tokenizer_config.json``.

    Returns:
        The tokenizer, with left padding.
    """
    tok = PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    tok.padding_side = "left"
    return tok


if __name__ == "__main__":
    t = build_tokenizer()
    print(len(t), t.tokenize(make_prompt(12, "+", 34)))
