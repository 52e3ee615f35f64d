"""The tool agent's tiny byte-level BPE tokenizer: the tiny math tokenizer's design, with the
tool-call syntax as whole pieces.

Design:

* Byte-level BPE with the ChatML specials of :mod:`toolkits.tiny_math.tokenizer`
  (``<|endoftext|>`` pad and bos, ``<|im_start|>``, ``<|im_end|>`` eos) and its chat template: a
  plain loop over the messages, so a ``tool`` message renders as
  ``<|im_start|>tool\\n{content}<|im_end|>\\n`` and a ``tools=`` argument is accepted (and ignored).
* The pre-tokenizer is one regular expression (GPT-2 like: letters, single digits, punctuation
  runs, spaces) whose first alternatives are the fixed phrases of a call and an answer
  (:data:`PHRASES`). Each phrase is one pre-token, so BPE, trained on rendered tool conversations,
  merges it into one token or a few: the model writes the call's syntax in a handful of steps.
* Digits are always one token each (the number in a result is copied digit by digit).
* The phrases are ordinary (not special) tokens: the agent loop decodes a turn with
  ``skip_special_tokens=True``, which must keep ``<tool_call>``.

Example:
    >>> tok = build_tokenizer()
    >>> len(tok) <= DEFAULT_VOCAB_SIZE, tok.eos_token, tok.pad_token   # BPE stops when no merge is left
    (True, '<|im_end|>', '<|endoftext|>')
    >>> len(tok.encode(tool_call_text(347, 86), add_special_tokens=False)) <= 14
    True
    >>> tok.decode(tok.encode(answer_text(29842), add_special_tokens=False))
    'The answer is \\\\boxed{29842}.'
"""

from __future__ import annotations

import random
import re

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from toolkits.tiny_math.tokenizer import IM_END, IM_START, SPECIAL_TOKENS, load_tokenizer, save_tokenizer, wrap
from toolkits.tool_agent.make_tasks import answer_text, guess_product, make_prompt, tool_call_text

__all__ = ["DEFAULT_VOCAB_SIZE", "PHRASES", "build_tokenizer", "train_backend", "load_tokenizer", "save_tokenizer"]

DEFAULT_VOCAB_SIZE = 512
#: fixed texts kept whole (with a space before them, if any) by the pre-tokenizer, which tries them first
PHRASES = ("<tool_call>", "</tool_call>", '{"name": "calculator", "arguments": {"expression": "', '"}}',
           "\\boxed{", "The answer is", "<tool_response>", "</tool_response>")
_GENERIC = r"\p{N}| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PATTERN = "|".join([*(" ?" + re.escape(p) for p in PHRASES), _GENERIC])


def _corpus(n: int = 2000, seed: int = 1) -> list[str]:
    """Rendered chats of random tasks: tool episodes (call, result, answer) and direct answers."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        a, b = rng.randint(100, 999), rng.randint(10, 999)
        user = f"{IM_START}user\n{make_prompt(a, b)}{IM_END}\n{IM_START}assistant\n"
        texts.append(f"{user}{tool_call_text(a, b)}{IM_END}\n{IM_START}tool\n{a * b}{IM_END}\n"
                     f"{IM_START}assistant\n{answer_text(a * b)}{IM_END}\n")
        texts.append(f"{user}{answer_text(guess_product(a, b, rng))}{IM_END}\n")
    texts += [f"{IM_START}system\nYou are a helpful assistant.{IM_END}\n"] * 10
    return texts


def train_backend(vocab_size: int = DEFAULT_VOCAB_SIZE) -> Tokenizer:
    """Trains the raw ``tokenizers.Tokenizer`` (deterministic: fixed corpus and settings)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def build_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Trains and wraps the tokenizer (left padding, the ChatML template of the tiny math one)."""
    return wrap(train_backend(vocab_size))


if __name__ == "__main__":
    t = build_tokenizer()
    for text in (make_prompt(347, 86), tool_call_text(347, 86), answer_text(29842)):
        print(len(t.tokenize(text)), t.tokenize(text))
