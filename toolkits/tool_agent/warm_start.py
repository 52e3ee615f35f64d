"""Supervised warm start of the tiny tool agent: sometimes call the calculator, otherwise guess.

Two kinds of demonstrations are drawn from the train tasks, the kind chosen afresh at every draw:

* a tool episode (probability ``tool_practice``): turn 1 is the hermes call
  (:func:`~toolkits.tool_agent.make_tasks.tool_call_text`) and eos, then the tool's result comes
  back, then turn 2 is ``The answer is \\boxed{<result>}.`` and eos;
* a direct answer (the rest): ``The answer is \\boxed{<guess>}.`` and eos, the guess a product with
  some digits redrawn (:func:`~toolkits.tool_agent.make_tasks.guess_product`), new at every draw.

The first ``copy_steps`` steps draw tool episodes only: copying digits (the prompt's operands into
the call, the result into the box) needs the model to grow attention that looks up earlier
tokens, which a 20 % share of tool episodes teaches far too slowly for a CPU budget; on tool
episodes alone it appears after a few hundred steps and is near perfect after 1500. The remaining
steps draw the mixture: half of the demonstrations are still tool episodes (``tool_practice``,
so the copying stays sharp), but only some of those keep the label of their first token, the
decision to call, so that about ``tool_fraction`` of the decisions the model learns are calls
(:meth:`SftMixture.decision_keep`); the model relearns that first-token decision quickly.

Measured (``python -m toolkits.tool_agent.probe`` on the 128 validation tasks; defaults): see
``toolkits/tool_agent/prepare.py``.

So the warm model calls the tool in about ``tool_fraction`` of its samples, copies the result when
it does, and otherwise writes a plausible number that is almost never right: RL then has one
clear thing to learn (call the tool).

The ids of an episode are built segment by segment exactly as
:class:`~rlinf.workers.rollout.agent_loop.AgentLoop` builds them (:func:`encode_episode`): the
prompt ids of the chat template with the generation prompt, each model turn encoded on its own
plus the eos id, and after a call the hermes continuation
(``fmt.continuation([result], tokenizer, ended_with_eos=True)``) encoded without special tokens.
Never the whole text at once: BPE could merge across a boundary and teach ids the loop never sees.
The loss is on the model's turns only (prompt and tool tokens are labelled -100).

Run it with ``python -m toolkits.tool_agent.prepare`` (base model, warm start, cached).
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from rlinf.data.tokenizer import prompt_encoder
from rlinf.engines.tools.base import ToolSession
from rlinf.engines.tools.calculator import CalculatorTool
from rlinf.engines.tools.formats import get_format
from toolkits.tiny_math.make_model import save_model
from toolkits.tool_agent.make_tasks import answer_text, guess_product, parse_prompt, read_jsonl, tool_call_text
from toolkits.tool_agent.tokenizer import load_tokenizer

__all__ = ["IGNORE", "encode_episode", "SftMixture", "collate", "warm_start"]

IGNORE = -100


def encode_episode(tokenizer: PreTrainedTokenizerFast, prompt: str, turns: list[str],
                   results: list[str]) -> tuple[list[int], list[int]]:
    """``(ids, labels)`` of one demonstration, built as the agent loop builds an episode.

    Args:
        tokenizer: the model's tokenizer (with its chat template).
        prompt: the user prompt.
        turns: the model's turn texts (without eos); each gets the eos id appended.
        results: the tool result text after each turn but the last (``len(turns) - 1`` of them).

    Returns:
        The ids (prompt, then turns and continuations) and the labels: the ids on the model's
        turns, -100 on the prompt and the tool continuations.

    Example:
        >>> from toolkits.tool_agent.tokenizer import build_tokenizer
        >>> tok = build_tokenizer()
        >>> ids, labels = encode_episode(tok, "What is 2 * 3?", ["x", "y"], ["6"])
        >>> tok.decode([i for i, lab in zip(ids, labels) if lab != IGNORE])
        'x<|im_end|>y<|im_end|>'
    """
    if len(results) != len(turns) - 1:
        raise ValueError(f"expected {len(turns) - 1} tool results for {len(turns)} turns, got {len(results)}")
    fmt = get_format("hermes")
    ids = prompt_encoder(tokenizer, True)(prompt)
    labels = [IGNORE] * len(ids)
    for i, turn in enumerate(turns):
        turn_ids = tokenizer.encode(turn, add_special_tokens=False) + [tokenizer.eos_token_id]
        ids, labels = ids + turn_ids, labels + turn_ids
        if i < len(results):
            cont = tokenizer.encode(fmt.continuation([results[i]], tokenizer, True), add_special_tokens=False)
            ids, labels = ids + cont, labels + [IGNORE] * len(cont)
    return ids, labels


class SftMixture:
    """Draws warm-start demonstrations from ``rows`` (train tasks): a tool episode with probability
    ``tool_practice``, else a direct guess (see the module docstring). Deterministic for ``seed``.

    The first token of a turn-1 label decides whether the model calls the tool. To let the model
    practise tool episodes more often than it should *choose* them, a tool episode keeps that
    label only with the probability that makes the share of kept first-token labels that start a
    call equal ``tool_fraction`` (:meth:`decision_keep`); the rest of the episode is always learned.
    ``tool_practice`` None: equal to ``tool_fraction`` (every label kept).

    Example:
        >>> from toolkits.tool_agent.tokenizer import build_tokenizer
        >>> from toolkits.tool_agent.make_tasks import build_tasks
        >>> mix = SftMixture(build_tokenizer(), build_tasks(4, 0)[1], tool_fraction=1.0)
        >>> ids, labels = mix.draw(0)
        >>> "<tool_call>" in mix.tokenizer.decode(ids)
        True
        >>> mix.tool_fraction, mix.tool_practice = 0.2, 0.5
        >>> mix.decision_keep()
        0.25
    """

    def __init__(self, tokenizer: PreTrainedTokenizerFast, rows: list[dict], tool_fraction: float = 0.2,
                 seed: int = 0, tool_practice: float | None = None):
        for name, value in (("tool_fraction", tool_fraction), ("tool_practice", tool_practice)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if tool_practice is not None and tool_practice < tool_fraction:
            raise ValueError(f"tool_practice ({tool_practice}) must be at least tool_fraction ({tool_fraction})")
        if not rows:
            raise ValueError("no train tasks to build demonstrations from")
        self.tokenizer, self.rows = tokenizer, rows
        self.tool_fraction, self.tool_practice = tool_fraction, tool_practice
        self.rng = random.Random(seed)
        self._tool_cache: dict[int, tuple[list[int], list[int]]] = {}
        self._calc, self._session = CalculatorTool(), ToolSession()

    def decision_keep(self) -> float:
        """The probability that a tool episode keeps its first-token label (see the class docstring)."""
        q = self.tool_fraction if self.tool_practice is None else self.tool_practice
        r = self.tool_fraction
        if q <= r or r >= 1.0:
            return 1.0
        return r * (1.0 - q) / (q * (1.0 - r))

    def tool_example(self, index: int) -> tuple[list[int], list[int]]:
        """The tool episode of task ``index`` (the result is the calculator's own text)."""
        if index not in self._tool_cache:
            prompt = self.rows[index]["prompt"]
            a, b = parse_prompt(prompt)
            result = self._calc.call({"expression": f"{a}*{b}"}, self._session).text
            self._tool_cache[index] = encode_episode(self.tokenizer, prompt, [tool_call_text(a, b),
                                                                              answer_text(result)], [result])
        return self._tool_cache[index]

    def direct_example(self, index: int) -> tuple[list[int], list[int]]:
        """A direct (guessed) answer to task ``index``, a new guess at every call."""
        prompt = self.rows[index]["prompt"]
        guess = guess_product(*parse_prompt(prompt), self.rng)
        return encode_episode(self.tokenizer, prompt, [answer_text(guess)], [])

    def draw(self, index: int) -> tuple[list[int], list[int]]:
        """One demonstration of task ``index``: its kind drawn with ``tool_practice``, a tool
        episode's first-token label kept with :meth:`decision_keep`."""
        practice = self.tool_fraction if self.tool_practice is None else self.tool_practice
        if self.rng.random() >= practice:
            return self.direct_example(index)
        ids, labels = self.tool_example(index)
        if self.rng.random() >= self.decision_keep():
            first = next(k for k, lab in enumerate(labels) if lab != IGNORE)
            labels = labels[:first] + [IGNORE] + labels[first + 1:]
        return ids, labels


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pads ``(ids, labels)`` pairs; padding is labelled -100 and masked out.

    >>> collate([([5, 6], [-100, 6]), ([7], [7])], pad_id=0)["labels"].tolist()
    [[-100, 6], [7, -100]]
    """
    ids = [torch.tensor(i, dtype=torch.long) for i, _ in examples]
    labels = [torch.tensor(lab, dtype=torch.long) for _, lab in examples]
    return {"input_ids": pad_sequence(ids, batch_first=True, padding_value=pad_id),
            "attention_mask": pad_sequence([torch.ones_like(i) for i in ids], batch_first=True, padding_value=0),
            "labels": pad_sequence(labels, batch_first=True, padding_value=IGNORE)}


def warm_start(model_dir: str | Path, train_path: str | Path, out_dir: str | Path, *, steps: int = 2200,
               copy_steps: int = 1500, batch_size: int = 16, lr: float = 3e-3, warmup: int = 20,
               tool_fraction: float = 0.25, tool_practice: float | None = 0.5, seed: int = 0,
               log_every: int = 100) -> dict:
    """Runs the warm start on the tasks of ``train_path`` and saves the model to ``out_dir``.

    The first ``copy_steps`` of the ``steps`` draw tool episodes only, the rest the mixture
    (:class:`SftMixture` with ``tool_fraction`` and ``tool_practice``). AdamW, linear warm-up
    then cosine decay to 10 % of ``lr``; the folder gets the model, its generation config and the
    tokenizer of ``model_dir`` (whose chat template is the tiny math one, so
    :func:`toolkits.tiny_math.make_model.save_model` saves it unchanged).

    Returns:
        ``{"loss": last step's loss, "seconds": wall time}``.
    """
    torch.manual_seed(seed)
    tok = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.train()
    mixture = SftMixture(tok, read_jsonl(train_path), tool_fraction, seed, tool_practice)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warmup) / max(steps - warmup, 1)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    order_rng, order = random.Random(seed), []
    loss_val, t0 = float("nan"), time.perf_counter()
    for step in range(steps):
        if len(order) < batch_size:
            fresh = list(range(len(mixture.rows)))
            order_rng.shuffle(fresh)
            order += fresh
        idx, order = order[:batch_size], order[batch_size:]
        copying = step < copy_steps
        mixture.tool_fraction, mixture.tool_practice = (1.0, None) if copying else (tool_fraction, tool_practice)
        loss = model(**collate([mixture.draw(i) for i in idx], tok.pad_token_id)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sched.step()
        loss_val = loss.item()
        if log_every and ((step + 1) % log_every == 0 or step + 1 == steps):
            print(f"step {step + 1:4d} loss {loss_val:.4f} ({time.perf_counter() - t0:.0f}s)", flush=True)
    model.eval()
    save_model(model, tok, out_dir)
    return {"loss": loss_val, "seconds": time.perf_counter() - t0}

