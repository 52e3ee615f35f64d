"""What an action does to a page (the ``execute`` operation's core): click or type by mark or at
a point, scroll, go back; ``answer`` touches nothing. Used by :class:`~rlinf.engines.web.browser.BrowserHost`.

Errors a page can cause (no such mark, a point outside the viewport, an element that takes no
text, no previous page) come back as one line; the caller bounds the whole call in time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rlinf.engines.web.actions import Action

try:
    from playwright.async_api import TimeoutError as PlaywrightTimeout
except ImportError:  # pragma: no cover - exercised only without playwright
    PlaywrightTimeout = RuntimeError  # type: ignore[misc,assignment]

#: bound of Playwright's actionability waits (visible, enabled, not covered) in a click / fill
ACTION_WAIT_S = 5.0
#: scroll distance, as a fraction of the viewport height
SCROLL_FRACTION = 0.8


async def perform_action(page, cdp, act: Action, timeout_s: float, viewport: tuple[int, int],
                         bounded: Callable[[Awaitable[Any]], Awaitable[None]]) -> str | None:
    """Do ``act`` on ``page``; None when done, else one line saying why it could not be."""
    ms = min(timeout_s, ACTION_WAIT_S) * 1000
    if act.type in ("click", "type"):
        if act.id is not None:
            marked = page.locator(f'[data-rlinf-mark="{act.id}"]')
            target = marked.first
            if await marked.count() == 0:
                return f"no element marked [{act.id}] on this page (marks come from the last ac_tree)"
            if act.type == "click":
                await target.click(timeout=ms)
                return None
            kind = await target.evaluate("e => e.isContentEditable ? 'TEXT' : e.tagName")
            if kind == "SELECT":
                await target.select_option(label=act.text or "", timeout=ms)
            elif kind in ("TEXT", "INPUT", "TEXTAREA"):
                await target.fill(act.text or "", timeout=ms)
            else:
                return f"element [{act.id}] does not take text"
            if act.submit:
                await target.press("Enter", timeout=ms)
            return None
        width, height = viewport
        if not (0 <= act.x < width and 0 <= act.y < height):
            return f"point ({act.x}, {act.y}) is outside the {width}x{height} viewport"
        await page.mouse.click(act.x, act.y)
        if act.type == "type":
            editable = await page.evaluate(
                "() => { const e = document.activeElement; return !!e && (e.isContentEditable || "
                "['INPUT', 'TEXTAREA'].includes(e.tagName)); }")
            if not editable:
                return f"no text field at ({act.x}, {act.y})"
            await page.keyboard.press("ControlOrMeta+A")
            await page.keyboard.insert_text(act.text or "")
            if act.submit:
                await page.keyboard.press("Enter")
        return None
    if act.type == "scroll":
        sign = -1 if act.direction == "up" else 1
        await page.evaluate(f"() => window.scrollBy(0, {sign} * Math.round(window.innerHeight * {SCROLL_FRACTION}))")
        return None
    if act.type == "goback":
        history = await cdp.send("Page.getNavigationHistory")
        index = history.get("currentIndex", 0)
        if index <= 0 or history["entries"][index - 1].get("url") == "about:blank":
            return "there is no previous page"
        try:
            await page.go_back(wait_until="load", timeout=timeout_s * 1000)
        except PlaywrightTimeout:
            await bounded(cdp.send("Page.stopLoading"))
            return f"the previous page did not finish loading within {timeout_s:g}s; loading stopped"
        return None
    if act.type == "answer":
        return None
    return f"a {act.type!r} action cannot be executed" + (f": {act.error}" if act.error else "")
