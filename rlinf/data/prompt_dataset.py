"""Prompt datasets for math RL: rows (see :mod:`rlinf.data.readers`) -> token ids, batches of prompts, resumable order.

Example:
    >>> rows = [{"prompt": f"{i}+1", "answer": str(i + 1)} for i in range(5)]
    >>> ds = PromptDataset(rows, encode=lambda s: [ord(c) for c in s], max_prompt_length=8)
    >>> loader = PromptLoader(ds, batch_size=2, shuffle=False, seed=0)
    >>> [b.answers for b in loader.epoch_batches()]
    [['1', '2'], ['3', '4']]
    >>> loader.epoch, loader.position
    (1, 0)
"""

from __future__ import annotations

import multiprocessing as mp
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from rlinf.data.readers import prompt_text


@dataclass(frozen=True)
class Prompt:
    """One dataset row: its index, prompt token ids, gold answer, the prompt as written (for
    reward models and judges, which read text) and its images (encoded files, e.g. PNG bytes; a
    vision-language prompt's ``token_ids`` hold each image's placeholder tokens already, and every
    worker that runs the model turns the same bytes into the same pixels)."""

    index: int
    token_ids: tuple[int, ...]
    answer: str
    text: str = ""
    images: tuple[bytes, ...] = ()


@dataclass(frozen=True)
class PromptBatch:
    """``batch_size`` prompts of one step (each is sampled ``group_size`` times by the rollout)."""

    prompts: tuple[Prompt, ...]

    @property
    def token_ids(self) -> list[list[int]]:
        return [list(p.token_ids) for p in self.prompts]

    @property
    def answers(self) -> list[str]:
        return [p.answer for p in self.prompts]

    @property
    def indices(self) -> list[int]:
        return [p.index for p in self.prompts]

    @property
    def images(self) -> list[tuple[bytes, ...]]:
        """Each prompt's images (empty tuples for text-only prompts)."""
        return [p.images for p in self.prompts]


class PromptDataset:
    """Rows tokenised once; prompts longer than ``max_prompt_length`` tokens are dropped.

    Args:
        rows: dicts with ``prompt`` and ``answer`` (and ``images``: a tuple of encoded image files,
            for a vision-language model).
        encode: text -> token ids (e.g. the tokenizer with its chat template applied).
        max_prompt_length: longest prompt kept, in tokens (a vision-language prompt counts its
            image tokens, so an image is never cut: the whole prompt is dropped).
        encode_images: ``(text, images) -> token ids`` for rows with images (the model's
            processor: chat template and each image's placeholder tokens); required when a row
            has images.
    """

    def __init__(self, rows: Sequence[dict], encode: Callable[[str], list[int]], max_prompt_length: int,
                 num_workers: int = 0,
                 encode_images: Callable[[str, tuple[bytes, ...]], list[int]] | None = None):
        self.prompts: list[Prompt] = []
        self.dropped = 0
        with_images = [i for i, row in enumerate(rows) if row.get("images")]
        if with_images and encode_images is None:
            raise ValueError(f"row {with_images[0]} has images but the model takes text only")
        text_rows = [i for i, row in enumerate(rows) if not row.get("images")]
        encoded: dict[int, list[int]] = dict(zip(text_rows, encode_all([rows[i]["prompt"] for i in text_rows],
                                                                       encode, num_workers)))
        for i in with_images:
            encoded[i] = list(encode_images(rows[i]["prompt"], tuple(rows[i]["images"])))
        for i, row in enumerate(rows):
            ids = tuple(encoded[i])
            if not all(isinstance(t, int) for t in ids):
                raise TypeError(f"encode must return a list of token ids (ints); for row {i} it "
                                f"returned {type(encode(row['prompt'])).__name__} of "
                                f"{sorted({type(t).__name__ for t in ids})}")
            if len(ids) > max_prompt_length:
                self.dropped += 1
                continue
            self.prompts.append(Prompt(i, ids, row["answer"], prompt_text(row["prompt"]),
                                       tuple(row.get("images") or ())))
        if not self.prompts:
            raise ValueError(f"no prompt fits data.max_prompt_length={max_prompt_length} "
                             f"({self.dropped} dropped)")

    def __len__(self) -> int:
        return len(self.prompts)


_ENCODE: Callable[[str], list[int]] | None = None


def _encode_one(text: str) -> list[int]:
    return list(_ENCODE(text))  # type: ignore[misc]


def encode_all(texts: Sequence[str], encode: Callable[[str], list[int]], num_workers: int = 0) -> list[list[int]]:
    """``encode`` over ``texts``, in ``num_workers`` forked processes when > 0 (``data.num_workers``);
    the order is kept.

    >>> encode_all(["ab", "c"], lambda s: [ord(ch) for ch in s], num_workers=2)
    [[97, 98], [99]]
    """
    if num_workers <= 0 or len(texts) < 2:
        return [list(encode(t)) for t in texts]
    global _ENCODE
    _ENCODE = encode  # inherited by the forked workers
    try:
        with mp.get_context("fork").Pool(num_workers) as pool:
            return pool.map(_encode_one, texts, chunksize=max(1, len(texts) // (4 * num_workers)))
    finally:
        _ENCODE = None


class PromptLoader:
    """Batches of a :class:`PromptDataset` in a seeded order; its position is checkpointable.

    Each epoch is a fresh permutation from ``(seed, epoch)`` when ``shuffle``; the last partial
    batch of an epoch is dropped (every step has the full batch size) unless ``drop_last`` is
    False (validation: every prompt once).
    """

    def __init__(self, dataset: PromptDataset, batch_size: int, shuffle: bool, seed: int,
                 drop_last: bool = True):
        if batch_size > len(dataset):
            raise ValueError(f"batch size {batch_size} exceeds the {len(dataset)} usable prompts")
        self.dataset, self.batch_size, self.shuffle, self.seed = dataset, batch_size, shuffle, seed
        self.drop_last = drop_last
        self.epoch = 0
        self.position = 0  # batches already taken in the current epoch

    @property
    def batches_per_epoch(self) -> int:
        full, rest = divmod(len(self.dataset), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(f"{self.seed}-{epoch}").shuffle(order)
        return order

    def next_batch(self) -> PromptBatch:
        """The next batch, moving to the next epoch when this one is used up."""
        if self.position >= self.batches_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        order = self._order(self.epoch)
        start = self.position * self.batch_size
        self.position += 1
        return PromptBatch(tuple(self.dataset.prompts[i] for i in order[start:start + self.batch_size]))

    def epoch_batches(self) -> Iterator[PromptBatch]:
        """The remaining batches of the current epoch."""
        while self.position < self.batches_per_epoch:
            yield self.next_batch()
        self.epoch, self.position = self.epoch + 1, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed:
            raise ValueError(f"checkpoint data seed {state['seed']} != data.seed {self.seed}")
        self.epoch, self.position = state["epoch"], state["position"]
