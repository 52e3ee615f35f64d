"""An LLM judge of text responses (``reward.judge`` of a math run) over an OpenAI-compatible
endpoint.

Each sample becomes one user message, ``reward.judge.prompt_template`` filled with ``{prompt}``,
``{response}`` and ``{answer}`` (the sample's reference); the score is the first number of the
reply, clipped to [0, 1]. A request that still fails after the client's retries scores 0 with
``error`` set, or raises :class:`~rlinf.rewards.base.JudgeError` under ``on_failure: stop``; a
reply without a number scores 0 with ``error`` set too (counted apart: :meth:`ChatJudge.metrics`).
Every score's ``detail`` is the client's :class:`~rlinf.rewards.openai_client.ChatResult`.

Example (needs a server)::

    judge = ChatJudge.from_config(reward_cfg)                                  # doctest: +SKIP
    judge.score_many([Sample("\\\\boxed{4}", "4", "2+2?")])[0].value             # doctest: +SKIP
    1.0
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rlinf.rewards.base import JudgeError, Sample, Score
from rlinf.rewards.openai_client import ChatClient, Endpoint

__all__ = ["ChatJudge"]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class ChatJudge:
    """See the module docstring; ``client`` is shared by no one else (:meth:`close` closes it)."""

    def __init__(self, client: ChatClient, template: str, on_failure: str = "zero"):
        if on_failure not in ("zero", "stop"):
            raise ValueError(f"on_failure: expected 'zero' or 'stop', got {on_failure!r}")
        self.client, self.template, self.on_failure = client, template, on_failure

    @classmethod
    def from_config(cls, reward_cfg: Any) -> ChatJudge:
        """From a ``reward`` section: ``judge`` (pool, timeouts, template) and the endpoint of
        ``openai_config`` for ``judge.task``."""
        j, ep = reward_cfg.judge, reward_cfg.openai_config.endpoint(reward_cfg.judge.task)
        client = ChatClient(Endpoint(ep.base_url, ep.model, ep.openai_api_key_env_var),
                            max_connections=j.max_connections, timeout_s=j.timeout_s, max_retries=j.max_retries,
                            backoff_s=j.backoff_s, max_tokens=j.max_tokens)
        return cls(client, j.template, j.on_failure)

    def score_many(self, samples: Sequence[Sample]) -> list[Score]:
        """One score per sample in [0, 1], in order (module docstring)."""
        results = self.client.complete_many([[{"role": "user", "content": self.template.format(
            prompt=s.prompt, response=s.response, answer=s.reference)}] for s in samples])
        scores = []
        for res in results:
            if res.error is not None:
                if self.on_failure == "stop":
                    raise JudgeError(f"reward.judge: a request failed after {res.attempts} attempts: {res.error}")
                scores.append(Score(0.0, error=res.error, detail=res))
                continue
            number = _NUMBER.search(res.text)
            if number is None:
                scores.append(Score(0.0, error=f"no number in the reply {res.text[-120:]!r}", detail=res))
                continue
            scores.append(Score(min(max(float(number.group()), 0.0), 1.0), detail=res))
        return scores

    @staticmethod
    def metrics(scores: Sequence[Score]) -> dict[str, float]:
        """Counters of one :meth:`score_many` call: failed requests, replies without a number, mean
        attempts, and the slowest request's seconds."""
        n = max(len(scores), 1)
        return {"reward/judge_failures": float(sum(s.detail.error is not None for s in scores)),
                "reward/judge_unparsed": float(sum(s.error is not None and s.detail.error is None for s in scores)),
                "reward/judge_attempts": sum(s.detail.attempts for s in scores) / n,
                "reward/judge_seconds": max((s.detail.seconds for s in scores), default=0.0)}

    def close(self) -> None:
        self.client.close()
