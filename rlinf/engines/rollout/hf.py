"""``rollout.backend: huggingface`` — batched ``transformers`` ``generate`` as a rollout engine.

Prompts are left-padded and generated in chunks of ``max_batch_size`` sequences. The engine owns
the sampling pipeline: it replaces the checkpoint's ``generation_config`` by a bare one (only the
EOS / pad ids), so nothing from ``generation_config.json`` (a default top_k of 50, a repetition
penalty, ...) changes sampling behind the caller's back, and passes its own logits processors in
this order::

    [record raw log-probs] -> repetition penalty -> min-new-tokens EOS mask
        -> temperature -> top-k -> top-p -> sample (or argmax when greedy)

The first processor sees the raw float32 logits of each step and records
``log_softmax(z / T)`` of the token that is then chosen, which is the log-prob definition of
:mod:`rlinf.engines.rollout._common` (no penalty, no truncation). Only one step of full-vocab
log-probs is kept alive at a time.

Stop strings: with the run's tokenizer (:meth:`HFRolloutEngine.set_tokenizer`, which the rollout
workers call) a row ends at the token that completes one of ``sampling.stop``, as on vLLM, and a
batch stops decoding once every row has ended; without it the caller cuts afterwards.

Interruption (``should_stop``): polled after each decode step in which some row is still
decoding (lean loop; ``model.generate`` polls through a ``StoppingCriteria``, after every step
but the last); once it returns True the chunk returns with what it has, rows not ended are
``interrupted``, and later chunks of the call are not started (their rows come back empty,
``interrupted``). Generation and weight loading hold one lock (:meth:`RolloutEngine.exclusive`).

Decoding: ``decode="lean"`` (the default) runs the steps with
:func:`~rlinf.engines.rollout.lean_decode.lean_generate` — the same model, processors and
sampling rule without ``generate``'s per-step overhead — for the Llama family (qwen2, qwen3,
llama, mistral); any other model, or ``decode="generate"``, uses ``model.generate``.
:attr:`HFRolloutEngine.decode_path` says which one runs and why.

Example (a tiny random model; real use passes a checkpoint folder)::

    engine = HFRolloutEngine("/path/to/hf_model", max_batch_size=32)
    gens = engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=16), n=4, seed=0)
    engine.load_weights(actor.named_parameters())  # in place, strict names
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout._common import (
    check_named_tensors,
    check_prompts,
    check_specs,
    effective_top_k,
    eos_id_list,
    logprob_temperature,
    parameter_layout,
)
from rlinf.engines.rollout.base import Generation, RolloutEngine
from rlinf.engines.rollout.lean_decode import lean_decode_problem, lean_generate
from rlinf.engines.rollout.stops import StopStringWatcher, cut_at_stop


class _RawLogprobRecorder:
    """Logits processor placed first: records ``log_softmax(raw / T)[chosen token]`` per step.

    At step ``t`` it receives ``input_ids`` whose last column is the token chosen at step ``t-1``,
    so it gathers that token from the distribution it stored one step earlier; :meth:`finish`
    gathers the last step from the final sequences.
    """

    def __init__(self, prompt_len: int, temperature: float):
        self.prompt_len = prompt_len
        self.temperature = temperature
        self.pending: torch.Tensor | None = None  # [b, V] log-probs of the step not yet resolved
        self.steps: list[torch.Tensor] = []  # [b] per generated token

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.pending = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """``[b, S]`` log-probs of the ``S`` generated tokens of ``sequences`` (prompt + response)."""
        if self.pending is not None:
            self.steps.append(self.pending.gather(-1, sequences[:, -1:]).squeeze(-1))
            self.pending = None
        if not self.steps:
            return torch.zeros((sequences.shape[0], 0))
        return torch.stack(self.steps, dim=1)


class _StickyPoll:
    """``should_stop`` called until it first returns True, then True without calling it again."""

    def __init__(self, should_stop: Callable[[], bool] | None):
        self.should_stop, self.fired = should_stop, False

    def __call__(self) -> bool:
        if not self.fired and self.should_stop is not None and self.should_stop():
            self.fired = True
        return self.fired


class _StopWhenAsked:
    """``StoppingCriteria`` for ``model.generate``: every row stops once the poll fires (not
    polled after the last step, where the call ends anyway)."""

    def __init__(self, poll: _StickyPoll, prompt_len: int, max_new_tokens: int):
        self.poll, self.prompt_len, self.max_new_tokens = poll, prompt_len, max_new_tokens

    def __call__(self, input_ids: torch.Tensor, scores=None, **_) -> torch.Tensor:
        last = input_ids.shape[1] - self.prompt_len >= self.max_new_tokens
        stop = not last and self.poll()
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


def sampling_processors(sampling: SamplingParams, prompt_len: int, recorder: _RawLogprobRecorder, *,
                        vocab_size: int, eos_token_ids: list[int], device: torch.device):
    """The logits processors of the module docstring's pipeline, the recorder first (also used by
    the VLM rollout, :mod:`rlinf.engines.rollout.hf_vlm`). ``eos_token_ids``: EOS plus
    ``sampling.stop_token_ids``."""
    # lazy: transformers (~2 s) only when the engine runs; importing it (before Ray) does not
    from transformers import (
        LogitsProcessorList,
        MinNewTokensLengthLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    procs = LogitsProcessorList([recorder])
    if sampling.repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(penalty=float(sampling.repetition_penalty)))
    if sampling.frequency_penalty:
        procs.append(FrequencyPenalty(sampling.frequency_penalty, prompt_len))
    if sampling.min_new_tokens > 0 and eos_token_ids:
        procs.append(MinNewTokensLengthLogitsProcessor(
            prompt_length_to_skip=prompt_len, min_new_tokens=int(sampling.min_new_tokens),
            eos_token_id=list(eos_token_ids), device=str(device)))
    if sampling.do_sample:
        if sampling.temperature != 1.0:
            procs.append(TemperatureLogitsWarper(float(sampling.temperature)))
        top_k = effective_top_k(sampling.top_k, vocab_size)
        if top_k is not None:
            procs.append(TopKLogitsWarper(top_k=top_k))
        if sampling.top_p < 1.0:
            procs.append(TopPLogitsWarper(top_p=float(sampling.top_p)))
        if sampling.min_p > 0:
            # lazy: transformers (~2 s) only when the engine runs; importing it (before Ray) does not
            from transformers import MinPLogitsWarper

            procs.append(MinPLogitsWarper(min_p=float(sampling.min_p)))
    return procs


class HFRolloutEngine(RolloutEngine):
    """Rollout with ``AutoModelForCausalLM.generate``.

    Args:
        model_path: local HF model folder.
        device: ``cuda`` / ``cpu`` / a torch device; default: CUDA when available.
        dtype: torch dtype or its name; default: float32 on CPU, bfloat16 on GPU.
        max_batch_size: sequences per ``generate`` call (prompts x n are chunked).
        eos_token_id: override (int or list); default: the checkpoint's generation / model config.
        pad_token_id: override; default: the checkpoint's pad id, else the first EOS id, else 0.
        decode: ``lean`` (the lean loop where the architecture allows, else ``generate``) or
            ``generate`` (always ``model.generate``).
    """

    def __init__(self, model_path: str, *, device: str | torch.device | None = None,
                 dtype: torch.dtype | str | None = None, max_batch_size: int = 64,
                 eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None,
                 decode: str = "lean"):
        # lazy: transformers (~2 s) only when the engine runs; importing it (before Ray) does not
        from transformers import GenerationConfig

        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if decode not in ("lean", "generate"):
            raise ValueError(f"decode must be 'lean' or 'generate', got {decode!r}")
        self.device = torch.device(device if device is not None else
                                   ("cuda" if torch.cuda.is_available() else "cpu"))
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        elif isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        self.dtype = dtype
        self.max_batch_size = max_batch_size

        model = self._load_model(model_path, dtype)
        model.to(self.device).eval()
        self.model = model

        if eos_token_id is None:
            eos_token_id = getattr(model.generation_config, "eos_token_id", None)
            if eos_token_id is None:
                eos_token_id = getattr(model.config, "eos_token_id", None)
        self.eos_token_ids = eos_id_list(eos_token_id)
        if pad_token_id is None:
            pad_token_id = getattr(model.generation_config, "pad_token_id", None)
            if pad_token_id is None:
                pad_token_id = getattr(model.config, "pad_token_id", None)
        if pad_token_id is None:
            pad_token_id = self.eos_token_ids[0] if self.eos_token_ids else 0
        self.pad_token_id = int(pad_token_id)
        # The engine owns sampling: drop whatever the checkpoint's generation_config.json sets.
        model.generation_config = GenerationConfig(
            eos_token_id=self.eos_token_ids or None, pad_token_id=self.pad_token_id,
            bos_token_id=getattr(model.config, "bos_token_id", None))
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self._shapes, self._groups = parameter_layout(model)
        problem = lean_decode_problem(model) if decode == "lean" else "decode: generate was asked for"
        self.lean = problem is None
        #: ``lean`` or ``generate (<why>)``: the decode loop this engine runs
        self.decode_path = "lean" if self.lean else f"generate ({problem})"
        self.tokenizer = None  # set_tokenizer: stop strings end rows while decoding

    def _load_model(self, model_path: str, dtype: torch.dtype) -> torch.nn.Module:
        """The HF model to sample from: a causal LM (a vision-language engine loads its own class)."""
        # lazy: transformers (~2 s) only when the engine runs; importing it (before Ray) does not
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)

    def set_tokenizer(self, tokenizer) -> None:
        """With the tokenizer, ``sampling.stop`` strings finish a row at the token that completes
        them (:class:`~rlinf.engines.rollout.stops.StopStringWatcher`) instead of the row decoding
        on to EOS or ``max_new_tokens`` and being cut afterwards."""
        self.tokenizer = tokenizer

    # ---- generation -----------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], sampling: SamplingParams, n: int = 1,
                 seed: int | None = None,
                 should_stop: Callable[[], bool] | None = None) -> list[Generation]:
        """See :meth:`RolloutEngine.generate` (``should_stop``: the module docstring)."""
        check_prompts(prompts, n)
        expanded = [(i, list(p)) for i, p in enumerate(prompts) for _ in range(n)]
        out: list[Generation] = []
        poll = _StickyPoll(should_stop)
        devices = [self.device] if self.device.type == "cuda" else []
        with self.exclusive("generate"), torch.random.fork_rng(devices=devices, enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            for start in range(0, len(expanded), self.max_batch_size):
                chunk = expanded[start:start + self.max_batch_size]
                if poll.fired:  # interrupted in an earlier chunk: these rows never started
                    out.extend(Generation(i, [], [], "interrupted") for i, _ in chunk)
                else:
                    out.extend(self._generate_chunk(chunk, sampling, poll))
        return out

    def _processors(self, sampling: SamplingParams, prompt_len: int, recorder: _RawLogprobRecorder):
        return sampling_processors(sampling, prompt_len, recorder, vocab_size=self.vocab_size,
                                   eos_token_ids=self._eos(sampling), device=self.device)

    def _eos(self, sampling: SamplingParams) -> list[int]:
        """The tokenizer's EOS ids plus ``sampling.stop_token_ids``."""
        return list(dict.fromkeys([*self.eos_token_ids, *sampling.stop_token_ids]))

    @torch.no_grad()
    def _generate_chunk(self, items: list[tuple[int, list[int]]], sampling: SamplingParams,
                        poll: _StickyPoll) -> list[Generation]:
        # lazy: transformers (~2 s) only when the engine runs; importing it (before Ray) does not
        from transformers import GenerationConfig

        b = len(items)
        prompt_len = max(len(p) for _, p in items)
        input_ids = torch.full((b, prompt_len), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((b, prompt_len), dtype=torch.long)
        for row, (_, p) in enumerate(items):
            input_ids[row, prompt_len - len(p):] = torch.as_tensor(p, dtype=torch.long)
            attention_mask[row, prompt_len - len(p):] = 1
        recorder = _RawLogprobRecorder(prompt_len, logprob_temperature(sampling))
        # Every knob that would make generate build its own processors is neutral here: ours above
        # do the work (and in our order, behind the recorder). top_k=0 disables HF's default of 50
        # (only read when sampling; set for greedy it just triggers a warning).
        gen_cfg = GenerationConfig(
            do_sample=bool(sampling.do_sample), max_new_tokens=int(sampling.max_new_tokens),
            min_new_tokens=0, temperature=1.0, top_k=0 if sampling.do_sample else None, top_p=1.0,
            repetition_penalty=1.0,
            num_beams=1, num_return_sequences=1, eos_token_id=self._eos(sampling) or None,
            pad_token_id=self.pad_token_id, return_dict_in_generate=False, use_cache=True)
        processors = self._processors(sampling, prompt_len, recorder)
        watcher = (StopStringWatcher(self.tokenizer, sampling.stop, prompt_len)
                   if sampling.stop and self.tokenizer is not None else None)
        if self.lean:
            sequences = lean_generate(
                self.model, input_ids.to(self.device), attention_mask.to(self.device),
                max_new_tokens=int(sampling.max_new_tokens), processors=processors,
                do_sample=bool(sampling.do_sample), eos_token_ids=self._eos(sampling),
                pad_token_id=self.pad_token_id, stop_check=watcher,
                should_stop=poll if poll.should_stop is not None else None)
        else:
            # lazy: transformers (~2 s) only when the engine runs; importing it (before Ray) does not
            from transformers import StoppingCriteriaList

            criteria = StoppingCriteriaList([watcher] if watcher else [])
            if poll.should_stop is not None:
                criteria.append(_StopWhenAsked(poll, prompt_len, int(sampling.max_new_tokens)))
            sequences = self.model.generate(
                input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device),
                generation_config=gen_cfg, logits_processor=processors, stopping_criteria=criteria)
        logprobs = recorder.finish(sequences).cpu()
        responses = sequences[:, prompt_len:].cpu()
        eos = set(self._eos(sampling))
        out = []
        for row, (prompt_index, _) in enumerate(items):
            tokens = responses[row].tolist()
            finish = "length"
            for j, tok in enumerate(tokens):
                if tok in eos:
                    tokens, finish = tokens[: j + 1], "stop"
                    break
            cut = cut_at_stop(tokens, self.tokenizer, sampling.stop) if watcher is not None else None
            if cut is not None:  # a row the watcher finished: its stop string ends it
                tokens, finish = tokens[:cut], "stop"
            if finish == "length" and poll.fired and len(tokens) < sampling.max_new_tokens:
                finish = "interrupted"  # still decoding when should_stop fired
            out.append(Generation(prompt_index=prompt_index, token_ids=tokens,
                                  logprobs=logprobs[row, : len(tokens)].tolist(), finish_reason=finish))
        return out

    # ---- weights --------------------------------------------------------------------------------
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy ``named_tensors`` (HF names) into the model's parameters / persistent buffers in place.

        Strict and all-or-nothing: every name and shape is checked before anything is copied; an
        unknown name or a parameter left without a value raises ``KeyError`` naming it, a shape
        mismatch ``ValueError``. Tied weights (``lm_head.weight`` sharing the embedding) are one
        storage: either name fills it. Values are cast to the model's dtype and device.
        """
        with self.exclusive("load_weights"):
            self._copy_in(check_named_tensors(named_tensors, self._shapes, self._groups))

    def _copy_in(self, items: list[tuple[str, torch.Tensor]]) -> None:
        targets = self.model.state_dict(keep_vars=True)
        with torch.no_grad():
            for name, value in items:
                target = targets[name]
                target.copy_(value.detach().to(device=target.device, dtype=target.dtype))

    def load_weight_stream(self, stream) -> None:
        """As :meth:`load_weights`, checked against ``stream.specs`` before the first bucket, then
        each piece copied into place as it arrives (no extra copy of any tensor, however large)."""
        check_specs(stream.specs, self._shapes, self._groups)
        targets = self.model.state_dict(keep_vars=True)
        with self.exclusive("load_weights"), torch.no_grad():
            # HF parameters are contiguous: a piece is a slice of the flat view
            stream.copy_into(lambda p: targets[p.name].detach().view(-1)[p.start:p.start + p.numel])

    def named_weights(self) -> dict[str, torch.Tensor]:
        """Parameters and persistent buffers by HF name (tied weights under each name)."""
        return dict(self.model.state_dict(keep_vars=False))

    # ---- memory ---------------------------------------------------------------------------------
    def offload(self) -> None:
        """Move the model to CPU and free the GPU cache (no-op on a CPU engine)."""
        if self.device.type == "cuda":
            with self.exclusive():
                self.model.to("cpu")
                torch.cuda.empty_cache()

    def onload(self) -> None:
        """Move the model back to its GPU (no-op on a CPU engine)."""
        if self.device.type == "cuda":
            with self.exclusive():
                self.model.to(self.device)

    def close(self) -> None:
        self.model = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


class FrequencyPenalty:
    """``sampling_params.frequency_penalty``: a token's logit drops by ``penalty`` per time it
    already occurs in the response (the prompt does not count), as OpenAI / vLLM define it."""

    def __init__(self, penalty: float, prompt_len: int):
        self.penalty, self.prompt_len = float(penalty), prompt_len

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        generated = input_ids[:, self.prompt_len:]
        if generated.shape[1] == 0:
            return scores
        counts = torch.zeros_like(scores).scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - self.penalty * counts
