"""``rollout.backend: sglang`` — a thin adapter over ``sglang.Engine`` for GPU machines.

UNTESTED IN THIS REPOSITORY: SGLang needs CUDA GPUs and is not installed on the CPU machines the
test suite runs on; this adapter only follows SGLang's documented offline-engine API
(``Engine(...)``, ``generate(input_ids=..., sampling_params=..., return_logprob=True)``,
``update_weights_from_tensor``, ``flush_cache``, ``release/resume_memory_occupation``). Check it
on a GPU before relying on it.

Mapping: prompts are repeated ``n`` times (prompt-major order); greedy is ``temperature=0``;
``top_k`` -1 disables; ``top_p``, ``repetition_penalty``, ``max_new_tokens``,
``min_new_tokens`` as is; EOS ids go to ``stop_token_ids``; with a ``seed`` sample ``j`` gets
``sampling_seed = seed + j`` (SGLang may need ``enable_deterministic_inference=True`` for it).
Log-probs: SGLang's output log-probs are temperature-scaled by default
(``SGLANG_RETURN_ORIGINAL_LOGPROB`` switches to untempered ones: do not set it), which matches rlinf's definition
(:mod:`rlinf.engines.rollout._common`) for plain temperature sampling. Whether penalties,
min-new-tokens masking or top-k/top-p enter them was NOT verified here; rely on
``rollout.recompute_logprobs`` (the default) for training with this backend.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout._common import check_prompts, effective_top_k, model_eos_ids
from rlinf.engines.rollout.base import Generation, RolloutEngine


class SGLangRolloutEngine(RolloutEngine):
    """Rollout with SGLang's offline engine (GPU only, untested here; see the module docstring)."""

    def __init__(self, model_path: str, *, eos_token_id: int | list[int] | None = None,
                 seed: int = 0, **engine_kwargs: Any):
        try:
            # lazy: optional extra (sglang)
            import sglang
        except ImportError as exc:
            raise ImportError(
                "rollout.backend=sglang needs the `sglang` package and CUDA GPUs "
                "(`pip install 'sglang[all]'` on a GPU machine); use rollout.backend=vllm or "
                "huggingface on CPU") from exc
        if not torch.cuda.is_available():
            raise RuntimeError("rollout.backend=sglang needs a CUDA GPU; none is visible here")
        self.eos_token_ids = model_eos_ids(model_path, eos_token_id)
        # lazy: transformers (~2 s) only when the engine is built
        from transformers import AutoConfig

        self.vocab_size = int(AutoConfig.from_pretrained(model_path).vocab_size)
        self._memory_saver = bool(engine_kwargs.get("enable_memory_saver", False))
        self.engine = sglang.Engine(model_path=model_path, skip_tokenizer_init=True,
                                    random_seed=seed, **engine_kwargs)

    @classmethod
    def from_config(cls, model_path: str, rollout_cfg: Any, **kw: Any) -> SGLangRolloutEngine:
        """Build from a :class:`~rlinf.config.rollout.RolloutConfig` (``kw`` wins)."""
        args: dict[str, Any] = dict(
            eos_token_id=rollout_cfg.eos, mem_fraction_static=rollout_cfg.gpu_memory_utilization,
            tp_size=rollout_cfg.tensor_parallel_size,
            max_running_requests=rollout_cfg.max_running_requests,
            disable_cuda_graph=rollout_cfg.enforce_eager,
            cuda_graph_max_bs=rollout_cfg.cuda_graph_max_bs,
            enable_torch_compile=rollout_cfg.use_torch_compile,
            torch_compile_max_bs=rollout_cfg.torch_compile_max_bs,
            enable_memory_saver=rollout_cfg.enable_offload,
            decode_log_interval=rollout_cfg.sglang_decode_log_interval)
        if rollout_cfg.attention_backend:
            args["attention_backend"] = rollout_cfg.attention_backend
        args.update(kw)
        return cls(model_path, **args)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, n: int = 1,
                 seed: int | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[Generation]:
        """See :meth:`RolloutEngine.generate`; ``should_stop`` is refused (not implemented here)."""
        if should_stop is not None:
            raise NotImplementedError(
                "rollout.backend=sglang cannot interrupt a generate call (should_stop, which "
                "runner.rollout_mode=fully_async uses); use rollout.backend=vllm or huggingface")
        check_prompts(prompts, n)
        greedy = not sampling.do_sample
        top_k = effective_top_k(sampling.top_k, self.vocab_size)
        input_ids, params, owners = [], [], []
        for i, p in enumerate(prompts):
            for _ in range(n):
                sp: dict[str, Any] = {
                    "temperature": 0.0 if greedy else float(sampling.temperature),
                    "top_k": -1 if greedy or top_k is None else top_k,
                    "top_p": 1.0 if greedy else float(sampling.top_p),
                    "repetition_penalty": float(sampling.repetition_penalty),
                    "max_new_tokens": int(sampling.max_new_tokens),
                    "min_new_tokens": int(sampling.min_new_tokens),
                    "stop_token_ids": list(self.eos_token_ids),
                    "skip_special_tokens": False,
                }
                if seed is not None:
                    sp["sampling_seed"] = seed + len(params)
                input_ids.append([int(t) for t in p])
                params.append(sp)
                owners.append(i)
        with self.exclusive("generate"):
            outputs = self.engine.generate(input_ids=input_ids, sampling_params=params, return_logprob=True)
        eos = set(self.eos_token_ids)
        result = []
        for owner, out in zip(owners, outputs):
            tokens = [int(t) for t in out["output_ids"]]
            meta = out.get("meta_info", {})
            logprobs = [float(entry[0]) for entry in meta.get("output_token_logprobs", [])][: len(tokens)]
            finish = "stop" if tokens and tokens[-1] in eos else "length"
            result.append(Generation(prompt_index=owner, token_ids=tokens, logprobs=logprobs,
                                     finish_reason=finish))
        return result

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """``update_weights_from_tensor`` (HF names; SGLang checks them), then flush the KV cache."""
        with self.exclusive("load_weights"):
            self.engine.update_weights_from_tensor(named_tensors=list(named_tensors))
            self.engine.flush_cache()

    def offload(self) -> None:
        """``release_memory_occupation`` (needs ``enable_memory_saver``, i.e. rollout.enable_offload)."""
        if self._memory_saver:
            self.engine.release_memory_occupation()

    def onload(self) -> None:
        if self._memory_saver:
            self.engine.resume_memory_occupation()

    def close(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            engine.shutdown()
