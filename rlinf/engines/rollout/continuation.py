"""Continuing interrupted generations (partial rollout): prompt + tokens so far, the rest of
each row's budget.

A ``generate(..., should_stop=...)`` call returns rows with ``finish_reason="interrupted"``
(:class:`~rlinf.engines.rollout.base.Generation`). Such a row continues in a new generate call
whose prompt is its prompt + the tokens it has (re-prefilled under whatever weights the engine
holds then) and whose budget is what is left of ``max_new_tokens``. One ``SamplingParams`` serves
a whole call, while rows differ in how much they have, so:

* ``max_new_tokens``: the call gets the LARGEST remaining budget of its rows, and each row is cut
  at its own budget afterwards (:func:`merge_continuation`): a row that reaches it ends
  ``length``, exactly as an uninterrupted call would have ended it (tokens past the budget would
  never have been sampled; an EOS exactly at the budget still ends it ``stop``).
* ``min_new_tokens``: the EOS mask cannot be cut afterwards, so rows are grouped by what they
  still owe (``max(0, min_new_tokens - len(tokens))``): one call per group
  (:func:`plan_continuation`). Rows interrupted after at least ``min_new_tokens`` tokens all owe
  0 and share one call.
* Penalties: ``repetition_penalty`` reads prompt and response alike on every engine, so moving
  tokens into the prompt changes nothing; ``frequency_penalty`` counts only response tokens, so a
  continued row would forget its earlier ones: refused (ValueError) when it is not 0.
* Stop strings: engines match them in the response of one call; one that spans the old tokens
  and the new ones is found by :func:`merge_continuation` given the tokenizer (cut there,
  ``stop``), where an uninterrupted call would have ended the row.

The log-prob of every token is the one reported by the call that sampled it, so a merged row's
log-probs mix the weights of the calls (the caller records which tokens came from which).

Example (a scripted engine; real use passes an HF or vLLM engine)::

    >>> from rlinf.engines.rollout.base import Generation, RolloutEngine
    >>> class Counting(RolloutEngine):
    ...     def generate(self, prompts, sampling, n=1, seed=None, should_stop=None):
    ...         return [Generation(i, [len(p) + k for k in range(sampling.max_new_tokens)],
    ...                            [-0.5] * sampling.max_new_tokens, "length") for i, p in enumerate(prompts)]
    ...     def load_weights(self, named_tensors):
    ...         pass
    >>> sp = SamplingParams(max_new_tokens=4, min_new_tokens=0)
    >>> partial = [Generation(0, [7], [-0.1], "interrupted"), Generation(1, [3], [-0.2], "stop")]
    >>> out = continue_generations(Counting(), [[1, 2], [5]], partial, sp)
    >>> [(g.token_ids, g.finish_reason) for g in out]
    [([7, 3, 4, 5], 'length'), ([3], 'stop')]
    >>> out[0].logprobs
    [-0.1, -0.5, -0.5, -0.5]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from rlinf.config.algorithm import SamplingParams
from rlinf.engines.rollout.base import Generation, RolloutEngine
from rlinf.engines.rollout.stops import cut_at_stop


@dataclass
class ContinuationCall:
    """One generate call of a continuation.

    Attributes:
        rows: indices (into the partial generations) of the rows it continues.
        prompts: each row's prompt + tokens so far (the call's prompts, ``n=1``).
        budgets: each row's remaining ``max_new_tokens``.
        sampling: the run's parameters with ``max_new_tokens = max(budgets)`` and
            ``min_new_tokens`` = what these rows still owe (the same for all of them).
    """

    rows: list[int]
    prompts: list[list[int]]
    budgets: list[int]
    sampling: SamplingParams


def plan_continuation(prompts: Sequence[Sequence[int]], partial: Sequence[Generation],
                      sampling: SamplingParams) -> list[ContinuationCall]:
    """The calls that continue the ``interrupted`` rows of ``partial`` (the output of
    ``generate(prompts, sampling, ...)``), one per amount of ``min_new_tokens`` still owed, in
    order of first row. Rows that ended, and interrupted rows with no budget left, need none.

    Raises ValueError when ``sampling.frequency_penalty`` is not 0 and a row has tokens to carry.

    >>> sp = SamplingParams(max_new_tokens=6, min_new_tokens=2)
    >>> part = [Generation(0, [9, 9, 9], [], "interrupted"), Generation(0, [], [], "interrupted"),
    ...         Generation(1, [4], [], "stop"), Generation(1, [5], [], "interrupted")]
    >>> [(c.rows, c.prompts, c.budgets, c.sampling.max_new_tokens, c.sampling.min_new_tokens)
    ...  for c in plan_continuation([[1], [2, 3]], part, sp)]
    [([0], [[1, 9, 9, 9]], [3], 3, 0), ([1], [[1]], [6], 6, 2), ([3], [[2, 3, 5]], [5], 5, 1)]
    """
    groups: dict[int, ContinuationCall] = {}
    for row, gen in enumerate(partial):
        if gen.finish_reason != "interrupted":
            continue
        budget = sampling.max_new_tokens - len(gen.token_ids)
        if budget <= 0:
            continue
        if gen.token_ids and sampling.frequency_penalty:
            raise ValueError(
                f"algorithm.sampling_params.frequency_penalty={sampling.frequency_penalty}: an interrupted row "
                "cannot be continued exactly (the penalty counts response tokens only, and a continued row's "
                "earlier tokens are in its prompt); set it to 0 or rollout.partial_rollout=false")
        owed = max(0, sampling.min_new_tokens - len(gen.token_ids))
        call = groups.setdefault(owed, ContinuationCall([], [], [], sampling))
        call.rows.append(row)
        call.prompts.append([*prompts[gen.prompt_index], *gen.token_ids])
        call.budgets.append(budget)
    for owed, call in groups.items():
        call.sampling = replace(sampling, max_new_tokens=max(call.budgets), min_new_tokens=owed)
    return list(groups.values())


def merge_continuation(partial: Generation, continued: Generation, budget: int, *, tokenizer=None,
                       stops: Sequence[str] = ()) -> Generation:
    """``partial`` (interrupted) followed by ``continued`` (from a call of the plan), cut at the
    row's ``budget`` (remaining ``max_new_tokens``) and, given ``tokenizer``, at the first
    ``stops`` string of the joined response. Finish reason: ``stop`` for an EOS within the budget
    or a stop string, ``length`` when the budget is reached, else ``continued``'s
    (``interrupted`` again when that call was stopped).

    >>> p = Generation(0, [5, 6], [-1.0, -1.0], "interrupted")
    >>> merge_continuation(p, Generation(0, [7, 8, 9], [-2.0] * 3, "length"), budget=2)
    Generation(prompt_index=0, token_ids=[5, 6, 7, 8], logprobs=[-1.0, -1.0, -2.0, -2.0], finish_reason='length')
    >>> merge_continuation(p, Generation(0, [3], [-2.0], "stop"), budget=2).finish_reason
    'stop'
    """
    tokens, logprobs, finish = list(continued.token_ids), list(continued.logprobs), continued.finish_reason
    if len(tokens) >= budget:
        finish = "stop" if finish == "stop" and len(tokens) == budget else "length"
        tokens, logprobs = tokens[:budget], logprobs[:budget]
    tokens, logprobs = [*partial.token_ids, *tokens], [*partial.logprobs, *logprobs]
    if tokenizer is not None and stops:
        cut = cut_at_stop(tokens, tokenizer, stops)
        if cut is not None:
            tokens, logprobs, finish = tokens[:cut], logprobs[:cut], "stop"
    return Generation(prompt_index=partial.prompt_index, token_ids=tokens, logprobs=logprobs,
                      finish_reason=finish)


def continue_generations(engine: RolloutEngine, prompts: Sequence[Sequence[int]], partial: Sequence[Generation],
                         sampling: SamplingParams, *, seed: int | None = None,
                         should_stop: Callable[[], bool] | None = None, tokenizer=None) -> list[Generation]:
    """``partial`` with every interrupted row continued on ``engine`` as it is now
    (:func:`plan_continuation`, one ``generate`` per call of the plan, call ``k`` with seed
    ``seed + k``, then :func:`merge_continuation`). ``should_stop`` interrupts again: rows of the
    call in progress come back ``interrupted`` with what they have, later calls do not start.
    An interrupted row with no budget left ends ``length``. Same order and length as ``partial``.
    """
    out = list(partial)
    for row, gen in enumerate(partial):
        if gen.finish_reason == "interrupted" and len(gen.token_ids) >= sampling.max_new_tokens:
            out[row] = replace(gen, finish_reason="length")
    fired = False

    def poll() -> bool:
        nonlocal fired
        fired = fired or bool(should_stop())
        return fired

    for k, call in enumerate(plan_continuation(prompts, partial, sampling)):
        if fired:
            break
        gens = engine.generate(call.prompts, call.sampling, n=1, seed=None if seed is None else seed + k,
                               should_stop=poll if should_stop is not None else None)
        for row, budget, gen in zip(call.rows, call.budgets, gens):
            out[row] = merge_continuation(partial[row], gen, budget, tokenizer=tokenizer, stops=sampling.stop)
    return out
