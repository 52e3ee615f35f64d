"""The instruction prompt of OpenVLA and the token ids the original code hard-codes.

The prompt is ``In: What action should the robot take to {instruction.lower()}?\\nOut:``; the
original code appends Llama-2's lone ``▁`` piece (id 29871) when the tokenised prompt does not
already end with it (RLinf writes ``Out: `` with a trailing space, which tokenises to the same
ids). Here every such id comes from the checkpoint's own tokenizer: ``▁`` by
``convert_tokens_to_ids``, BOS / EOS (the OFT stop token, 2 in Llama-2) / pad from the tokenizer's
special tokens, so a small locally trained tokenizer of the same kind works too.

Sequences are left-padded inside the prompt block: ``[BOS, (image patches), pad..., prompt...,
▁]``; pads are masked and skipped by the position ids, so a sample's outputs do not depend on
its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

PROMPT_TEMPLATE = "In: What action should the robot take to {instruction}?\nOut:"
SPACE_PIECE = "\u2581"


@dataclass(frozen=True)
class SpecialIds:
    """Token ids the prompt needs, looked up in the tokenizer.

    Attributes:
        bos: beginning of sequence (``<s>``).
        eos: end of sequence (``</s>``, OFT's stop token).
        pad: padding (``<PAD>``).
        space: the lone ``▁`` piece.
    """

    bos: int
    eos: int
    pad: int
    space: int


def load_tokenizer(path: str | Path):
    """The tokenizer of a checkpoint folder (``tokenizer.json``; else the slow Llama tokenizer,
    which needs ``sentencepiece``), local files only.

    Raises:
        FileNotFoundError: no tokenizer files in the folder.
    """
    root = Path(path)
    if (root / "tokenizer.json").is_file():
        # lazy: transformers (~2 s) only when a tokenizer is loaded; the pre-Ray folder check imports this package
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(root), local_files_only=True)
    if (root / "tokenizer.model").is_file():
        # lazy: transformers (~2 s) only when a tokenizer is loaded; the pre-Ray folder check imports this package
        from transformers import LlamaTokenizer

        return LlamaTokenizer.from_pretrained(str(root), local_files_only=True)
    raise FileNotFoundError(f"{root}: no tokenizer (tokenizer.json or tokenizer.model)")


def special_ids(tokenizer, pad_token_id: int | None = None) -> SpecialIds:
    """Looks up BOS, EOS, pad and the lone ``▁`` piece.

    Args:
        tokenizer: the checkpoint's tokenizer.
        pad_token_id: ``config.json``'s ``pad_token_id`` (used when the tokenizer has none).

    Raises:
        ValueError: one of them is missing.
    """
    space = tokenizer.convert_tokens_to_ids(SPACE_PIECE)
    if space is None or space == tokenizer.unk_token_id:
        raise ValueError(f"the tokenizer has no lone {SPACE_PIECE!r} piece (Llama-2's id 29871)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else pad_token_id
    for name, value in (("bos", tokenizer.bos_token_id), ("eos", tokenizer.eos_token_id), ("pad", pad)):
        if value is None:
            raise ValueError(f"the tokenizer has no {name} token")
    return SpecialIds(bos=int(tokenizer.bos_token_id), eos=int(tokenizer.eos_token_id), pad=int(pad),
                      space=int(space))


def prompt_ids(tokenizer, ids: SpecialIds, instruction: str) -> list[int]:
    """Token ids of one prompt WITHOUT the BOS, ending with the ``▁`` piece."""
    text = PROMPT_TEMPLATE.format(instruction=str(instruction).lower())
    out = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not out or out[-1] != ids.space:
        out.append(ids.space)
    return out


def batch_prompt_ids(tokenizer, ids: SpecialIds, instructions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids ``[N, T]`` (int64) and their mask ``[N, T]`` (bool)."""
    rows = [prompt_ids(tokenizer, ids, t) for t in instructions]
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), ids.pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        out[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = True
    return out, mask
