"""The episodes' policy: concurrent requests batched, failures reach every waiter, and the
external-server backend against a real local OpenAI-compatible server."""

from __future__ import annotations

import asyncio

import pytest

from rlinf.config.algorithm import SamplingParams
from rlinf.runners.web_agent.policy import BatchingPolicy, Reply, ServerBackend


class EchoBackend:
    def __init__(self, max_batch=8, delay=0.05, fail=False):
        self.max_batch, self.delay, self.fail = max_batch, delay, fail
        self.calls: list[list[str]] = []
        self.in_flight = self.peak = 0

    async def generate_batch(self, texts):
        self.calls.append(list(texts))
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
            if self.fail:
                raise RuntimeError("engine down")
            return [Reply(text=t.upper()) for t in texts]
        finally:
            self.in_flight -= 1


def test_concurrent_requests_are_batched_and_answered_in_order():
    backend = EchoBackend(max_batch=4)
    policy = BatchingPolicy(backend, max_in_flight=2, gather_s=0.01)

    async def main():
        return await asyncio.gather(*(policy.generate(f"p{i}") for i in range(10)))

    replies = asyncio.run(main())
    assert [r.text for r in replies] == [f"P{i}" for i in range(10)]
    assert sorted(t for call in backend.calls for t in call) == sorted(f"p{i}" for i in range(10))
    assert max(len(c) for c in backend.calls) == 4 and len(backend.calls) == 3  # 4 + 4 + 2
    assert backend.peak == 2  # max_in_flight batches at once


def test_a_failing_engine_fails_every_waiter_with_its_reason():
    policy = BatchingPolicy(EchoBackend(fail=True), max_in_flight=1)

    async def main():
        return await asyncio.gather(*(policy.generate("x") for _ in range(3)), return_exceptions=True)

    out = asyncio.run(main())
    assert all(isinstance(e, RuntimeError) and "engine down" in str(e) for e in out)


def test_server_backend_speaks_openai_chat():
    pytest.importorskip("aiohttp")
    from tests.utils.openai_server import OpenAIServer

    server = OpenAIServer(reply='click [3]')
    try:
        backend = ServerBackend(server.base_url, "policy", SamplingParams(temperature=0.5, max_new_tokens=8),
                                timeout_s=5.0, max_batch=4)

        async def main():
            policy = BatchingPolicy(backend)
            out = await asyncio.gather(*(policy.generate(f"task {i}") for i in range(3)))
            await backend.aclose()
            return out

        replies = asyncio.run(main())
        assert [r.text for r in replies] == ["click [3]"] * 3
        assert replies[0].response_ids == []  # no tokenizer given: text only
    finally:
        server.close()
