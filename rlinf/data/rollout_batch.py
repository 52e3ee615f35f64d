"""``RolloutBatch``: the one object that carries samples from rollout to reward to actor.

Layout: ``B`` samples (``group_size`` consecutive samples per prompt). Prompts are LEFT-padded to
``P`` tokens, responses RIGHT-padded to ``R`` tokens, so ``cat([prompt_ids, response_ids], 1)`` puts
every response's first token at column ``P``. Token-level training quantities (log-probs,
advantages, ...) are ``[B, R]`` and aligned with ``response_ids``.

Example:
    >>> import torch
    >>> batch = RolloutBatch.from_token_lists(
    ...     prompts=[[5, 6], [7]], responses=[[1, 2, 3], [4]], pad_token_id=0, group_size=1)
    >>> batch.prompt_ids.tolist(), batch.response_ids.tolist()
    ([[5, 6], [0, 7]], [[1, 2, 3], [4, 0, 0]])
    >>> batch.response_lengths.tolist(), batch.num_response_tokens
    ([3, 1], 4)
    >>> ids, attn, pos = batch.model_inputs()
    >>> pos.tolist()
    [[0, 1, 2, 3, 4], [0, 0, 1, 1, 1]]
    >>> batch.select([1]).response_ids.tolist()
    [[4, 0, 0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

#: Fields that are tensors with the batch as first dimension (sliced by select / split / concat).
_TENSOR_FIELDS = (
    "prompt_ids", "prompt_mask", "response_ids", "response_mask", "rollout_logprobs",
    "old_logprobs", "ref_logprobs", "values", "rewards", "advantages", "returns", "group_ids",
    "correct", "loss_mask", "token_versions", "version_start", "version_end",
)


@dataclass
class RolloutBatch:
    """Samples of one training step.

    Attributes:
        prompt_ids, prompt_mask: ``[B, P]`` left-padded prompt tokens and their mask.
        response_ids, response_mask: ``[B, R]`` right-padded response tokens and their mask.
        group_size: samples per prompt; sample ``i`` belongs to group ``i // group_size``.
        group_ids: ``[B]`` dataset index of each sample's prompt.
        rollout_logprobs: ``[B, R]`` log-probs the rollout engine reported (behaviour policy).
        old_logprobs: ``[B, R]`` log-probs recomputed by the actor before the update; None at the
            update when the update is on-policy and its own forward pass gives them (the
            runner skipped the separate pass).
        ref_logprobs: ``[B, R]`` reference-model log-probs (KL).
        values: ``[B, R]`` critic values.
        rewards: ``[B]`` sequence rewards.
        correct: ``[B]`` bool, the verifier's verdict (rewards may also carry penalties).
        advantages, returns: ``[B, R]``.
        answers: gold answers, one per sample.
        texts: decoded responses (for the reward and for logging), one per sample.
        prompt_texts: the prompts as written in the data (for reward models and judges).
        finish_reasons: "stop" or "length" per sample.
        policy_version: actor version whose weights generated the batch.
        loss_mask: ``[B, R]`` the response tokens the policy is trained on, when not all of them
            are the model's own (a tool agent's tool results: 0); None = ``response_mask``.
            Attention still covers every response token; :attr:`train_mask` is what losses,
            advantages and token metrics use.
        token_versions: ``[B, R]`` the policy version that sampled each response token (-1 where
            the policy did not sample it: a tool result, padding); None = not tracked (every
            token came from ``policy_version``).
        version_start, version_end: ``[B]`` the versions of each sample's first and last sampled
            token (fully asynchronous rollout: a sample continued under new weights spans
            several); None = not tracked. :meth:`versions` gives them either way.
        images: per sample, its prompt's images (encoded files, e.g. PNG bytes; a
            vision-language run): the actor and the reference turn them into the same pixel
            inputs the rollout sampled with. Empty for text-only runs.
        episodes: per sample, a tool agent's episode figures (``turns``, ``tool_calls``,
            ``invalid_calls``, ``tool_errors``, ``tool_timeouts``, ``end_reason``, ...); empty
            for single-turn rollouts.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    group_size: int = 1
    group_ids: torch.Tensor | None = None
    rollout_logprobs: torch.Tensor | None = None
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    correct: torch.Tensor | None = None
    answers: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    prompt_texts: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    policy_version: int = 0
    loss_mask: torch.Tensor | None = None
    episodes: list[dict] = field(default_factory=list)
    images: list[tuple[bytes, ...]] = field(default_factory=list)
    token_versions: torch.Tensor | None = None
    version_start: torch.Tensor | None = None
    version_end: torch.Tensor | None = None

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_token_lists(cls, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                         pad_token_id: int, group_size: int = 1,
                         logprobs: Sequence[Sequence[float]] | None = None, **extra: Any) -> RolloutBatch:
        """Pad ragged prompt / response token lists (and per-token log-probs) into a batch."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        P = max((len(p) for p in prompts), default=0)
        R = max(max((len(r) for r in responses), default=0), 1)
        B = len(prompts)
        prompt_ids = torch.full((B, P), pad_token_id, dtype=torch.long)
        prompt_mask = torch.zeros((B, P), dtype=torch.long)
        response_ids = torch.full((B, R), pad_token_id, dtype=torch.long)
        response_mask = torch.zeros((B, R), dtype=torch.long)
        lp = torch.zeros((B, R), dtype=torch.float32) if logprobs is not None else None
        for i, (p, r) in enumerate(zip(prompts, responses)):
            if p:
                prompt_ids[i, P - len(p):] = torch.as_tensor(p, dtype=torch.long)
                prompt_mask[i, P - len(p):] = 1
            if r:
                response_ids[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
                response_mask[i, : len(r)] = 1
            if lp is not None and len(logprobs[i]):
                lp[i, : len(logprobs[i])] = torch.as_tensor(logprobs[i], dtype=torch.float32)
        return cls(prompt_ids, prompt_mask, response_ids, response_mask, group_size=group_size,
                   rollout_logprobs=lp, **extra)

    # ---- views ---------------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return self.response_ids.shape[0]

    @property
    def response_lengths(self) -> torch.Tensor:
        return self.response_mask.sum(-1)

    @property
    def train_mask(self) -> torch.Tensor:
        """The tokens losses and advantages cover: ``loss_mask`` (tool results out) when set,
        else ``response_mask``."""
        return self.response_mask if self.loss_mask is None else self.loss_mask

    @property
    def num_response_tokens(self) -> int:
        return int(self.response_mask.sum())

    @property
    def num_train_tokens(self) -> int:
        """Tokens the loss covers (``train_mask``): a token-mean loss divides by these, so tool
        results, which are in the response but not the policy's actions, weigh nothing."""
        return int(self.train_mask.sum())

    def model_inputs(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(input_ids, attention_mask, position_ids)`` of prompt + response, ``[B, P + R]``.

        Position ids count real tokens only, so left padding does not shift positions.
        """
        input_ids = torch.cat([self.prompt_ids, self.response_ids], dim=1)
        attention_mask = torch.cat([self.prompt_mask, self.response_mask], dim=1)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        return input_ids, attention_mask, position_ids

    # ---- slicing --------------------------------------------------------------------------------
    def versions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(version_start, version_end)`` per sample; a batch that does not track them was
        sampled wholly by ``policy_version``.

        >>> b = RolloutBatch.from_token_lists([[1]], [[2]], pad_token_id=0, policy_version=3)
        >>> [t.tolist() for t in b.versions()]
        [[3], [3]]
        """
        if self.version_start is not None and self.version_end is not None:
            return self.version_start, self.version_end
        same = torch.full((self.batch_size,), self.policy_version, dtype=torch.long)
        return same, same.clone()

    def select(self, indices: Sequence[int] | torch.Tensor) -> RolloutBatch:
        """The samples at ``indices`` (lists and tensors of the batch dimension are indexed)."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _TENSOR_FIELDS and value is not None:
                changes[f.name] = value[idx]
            elif isinstance(value, list) and value:
                changes[f.name] = [value[i] for i in idx.tolist()]
        return dataclasses.replace(self, **changes)

    def split(self, num_chunks: int) -> list[RolloutBatch]:
        """``num_chunks`` equal consecutive parts (the batch must divide evenly)."""
        if num_chunks < 1 or self.batch_size % num_chunks:
            raise ValueError(f"cannot split {self.batch_size} samples into {num_chunks} equal parts")
        size = self.batch_size // num_chunks
        return [self.select(range(i * size, (i + 1) * size)) for i in range(num_chunks)]

    @classmethod
    def concat(cls, batches: Sequence[RolloutBatch], pad_token_id: int) -> RolloutBatch:
        """Join batches, re-padding prompts (left) and responses (right) to the longest."""
        if not batches:
            raise ValueError("nothing to concatenate")
        P = max(b.prompt_ids.shape[1] for b in batches)
        R = max(b.response_ids.shape[1] for b in batches)
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            values = [getattr(b, f.name) for b in batches]
            if f.name in ("prompt_ids", "prompt_mask"):
                fill = pad_token_id if f.name == "prompt_ids" else 0
                changes[f.name] = torch.cat([_pad_left(v, P, fill) for v in values])
            elif f.name in _TENSOR_FIELDS:
                if any(v is None for v in values):
                    changes[f.name] = None
                    continue
                fill = {"response_ids": pad_token_id, "token_versions": -1}.get(f.name, 0)
                changes[f.name] = torch.cat([_pad_right(v, R, fill) if v.dim() == 2 else v for v in values])
            elif f.name == "images" and any(values):  # text-only parts: no image per sample
                changes[f.name] = [x for b, v in zip(batches, values) for x in (v or [()] * b.batch_size)]
            elif isinstance(values[0], list):
                changes[f.name] = [x for v in values for x in v]
        changes["group_size"] = batches[0].group_size
        changes["policy_version"] = min(b.policy_version for b in batches)
        return cls(**changes)


def _pad_left(t: torch.Tensor, width: int, fill) -> torch.Tensor:
    if t.shape[1] == width:
        return t
    pad = torch.full((t.shape[0], width - t.shape[1]), fill, dtype=t.dtype)
    return torch.cat([pad, t], dim=1)


def _pad_right(t: torch.Tensor, width: int, fill) -> torch.Tensor:
    if t.shape[1] == width:
        return t
    pad = torch.full((t.shape[0], width - t.shape[1]), fill, dtype=t.dtype)
    return torch.cat([t, pad], dim=1)
