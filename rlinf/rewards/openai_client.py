"""A bounded, retrying client of an OpenAI-compatible ``/chat/completions`` endpoint.

Requests go through one ``httpx.Client`` whose pool holds at most ``max_connections``
connections, from a thread pool of the same size, so no more than that many requests are in
flight. Each request has a ``timeout_s`` budget; a failure (connection error, timeout, HTTP 429 /
5xx, a reply without a message) is retried up to ``max_retries`` times with exponential back-off
(``backoff_s``, 2x, 4x ... plus up to 10 % jitter). HTTP 4xx other than 429 is not retried (the
request itself is wrong). What is left failing is returned as a :class:`ChatResult` with
``error`` set; the caller decides (score 0 and count it, or stop).

The API key is read from the environment variable the config names, when the request is made
(never stored in the config or logged); a missing variable sends no ``Authorization`` header.

Example (against a local server)::

    client = ChatClient(Endpoint("http://127.0.0.1:8000/v1", "judge", "OPENAI_API_KEY"))  # doctest: +SKIP
    [r.text for r in client.complete_many([[{"role": "user", "content": "2+2?"}]])]       # doctest: +SKIP
"""

from __future__ import annotations

import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    """Where and as whom to ask: ``base_url`` (ends before ``/chat/completions``), ``model``,
    and the name of the environment variable holding the API key."""

    base_url: str
    model: str
    api_key_env_var: str | None = None


@dataclass
class ChatResult:
    """One reply: its text, or the error that remained after the retries; ``attempts`` made."""

    text: str | None
    error: str | None
    attempts: int
    seconds: float


class ChatClient:
    """See the module docstring."""

    def __init__(self, endpoint: Endpoint, *, max_connections: int = 8, timeout_s: float = 30.0,
                 max_retries: int = 3, backoff_s: float = 0.5, max_tokens: int = 64, temperature: float = 0.0):
        # lazy: httpx (~0.7 s, math / web extras) only when a judge endpoint is used
        import httpx

        if max_connections < 1 or max_retries < 0 or timeout_s <= 0 or backoff_s < 0:
            raise ValueError("max_connections >= 1, max_retries >= 0, timeout_s > 0, backoff_s >= 0")
        self.endpoint = endpoint
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.max_tokens, self.temperature = max_tokens, temperature
        self._http = httpx.Client(timeout=timeout_s, limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections))
        self._pool = ThreadPoolExecutor(max_connections, thread_name_prefix="judge")

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.endpoint.api_key_env_var or "", "") if self.endpoint.api_key_env_var else ""
        return {"Authorization": f"Bearer {key}"} if key else {}

    def complete(self, messages: list[dict]) -> ChatResult:
        """One chat completion with retries (see the module docstring)."""
        # lazy: httpx (~0.7 s, math / web extras) only when a judge endpoint is used
        import httpx

        url = self.endpoint.base_url.rstrip("/") + "/chat/completions"
        body = {"model": self.endpoint.model, "messages": messages, "max_tokens": self.max_tokens,
                "temperature": self.temperature}
        start, error = time.perf_counter(), "not tried"
        for attempt in range(1, self.max_retries + 2):
            try:
                reply = self._http.post(url, json=body, headers=self._headers())
                if reply.status_code == 200:
                    text = reply.json()["choices"][0]["message"]["content"]
                    if isinstance(text, str):
                        return ChatResult(text, None, attempt, time.perf_counter() - start)
                    error = "the reply has no message content"
                else:
                    error = f"HTTP {reply.status_code}: {reply.text[:200]}"
                    if 400 <= reply.status_code < 500 and reply.status_code != 429:
                        return ChatResult(None, error, attempt, time.perf_counter() - start)
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt <= self.max_retries:
                time.sleep(self.backoff_s * 2 ** (attempt - 1) * (1 + 0.1 * random.random()))
        return ChatResult(None, error, self.max_retries + 1, time.perf_counter() - start)

    def complete_many(self, conversations: list[list[dict]]) -> list[ChatResult]:
        """:meth:`complete` for each conversation, ``max_connections`` at a time, in order."""
        return list(self._pool.map(self.complete, conversations))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._http.close()
