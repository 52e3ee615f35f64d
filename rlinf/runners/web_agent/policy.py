"""The policy of a web run, seen from the episodes: ``await policy.generate(prompt_text)``.

Many episodes are in flight at once and each asks for one reply at a time. :class:`BatchingPolicy`
gathers the requests that arrive together into one batched generation call, so a rollout engine
sees batches rather than single prompts; up to ``max_in_flight`` batches run at once (one per
rollout rank). Two backends:

* :class:`RolloutGroupBackend` — our rollout group (HF or vLLM engines placed by
  ``cluster.component_placement``); replies carry token ids and log-probs for training.
* :class:`ServerBackend` — an external OpenAI-compatible server (``env_config.vllm_server_url``),
  bounded by ``vllm_timeout``; with a tokenizer the text is tokenised locally for training.

Example (any async backend returning replies)::

    policy = BatchingPolicy(backend, render=lambda text: text)
    reply = await policy.generate("Task: ...")                 # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field


@dataclass
class Reply:
    """One generated reply: its text, and (for training) the prompt / response token ids and the
    response's log-probs under the policy that sampled it."""

    text: str
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_version: int = 0


class BatchingPolicy:
    """Batches concurrent :meth:`generate` calls for ``backend.generate_batch(texts)``.

    Args:
        backend: has ``async generate_batch(list[str]) -> list[Reply]`` and ``max_batch``.
        max_in_flight: batches running at once.
        gather_s: how long the first request of a batch waits for company.
    """

    def __init__(self, backend, max_in_flight: int = 1, gather_s: float = 0.01):
        self.backend = backend
        self.max_in_flight = max(1, max_in_flight)
        self.gather_s = gather_s
        self._queue: list[tuple[str, asyncio.Future]] = []
        self._wake: asyncio.Event | None = None
        self._runner: asyncio.Task | None = None
        self.batches: list[int] = []

    async def generate(self, text: str) -> Reply:
        loop = asyncio.get_running_loop()
        if self._runner is None or self._runner.done():
            self._wake = asyncio.Event()
            self._runner = loop.create_task(self._run())
        fut = loop.create_future()
        self._queue.append((text, fut))
        self._wake.set()
        return await fut

    async def _run(self) -> None:
        slots = asyncio.Semaphore(self.max_in_flight)
        pending: set[asyncio.Task] = set()
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if not self._queue:
                    continue
                await asyncio.sleep(self.gather_s)
                await slots.acquire()
                take = self._queue[: self.backend.max_batch]
                del self._queue[: len(take)]
                if self._queue:
                    self._wake.set()
                task = asyncio.ensure_future(self._serve(take, slots))
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            for task in pending:
                task.cancel()

    async def _serve(self, take, slots: asyncio.Semaphore) -> None:
        live = [(t, f) for t, f in take if not f.done()]
        try:
            if not live:
                return
            self.batches.append(len(live))
            replies = await self.backend.generate_batch([t for t, _ in live])
            for (_, fut), reply in zip(live, replies):
                if not fut.done():
                    fut.set_result(reply)
        except BaseException as exc:  # noqa: BLE001 - every waiter learns why
            for _, fut in live:
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        finally:
            slots.release()

    def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()


class RolloutGroupBackend:
    """Generation on the rollout group's ranks, one batch per rank at a time.

    Args:
        group: the rollout :class:`~rlinf.scheduler.WorkerGroup` (``GenerationWorker``).
        tokenizer: the policy's tokenizer; prompts are rendered with its chat template.
        sampling: :class:`~rlinf.config.algorithm.SamplingParams` of the replies.
        max_batch: prompts per engine call.
    """

    def __init__(self, group, tokenizer, sampling, max_batch: int = 16, seed: int = 0):
        self.group, self.tokenizer, self.sampling = group, tokenizer, sampling
        self.max_batch = max_batch
        self.seed = seed
        self._calls = 0
        self._free = list(range(group.world_size))
        self.policy_version = 0

    def encode(self, text: str) -> list[int]:
        return chat_ids(self.tokenizer, text)

    async def generate_batch(self, texts: list[str]) -> list[Reply]:
        # lazy: prompt_dataset imports torch (~4 s); this module stays light until a batch is generated
        from rlinf.data.prompt_dataset import Prompt, PromptBatch

        prompts = PromptBatch(tuple(Prompt(index=i, text=t, token_ids=tuple(self.encode(t)), answer="")
                                    for i, t in enumerate(texts)))
        rank = self._free.pop(0) if self._free else self._calls % self.group.world_size
        self._calls += 1
        try:
            call = self.group.execute("generate", prompts, self.sampling, 1, self.seed + self._calls, ranks=[rank])
            batch = (await asyncio.to_thread(call.wait))[0]  # wait() names a dead rank
        finally:
            self._free.append(rank)
        out = []
        for i in range(batch.batch_size):
            n = int(batch.response_mask[i].sum())
            out.append(Reply(text=batch.texts[i] if batch.texts else self.tokenizer.decode(
                                 batch.response_ids[i, :n].tolist(), skip_special_tokens=True),
                             prompt_ids=list(prompts.prompts[i].token_ids),
                             response_ids=batch.response_ids[i, :n].tolist(),
                             logprobs=batch.rollout_logprobs[i, :n].tolist() if batch.rollout_logprobs is not None
                             else [], policy_version=batch.policy_version))
        return out


class ServerBackend:
    """An external OpenAI-compatible chat server (``env_config.vllm_server_url``).

    Sampling keys go to the request as vLLM's server reads them (``top_k`` and ``min_p`` as extra
    body fields). With ``tokenizer`` the prompt (chat template) and reply are tokenised here, so
    the steps can be trained on; without it they carry text only.
    """

    def __init__(self, base_url: str, model: str, sampling, timeout_s: float, max_batch: int = 16,
                 tokenizer=None, max_connections: int = 16):
        self.url = base_url.rstrip("/") + ("/chat/completions" if base_url.rstrip("/").endswith("/v1")
                                           else "/v1/chat/completions")
        self.model, self.sampling, self.tokenizer = model, sampling, tokenizer
        self.max_batch = max_batch
        self.timeout_s, self.max_connections = timeout_s, max_connections
        self._client = None
        self._loop = None

    @property
    def client(self):
        """One pooled ``httpx.AsyncClient`` per event loop (each rollout phase runs its own loop,
        and a client's connections belong to the loop that opened them)."""
        import httpx  # lazy: httpx only for an external OpenAI-compatible server (env_config.vllm_server_url)

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = httpx.AsyncClient(timeout=self.timeout_s,
                                             limits=httpx.Limits(max_connections=self.max_connections))
            self._loop = loop
        return self._client

    async def _one(self, text: str) -> Reply:
        s = self.sampling
        body = {"model": self.model, "messages": [{"role": "user", "content": text}],
                "max_tokens": s.max_new_tokens, "temperature": s.temperature, "top_p": s.top_p,
                "top_k": s.top_k, "min_p": s.min_p}
        resp = await self.client.post(self.url, json=body)
        resp.raise_for_status()
        content = resp.json()["choices"][0]["message"]["content"] or ""
        reply = Reply(text=content)
        if self.tokenizer is not None:
            reply.prompt_ids = chat_ids(self.tokenizer, text)
            reply.response_ids = self.tokenizer.encode(content, add_special_tokens=False)
        return reply

    async def generate_batch(self, texts: list[str]) -> list[Reply]:
        return list(await asyncio.gather(*(self._one(t) for t in texts)))

    async def aclose(self) -> None:
        """Close the client of the running loop; one left from a finished loop is dropped."""
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = self._loop = None


def chat_ids(tokenizer, text: str) -> list[int]:
    """Token ids of one user message rendered with the tokenizer's chat template (generation
    prompt appended), as every backend encodes a step's prompt."""
    return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                              tokenize=True, return_dict=False))
