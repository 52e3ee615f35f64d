"""A small byte-level BPE tokenizer for robot instructions, trained locally (no download).

Byte-level, so any instruction encodes (nothing maps to an unknown token); merges are learned from a
few hundred generated manipulation instructions (LIBERO / ManiSkill / Bridge style) and OpenVLA's
prompt, so common words are one or two tokens. Special tokens: ``<pad>`` (id 0), ``<s>`` (bos),
``</s>`` (eos). The tokenizer knows nothing of the action bins: the VLA's vocabulary is the
tokenizer's plus ``n_bins`` action ids at the end.

Example:
    >>> tok = build_instruction_tokenizer(vocab_size=300)
    >>> len(tok), tok.pad_token_id, tok.decode(tok("pick up the cube")["input_ids"])
    (300, 0, 'pick up the cube')
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from rlinf.data.tokenizer import save_tokenizer_pinned

PAD_TOKEN = "<pad>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
SPECIAL_TOKENS = [PAD_TOKEN, BOS_TOKEN, EOS_TOKEN]
DEFAULT_VOCAB_SIZE = 512

#: OpenVLA's prompt; ``{instruction}`` is the lower-cased task.
PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"

_VERBS = ["pick up", "put", "place", "push", "move", "open", "close", "turn on", "turn off", "stack",
          "lift", "grasp", "slide", "pull", "rotate", "insert"]
_COLORS = ["", "red ", "green ", "blue ", "yellow ", "black ", "white ", "orange ", "purple "]
_OBJECTS = ["cube", "bowl", "plate", "mug", "carrot", "spoon", "eggplant", "ketchup", "cream cheese",
            "alphabet soup", "tomato sauce", "butter", "milk", "orange juice", "drawer", "microwave",
            "stove", "cabinet", "basket", "book", "peg", "box", "banana", "sponge", "cup", "towel"]
_PLACES = ["on the plate", "in the basket", "on top of the cabinet", "into the drawer", "on the stove",
           "to the left", "to the right", "onto the towel", "in the bowl", "on the table", "next to the mug",
           "in the sink", "on the shelf", "to the goal", "into the hole"]


def instruction_corpus(n: int = 600, seed: int = 0) -> list[str]:
    """``n`` generated instructions, each also rendered in :data:`PROMPT_TEMPLATE` (deterministic)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        verb = rng.choice(_VERBS)
        text = f"{verb} the {rng.choice(_COLORS)}{rng.choice(_OBJECTS)}"
        if verb in ("put", "place", "move", "push", "slide", "stack", "insert") or rng.random() < 0.3:
            text += f" {rng.choice(_PLACES)}"
        out.append(text)
        out.append(PROMPT_TEMPLATE.format(instruction=text))
    out += [" ".join(w) for w in itertools.permutations(["the", "robot", "arm", "gripper"], 2)]
    return out


def build_instruction_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE):
    """Trains the tokenizer and wraps it as a ``PreTrainedTokenizerFast`` (right padding).

    Args:
        vocab_size: final size including the 256 byte symbols and the 3 special tokens.

    Returns:
        The ``PreTrainedTokenizerFast``.
    """
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(instruction_corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=EOS_TOKEN,
                                   pad_token=PAD_TOKEN, padding_side="right", model_max_length=512,
                                   clean_up_tokenization_spaces=False)


def save_instruction_tokenizer(tokenizer, out_dir: str | Path) -> None:
    """Saves ``tokenizer`` into ``out_dir`` and pins its class to ``PreTrainedTokenizerFast`` (so
    loading never depends on the model folder's ``config.json``).

    Args:
        tokenizer: the tokenizer.
        out_dir: folder (created if missing).
    """
    save_tokenizer_pinned(tokenizer, out_dir)


def load_instruction_tokenizer(path: str | Path):
    """Loads a tokenizer saved by :func:`save_instruction_tokenizer` (local files only)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
