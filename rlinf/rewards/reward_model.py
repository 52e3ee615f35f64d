"""A learned reward model: an HF sequence-classification checkpoint with one label.

Each (prompt, response) pair is written as a user and an assistant turn with the reward
model's own chat template when its tokenizer has one, else as ``prompt + response``; the
sequence's logit is its score. Sequences are right-padded in micro-batches (the HF
sequence-classification heads read the last non-pad token, located from ``pad_token_id``).

Example (``rm_dir`` is an HF ``...ForSequenceClassification`` folder with a tokenizer)::

    rm = HFRewardModel(rm_dir)                                   # doctest: +SKIP
    rm.score(["1+1?"], ["\\\\boxed{2}"])                          # doctest: +SKIP
    [0.73]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import AutoModelForSequenceClassification

from rlinf.data.tokenizer import load_tokenizer
from rlinf.rewards.base import Sample, Score


class HFRewardModel:
    """See the module docstring. ``device`` default: CUDA when available, else CPU."""

    def __init__(self, model_path: str, *, micro_batch_size: int = 8, device: str | None = None,
                 trust_remote_code: bool = False):
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.tokenizer = load_tokenizer(model_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            model_path, trust_remote_code=trust_remote_code).to(self.device).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(f"reward.model.model_path: {model_path} has {self.model.config.num_labels} labels; "
                             "a reward model has one (its logit is the score)")
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        if pad is None:
            raise ValueError(f"reward.model.model_path: the tokenizer of {model_path} has no pad or eos token")
        self.pad_token_id = int(pad)
        self.model.config.pad_token_id = self.pad_token_id
        self.micro_batch_size = micro_batch_size

    def text_of(self, prompt: str, response: str) -> str:
        """The text the model reads for one pair (see the module docstring)."""
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}], tokenize=False)
        return prompt + response

    @torch.no_grad()
    def score(self, prompts: list[str], responses: list[str]) -> list[float]:
        """One score per pair, in order."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        ids = [self.tokenizer(self.text_of(p, r), add_special_tokens=False)["input_ids"] or [self.pad_token_id]
               for p, r in zip(prompts, responses)]
        out: list[float] = []
        for s in range(0, len(ids), self.micro_batch_size):
            chunk = ids[s:s + self.micro_batch_size]
            width = max(len(x) for x in chunk)
            input_ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, x in enumerate(chunk):
                input_ids[i, :len(x)] = torch.tensor(x)
                mask[i, :len(x)] = 1
            logits = self.model(input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)).logits
            out += logits[:, 0].float().cpu().tolist()
        return out

    def score_many(self, samples: Sequence[Sample]) -> list[Score]:
        """:meth:`score` as a :class:`~rlinf.rewards.base.Scorer` (reads ``prompt`` and ``response``)."""
        return [Score(value) for value in self.score([s.prompt for s in samples], [s.response for s in samples])]

    def close(self) -> None:
        """Nothing to free (the model goes with the object)."""
