"""The rollout worker for LLM RL: prompts in, a :class:`RolloutBatch` out; weights in place.

Example (without Ray a worker is a plain object; ``model_dir`` holds an HF model + tokenizer):
    >>> worker = GenerationWorker(model_dir, RolloutConfig())                 # doctest: +SKIP
    >>> batch = worker.generate(prompt_batch, SamplingParams(), n=4, seed=0)   # doctest: +SKIP
    >>> batch.batch_size == 4 * len(prompt_batch.prompts)                      # doctest: +SKIP
    True
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch
from safetensors.torch import save_file

from rlinf.config.algorithm import SamplingParams
from rlinf.config.rollout import RolloutConfig
from rlinf.data.prompt_dataset import PromptBatch
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.data.tokenizer import load_tokenizer
from rlinf.engines.rollout.factory import make_rollout_engine
from rlinf.engines.rollout.stops import cut_at_stop
from rlinf.scheduler import Channel, Worker
from rlinf.workers.links import WEIGHT_LINK
from rlinf.workers.memory_hints import generate_step
from rlinf.workers.rollout.continuous import PauseGate, StreamLoop


class GenerationWorker(Worker):
    """One rank of the rollout group.

    Args:
        model_path: HF folder with the model (and its tokenizer unless ``tokenizer_path``).
        cfg: ``rollout:`` section (``backend`` picks the engine).
        tokenizer_path: tokenizer folder (``actor.tokenizer.tokenizer_model``); None = model_path.
        tokenizer_settings: ``actor.tokenizer`` (use_fast, trust_remote_code, padding_side).

    ``rollout.detokenize`` decides whether responses come back with their text (else the reward
    decodes them), ``print_outputs`` prints each batch's first sample, ``validate_weight`` /
    ``validate_save_dir`` check (and save) the weights of the first sync.
    """

    def __init__(self, model_path: str, cfg: RolloutConfig, tokenizer_path: str | None = None,
                 tokenizer_settings=None):
        self.cfg = cfg
        self.tokenizer = load_tokenizer(tokenizer_path or model_path, tokenizer_settings)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id
        self.engine = make_rollout_engine(cfg.engine_backend, model_path, cfg,
                                          tokenizer_path=tokenizer_path or model_path)
        self.engine.set_tokenizer(self.tokenizer)
        self.policy_version = 0
        self._stream: StreamLoop | None = None
        self._gate = PauseGate(cfg.pause_grace_period)

    @generate_step
    def generate(self, prompts: PromptBatch, sampling: SamplingParams, n: int,
                 seed: int | None = None, chunk_prompts: int | None = None) -> RolloutBatch:
        """``n`` responses per prompt, group-major, with behaviour log-probs (and text with
        ``rollout.detokenize``); ``chunk_prompts`` prompts per engine call (chunk ``i`` samples
        with seed ``seed + i``; None = all at once)."""
        items = prompts.prompts
        if chunk_prompts and len(items) > chunk_prompts:
            parts = [self.generate(PromptBatch(items[s:s + chunk_prompts]), sampling, n,
                                   None if seed is None else seed + i)
                     for i, s in enumerate(range(0, len(items), chunk_prompts))]
            return RolloutBatch.concat(parts, self.pad_token_id)
        if not prompts.prompts:  # an empty shard (more ranks than prompts)
            return RolloutBatch.from_token_lists([], [], self.pad_token_id, group_size=n,
                                                 policy_version=self.policy_version)
        return self.generate_batch(prompts, sampling, n, seed)

    def generate_batch(self, prompts: PromptBatch, sampling: SamplingParams, n: int,
                       seed: int | None) -> RolloutBatch:
        """One engine call for a non-empty ``prompts`` (what :meth:`generate` runs per chunk);
        subclasses that roll out differently (a tool agent's episodes) override this."""
        takes_images = getattr(self.engine, "takes_images", False)
        if takes_images:
            gens = self.engine.generate(prompts.token_ids, sampling, n=n, seed=seed, images=prompts.images)
        elif any(prompts.images):
            raise ValueError("these prompts have images but the rollout model takes text only")
        else:
            gens = self.engine.generate(prompts.token_ids, sampling, n=n, seed=seed)
        if sampling.stop:  # the same cut on every engine (HF stops there while decoding, vLLM too)
            for g in gens:
                cut = cut_at_stop(g.token_ids, self.tokenizer, sampling.stop)
                if cut is not None and cut < len(g.token_ids):
                    g.token_ids, g.logprobs, g.finish_reason = g.token_ids[:cut], g.logprobs[:cut], "stop"
                elif cut is not None:
                    g.finish_reason = "stop"
        prompt_ids, responses, logprobs, texts, reasons, answers, groups = [], [], [], [], [], [], []
        prompt_texts, images = [], []
        for g in gens:
            prompt = prompts.prompts[g.prompt_index]
            prompt_ids.append(list(prompt.token_ids))
            responses.append(g.token_ids)
            logprobs.append(g.logprobs)
            if self.cfg.detokenize:
                texts.append(self.tokenizer.decode(g.token_ids, skip_special_tokens=True))
            reasons.append(g.finish_reason)
            answers.append(prompt.answer)
            prompt_texts.append(prompt.text)
            images.append(prompt.images)
            groups.append(prompt.index)
        if self.cfg.print_outputs:
            prompt_text = self.tokenizer.decode(prompt_ids[0], skip_special_tokens=True)
            print(f"[rollout rank {self.rank} v{self.policy_version}] {len(responses)} responses; first: "
                  f"prompt {prompt_text!r} -> response "
                  f"{self.tokenizer.decode(responses[0], skip_special_tokens=True)!r} ({reasons[0]}); prompt ids "
                  f"{prompt_ids[0]}, response ids {list(responses[0])}", flush=True)
        return RolloutBatch.from_token_lists(
            prompt_ids, responses, self.pad_token_id, group_size=n, logprobs=logprobs,
            answers=answers, texts=texts, finish_reasons=reasons, prompt_texts=prompt_texts,
            images=images if takes_images else [],
            group_ids=torch.tensor(groups, dtype=torch.long), policy_version=self.policy_version)

    # ---- fully asynchronous rollout ------------------------------------------------------------------
    def run_stream(self, channel: Channel, in_key: str, out_key: str, sampling: SamplingParams, n: int,
                   max_episodes: int) -> dict:
        """Run the fully asynchronous loop (:mod:`rlinf.workers.rollout.continuous`) until
        :meth:`stop_stream`; returns its counts. The group is launched with two call threads so
        that weights and validation arrive while this call runs."""
        loop = self._make_stream(channel, in_key, out_key, sampling, n, max_episodes)
        self._stream = loop
        try:
            return loop.run()
        finally:
            self._stream = None

    def _make_stream(self, channel, in_key, out_key, sampling, n, max_episodes) -> StreamLoop:
        return StreamLoop(self, channel, in_key, out_key, sampling, n, max_episodes,
                          self.cfg.partial_rollout, self._gate)

    def stop_stream(self) -> None:
        """End :meth:`run_stream` after its current round (episodes in flight are dropped: the
        driver restarts them from their prompts)."""
        if self._stream is not None:
            self._stream.stop()

    @contextmanager
    def _stream_parked(self, grace: bool):
        """Hold the stream loop (if one runs) at a token boundary while the body uses the engine:
        after ``rollout.pause_grace_period`` for weights (``grace``), at once otherwise."""
        if self._stream is None:
            yield
            return
        saved = self._gate.grace_s
        self._gate.grace_s = saved if grace else 0.0
        self._gate.request()
        try:
            self._gate.wait_parked()
            yield
        finally:
            self._gate.grace_s = saved
            self._gate.resume()

    def generate_to_channel(self, prompts: PromptBatch, sampling: SamplingParams, n: int, seed: int,
                            channel: Channel, key: str, chunk_prompts: int) -> int:
        """Generate ``chunk_prompts`` prompts at a time and put each chunk's :class:`RolloutBatch`
        into ``channel[key]`` as soon as it is done (the streaming, disaggregated path). Chunk
        ``i`` samples with seed ``seed + i``. Returns the number of chunks put."""
        items = prompts.prompts
        chunks = [PromptBatch(items[s:s + chunk_prompts]) for s in range(0, len(items), chunk_prompts)]
        with self._stream_parked(grace=False):  # validation while a fully asynchronous stream runs
            for i, chunk in enumerate(chunks):
                channel.put(self.generate(chunk, sampling, n, seed + i), key=key)
        return len(chunks)

    def receive_weights(self, version: int | None = None) -> int:
        """Take the actor's weights from the weight link, in place; returns the new version
        (``version`` when given — a resumed run continues its count — else the old one + 1).
        While a fully asynchronous stream runs, it is parked at a token boundary first (never a
        half-loaded model: no round runs while the weights load)."""
        with self._stream_parked(grace=True):
            return self._receive_weights(version)

    def _receive_weights(self, version: int | None) -> int:
        if self.cfg.validate_weight and self.policy_version == 0:
            state = self.recv_tensors(WEIGHT_LINK)  # kept whole, to compare after loading
            self.engine.load_weights(state.items())
            self._validate_weights(state)
        else:  # one bucket at a time: no full extra copy of the weights in this process
            with self.recv_tensor_stream(WEIGHT_LINK) as stream:
                self.engine.load_weight_stream(stream)
        self.policy_version = self.policy_version + 1 if version is None else version
        return self.policy_version

    def _validate_weights(self, sent: dict[str, torch.Tensor]) -> None:
        """``rollout.validate_weight``: every tensor the actor sent must now be in the engine, equal
        up to the engine's dtype; rank 0 writes what it received to ``validate_save_dir``."""
        held = self.engine.named_weights()
        for name, value in sent.items():
            if name not in held:
                raise RuntimeError(f"rollout.validate_weight: the actor sent {name!r}, which the rollout "
                                   "engine does not hold")
            mine = held[name].detach().float().cpu()
            theirs = value.detach().to(held[name].dtype).float().cpu()
            if mine.shape != theirs.shape or not torch.equal(mine, theirs):
                diff = (mine - theirs).abs().max().item() if mine.shape == theirs.shape else float("nan")
                raise RuntimeError(f"rollout.validate_weight: {name!r} differs after the first sync (shape "
                                   f"{tuple(mine.shape)} vs {tuple(theirs.shape)}, max |diff| {diff})")
        if self.cfg.validate_save_dir and self.rank == 0:
            os.makedirs(self.cfg.validate_save_dir, exist_ok=True)
            save_file({k: v.detach().cpu().contiguous() for k, v in sent.items()},
                      os.path.join(self.cfg.validate_save_dir, "rollout_weights.safetensors"))
        print(f"[rollout rank {self.rank}] validate_weight: {len(sent)} tensors match after the first sync",
              flush=True)

    def offload(self) -> None:
        self.engine.offload()

    def onload(self) -> None:
        self.engine.onload()

    def close(self) -> None:
        self.engine.close()
