"""The rollout-engine interface every generation backend implements.

Interruptible generation: ``generate(..., should_stop=poll)`` calls ``poll()`` between decode
steps and, once it returns True, returns at once; rows still decoding come back with the tokens
(and log-probs) sampled so far and ``finish_reason="interrupted"``. They continue in a later call
whose prompt is prompt + those tokens (:mod:`rlinf.engines.rollout.continuation`), under whatever
weights the engine holds then.

Never a half-loaded model: ``generate`` and ``load_weights`` / ``load_weight_stream`` hold one
lock (:meth:`RolloutEngine.exclusive`), so weights change only between generate calls, whichever
threads make them: a call's tokens all come from one set of weights.

Example (an engine that needs no model):

    >>> class Echo(RolloutEngine):
    ...     def generate(self, prompts, sampling, n=1, seed=None, should_stop=None):
    ...         with self.exclusive("generate"):
    ...             return [Generation(i, list(p), [0.0] * len(p), "length") for i, p in enumerate(prompts)]
    ...     def load_weights(self, named_tensors):
    ...         with self.exclusive("load_weights"):
    ...             pass
    >>> Echo().generate([[5, 6]], SamplingParams())[0].token_ids
    [5, 6]
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
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
        finish_reason: ``stop`` (EOS, a stop token id or a stop string), ``length`` (hit
            max_new_tokens) or ``interrupted`` (``should_stop`` ended the call first: the tokens
            sampled so far, possibly none; continue it from prompt + ``token_ids``).
    """

    prompt_index: int
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"


#: the kinds of :meth:`RolloutEngine.exclusive` sections that may not nest (a weight load inside
#: a generate call, from ``should_stop`` say, would change weights mid-call)
_EXCLUSIVE_KINDS = ("generate", "load_weights")


class RolloutEngine(ABC):
    """Generates responses and takes new weights in place (no reload from disk)."""

    @abstractmethod
    def generate(self, prompts: list[list[int]], sampling: SamplingParams, n: int = 1,
                 seed: int | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[Generation]:
        """``n`` responses per prompt, ordered prompt by prompt (``n`` consecutive per prompt).

        ``should_stop``: polled between decode steps (the first poll after each running row's
        first token). When it returns True the call returns at once: rows that had ended keep
        their ``finish_reason``; the others come back with the tokens and log-probs sampled so
        far (same lengths; none for rows not started yet, e.g. a later batch chunk or a queued
        request) and ``finish_reason="interrupted"``. No sampled token is dropped. It is not
        polled again in that call. None (the default): never interrupted.
        """

    @abstractmethod
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the model weights in place (HF parameter names)."""

    @contextmanager
    def exclusive(self, kind: str = "hold") -> Iterator[None]:
        """The engine's one lock: ``generate`` runs under ``exclusive("generate")``, weight loads
        under ``exclusive("load_weights")``, so a load waits for the generate call in progress
        (stop it with ``should_stop``) and a generate call waits for the load in progress.

        A caller may hold it (``kind="hold"``) across several calls, e.g. to load weights and
        bump a version with no generation in between. It is re-entrant on one thread, except that
        a ``generate`` section inside a ``generate`` / ``load_weights`` one, or a load inside a
        ``generate`` one (a load from ``should_stop``), raises ``RuntimeError``: the weights would
        change mid-call.
        """
        lock = self.__dict__.setdefault("_exclusive_lock", threading.RLock())
        held = self.__dict__.setdefault("_exclusive_held", threading.local())
        stack = held.__dict__.setdefault("stack", [])
        if kind in _EXCLUSIVE_KINDS:
            inner = [k for k in stack if k in _EXCLUSIVE_KINDS]
            if inner and "generate" in (kind, *inner):  # only a load inside a load may nest
                raise RuntimeError(
                    f"{type(self).__name__}: {kind} called inside {inner[-1]} on the same thread (from "
                    f"should_stop?); weights may change only between generate calls: return True from "
                    f"should_stop and {kind} after generate returns")
        with lock:
            stack.append(kind)
            try:
                yield
            finally:
                stack.pop()

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
