"""Helpers shared by the rollout engines: one definition of the reported log-probs and of the
sampling knobs, so every backend behaves the same.

Log-prob definition (every engine reports exactly this for each response token ``y_t``)::

    logprob_t = log_softmax(z_t / T)[y_t]

where ``z_t`` are the RAW model logits at that step (no repetition penalty, no min-tokens EOS
mask, no top-k / top-p truncation or renormalisation) and ``T`` is :func:`logprob_temperature`:
the sampling temperature when sampling, 1.0 for greedy decoding. This is what the actor recomputes
from a forward pass (it divides its logits by the temperature), so ``rollout_logprobs`` and
``old_logprobs`` agree up to numerics when the weights are the same.

Example:
    >>> from rlinf.config.algorithm import SamplingParams
    >>> logprob_temperature(SamplingParams(do_sample=True, temperature=0.7))
    0.7
    >>> logprob_temperature(SamplingParams(do_sample=False, temperature=0.7))
    1.0
    >>> effective_top_k(0, 32000), effective_top_k(1000000, 32000), effective_top_k(20, 32000)
    (None, None, 20)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rlinf.config.algorithm import SamplingParams


def logprob_temperature(sampling: SamplingParams) -> float:
    """``T`` of the log-prob definition: the temperature when sampling, 1.0 when greedy."""
    if sampling.do_sample and sampling.temperature > 0:
        return float(sampling.temperature)
    return 1.0


def effective_top_k(top_k: int | None, vocab_size: int) -> int | None:
    """``top_k`` if it truncates anything, else ``None`` (``<= 0`` or ``>= vocab`` disable it)."""
    if top_k is None or top_k <= 0 or top_k >= vocab_size:
        return None
    return int(top_k)


def check_prompts(prompts: Sequence[Sequence[int]], n: int) -> None:
    """Reject empty prompts and ``n < 1`` with a clear message."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for i, p in enumerate(prompts):
        if len(p) == 0:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")


def eos_id_list(value: Any) -> list[int]:
    """Normalise an ``eos_token_id`` (None, int or list) to a list of ints."""
    if value is None:
        return []
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return [int(v) for v in value]
    return [int(value)]


def model_eos_ids(model_path: str, override: Any = None) -> list[int]:
    """EOS ids of an HF folder: ``override`` if given, else its generation config's, else its
    model config's."""
    eos = override
    if eos is None:
        # lazy: transformers (~2 s) only when a model's config is read
        from transformers import AutoConfig, GenerationConfig

        try:
            eos = GenerationConfig.from_pretrained(model_path).eos_token_id
        except OSError:
            eos = None
        if eos is None:
            eos = getattr(AutoConfig.from_pretrained(model_path), "eos_token_id", None)
    return eos_id_list(eos)


def parameter_layout(model: Any) -> tuple[dict[str, tuple[int, ...]], list[list[str]]]:
    """Names -> shapes of a module's parameters and persistent buffers, plus the groups of names
    that share one tensor (tied embeddings: ``model.embed_tokens.weight`` and ``lm_head.weight``)."""
    shapes: dict[str, tuple[int, ...]] = {}
    by_tensor: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        shapes[name] = tuple(tensor.shape)
        by_tensor.setdefault(id(tensor), []).append(name)
    return shapes, list(by_tensor.values())


def check_named_tensors(named_tensors: Iterable[tuple[str, Any]], shapes: dict[str, tuple[int, ...]],
                        groups: list[list[str]]) -> list[tuple[str, Any]]:
    """Materialise ``named_tensors`` (references, no copies) and check them strictly against a
    layout from :func:`parameter_layout`, before anything is written (see :func:`check_specs`)."""
    items = list(named_tensors)
    check_specs([(name, tuple(value.shape)) for name, value in items], shapes, groups)
    return items


def check_specs(specs: Iterable[tuple], shapes: dict[str, tuple[int, ...]], groups: list[list[str]]) -> None:
    """Check ``(name, shape, ...)`` specs against a layout from :func:`parameter_layout`: the
    whole-update check of a weight stream, done before its first bucket arrives.

    Raises ``KeyError`` naming an unknown name or the parameters left without a value (a tied
    group is filled by any one of its names) and ``ValueError`` naming a shape mismatch.
    """
    given: set[str] = set()
    for name, shape, *_ in specs:
        shape = tuple(shape)
        if name not in shapes:
            raise KeyError(f"load_weights: unknown parameter name {name!r} for this model")
        if shape != shapes[name]:
            raise ValueError(f"load_weights: {name!r} has shape {shape}, the model expects {shapes[name]}")
        given.add(name)
    missing = [names[0] for names in groups if not given.intersection(names)]
    if missing:
        raise KeyError(f"load_weights: no value given for {len(missing)} parameter(s): {missing}")
