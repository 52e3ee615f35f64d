"""HF ``generate`` rollout of a Qwen-VL model (Qwen2.5-VL, Qwen3-VL) on batches of multimodal
prompts: N samples per prompt, response tokens and the log-prob of each sampled token.

The sampling pipeline and the log-prob definition are the text engine's
(:mod:`rlinf.engines.rollout.hf`: raw ``log_softmax(z / T)`` of the chosen token, recorded by the
first logits processor; the checkpoint's ``generation_config`` is not read). The model is driven
by ``model.generate`` with the prompts' pixel inputs, so its own rope index (Qwen's multimodal
positions, from ``image_grid_thw``, ``mm_token_type_ids`` and the attention mask, left padding
included) places the tokens; the actor recomputes the same log-probs from the same
:class:`~rlinf.models.vlm.batch.PixelInputs` with
:func:`rlinf.engines.training.vlm_logprobs.vlm_response_logprobs`.

:class:`HFVLMRolloutEngine` is the rollout engine of a vision-language model folder
(``rollout.backend: huggingface``): the text engine's weight loading, offload and sampling
settings, with :meth:`~HFVLMRolloutEngine.generate` taking each prompt's images (encoded files)
beside its token ids, chunked by ``max_batch_size``. Not here yet: ``sampling.stop`` strings
(cut after decoding by the worker, as for every engine) and interruption (``should_stop``: the
fully asynchronous rollout), which it refuses.

Example:
    >>> vlm = load_vlm("/tmp/tiny_vlm")  # doctest: +SKIP
    >>> rows = [render_prompt(vlm.processor, "Colour?", ["red.png"])]  # doctest: +SKIP
    >>> prompts = collate_prompts(rows, pad_token_id=0)  # doctest: +SKIP
    >>> gens = generate_vlm(vlm.model, prompts, SamplingParams(max_new_tokens=8), n=4, seed=0)  # doctest: +SKIP
    >>> gens[0].token_ids, gens[0].logprobs  # doctest: +SKIP
"""

from __future__ import annotations

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout._common import check_prompts, eos_id_list, logprob_temperature
from rlinf.engines.rollout.base import Generation
from rlinf.engines.rollout.hf import HFRolloutEngine, _RawLogprobRecorder, sampling_processors
from rlinf.models.vlm.batch import PixelInputs, VLMPromptBatch, pixel_inputs
from rlinf.models.vlm.image_processing import load_image_processor


def generate_vlm(model: torch.nn.Module, prompts: VLMPromptBatch, sampling: SamplingParams, n: int = 1,
                 seed: int | None = None, eos_token_ids: int | list[int] | None = None,
                 pad_token_id: int | None = None) -> list[Generation]:
    """Sample ``n`` responses per prompt row of ``prompts`` (rows of one prompt come out next to
    each other, ``prompt_index`` = the row).

    Args:
        model: A loaded Qwen-VL model (eval mode), on the device of its use.
        prompts: From :func:`~rlinf.models.vlm.batch.collate_prompts` (left-padded; pixels in row order).
        sampling: ``do_sample``, ``temperature``, ``top_k`` / ``top_p`` / ``min_p``,
            ``max_new_tokens``, ``min_new_tokens``, ``stop_token_ids``, penalties (as the text
            engine). ``stop`` strings are refused (not implemented for VLMs yet).
        n: Samples per prompt.
        seed: Seeds torch's generator for this call (the global state is restored after).
        eos_token_ids / pad_token_id: Default: the model's generation config, else its config.

    Returns:
        ``B * n`` generations: token ids (ending at the first EOS, kept), per-token log-probs,
        ``finish_reason`` ``stop`` or ``length``.
    """
    # lazy: transformers (~2 s) only when generating
    from transformers import GenerationConfig

    if sampling.stop:
        raise ValueError("generate_vlm: sampling.stop strings are not supported for VLM rollout yet; "
                         "use stop_token_ids")
    check_prompts(prompts.token_lists(), n)
    eos = eos_id_list(eos_token_ids if eos_token_ids is not None else
                      (model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None
                       else model.config.eos_token_id))
    eos = list(dict.fromkeys([*eos, *sampling.stop_token_ids]))
    if pad_token_id is None:
        pad_token_id = model.generation_config.pad_token_id
    pad_token_id = int(pad_token_id if pad_token_id is not None else (eos[0] if eos else 0))
    device = next(model.parameters()).device
    batch = prompts.repeat(n)
    inputs = {k: v.to(device) for k, v in batch.model_inputs(model.config.image_token_id).items()}
    prompt_len = batch.input_ids.shape[1]
    recorder = _RawLogprobRecorder(prompt_len, logprob_temperature(sampling))
    vocab_size = int(model.get_output_embeddings().weight.shape[0])
    processors = sampling_processors(sampling, prompt_len, recorder, vocab_size=vocab_size, eos_token_ids=eos,
                                     device=device)
    # a response never holds a vision placeholder (it would need pixels no one has); the recorder,
    # first, keeps the raw log-probs, which is what the actor's forward computes
    processors.insert(1, _Suppress(vision_token_ids(model.config), device))  # before the warpers
    # neutral knobs: the processors above do all the work, in the text engine's order
    gen_cfg = GenerationConfig(
        do_sample=bool(sampling.do_sample), max_new_tokens=int(sampling.max_new_tokens), min_new_tokens=0,
        temperature=1.0, top_k=0 if sampling.do_sample else None, top_p=1.0, repetition_penalty=1.0,
        num_beams=1, num_return_sequences=1, eos_token_id=eos or None, pad_token_id=pad_token_id,
        return_dict_in_generate=False, use_cache=True)
    devices = [device] if device.type == "cuda" else []
    with torch.no_grad(), torch.random.fork_rng(devices=devices, enabled=seed is not None):
        if seed is not None:
            torch.manual_seed(seed)
        sequences = model.generate(**inputs, generation_config=gen_cfg, logits_processor=processors)
    logprobs = recorder.finish(sequences).cpu()
    responses = sequences[:, prompt_len:].cpu()
    out = []
    stop = set(eos)
    for row in range(batch.batch_size):
        tokens, finish = responses[row].tolist(), "length"
        for j, tok in enumerate(tokens):
            if tok in stop:
                tokens, finish = tokens[:j + 1], "stop"
                break
        out.append(Generation(prompt_index=row // n, token_ids=tokens,
                              logprobs=logprobs[row, :len(tokens)].tolist(), finish_reason=finish))
    return out


class HFVLMRolloutEngine(HFRolloutEngine):
    """HF rollout of a Qwen-VL folder (see the module docstring); the model's own image processor
    turns each prompt's images into pixels.

    Example:
        >>> engine = HFVLMRolloutEngine("/tmp/tiny_vlm")  # doctest: +SKIP
        >>> gens = engine.generate([prompt_ids], SamplingParams(max_new_tokens=8), n=2,
        ...                        images=[(png_bytes,)])  # doctest: +SKIP
    """

    takes_images = True

    def _load_model(self, model_path: str, dtype: torch.dtype) -> torch.nn.Module:
        # lazy: transformers (~2 s) only when the engine runs
        from transformers import AutoModelForImageTextToText

        self.image_processor = load_image_processor(model_path)
        return AutoModelForImageTextToText.from_pretrained(model_path, dtype=dtype)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams, n: int = 1,
                 seed: int | None = None, should_stop=None,
                 images: list[tuple] | None = None) -> list[Generation]:
        """``n`` responses per prompt; ``images``: each prompt's images (empty for a text-only
        prompt; None: none at all), whose placeholder tokens ``prompts`` already hold."""
        if should_stop is not None:
            raise ValueError("the vision-language rollout cannot be interrupted yet (rollout_mode: fully_async "
                             "and partial rollouts need the text engine)")
        check_prompts(prompts, n)
        images = images if images is not None else [()] * len(prompts)
        if len(images) != len(prompts):
            raise ValueError(f"{len(images)} image lists for {len(prompts)} prompts")
        per_call = max(1, self.max_batch_size // n)
        out: list[Generation] = []
        with self.exclusive("generate"):
            for start in range(0, len(prompts), per_call):
                rows = list(range(start, min(start + per_call, len(prompts))))
                batch = _left_padded([prompts[r] for r in rows], self.pad_token_id,
                                     pixel_inputs(self.image_processor, [images[r] for r in rows]))
                chunk_seed = None if seed is None else seed + start // per_call
                for g in generate_vlm(self.model, batch, sampling, n=n, seed=chunk_seed,
                                      eos_token_ids=self.eos_token_ids, pad_token_id=self.pad_token_id):
                    g.prompt_index += start
                    out.append(g)
        return out


def _left_padded(token_lists: list[list[int]], pad_token_id: int, pixels: PixelInputs) -> VLMPromptBatch:
    length = max(len(t) for t in token_lists)
    ids = torch.full((len(token_lists), length), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(token_lists), length), dtype=torch.long)
    for i, tokens in enumerate(token_lists):
        ids[i, length - len(tokens):] = torch.as_tensor(tokens, dtype=torch.long)
        mask[i, length - len(tokens):] = 1
    return VLMPromptBatch(ids, mask, pixels)


def vision_token_ids(config) -> list[int]:
    """The vision placeholder tokens of a Qwen-VL config (image, video, vision start / end), which
    a sampled response must not contain."""
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return sorted({int(getattr(config, n)) for n in names if getattr(config, n, None) is not None})


class _Suppress:
    """Logits processor: ``-inf`` at ``ids`` (never sampled, in greedy decoding either)."""

    def __init__(self, ids: list[int], device: torch.device):
        self.ids = torch.as_tensor(ids, dtype=torch.long, device=device)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.ids.numel():
            scores[:, self.ids] = float("-inf")
        return scores

