"""``BrowserClient``: the browser server's operations as async calls, one pool per operation.

Each operation has its own ``httpx.AsyncClient`` whose pool holds ``http_pools[op]``
connections, so at most that many requests of that operation are in flight (seed 000's
``http_pools``); a request waits for a free connection up to ``wait_timeout`` (the queue timeout).
A request may take ``operation_timeout`` (``allocate``: ``wait_timeout + operation_timeout``)
plus a grace of ``grace_s`` for the server's own 504 to arrive. Connection errors, timeouts and
5xx answers (503 from ``allocate`` included) are retried up to ``max_retries`` times with a
short doubling back-off; 4xx never are. HTTP 410 raises :class:`InstanceLost`; what still fails
raises :class:`OperationFailed` with one line. Every request carries ``Authorization: Bearer
<token>`` (the server answers 401 otherwise: never retried).

:func:`split_for_rank` divides the pools and ``server_size`` across ranks by
``rank_load_weight`` (seed 004's multi-node rule).

Example (needs a browser server on port 8000 and a site on port 9000)::

    >>> async def demo():
    ...     async with BrowserClient("http://127.0.0.1:8000", {"execute": 64}, token=TOKEN) as client:
    ...         iid = await client.allocate()
    ...         await client.navigate(iid, "http://127.0.0.1:9000/")
    ...         tree = await client.ac_tree(iid, "set_of_marks")
    ...         done = await client.execute(iid, {"type": "click", "id": 1})
    ...         await client.release(iid)
    ...         return tree["text"].splitlines()[0], done["ok"]
    >>> asyncio.run(demo())  # doctest: +SKIP
    ('heading "Welcome"', True)
"""

from __future__ import annotations

import asyncio
import base64
import collections
import math
from typing import Any

import httpx

from rlinf.engines.web.actions import Action
from rlinf.engines.web.browser import InstanceLost
from rlinf.utils.web_auth import bearer, check_token

#: seed 000's operation names (``http_pools`` keys)
OPERATIONS = ("allocate", "release", "navigate", "metadata", "screenshot", "ac_tree", "page_metadata", "execute")
#: connections of an operation ``http_pools`` does not name
DEFAULT_POOL = 4

__all__ = ["BrowserClient", "InstanceLost", "OperationFailed", "split_for_rank", "OPERATIONS"]


class OperationFailed(RuntimeError):
    """An operation failed for good (after its retries, or at once on a 4xx answer)."""

    def __init__(self, op: str, reason: str) -> None:
        super().__init__(f"{op} failed: {reason}")
        self.op, self.reason = op, reason


def check_pools(http_pools: dict[str, int] | None) -> dict[str, int]:
    """Every operation's pool size; unknown names and sizes < 1 raise ``ValueError``.

    >>> check_pools({"execute": 8})["execute"], check_pools({"execute": 8})["allocate"]
    (8, 4)
    >>> check_pools({"exec": 8})
    Traceback (most recent call last):
    ...
    ValueError: http_pools.exec: unknown operation; expected one of allocate, release, navigate, metadata, screenshot, ac_tree, page_metadata, execute
    """  # noqa: E501 - a doctest's expected output is one line
    pools = dict.fromkeys(OPERATIONS, DEFAULT_POOL)
    for op, size in (http_pools or {}).items():
        if op not in OPERATIONS:
            raise ValueError(f"http_pools.{op}: unknown operation; expected one of {', '.join(OPERATIONS)}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"http_pools.{op}: expected an integer >= 1, got {size!r}")
        pools[op] = size
    return pools


class BrowserClient:
    """Async client of one browser server (``base_url``), sending ``token`` as its bearer token.
    ``retries[op]`` counts the retries made."""

    def __init__(self, base_url: str, http_pools: dict[str, int] | None = None, operation_timeout: float = 120.0,
                 wait_timeout: float = 2400.0, max_retries: int = 2, backoff_s: float = 0.25,
                 grace_s: float = 2.0, *, token: str) -> None:
        self._headers = bearer(check_token(token, "the browser service's token"))
        for name, value in (("operation_timeout", operation_timeout), ("wait_timeout", wait_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name}: expected a number > 0, got {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries: expected an integer >= 0, got {max_retries!r}")
        self.base_url = base_url.rstrip("/")
        self.pools = check_pools(http_pools)
        self.operation_timeout = float(operation_timeout)
        self.wait_timeout = float(wait_timeout)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.grace_s = grace_s
        self.retries: collections.Counter[str] = collections.Counter()
        self._clients: dict[str, httpx.AsyncClient] = {}

    def _client(self, op: str) -> httpx.AsyncClient:
        client = self._clients.get(op)
        if client is None:
            read = self.operation_timeout + self.grace_s + (self.wait_timeout if op == "allocate" else 0.0)
            timeout = httpx.Timeout(connect=self.operation_timeout, read=read, write=self.operation_timeout,
                                    pool=self.wait_timeout)
            limits = httpx.Limits(max_connections=self.pools[op], max_keepalive_connections=self.pools[op])
            client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, limits=limits, headers=self._headers)
            self._clients[op] = client
        return client

    async def aclose(self) -> None:
        """Close every pool."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def __aenter__(self) -> BrowserClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        reason = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.retries[op] += 1
                await asyncio.sleep(min(self.backoff_s * 2 ** (attempt - 1), 5.0))
            try:
                response = await self._client(op).post(f"/{op}", json=payload)
            except httpx.TransportError as err:
                reason = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
                continue
            try:
                body = response.json()
            except ValueError:
                body = {"error": response.text[:200]}
            if response.status_code == 200:
                return body
            message = body.get("error", "") if isinstance(body, dict) else str(body)
            if response.status_code == 410:
                raise InstanceLost(payload.get("instance_id", "?"), body.get("reason") or message)
            reason = f"HTTP {response.status_code}: {message}"
            if response.status_code < 500:
                raise OperationFailed(op, reason)
        raise OperationFailed(op, f"after {self.max_retries + 1} attempts: {reason}")

    async def allocate(self) -> str:
        """A new instance id (waits up to ``wait_timeout`` for a free slot)."""
        return (await self._call("allocate", {}))["instance_id"]

    async def release(self, iid: str) -> dict[str, Any]:
        """Give an instance back (``{"released": False, "note"}`` if it was lost or recycled)."""
        return await self._call("release", {"instance_id": iid})

    async def navigate(self, iid: str, url: str, timeout_s: float | None = None) -> dict[str, Any]:
        """Open ``url``: ``{"url", "title", "ok", "error", "status"}``."""
        payload: dict[str, Any] = {"instance_id": iid, "url": url}
        if timeout_s is not None:
            payload["timeout_s"] = timeout_s
        return await self._call("navigate", payload)

    async def metadata(self, iid: str) -> dict[str, int]:
        """The screen size: ``{"width", "height"}``."""
        return await self._call("metadata", {"instance_id": iid})

    async def page_metadata(self, iid: str) -> dict[str, str]:
        """The page's ``{"url", "title"}``."""
        return await self._call("page_metadata", {"instance_id": iid})

    async def screenshot(self, iid: str, marks: bool = False) -> bytes:
        """The viewport as PNG bytes (with the numbered marks drawn when ``marks``)."""
        body = await self._call("screenshot", {"instance_id": iid, "marks": marks})
        return base64.b64decode(body["png_base64"])

    async def ac_tree(self, iid: str, mode: str = "set_of_marks", rich: bool = False) -> dict[str, Any]:
        """The observation: ``{"text", "elements"}``."""
        return await self._call("ac_tree", {"instance_id": iid, "mode": mode, "rich": rich})

    async def execute(self, iid: str, action: dict[str, Any] | Action,
                      timeout_s: float | None = None) -> dict[str, Any]:
        """Perform one action: ``{"ok", "error", "url", "title"}``."""
        payload: dict[str, Any] = {"instance_id": iid,
                                   "action": action.to_dict() if isinstance(action, Action) else action}
        if timeout_s is not None:
            payload["timeout_s"] = timeout_s
        return await self._call("execute", payload)

    async def _get(self, path: str) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(base_url=self.base_url, timeout=self.operation_timeout,
                                         headers=self._headers) as client:
                response = await client.get(path)
        except httpx.TransportError as err:
            raise OperationFailed(path.strip("/"), f"{type(err).__name__}: {err}") from None
        if response.status_code != 200:
            raise OperationFailed(path.strip("/"), f"HTTP {response.status_code}: {response.text[:200]}")
        return response.json()

    async def health(self) -> dict[str, Any]:
        """``GET /health``."""
        return await self._get("/health")

    async def stats(self) -> dict[str, Any]:
        """``GET /stats``: the server's counters."""
        return await self._get("/stats")


def _largest_remainder(total: int, weights: list[float]) -> list[int]:
    whole = sum(weights)
    exact = [total * w / whole for w in weights]
    shares = [math.floor(e) for e in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in order[: total - sum(shares)]:
        shares[i] += 1
    for i, share in enumerate(shares):
        if share == 0:  # every rank gets at least one: take it from the largest share that can spare it
            donor = max(range(len(shares)), key=lambda j: (shares[j], -j))
            if shares[donor] > 1:
                shares[donor] -= 1
            shares[i] = 1
    return shares


def split_for_rank(http_pools: dict[str, int], server_size: int, rank_load_weight: list[float],
                   rank: int) -> tuple[dict[str, int], int]:
    """This rank's share of every pool and of ``server_size``, proportional to its weight
    (largest remainder, so shares sum to the total; every rank gets at least 1, which exceeds a
    total smaller than the number of ranks).

    >>> split_for_rank({"execute": 128, "allocate": 4}, 64, [1, 1, 2], 2)
    ({'execute': 64, 'allocate': 2}, 32)
    >>> split_for_rank({"allocate": 4}, 10, [1, 1, 1], 0)
    ({'allocate': 2}, 4)
    """
    if not isinstance(rank_load_weight, (list, tuple)) or not rank_load_weight:
        raise ValueError(f"rank_load_weight: expected a non-empty list of numbers, got {rank_load_weight!r}")
    if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0 for w in rank_load_weight) \
            or not sum(rank_load_weight) > 0:
        raise ValueError(f"rank_load_weight: expected numbers >= 0 with a positive sum, got {list(rank_load_weight)}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(rank_load_weight):
        raise ValueError(f"rank: expected 0..{len(rank_load_weight) - 1}, got {rank!r}")
    weights = [float(w) for w in rank_load_weight]
    checked = check_pools(http_pools)
    pools = {op: _largest_remainder(checked[op], weights)[rank] for op in http_pools}
    if isinstance(server_size, bool) or not isinstance(server_size, int) or server_size < 1:
        raise ValueError(f"server_size: expected an integer >= 1, got {server_size!r}")
    return pools, _largest_remainder(server_size, weights)[rank]
