"""``data:`` — prompt datasets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rlinf.utils.typed_config import check


@dataclass(frozen=True)
class DataConfig:
    """``data``.

    Attributes:
        type: dataset family (math).
        max_prompt_length: prompts longer than this (in tokens) are dropped.
        rollout_batch_size: prompts per training step (each sampled group_size times).
        val_rollout_batch_size: prompts per validation batch; null = rollout_batch_size.
        num_workers: processes that tokenise the data files at start (0 = the driver alone);
            worth it for large files, whose prompts (chat template and all) then encode in
            parallel.
        prompt_key: key holding the prompt text.
        messages_key: key holding the prompt as a chat (a list of ``{role, content}`` turns,
            rendered by the tokenizer's chat template; needs apply_chat_template); null = use
            prompt_key (seed 001's ``data_args.messages``).
        answer_key: JSONL key holding the gold answer (our key).
        image_key: key holding each row's image(s) for a vision-language model (a path relative
            to the data file or absolute, a base64 data URI, or ``{"bytes"|"path": ...}``; one
            or a list), shown before the prompt's text; null = text-only data (our key). Needs
            a Qwen2.5-VL / Qwen3-VL model (refused before start otherwise); a missing or
            unreadable image stops the run naming file, row and image.
        apply_chat_template: wrap prompts with the tokenizer's chat template (our key).
        shuffle: a fresh seeded order of the training prompts every epoch.
        validation_shuffle: a fresh seeded order of the validation prompts at every validation
            (false = file order); matters when a validation batch is smaller than the set.
        seed: data RNG seed.
        train_data_paths, val_data_paths: data files: ``.jsonl``, ``.json`` (a list of rows),
            ``.csv`` or ``.parquet`` (see :mod:`rlinf.data.readers`).
    """

    train_data_paths: tuple[str, ...]
    val_data_paths: tuple[str, ...] = ()
    type: Literal["math"] = "math"
    max_prompt_length: int = 1024
    rollout_batch_size: int = 64
    val_rollout_batch_size: int | None = None
    num_workers: int = 0
    prompt_key: str = "prompt"
    messages_key: str | None = None
    answer_key: str = "answer"
    image_key: str | None = None
    apply_chat_template: bool = True
    shuffle: bool = True
    validation_shuffle: bool = True
    seed: int = 1234

    def validate(self, path: str) -> None:
        check(bool(self.train_data_paths), f"{path}.train_data_paths", "give at least one JSONL file")
        check(self.rollout_batch_size >= 1, f"{path}.rollout_batch_size",
              f"must be >= 1, got {self.rollout_batch_size}")
        check(self.val_rollout_batch_size is None or self.val_rollout_batch_size >= 1,
              f"{path}.val_rollout_batch_size", f"must be >= 1 or null (= rollout_batch_size), "
              f"got {self.val_rollout_batch_size}")
        check(self.max_prompt_length >= 1, f"{path}.max_prompt_length",
              f"must be >= 1, got {self.max_prompt_length}")
        check(self.messages_key is None or self.apply_chat_template, f"{path}.messages_key",
              "chat prompts are rendered by the tokenizer's chat template: set apply_chat_template: true")
        check(self.num_workers >= 0, f"{path}.num_workers", f"must be >= 0, got {self.num_workers}")
