"""How a tool-agent model does on the multiplication tasks, measured with the real agent loop.

The model runs in :class:`~rlinf.workers.rollout.agent_loop.AgentLoop` on an
:class:`~rlinf.engines.rollout.hf.HFRolloutEngine` (CPU), the hermes format and a
:class:`~rlinf.engines.tools.pool.ToolPool` holding the :class:`~rlinf.engines.tools.calculator.CalculatorTool`,
with the prompts rendered by :func:`~rlinf.data.tokenizer.prompt_encoder` (the chat template's
user turn and generation prompt), as in a training run. Per decoding mode (greedy, sampled at
temperature 1) it reports over the episodes:

* ``tool_rate``: share of episodes that made at least one calculator call;
* ``success``: the last turn's ``\\boxed{}`` equals the answer
  (:func:`~rlinf.rewards.math_answer.extract_boxed_answer`);
* ``success_with_tool`` / ``success_without_tool``: success among episodes that called / did not
  call the tool;
* ``result_right``: among episodes that called the tool, the share whose tool tokens (loss mask 0)
  hold the answer, i.e. the call asked for the right product (so ``success_with_tool`` below it
  means the result was miscopied into the box, and ``result_right`` below 1 that the operands were
  miscopied into the call).

Example:
    python -m toolkits.tool_agent.probe --model results/tiny_tool/warm --n 4

    >>> figures = summarize([{"calls": 1, "correct": True, "result_right": True}, {"calls": 0, "correct": False}])
    >>> figures["tool_rate"], figures["success_with_tool"], figures["success_without_tool"], figures["result_right"]
    (0.5, 1.0, 0.0, 1.0)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import torch

from rlinf.config.algorithm import SamplingParams
from rlinf.data.tokenizer import load_tokenizer, prompt_encoder
from rlinf.engines.rollout.hf import HFRolloutEngine
from rlinf.engines.tools.calculator import CalculatorTool
from rlinf.engines.tools.formats import get_format
from rlinf.engines.tools.pool import ToolPool
from rlinf.rewards.math_answer import extract_boxed_answer
from rlinf.workers.rollout.agent_loop import AgentBudgets, AgentLoop
from toolkits.tool_agent.make_tasks import read_jsonl

__all__ = ["summarize", "run_probe"]


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def summarize(outcomes: list[dict]) -> dict:
    """The probe's figures from per-episode ``{"calls": int, "correct": bool, "result_right": bool}``
    (``result_right`` only where ``calls`` > 0)."""
    tool = [o for o in outcomes if o["calls"] > 0]
    plain = [o for o in outcomes if o["calls"] == 0]
    return {"episodes": len(outcomes), "tool_rate": _rate(len(tool), len(outcomes)),
            "success": _rate(sum(o["correct"] for o in outcomes), len(outcomes)),
            "success_with_tool": _rate(sum(o["correct"] for o in tool), len(tool)),
            "success_without_tool": _rate(sum(o["correct"] for o in plain), len(plain)),
            "result_right": _rate(sum(o["result_right"] for o in tool), len(tool))}


def _outcome(episode, answer: str, tokenizer) -> dict:
    """One episode's calls, success and whether its tool tokens hold the answer."""
    tool_ids = [t for t, m in zip(episode.response_ids, episode.loss_mask) if m == 0]
    return {"calls": episode.tool_calls,
            "correct": extract_boxed_answer(episode.turn_texts[-1] if episode.turn_texts else "") == answer,
            "result_right": re.search(rf"(?<!\d){re.escape(answer)}(?!\d)", tokenizer.decode(tool_ids)) is not None}


def run_probe(model_dir: str | Path, rows: list[dict], *, n_sampled: int = 4, seed: int = 0,
              max_turns: int = 2, max_response_length: int = 96, batch_size: int = 128) -> dict:
    """Greedy (one episode a prompt) and sampled (``n_sampled`` a prompt, temperature 1) figures.

    Returns:
        ``{"greedy": summarize(...), "sampled": summarize(...), "seconds": ..., "examples": [...]}``
        (``examples``: the first sampled episodes' model texts).
    """
    tok = load_tokenizer(str(model_dir))
    engine = HFRolloutEngine(str(model_dir), device="cpu", max_batch_size=batch_size)
    pool = ToolPool({"calculator": CalculatorTool()})
    loop = AgentLoop(engine, tok, get_format("hermes"), pool,
                     AgentBudgets(max_turns=max_turns, max_response_length=max_response_length))
    encode = prompt_encoder(tok, True)
    prompts = [encode(r["prompt"]) for r in rows]
    report, t0 = {}, time.perf_counter()
    try:
        for mode, sampling, n in (("greedy", SamplingParams(do_sample=False, max_new_tokens=max_response_length), 1),
                                  ("sampled", SamplingParams(do_sample=True, temperature=1.0,
                                                             max_new_tokens=max_response_length), n_sampled)):
            episodes = loop.run(prompts, sampling, n=n, seed=seed)
            outcomes = [_outcome(e, rows[e.prompt_index]["answer"], tok) for e in episodes]
            report[mode] = summarize(outcomes)
            if mode == "sampled":
                report["examples"] = [e.model_text for e in episodes[:3]]
    finally:
        pool.close()
    report["seconds"] = round(time.perf_counter() - t0, 1)
    return report


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Tool-call rate and success of a tool-agent model (agent loop).")
    p.add_argument("--model", default="results/tiny_tool/warm", help="HF model folder")
    p.add_argument("--data", default="examples/tool_agent/data/mul_val.jsonl", help="tasks (JSONL)")
    p.add_argument("--limit", type=int, default=0, help="use the first N tasks (0: all)")
    p.add_argument("--n", type=int, default=4, help="sampled episodes per task")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    if not (Path(a.model) / "config.json").is_file():
        p.error(f"no HF model folder at {a.model} (build one with python -m toolkits.tool_agent.prepare)")
    if not Path(a.data).is_file():
        p.error(f"no tasks file at {a.data}")
    torch.set_num_threads(a.threads)
    rows = read_jsonl(a.data)
    rows = rows[: a.limit] if a.limit > 0 else rows
    report = run_probe(a.model, rows, n_sampled=a.n, seed=a.seed)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
