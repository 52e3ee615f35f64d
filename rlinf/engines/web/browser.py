"""``BrowserHost``: one Chromium process (Playwright's async API), many browser instances.

An instance is a fresh browser context with one page, named by a string id. Every operation is
bounded: ``timeout_s`` per call; a call that overruns raises :class:`OperationTimeout` at once and
the instance is reset in the background (the page's script is terminated, its loading stopped,
and if it still does not answer, the context is replaced), so the next call on it works.
``navigate`` and the navigating actions of ``execute`` wait for the page to load; a load that
does not finish in time is stopped and reported (``ok: False``) with the page left usable.

When the Chromium process dies, every instance of it is lost: calls on them raise
:class:`InstanceLost`, and the next ``allocate`` starts a new Chromium (``restarts`` counts it).
Pages are kept in one tab (``target=_blank`` and ``window.open`` open in place) and dialogs are
accepted, so no action can leave an instance waiting on a popup.

``origin_tokens`` (``{"http://127.0.0.1:8080": token}``) are bearer tokens Chromium sends to
those origins only: each context routes requests to an origin it names and adds
``Authorization: Bearer <token>`` to them (:func:`origin_of` must match exactly: scheme, host
and port); requests to any other origin go out untouched. Playwright carries an added header
along a redirect, so a server given a token must redirect within its own origin only (the
shipped sites do: every ``Location`` is root-relative).

Example (needs Chromium and a site on port 8000)::

    >>> async def demo():
    ...     host = BrowserHost()
    ...     await host.start()
    ...     iid = await host.allocate()
    ...     await host.navigate(iid, "http://127.0.0.1:8000/", timeout_s=10.0)
    ...     tree = await host.ac_tree(iid, "set_of_marks", rich=False)
    ...     done = await host.execute(iid, {"type": "click", "id": 1}, timeout_s=10.0)
    ...     await host.close()
    ...     return tree["text"].splitlines()[0], done["ok"]
    >>> asyncio.run(demo())  # doctest: +SKIP
    ('heading "Welcome"', True)
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from rlinf.engines.web.actions import MODES, Action
from rlinf.engines.web.browser_errors import (
    BrowserStartError,
    InstanceLost,
    OperationTimeout,
    UnknownInstance,
    find_chromium,
    first_line,
)
from rlinf.engines.web.observe import SAME_TAB_JS, read_page, take_screenshot
from rlinf.engines.web.perform import perform_action
from rlinf.utils.web_auth import check_token

try:  # the client imports this module's errors on machines without Playwright
    from playwright.async_api import Error as PlaywrightError
    from playwright.async_api import TimeoutError as PlaywrightTimeout
    from playwright.async_api import async_playwright
except ImportError:  # pragma: no cover - exercised only without playwright
    PlaywrightError = PlaywrightTimeout = RuntimeError  # type: ignore[misc,assignment]
    async_playwright = None  # type: ignore[assignment]

DEFAULT_TIMEOUT_S = 30.0
#: how long after a click / submit a navigation may take to start and still be waited for
SETTLE_WINDOW_S = 0.25
#: bounds of the steps of a reset and of closing things
STEP_TIMEOUT_S = 2.0


def split_bound(timeout_s: float) -> float:
    """The load / action wait inside a navigate or execute bounded by ``timeout_s`` as a whole
    (the rest, at most 2 x STEP_TIMEOUT_S, stops a load and reads the title).

    >>> split_bound(30.0), split_bound(3.0)
    (26.0, 2.0)
    """
    return timeout_s - min(2 * STEP_TIMEOUT_S, timeout_s / 3)


def origin_of(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port always written), lower case.

    >>> origin_of("http://127.0.0.1:8080/shop/?q=1"), origin_of("HTTP://Example.com/x")
    ('http://127.0.0.1:8080', 'http://example.com:80')
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    except ValueError:
        port = 0
    host = (parts.hostname or "").lower()
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _origin_pattern(origin: str) -> re.Pattern:
    """The URLs of ``origin`` (an :func:`origin_of` result), its default port written or not.

    >>> bool(_origin_pattern("http://a.b:80").match("http://a.b/x"))
    True
    >>> bool(_origin_pattern("http://a.b:8").match("http://a.b:80/"))
    False
    """
    scheme, _, rest = origin.partition("://")
    host, _, port = rest.rpartition(":")
    default = {"http": "80", "https": "443"}.get(scheme) == port
    return re.compile(f"^{re.escape(scheme)}://{re.escape(host)}" + (f"(:{port})?" if default else f":{port}") + "/",
                      re.IGNORECASE)


async def _quietly(awaitable: Awaitable[Any], limit_s: float) -> None:
    """Await with a bound, ignoring any error and the timeout (best-effort cleanup and resets)."""
    try:
        await asyncio.wait_for(awaitable, limit_s)
    except Exception:  # noqa: BLE001 - best effort: the next call reports what is still wrong
        pass


@dataclass
class _Instance:
    iid: str
    context: Any = None
    page: Any = None
    cdp: Any = None
    generation: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    nav_started: asyncio.Event = field(default_factory=asyncio.Event)
    nav_ended: asyncio.Event = field(default_factory=asyncio.Event)
    committed: asyncio.Event = field(default_factory=asyncio.Event)
    loaded: asyncio.Event = field(default_factory=asyncio.Event)
    lost: str | None = None
    needs_reset: bool = False


class BrowserHost:
    """One Chromium, many instances. ``viewport`` is (width, height) of every page;
    ``origin_tokens`` the bearer tokens sent to those origins only (module docstring)."""

    def __init__(self, executable_path: str | None = None, viewport: tuple[int, int] = (1280, 720),
                 headless: bool = True, settle_window_s: float = SETTLE_WINDOW_S,
                 origin_tokens: dict[str, str] | None = None) -> None:
        self._origin_headers = {origin_of(origin): f"Bearer {check_token(token, f'origin_tokens[{origin}]')}"
                                for origin, token in (origin_tokens or {}).items()}
        self.executable_path = executable_path
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self.headless = headless
        self.settle_window_s = settle_window_s
        self.restarts = 0
        self.browser_pid: int | None = None
        self.lost: dict[str, str] = {}
        self._pw: Any = None
        self._browser: Any = None
        self._generation = 0
        self._instances: dict[str, _Instance] = {}
        self._launch_lock = asyncio.Lock()
        self._background: set[asyncio.Task] = set()

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        """Whether the Chromium process is up and connected."""
        return self._browser is not None and self._browser.is_connected()

    async def start(self) -> None:
        """Start the Playwright driver and Chromium (bounded: 60 s)."""
        if async_playwright is None:
            raise BrowserStartError("the playwright package is not installed (scripts/setup_system_browser.sh)")
        async with self._launch_lock:
            if not self.connected:
                await self._launch()

    async def _launch(self) -> None:
        path = find_chromium(self.executable_path)
        if self._pw is None:
            self._pw = await asyncio.wait_for(async_playwright().start(), 60.0)
        if self._browser is not None:
            self.restarts += 1
        try:
            browser = await self._pw.chromium.launch(executable_path=path, headless=self.headless, timeout=60_000)
        except PlaywrightError as err:
            raise BrowserStartError(f"could not launch {path}: {first_line(err)}") from err
        self._generation += 1
        generation = self._generation
        browser.on("disconnected", lambda _b: self._browser_gone(generation))
        self._browser = browser
        try:
            session = await browser.new_browser_cdp_session()
            info = await asyncio.wait_for(session.send("SystemInfo.getProcessInfo"), STEP_TIMEOUT_S)
            self.browser_pid = next((p["id"] for p in info["processInfo"] if p["type"] == "browser"), None)
            await session.detach()
        except (TimeoutError, PlaywrightError):
            self.browser_pid = None

    def _browser_gone(self, generation: int) -> None:
        for iid, inst in list(self._instances.items()):
            if inst.generation == generation:
                inst.lost = inst.lost or "the browser process exited"
                self.lost[iid] = inst.lost
                del self._instances[iid]

    async def close(self) -> None:
        """Close every instance, Chromium and the driver (each step bounded)."""
        for task in list(self._background):
            task.cancel()
        browser, self._browser, driver, self._pw = self._browser, None, self._pw, None
        if browser is not None:
            await _quietly(browser.close(), 10.0)
        if driver is not None:
            await _quietly(driver.stop(), 10.0)
        self._instances.clear()

    # -- instances ---------------------------------------------------------------------------
    async def allocate(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
        """A new instance (fresh context + page) at ``about:blank``; restarts Chromium if it died.

        >>> asyncio.run(BrowserHost().allocate())  # doctest: +SKIP
        '3f2a9c0e1b7d'
        """
        async def make() -> str:
            async with self._launch_lock:
                if not self.connected:
                    await self._launch()
            inst = _Instance(uuid.uuid4().hex[:12])
            await self._open(inst)
            self._instances[inst.iid] = inst
            return inst.iid
        try:
            return await asyncio.wait_for(make(), timeout_s)
        except TimeoutError:
            raise OperationTimeout("allocate", "-", timeout_s) from None

    async def _open(self, inst: _Instance) -> None:
        """Give ``inst`` a fresh context and page, watched for navigations, crashes and dialogs."""
        width, height = self.viewport
        context = await self._browser.new_context(viewport={"width": width, "height": height}, accept_downloads=False)
        await context.add_init_script(script=SAME_TAB_JS)
        for origin in self._origin_headers:
            await context.route(_origin_pattern(origin), self._add_bearer)
        page = await context.new_page()
        inst.cdp = await context.new_cdp_session(page)
        inst.context, inst.page, inst.generation = context, page, self._generation

        def main_navigation(request: Any) -> bool:
            try:
                return inst.page is page and request.is_navigation_request() and request.frame == page.main_frame
            except PlaywrightError:
                return False

        page.on("request", lambda r: inst.nav_started.set() if main_navigation(r) else None)
        page.on("requestfailed", lambda r: inst.nav_ended.set() if main_navigation(r) else None)
        page.on("requestfinished", lambda r: inst.nav_ended.set() if main_navigation(r) else None)
        page.on("framenavigated", lambda f: inst.committed.set() if f == page.main_frame else None)
        page.on("load", lambda _p: inst.loaded.set() if inst.page is page else None)
        page.on("crash", lambda _p: setattr(inst, "lost", inst.lost or "the page crashed")
                if inst.page is page else None)
        page.on("dialog", lambda dialog: self._spawn(dialog.accept()))

    async def _add_bearer(self, route: Any, request: Any) -> None:
        """Send a request to an origin of ``origin_tokens`` on with its bearer token (the route's
        pattern picked the origin; it is checked again exactly here). The headers Playwright
        already holds are reused (``request.all_headers()`` would cost one more round trip per
        request); Chromium still adds the origin's cookies."""
        value = self._origin_headers.get(origin_of(request.url))
        if value is None:
            await route.fallback()
            return
        headers = dict(request.headers)
        headers["authorization"] = value
        await route.continue_(headers=headers)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(_quietly(coro, 10.0))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def instance_ids(self) -> list[str]:
        """Ids of the live instances (lost ones are in :attr:`lost`)."""
        return list(self._instances)

    def _get(self, iid: str) -> _Instance:
        if self._browser is not None and not self._browser.is_connected():
            self._browser_gone(self._generation)
        inst = self._instances.get(iid)
        if inst is None:
            if iid in self.lost:
                raise InstanceLost(iid, self.lost[iid])
            raise UnknownInstance(iid)
        if inst.lost:
            self._lose(inst, inst.lost)
        return inst

    def _lose(self, inst: _Instance, reason: str) -> None:
        inst.lost = reason
        self.lost[inst.iid] = reason
        self._instances.pop(inst.iid, None)
        self._spawn(inst.context.close())
        raise InstanceLost(inst.iid, reason)

    async def release(self, iid: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Close an instance; releasing a lost one just forgets it. Unknown ids raise
        :class:`UnknownInstance`."""
        if self.lost.pop(iid, None) is not None:
            return
        inst = self._instances.pop(iid, None)
        if inst is None:
            raise UnknownInstance(iid)
        await _quietly(inst.context.close(), min(timeout_s, 10.0))  # a dead or hung one goes with Chromium

    async def _op(self, iid: str, name: str, fn: Callable[[_Instance], Awaitable[Any]], timeout_s: float) -> Any:
        inst = self._get(iid)

        async def locked() -> Any:
            async with inst.lock:
                if inst.needs_reset:
                    await self._recover(inst)
                return await fn(inst)
        try:
            return await asyncio.wait_for(locked(), timeout_s)
        except TimeoutError:
            inst.needs_reset = True  # the next call recovers first, unless the background reset did
            self._spawn(self._reset_locked(inst))
            raise OperationTimeout(name, iid, timeout_s) from None
        except PlaywrightError as err:
            await asyncio.sleep(0)  # let a pending 'disconnected' / 'crash' event land
            if inst.lost or not self.connected or inst.page.is_closed() or inst.generation != self._generation:
                self._lose(inst, inst.lost or f"the browser went away ({first_line(err)})")
            raise

    async def reset(self, iid: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
        """Make a stuck instance usable again; returns what it took (``"answered"``,
        ``"script stopped"`` or ``"context replaced"``)."""
        inst = self._get(iid)
        return await asyncio.wait_for(self._reset_locked(inst), timeout_s)

    async def _reset_locked(self, inst: _Instance) -> str:
        async with inst.lock:
            return await self._recover(inst)

    async def _recover(self, inst: _Instance) -> str:
        inst.needs_reset = False
        if await self._answers(inst, STEP_TIMEOUT_S / 4):
            await self._bounded(inst.cdp.send("Page.stopLoading"))
            return "answered"
        await self._bounded(inst.cdp.send("Runtime.terminateExecution"))
        await self._bounded(inst.cdp.send("Page.stopLoading"))
        if await self._answers(inst):
            return "script stopped"
        old = inst.context
        await asyncio.wait_for(self._open(inst), 3 * STEP_TIMEOUT_S)
        self._spawn(old.close())
        return "context replaced"

    async def _answers(self, inst: _Instance, limit_s: float = STEP_TIMEOUT_S / 2) -> bool:
        try:
            return await asyncio.wait_for(inst.page.evaluate("1"), limit_s) == 1
        except (TimeoutError, PlaywrightError):
            return False

    @staticmethod
    async def _bounded(awaitable: Awaitable[Any]) -> None:
        await _quietly(awaitable, STEP_TIMEOUT_S / 2)

    # -- operations --------------------------------------------------------------------------
    async def navigate(self, iid: str, url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Open ``url`` and return within ``timeout_s``: a load that does not finish in time is
        stopped and reported. Returns ``{"url", "title", "ok", "error", "status"}``."""
        load_s = split_bound(timeout_s)

        async def run(inst: _Instance) -> dict[str, Any]:
            error, status = None, None
            try:
                response = await inst.page.goto(url, wait_until="load", timeout=load_s * 1000)
                status = response.status if response is not None else None
                if status is not None and status >= 400:
                    error = f"HTTP {status} from {url}"
            except PlaywrightTimeout:
                await self._bounded(inst.cdp.send("Page.stopLoading"))
                error = f"{url} did not finish loading within {load_s:.3g}s; loading stopped"
            except PlaywrightError as err:
                if inst.page.is_closed() or not self.connected:
                    raise
                error = f"could not open {url}: {first_line(err)}"
            meta = await self._page_meta(inst)
            return {**meta, "ok": error is None, "error": error, "status": status}
        return await self._op(iid, "navigate", run, timeout_s)

    async def _page_meta(self, inst: _Instance) -> dict[str, str]:
        try:
            title = await asyncio.wait_for(inst.page.title(), STEP_TIMEOUT_S)
        except TimeoutError:
            title = ""
        return {"url": inst.page.url, "title": title}

    async def metadata(self, iid: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, int]:
        """The screen (viewport) size: ``{"width", "height"}``."""
        async def run(inst: _Instance) -> dict[str, int]:
            size = inst.page.viewport_size or {"width": self.viewport[0], "height": self.viewport[1]}
            return {"width": size["width"], "height": size["height"]}
        return await self._op(iid, "metadata", run, timeout_s)

    async def page_metadata(self, iid: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, str]:
        """The page's ``{"url", "title"}``."""
        return await self._op(iid, "page_metadata", self._page_meta, timeout_s)

    async def screenshot(self, iid: str, marks: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> bytes:
        """A PNG of the viewport; with ``marks`` the numbered boxes of the marked elements."""
        return await self._op(iid, "screenshot", lambda inst: self._settled_read(
            inst, lambda: take_screenshot(inst.page, marks, timeout_s), timeout_s), timeout_s)

    async def ac_tree(self, iid: str, mode: str = "set_of_marks", rich: bool = False,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """The observation text and the marked elements: ``{"text", "elements": [{"id", "role",
        "name", "box": [x, y, w, h]}]}``; ``rich`` renders Chromium's full AX tree."""
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        return await self._op(iid, "ac_tree", lambda inst: self._settled_read(
            inst, lambda: read_page(inst.page, inst.cdp, mode, rich), timeout_s), timeout_s)

    async def _settled_read(self, inst: _Instance, read: Callable[[], Awaitable[Any]], timeout_s: float) -> Any:
        """``read()``, once more after the load if a late navigation (a script's timer, a
        redirect) replaced the document under it."""
        try:
            return await read()
        except PlaywrightError as err:
            if "destroyed" not in str(err) and "navigat" not in str(err).lower():
                raise
        await _quietly(inst.page.wait_for_load_state("load", timeout=timeout_s * 500), timeout_s / 2)
        return await read()

    async def execute(self, iid: str, action: dict[str, Any] | Action,
                      timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
        """Perform one action within ``timeout_s`` (a navigation it starts included); returns
        ``{"ok", "error", "url", "title"}``. A missing mark, a point
        outside the viewport or an element that takes no text give ``ok: False`` with the reason."""
        try:
            act = action if isinstance(action, Action) else Action.from_dict(action)
        except ValueError as err:
            inst = self._get(iid)
            return {"ok": False, "error": str(err), **(await self._page_meta(inst))}

        wait_s = split_bound(timeout_s)

        async def run(inst: _Instance) -> dict[str, Any]:
            deadline = time.monotonic() + wait_s
            for event in (inst.nav_started, inst.nav_ended, inst.committed, inst.loaded):
                event.clear()
            try:
                error = await perform_action(inst.page, inst.cdp, act, wait_s, self.viewport, self._bounded)
            except PlaywrightTimeout as err:
                error = f"{act.type} did not complete: {first_line(err)}"
                if not await self._answers(inst, STEP_TIMEOUT_S / 4):
                    error += f"; the page stopped answering ({await self._recover(inst)})"
            except PlaywrightError as err:
                if inst.page.is_closed() or not self.connected:
                    raise
                error = f"{act.type} failed: {first_line(err)}"
            if error is None and act.type in ("click", "type"):
                error = await self._settle(inst, deadline)
            return {"ok": error is None, "error": error, **(await self._page_meta(inst))}
        return await self._op(iid, "execute", run, timeout_s)

    async def _settle(self, inst: _Instance, deadline: float) -> str | None:
        """Wait for a navigation the action started (if one starts within the settle window)."""
        async def first(events: list[asyncio.Event], limit: float) -> None:
            waits = [asyncio.ensure_future(e.wait()) for e in events]
            try:
                await asyncio.wait(waits, timeout=max(0.0, limit), return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        await first([inst.nav_started, inst.committed], min(self.settle_window_s, deadline - time.monotonic()))
        if not inst.nav_started.is_set():
            return None  # nothing, or a same-document navigation
        await first([inst.committed, inst.nav_ended], deadline - time.monotonic())
        if not inst.committed.is_set():
            await first([inst.committed], min(0.2, deadline - time.monotonic()))
        if inst.committed.is_set() and not inst.loaded.is_set():
            await first([inst.loaded], deadline - time.monotonic())
        if inst.nav_ended.is_set() and not inst.committed.is_set():
            return None  # the request ended without a new document (204, download, failure)
        if not inst.loaded.is_set():
            await self._bounded(inst.cdp.send("Page.stopLoading"))
            return "the page the action opened did not finish loading in time; loading stopped"
        return None
