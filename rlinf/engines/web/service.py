"""The browser server: one :class:`BrowserHost` behind aiohttp, one endpoint per operation.

``POST /allocate /release /navigate /metadata /screenshot /ac_tree /page_metadata /execute``
take and give JSON (``screenshot`` gives ``{"png_base64"}``); ``GET /health`` and ``GET /stats``
(instances live, allocations waiting, timeouts, lost instances, recycles, requests and peak
in-flight requests per operation). Every request, to any path, carries
``Authorization: Bearer <token>`` (:mod:`rlinf.utils.web_auth`); one without it, or with a wrong
token, is answered 401 before anything else of it is read.

At most ``server_size`` instances live at once: ``allocate`` waits up to ``wait_timeout`` seconds
for a free slot, then answers 503. Every operation is bounded by ``operation_timeout`` (504; the
instance is reset for the next call). Answers:

=====  ======================================================================
400    malformed body: names the field and what was expected
401    no ``Authorization: Bearer <token>`` header, or a wrong token
404    unknown instance id
410    instance lost (browser crashed) or recycled (older than ``instance_lifetime_max``)
503    no free slot within ``wait_timeout`` (or the browser could not start)
504    the operation overran ``operation_timeout``
=====  ======================================================================

Run it: ``RLINF_WEB_TOKEN=... python -m rlinf.engines.web.service --port 0 --server-size 8`` prints
its URL (the token comes from ``$RLINF_WEB_TOKEN`` or ``--token-file PATH``; on a loopback
``--host`` without one, a fresh token is written to a 0600 file whose path is printed; on any
other address the service refuses to start without one). In-process (needs Chromium)::

    >>> url, stop = start_service_thread(token=TOKEN, server_size=4, operation_timeout=30)  # doctest: +SKIP
    >>> httpx.get(url + "/health", headers=bearer(TOKEN)).json()  # doctest: +SKIP
    {'ok': True, 'browser_connected': True}
    >>> stop()  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import json
import math
import os
import signal
import sys
import threading
import time
from typing import Any

from aiohttp import web

from rlinf.engines.web.actions import MODES, Action
from rlinf.engines.web.browser import (
    BrowserHost,
    BrowserStartError,
    InstanceLost,
    OperationTimeout,
    UnknownInstance,
    first_line,
)
from rlinf.engines.web.client import OPERATIONS
from rlinf.utils.web_auth import UNAUTHORIZED, authorized, check_token, server_token

_FIELDS = {"allocate": set(), "release": {"instance_id"}, "metadata": {"instance_id"},
           "page_metadata": {"instance_id"}, "navigate": {"instance_id", "url", "timeout_s"},
           "screenshot": {"instance_id", "marks"}, "ac_tree": {"instance_id", "mode", "rich"},
           "execute": {"instance_id", "action", "timeout_s"}}
_TOMBSTONES_KEPT = 10_000


class _Answer(Exception):
    """An HTTP error answer: status and one line."""

    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.reason = status, message, reason


def _field(body: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ..., what: str = "") -> Any:
    if key not in body:
        if default is ...:
            raise _Answer(400, f"field '{key}' is missing; expected {what or kind}")
        return default
    value = body[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _Answer(400, f"field '{key}': expected {what or kind}, got {value!r}")
    return value


class BrowserService:
    """The server's state and handlers; :meth:`app` builds the aiohttp application. ``token``
    is the bearer token every request must carry; ``host_kwargs`` go to :class:`BrowserHost`
    (``origin_tokens`` among them: the bearer tokens Chromium sends to the origins they name).

    >>> BrowserService(token="t" * 64, server_size=0)
    Traceback (most recent call last):
    ...
    ValueError: server_size: expected an integer >= 1, got 0
    """

    def __init__(self, server_size: int = 64, operation_timeout: float = 120.0, wait_timeout: float = 2400.0,
                 instance_lifetime_max_minutes: float = 50.0, *, token: str, **host_kwargs: Any) -> None:
        self._token = check_token(token, "the browser service's token")
        if isinstance(server_size, bool) or not isinstance(server_size, int) or server_size < 1:
            raise ValueError(f"server_size: expected an integer >= 1, got {server_size!r}")
        for name, value in (("operation_timeout", operation_timeout), ("wait_timeout", wait_timeout),
                            ("instance_lifetime_max_minutes", instance_lifetime_max_minutes)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name}: expected a number > 0, got {value!r}")
        self.server_size = server_size
        self.operation_timeout = float(operation_timeout)
        self.wait_timeout = float(wait_timeout)
        self.lifetime_s = float(instance_lifetime_max_minutes) * 60.0
        self.host = BrowserHost(**host_kwargs)
        self._slots: asyncio.Semaphore | None = None
        self._live: dict[str, float] = {}
        self._busy: collections.Counter[str] = collections.Counter()
        self._tombstones: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._waiting = 0
        self._counts = {"timeouts": 0, "lost": 0, "recycles": 0, "rejected_allocations": 0}
        self._requests = dict.fromkeys(OPERATIONS, 0)
        self._in_flight = dict.fromkeys(OPERATIONS, 0)
        self._peak = dict.fromkeys(OPERATIONS, 0)
        self._janitor: asyncio.Task | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def app(self) -> web.Application:
        """The aiohttp application; starting it starts Chromium, cleaning it up closes it."""
        app = web.Application(client_max_size=8 * 1024 * 1024, middlewares=[self._authenticate])
        for op in OPERATIONS:
            app.router.add_post(f"/{op}", self._handler(op))
        app.router.add_get("/health", self._health)
        app.router.add_get("/stats", self._stats)
        app.on_startup.append(lambda _app: self.start())
        app.on_cleanup.append(lambda _app: self.stop())
        return app

    async def start(self) -> None:
        """Start Chromium and the janitor (lost-instance reaping, lifetime recycling)."""
        self._slots = asyncio.Semaphore(self.server_size)
        await self.host.start()
        self._janitor = asyncio.ensure_future(self._janitor_loop())

    async def stop(self) -> None:
        """Stop the janitor and close Chromium."""
        if self._janitor is not None:
            self._janitor.cancel()
        await self.host.close()

    # -- bookkeeping ----------------------------------------------------------------------------
    def _bury(self, iid: str, reason: str | None) -> None:
        """Forget a live instance: free its slot and, unless it was released, remember why it
        is gone (later calls on it answer 410 with the reason)."""
        if self._live.pop(iid, None) is None:
            return
        if reason is not None:
            self._tombstones[iid] = reason
            while len(self._tombstones) > _TOMBSTONES_KEPT:
                self._tombstones.popitem(last=False)
        assert self._slots is not None
        self._slots.release()

    async def _reap(self) -> None:
        for iid, reason in list(self.host.lost.items()):
            if iid in self._live:
                self._counts["lost"] += 1
                self._bury(iid, reason)
            await self.host.release(iid)

    async def _janitor_loop(self) -> None:
        every = min(1.0, max(0.1, self.lifetime_s / 4))
        while True:
            await asyncio.sleep(every)
            try:
                await self._reap()
                now = time.monotonic()
                for iid, born in list(self._live.items()):
                    if now - born > self.lifetime_s and not self._busy[iid]:
                        self._counts["recycles"] += 1
                        self._bury(iid, f"recycled after instance_lifetime_max ({self.lifetime_s / 60:g} minutes)")
                        try:
                            await self.host.release(iid, timeout_s=self.operation_timeout)
                        except UnknownInstance:
                            pass
            except Exception:  # noqa: BLE001 - the janitor must outlive one bad round
                continue

    # -- handlers -------------------------------------------------------------------------------
    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """401 unless the request carries the token; runs before routing and before the body is read."""
        if not authorized(request.headers.get("Authorization"), self._token):
            return web.json_response({"error": UNAUTHORIZED}, status=401, headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    def _handler(self, op: str):
        async def handle(request: web.Request) -> web.Response:
            self._requests[op] += 1
            self._in_flight[op] += 1
            self._peak[op] = max(self._peak[op], self._in_flight[op])
            try:
                body = await self._body(request, op)
                return web.json_response(await self._dispatch(op, body))
            except _Answer as answer:
                extra = {"reason": answer.reason} if answer.reason else {}
                return web.json_response({"error": answer.message, "op": op, **extra}, status=answer.status)
            finally:
                self._in_flight[op] -= 1
        return handle

    async def _body(self, request: web.Request, op: str) -> dict[str, Any]:
        raw = await request.read()
        if not raw.strip():
            body: Any = {}
        else:
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise _Answer(400, f"request body is not valid JSON: {err}") from None
        if not isinstance(body, dict):
            raise _Answer(400, f"request body: expected a JSON object, got {type(body).__name__}")
        unknown = sorted(set(body) - _FIELDS[op])
        if unknown:
            raise _Answer(400, f"unknown field '{unknown[0]}' for {op}; expected {sorted(_FIELDS[op]) or 'none'}")
        return body

    async def _dispatch(self, op: str, body: dict[str, Any]) -> dict[str, Any]:
        if op == "allocate":
            return {"instance_id": await self._allocate()}
        iid = _field(body, "instance_id", str, what="an instance id string")
        if op == "release":
            return await self._release(iid)
        if iid in self._tombstones:
            raise self._gone(iid, self._tombstones[iid])
        if iid not in self._live:
            raise _Answer(404, f"unknown instance_id {iid!r} (never allocated or already released)")
        bound = self.operation_timeout
        if op == "navigate":
            url = _field(body, "url", str, what="a URL string")
            bound = min(bound, self._timeout_field(body))
            call = self.host.navigate(iid, url, timeout_s=bound)
        elif op == "execute":
            try:
                action = Action.from_dict(_field(body, "action", dict, what="an action object"))
            except ValueError as err:
                raise _Answer(400, f"field {err}") from None
            bound = min(bound, self._timeout_field(body))
            call = self.host.execute(iid, action, timeout_s=bound)
        elif op == "screenshot":
            marks = _field(body, "marks", bool, default=False, what="true or false")
            call = self.host.screenshot(iid, marks=marks, timeout_s=bound)
        elif op == "ac_tree":
            mode = _field(body, "mode", str, default="set_of_marks", what=" or ".join(MODES))
            if mode not in MODES:
                raise _Answer(400, f"field 'mode': expected {' or '.join(MODES)}, got {mode!r}")
            call = self.host.ac_tree(iid, mode, _field(body, "rich", bool, default=False, what="true or false"),
                                     timeout_s=bound)
        elif op == "metadata":
            call = self.host.metadata(iid, timeout_s=bound)
        else:
            call = self.host.page_metadata(iid, timeout_s=bound)
        result = await self._on_instance(op, iid, call, bound)
        if op == "screenshot":
            return {"png_base64": base64.b64encode(result).decode("ascii")}
        return result

    def _timeout_field(self, body: dict[str, Any]) -> float:
        value = _field(body, "timeout_s", (int, float), default=self.operation_timeout, what="a number > 0")
        if not value > 0 or not math.isfinite(value):
            raise _Answer(400, f"field 'timeout_s': expected a number > 0, got {value!r}")
        return float(value)

    async def _on_instance(self, op: str, iid: str, call: Any, bound: float) -> Any:
        self._busy[iid] += 1
        try:
            return await asyncio.wait_for(call, bound + 1.0)  # the host keeps its bound; this is a net
        except (TimeoutError, OperationTimeout):
            self._counts["timeouts"] += 1
            if iid in self._live and iid in self.host.instance_ids():
                asyncio.ensure_future(self._quiet_reset(iid))
            raise _Answer(504, f"{op} did not finish within {bound:g}s "
                               f"(operation_timeout={self.operation_timeout:g}s); "
                               "the instance was reset") from None
        except InstanceLost as lost:
            if iid in self._live:
                self._counts["lost"] += 1
                self._bury(iid, lost.reason)
            raise self._gone(iid, self._tombstones.get(iid, lost.reason)) from None
        except UnknownInstance:
            raise self._gone(iid, self._tombstones.get(iid, "released while the call ran")) from None
        except Exception as err:  # noqa: BLE001 - one line to the client, not a traceback
            raise _Answer(500, f"{op} failed: {type(err).__name__}: {first_line(err)}") from None
        finally:
            self._busy[iid] -= 1
            if not self._busy[iid]:
                del self._busy[iid]

    @staticmethod
    def _gone(iid: str, reason: str) -> _Answer:
        return _Answer(410, f"instance {iid} is gone: {reason}", reason)

    async def _quiet_reset(self, iid: str) -> None:
        try:
            await self.host.reset(iid, timeout_s=self.operation_timeout)
        except Exception:  # noqa: BLE001 - best effort; the next call recovers or reports
            pass

    async def _allocate(self) -> str:
        assert self._slots is not None
        await self._reap()
        self._waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.wait_timeout)
        except TimeoutError:
            self._counts["rejected_allocations"] += 1
            raise _Answer(503, f"no free browser instance within wait_timeout={self.wait_timeout:g}s "
                               f"(server_size={self.server_size}, all in use)") from None
        finally:
            self._waiting -= 1
        try:
            iid = await self.host.allocate(timeout_s=self.operation_timeout)
        except BaseException as err:
            self._slots.release()
            if isinstance(err, OperationTimeout):
                self._counts["timeouts"] += 1
                raise _Answer(504, f"allocate exceeded operation_timeout={self.operation_timeout:g}s") from None
            if isinstance(err, BrowserStartError):
                raise _Answer(503, f"the browser could not start: {err}") from None
            if isinstance(err, Exception):
                raise _Answer(500, f"allocate failed: {type(err).__name__}: {first_line(err)}") from None
            raise
        self._live[iid] = time.monotonic()
        return iid

    async def _release(self, iid: str) -> dict[str, Any]:
        if iid in self._tombstones:
            return {"released": False, "note": self._tombstones[iid]}
        if iid not in self._live:
            raise _Answer(404, f"unknown instance_id {iid!r} (never allocated or already released)")
        self._bury(iid, None)
        try:
            await self.host.release(iid, timeout_s=self.operation_timeout)
        except UnknownInstance:
            pass
        return {"released": True}

    async def _health(self, _request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "browser_connected": self.host.connected})

    async def _stats(self, _request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    def stats(self) -> dict[str, Any]:
        """Counters: live / waiting instances, timeouts, lost, recycles, per-op requests and peaks."""
        return {"server_size": self.server_size, "live": len(self._live), "waiting": self._waiting,
                **self._counts, "browser_restarts": self.host.restarts, "browser_pid": self.host.browser_pid,
                "requests": dict(self._requests), "in_flight": dict(self._in_flight),
                "peak_in_flight": dict(self._peak)}


async def _serve(service: BrowserService, host: str, port: int) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(service.app(), handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()  # the real port when port=0
    return runner, f"http://{bound[0]}:{bound[1]}"


def start_service_thread(host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 60.0,
                         **service_kwargs: Any) -> tuple[str, Any]:
    """Run a :class:`BrowserService` on its own event-loop thread; returns ``(url, stop)``.
    ``service_kwargs`` are the service's (``token`` among them). ``stop()`` closes the server and
    Chromium (bounded: 30 s)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            box["runner"], box["url"] = loop.run_until_complete(_serve(BrowserService(**service_kwargs), host, port))
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = err
            ready.set()
            loop.close()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(asyncio.wait_for(box["runner"].cleanup(), 30.0))
        loop.close()

    thread = threading.Thread(target=run, name="browser-service", daemon=True)
    thread.start()
    if not ready.wait(start_timeout_s):
        raise RuntimeError(f"the browser service did not start within {start_timeout_s:g}s")
    if "error" in box:
        raise box["error"]

    def stop() -> None:
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30.0)
    return box["url"], stop


def main(argv: list[str] | None = None) -> int:
    """The CLI: serve until SIGINT / SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m rlinf.engines.web.service", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    parser.add_argument("--server-size", type=int, default=64)
    parser.add_argument("--operation-timeout", type=float, default=120.0)
    parser.add_argument("--wait-timeout", type=float, default=2400.0)
    parser.add_argument("--instance-lifetime-max", type=float, default=50.0, help="minutes")
    parser.add_argument("--executable-path", default=None)
    parser.add_argument("--viewport", default="1280x720", help="WIDTHxHEIGHT")
    parser.add_argument("--token-file", default=None, metavar="PATH",
                        help="file holding the bearer token (mode 0600); default: $RLINF_WEB_TOKEN, else (on a "
                             "loopback --host only) a fresh token written to a 0600 file whose path is printed")
    args = parser.parse_args(argv)
    try:
        width, height = (int(v) for v in args.viewport.lower().split("x"))
    except ValueError:
        print(f"error: --viewport: expected WIDTHxHEIGHT like 1280x720, got {args.viewport!r}", file=sys.stderr)
        return 2
    try:
        token, written = server_token(args.host, args.token_file, name="the browser service")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        return _run_cli(args, token, written, (width, height))
    finally:
        if written is not None:  # a token made for this server is good for nothing once it stops
            os.unlink(written)


def _run_cli(args: argparse.Namespace, token: str, written: str | None, viewport: tuple[int, int]) -> int:
    try:
        service = BrowserService(args.server_size, args.operation_timeout, args.wait_timeout,
                                 args.instance_lifetime_max, token=token, executable_path=args.executable_path,
                                 viewport=viewport)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    async def serve() -> None:
        runner, url = await _serve(service, args.host, args.port)
        if written is not None:
            print(f"bearer token written to {written} (mode 0600; send Authorization: Bearer <its content>)",
                  flush=True)
        print(f"browser service listening on {url}", flush=True)
        done = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, done.set)
        await done.wait()
        await asyncio.wait_for(runner.cleanup(), 30.0)
    try:
        asyncio.run(serve())
    except BrowserStartError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: cannot listen on {args.host}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 2
    return 0

if __name__ == "__main__":
    sys.exit(main())
