"""The rollout worker for LLM RL: prompts in, a :class:`RolloutBatch` out; weights in place.

Example (without Ray a worker is a plain object; ``model_dir`` holds an HF model + tokenizer):
    >>> worker = GenerationWorker(model_dir, RolloutConfig())                 # doctest: +SKIP
    >>> batch = worker.generate(prompt_batch, SamplingParams(), n=4, seed=0)   # doctest: +SKIP
    >>> batch.batch_size == 4 * len(prompt_batch.prompts)                      # doctest: +SKIP
    True
"""

from __future__ import annotations

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.config.rollout import RolloutConfig
from rlinf.data.prompt_dataset import PromptBatch
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.data.tokenizer import load_tokenizer
from rlinf.engines.rollout.factory import make_rollout_engine
from rlinf.scheduler import Channel, Worker
from rlinf.workers.actor.fsdp_actor import WEIGHT_LINK


class GenerationWorker(Worker):
    """One rank of the rollout group.

    Args:
        model_path: HF folder with the model (and its tokenizer unless ``tokenizer_path``).
        cfg: ``rollout:`` section (``backend`` picks the engine).
        tokenizer_path: tokenizer folder (``actor.tokenizer.tokenizer_model``); None = model_path.
    """

    def __init__(self, model_path: str, cfg: RolloutConfig, tokenizer_path: str | None = None):
        self.tokenizer = load_tokenizer(tokenizer_path or model_path)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else self.tokenizer.eos_token_id
        self.engine = make_rollout_engine(cfg.engine_backend, model_path, cfg)
        self.policy_version = 0

    def generate(self, prompts: PromptBatch, sampling: SamplingParams, n: int,
                 seed: int | None = None) -> RolloutBatch:
        """``n`` responses per prompt, group-major, with behaviour log-probs and decoded text."""
        if not prompts.prompts:  # an empty shard (more ranks than prompts)
            return RolloutBatch.from_token_lists([], [], self.pad_token_id, group_size=n,
                                                 policy_version=self.policy_version)
        gens = self.engine.generate(prompts.token_ids, sampling, n=n, seed=seed)
        prompt_ids, responses, logprobs, texts, reasons, answers, groups = [], [], [], [], [], [], []
        for g in gens:
            prompt = prompts.prompts[g.prompt_index]
            prompt_ids.append(list(prompt.token_ids))
            responses.append(g.token_ids)
            logprobs.append(g.logprobs)
            texts.append(self.tokenizer.decode(g.token_ids, skip_special_tokens=True))
            reasons.append(g.finish_reason)
            answers.append(prompt.answer)
            groups.append(prompt.index)
        return RolloutBatch.from_token_lists(
            prompt_ids, responses, self.pad_token_id, group_size=n, logprobs=logprobs,
            answers=answers, texts=texts, finish_reasons=reasons,
            group_ids=torch.tensor(groups, dtype=torch.long), policy_version=self.policy_version)

    def generate_to_channel(self, prompts: PromptBatch, sampling: SamplingParams, n: int, seed: int,
                            channel: Channel, key: str, chunk_prompts: int) -> int:
        """Generate ``chunk_prompts`` prompts at a time and put each chunk's :class:`RolloutBatch`
        into ``channel[key]`` as soon as it is done (the streaming, disaggregated path). Chunk
        ``i`` samples with seed ``seed + i``. Returns the number of chunks put."""
        items = prompts.prompts
        chunks = [PromptBatch(items[s:s + chunk_prompts]) for s in range(0, len(items), chunk_prompts)]
        for i, chunk in enumerate(chunks):
            channel.put(self.generate(chunk, sampling, n, seed + i), key=key)
        return len(chunks)

    def receive_weights(self, version: int | None = None) -> int:
        """Take the actor's weights from the weight link, in place; returns the new version
        (``version`` when given — a resumed run continues its count — else the old one + 1)."""
        state = self.recv_tensors(WEIGHT_LINK)
        self.engine.load_weights(state.items())
        self.policy_version = self.policy_version + 1 if version is None else version
        return self.policy_version

    def offload(self) -> None:
        self.engine.offload()

    def onload(self) -> None:
        self.engine.onload()

    def close(self) -> None:
        self.engine.close()
