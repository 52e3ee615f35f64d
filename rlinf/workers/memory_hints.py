"""What a worker step says when it runs out of memory: the batch / sequence sizes it was given,
with their config keys, and what to lower.

A step method decorated with :func:`on_oom` runs unchanged; when it raises a CUDA out-of-memory
error (or ``MemoryError``), the error gets a :class:`~rlinf.scheduler.memory_report.MemoryHint`
and the driver's one line ends with it, e.g. ``actor[1] on node 0 ran out of GPU memory in
update() after 12 training steps (torch.OutOfMemoryError: CUDA out of memory, tried to allocate
2.00 GiB; its GPU: 79.0/79.6 GiB used; algorithm.training_batch_size_per_gpu=8, sequences of
2048 tokens (data.max_prompt_length + algorithm.sampling_params.max_new_tokens); lower ...)``.
The sizes are read only then.

Example:
    >>> class Step:
    ...     micro = 8
    ...     @on_oom(lambda self, n: {"actor.micro_batch_size": self.micro}, "lower actor.micro_batch_size")
    ...     def update(self, n):
    ...         raise MemoryError()
    >>> try:
    ...     Step().update(3)
    ... except MemoryError as exc:
    ...     print(exc.rlinf_memory_hint.describe())
    actor.micro_batch_size=8; lower actor.micro_batch_size
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from rlinf.scheduler.memory_report import hint_on_oom

#: the config keys that make an LLM sequence long
SEQUENCE_KEYS = "data.max_prompt_length + algorithm.sampling_params.max_new_tokens"
_TRAIN_ADVICE = ("lower algorithm.training_batch_size_per_gpu (or runner.max_tokens_per_mbs), or set "
                 "actor.model.gradient_checkpointing=true (megatron: actor.model.recompute_granularity) "
                 "or actor.fsdp_config.cpu_offload=true")
_FORWARD_ADVICE = "lower algorithm.logprob_forward_micro_batch_size (or the sequence length)"


def on_oom(sizes: Callable[..., dict], advice: str):
    """Decorate a worker step: ``sizes(self, *args, **kwargs)`` (``{config key: value}``) and
    ``advice`` are attached to an out-of-memory error it raises."""

    def wrap(method):
        @functools.wraps(method)
        def step(self, *args, **kwargs):
            with hint_on_oom(lambda: sizes(self, *args, **kwargs), advice):
                return method(self, *args, **kwargs)

        return step

    return wrap


def _sequence(shard) -> dict:
    """``sequences of N tokens (keys)`` of a :class:`~rlinf.data.rollout_batch.RolloutBatch`."""
    width = int(shard.prompt_ids.shape[1]) + int(shard.response_ids.shape[1])
    return {f"{shard.batch_size} sequences of {width} tokens ({SEQUENCE_KEYS})": ""}


def _train_sizes(self, shard, *_args, **_kwargs) -> dict:
    shard = shard[0] if isinstance(shard, list) and shard else shard  # the web actor: a list of steps
    out = {"algorithm.training_batch_size_per_gpu": self.algorithm.training_batch_size_per_gpu}
    if getattr(self, "max_tokens_per_mbs", None):
        out["runner.max_tokens_per_mbs"] = self.max_tokens_per_mbs
    return {**out, **_sequence(shard)}


def _forward_sizes(self, shard, *_args, **_kwargs) -> dict:
    algorithm = getattr(self, "algorithm", None)  # the inference group keeps only the size
    size = algorithm.logprob_forward_micro_batch_size if algorithm is not None else self.micro_batch_size
    return {"algorithm.logprob_forward_micro_batch_size": size, **_sequence(shard)}


def _generate_sizes(self, prompts, sampling, n, *_args, chunk_prompts=None, **_kwargs) -> dict:
    longest = max((len(p.token_ids) for p in prompts.prompts), default=0)
    out = {"prompts": len(prompts.prompts), "algorithm.group_size": n,
           "longest prompt (data.max_prompt_length)": f"{longest} tokens",
           "algorithm.sampling_params.max_new_tokens": sampling.max_new_tokens}
    if chunk_prompts:
        out["prompts per engine call"] = chunk_prompts
    return out


def _web_train_sizes(self, minibatches, *_args, **_kwargs) -> dict:
    out = {"algorithm_config.per_device_train_batch_size": self.micro_batch_size}
    return {**out, **_sequence(minibatches[0])} if minibatches else out


#: LLM actor / critic updates (FSDP, Megatron)
train_step = on_oom(_train_sizes, _TRAIN_ADVICE)
#: log-prob / value forward passes
forward_step = on_oom(_forward_sizes, _FORWARD_ADVICE)
#: LLM generation
generate_step = on_oom(_generate_sizes, "lower rollout.gpu_memory_utilization (vLLM / SGLang KV cache), "
                                        "algorithm.sampling_params.max_new_tokens or the prompts per rollout "
                                        "rank; or place the rollout apart from the actor")
#: web actor updates
web_train_step = on_oom(_web_train_sizes, "lower algorithm_config.per_device_train_batch_size or "
                                          "algorithm_config.cutoff_len, or turn on activation checkpointing "
                                          "in algorithm_config.deepspeed_config_filename")
#: embodied actor updates
embodied_train_step = on_oom(
    lambda self, shard, num_minibatches, *_a, **_k: {
        "actor.micro_batch_size": self.actor.micro_batch_size,
        "samples per minibatch (actor.global_batch_size)": shard.size // max(num_minibatches, 1)},
    "lower actor.micro_batch_size")
