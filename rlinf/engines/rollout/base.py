"""The rollout-engine interface every generation backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from rlinf.config.algorithm import SamplingParams


@dataclass
class Generation:
    """One sampled response.

    Attributes:
        prompt_index: index of its prompt in the ``generate`` call.
        token_ids: response tokens (without the prompt), ending with EOS when it stopped there.
        logprobs: log-prob of each response token under the sampling distribution the engine
            used (temperature applied), same length as ``token_ids``.
        finish_reason: ``stop`` (EOS) or ``length`` (hit max_new_tokens).
    """

    prompt_index: int
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"


class RolloutEngine(ABC):
    """Generates responses and takes new weights in place (no reload from disk)."""

    @abstractmethod
    def generate(self, prompts: list[list[int]], sampling: SamplingParams, n: int = 1,
                 seed: int | None = None) -> list[Generation]:
        """``n`` responses per prompt, ordered prompt by prompt (``n`` consecutive per prompt)."""

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the model weights in place (HF parameter names)."""

    def load_weight_stream(self, stream) -> None:
        """Replace the weights from a :class:`~rlinf.scheduler.transfer_stream.TensorStream`
        (``stream.specs`` first, then one bucket at a time, each tensor valid until the next
        bucket). Default: take owned copies of everything, then :meth:`load_weights`; engines that
        copy each tensor in place as it arrives override this and hold no extra copy."""
        self.load_weights([(name, tensor.clone()) for name, tensor in stream])

    def named_weights(self) -> dict[str, torch.Tensor]:
        """The weights the engine holds, by HF name (for ``rollout.validate_weight``); engines whose
        weights are fused or sharded under other names do not offer it."""
        raise NotImplementedError(f"{type(self).__name__} cannot read its weights back by HF name")

    def set_tokenizer(self, tokenizer) -> None:
        """The run's tokenizer, for engines that stop on ``sampling.stop`` strings while decoding
        (HF); default: not needed (vLLM / SGLang detokenize themselves)."""

    def offload(self) -> None:
        """Free accelerator memory between phases (collocated mode); default: nothing to do."""

    def onload(self) -> None:
        """Undo :meth:`offload`."""

    def close(self) -> None:
        """Release the engine (processes, memory)."""
