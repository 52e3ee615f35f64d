"""The rollout worker of a tool agent: prompts in, multi-turn episodes out as a
:class:`~rlinf.data.rollout_batch.RolloutBatch` with a loss mask (tool results 0).

It is a :class:`~rlinf.workers.rollout.generation_worker.GenerationWorker` (same engines, weight
sync, offload, streaming to a channel) whose ``generate`` runs
:class:`~rlinf.workers.rollout.agent_loop.AgentLoop` episodes. Its tools are built in the worker
from the run's ``tools:`` keys and run on a :class:`~rlinf.engines.tools.pool.ToolPool` of
``agentloop.tool_concurrency`` threads.

Example (without Ray a worker is a plain object)::

    worker = AgentRolloutWorker(model_dir, RolloutConfig(), None, None, AgentLoopConfig(),
                                {"calculator": {}}, response_budget=256)   # doctest: +SKIP
    batch = worker.generate(prompt_batch, SamplingParams(), n=4, seed=0)  # doctest: +SKIP
    batch.loss_mask.shape == batch.response_mask.shape                    # doctest: +SKIP
    True
"""

from __future__ import annotations

import torch

from rlinf.config.agent import AgentLoopConfig
from rlinf.config.algorithm import SamplingParams
from rlinf.config.rollout import RolloutConfig
from rlinf.data.prompt_dataset import Prompt, PromptBatch
from rlinf.data.rollout_batch import RolloutBatch
from rlinf.engines.tools.base import make_tool
from rlinf.engines.tools.formats import get_format
from rlinf.engines.tools.pool import ToolPool
from rlinf.workers.rollout.agent_loop import AgentBudgets, AgentLoop, Episode
from rlinf.workers.rollout.agent_stream import AgentStreamLoop
from rlinf.workers.rollout.generation_worker import GenerationWorker


class AgentRolloutWorker(GenerationWorker):
    """One rank of a tool agent's rollout group.

    Args:
        model_path, cfg, tokenizer_path, tokenizer_settings: as for
            :class:`~rlinf.workers.rollout.generation_worker.GenerationWorker`.
        agent: ``agentloop:``.
        tools: ``tools:`` (name -> keys).
        response_budget: tokens after the prompt (model + tool).
    """

    def __init__(self, model_path: str, cfg: RolloutConfig, tokenizer_path: str | None, tokenizer_settings,
                 agent: AgentLoopConfig, tools: dict, response_budget: int):
        super().__init__(model_path, cfg, tokenizer_path, tokenizer_settings)
        self.agent = agent
        built = {name: make_tool(name, options) for name, options in tools.items()}
        for tool in built.values():
            tool.start()
        self.pool = ToolPool(built, max_concurrency=agent.tool_concurrency, timeout_s=agent.tool_timeout_s)
        self.format = get_format(agent.toolcall_parser)
        budgets = AgentBudgets(max_turns=agent.max_turns, max_response_length=response_budget,
                               max_tool_response_length=agent.max_tool_response_length,
                               max_parallel_calls=agent.max_parallel_calls, wait_fraction=agent.wait_fraction,
                               continue_at_tool_failure=agent.continue_at_tool_failure)
        self.loop = AgentLoop(self.engine, self.tokenizer, self.format, self.pool, budgets)

    def generate_batch(self, prompts: PromptBatch, sampling: SamplingParams, n: int,
                       seed: int | None) -> RolloutBatch:
        """``n`` episodes per prompt, group-major; ``texts`` hold what the reward reads (the
        format's answer), ``finish_reasons`` the end reasons, ``episodes`` each one's figures.
        (:meth:`generate`, inherited, chunks the prompts and calls this per chunk.)"""
        items = prompts.prompts
        self.loop.version = self.policy_version
        episodes = self.loop.run(prompts.token_ids, sampling, n=n, seed=seed)
        batch = self.episodes_batch(episodes, [items[e.prompt_index] for e in episodes], n)
        if self.cfg.print_outputs:
            first = episodes[0]
            print(f"[agent rollout rank {self.rank} v{self.policy_version}] {len(episodes)} episodes; first "
                  f"({first.end_reason}, {len(first.turns)} turns, {first.tool_calls} calls): "
                  f"{self.tokenizer.decode(first.response_ids)!r}", flush=True)
        return batch

    def episodes_batch(self, episodes: list[Episode], prompts: list[Prompt], n: int) -> RolloutBatch:
        """The batch of ``episodes`` (``prompts[i]`` is episode ``i``'s prompt; ``n`` per group,
        group-major as given), with its loss mask (tool results 0)."""
        batch = RolloutBatch.from_token_lists(
            [e.prompt_ids for e in episodes], [e.response_ids for e in episodes], self.pad_token_id,
            group_size=n, logprobs=[e.logprobs for e in episodes],
            answers=[p.answer for p in prompts],
            texts=[self.format.answer_text(e.model_text, e.turn_texts[-1] if e.turn_texts else "") for e in episodes],
            finish_reasons=[e.end_reason for e in episodes],
            prompt_texts=[p.text for p in prompts],
            group_ids=torch.tensor([p.index for p in prompts], dtype=torch.long),
            policy_version=self.policy_version, episodes=[e.stats() for e in episodes])
        mask = torch.zeros_like(batch.response_mask)
        for i, e in enumerate(episodes):
            mask[i, :len(e.loss_mask)] = torch.as_tensor(e.loss_mask, dtype=mask.dtype)
        batch.loss_mask = mask
        return batch

    def _make_stream(self, channel, in_key, out_key, sampling, n, max_episodes) -> AgentStreamLoop:
        return AgentStreamLoop(self, channel, in_key, out_key, sampling, n, max_episodes,
                               self.cfg.partial_rollout, self._gate)

    def tool_counts(self) -> dict[str, int]:
        """The pool's counts since start (calls, unknown_tool, bad_arguments, errors, timeouts)."""
        return dict(self.pool.counts)

    def close(self) -> None:
        self.pool.close()
        super().close()
