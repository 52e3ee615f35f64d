"""BrowserHost against real Chromium and the local test pages (tests/engines/web/pages.py).

One Chromium for the module; each test works in its own instance. Skips without Playwright or
a Chromium binary (scripts/setup_system_browser.sh installs both).
"""

from __future__ import annotations

import asyncio
import os
import signal
import struct
import time

import pytest

from .pages import PageServer

pytest.importorskip("playwright.async_api", reason="playwright is not installed (scripts/setup_system_browser.sh)")

from rlinf.engines.web.browser import (
    BrowserHost,
    BrowserStartError,
    InstanceLost,
    OperationTimeout,
    UnknownInstance,
    find_chromium,
)

try:
    CHROMIUM = find_chromium()
except BrowserStartError as err:
    pytest.skip(str(err), allow_module_level=True)


@pytest.fixture(scope="module")
def pages():
    with PageServer() as server:
        yield server


@pytest.fixture(scope="module")
def host():
    loop = asyncio.new_event_loop()
    browser_host = BrowserHost(executable_path=CHROMIUM)
    loop.run_until_complete(browser_host.start())
    browser_host.loop = loop  # type: ignore[attr-defined]
    yield browser_host
    loop.run_until_complete(browser_host.close())
    loop.close()


def run(host: BrowserHost, body, limit_s: float = 30.0):
    """Run ``body(host, iid)`` in a fresh instance on the module's loop; release it after."""
    async def wrapped():
        iid = await host.allocate()
        try:
            return await body(host, iid)
        finally:
            try:
                await host.release(iid)
            except (UnknownInstance, InstanceLost):
                pass
    return host.loop.run_until_complete(asyncio.wait_for(wrapped(), limit_s))


def mark_of(tree: dict, name: str) -> int:
    return next(e["id"] for e in tree["elements"] if e["name"] == name)


def test_set_of_marks_lists_the_interactive_elements(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/"), 10)
        return await h.ac_tree(iid, "set_of_marks", False)
    tree = run(host, body)
    lines = tree["text"].splitlines()
    assert lines[0] == 'heading "Welcome Home"'
    for line in ('[1] link "Go to page A"', '[2] link "Go to page B"', '[3] link "Search form"',
                 '[4] button "Say hello"', '[5] checkbox "I agree" checked=false', "Not clicked"):
        assert line in lines
    assert "Hidden link" not in tree["text"]  # display:none is not offered
    assert lines.count('[5] checkbox "I agree" checked=false') == 1 and "I agree" not in lines  # label once
    assert [(e["id"], e["role"]) for e in tree["elements"]] == [
        (1, "link"), (2, "link"), (3, "link"), (4, "button"), (5, "checkbox")]
    x, y, w, h = tree["elements"][0]["box"]
    assert 0 <= x < 1280 and 0 <= y < 720 and w > 0 and h > 0


def test_clicking_a_mark_navigates_and_goback_returns(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/"), 10)
        tree = await h.ac_tree(iid, "set_of_marks", False)
        clicked = await h.execute(iid, {"type": "click", "id": mark_of(tree, "Go to page B")}, 10)
        back = await h.execute(iid, {"type": "goback"}, 10)
        return clicked, back
    clicked, back = run(host, body)
    assert clicked == {"ok": True, "error": None, "url": pages.url("/b"), "title": "Page B"}
    assert back["ok"] and back["url"] == pages.url("/") and back["title"] == "Test Home"


def test_click_without_navigation_and_missing_mark(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/"), 10)
        tree = await h.ac_tree(iid, "set_of_marks", False)
        done = await h.execute(iid, {"type": "click", "id": mark_of(tree, "Say hello")}, 10)
        after = await h.ac_tree(iid, "set_of_marks", False)
        missing = await h.execute(iid, {"type": "click", "id": 99}, 10)
        first_page = await h.execute(iid, {"type": "goback"}, 10)
        return done, after, missing, first_page
    done, after, missing, first_page = run(host, body)
    assert done["ok"] and done["url"] == pages.url("/")
    assert "Clicked!" in after["text"].splitlines() and "Not clicked" not in after["text"]
    assert missing["ok"] is False and "no element marked [99]" in missing["error"]
    assert first_page["ok"] is False and "no previous page" in first_page["error"]


def test_typing_with_enter_submits_the_form(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/form"), 10)
        tree = await h.ac_tree(iid, "set_of_marks", False)
        not_text = await h.execute(iid, {"type": "type", "id": mark_of(tree, "Find"), "text": "x"}, 10)
        typed = await h.execute(iid, {"type": "type", "id": mark_of(tree, "Search"), "text": "blue kettle",
                                      "submit": True}, 10)
        return tree, not_text, typed, await h.ac_tree(iid, "set_of_marks", False)
    tree, not_text, typed, result = run(host, body)
    assert '[1] textbox "Search" value=""' in tree["text"].splitlines()
    assert not_text["ok"] is False and "does not take text" in not_text["error"]
    assert typed["ok"] and typed["title"] == "Results" and typed["url"].endswith("/result?q=blue+kettle")
    assert "You searched for: blue kettle" in result["text"]


def test_scroll_moves_the_viewport(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/long"), 10)
        top = await h.ac_tree(iid, "set_of_marks", False)
        await h.execute(iid, {"type": "scroll", "direction": "down"}, 10)
        down = await h.ac_tree(iid, "set_of_marks", False)
        await h.execute(iid, {"type": "scroll", "direction": "up"}, 10)
        return top, down, await h.ac_tree(iid, "set_of_marks", False)
    top, down, up = run(host, body)
    assert "Row number 0" in top["text"] and "(more above)" not in top["text"] and "(more below)" in top["text"]
    assert "Row number 0" not in down["text"] and "(more above)" in down["text"]
    rows = [int(line.split()[-1]) for line in down["text"].splitlines() if line.startswith("Row number")]
    assert rows and min(rows) >= 5  # 80 % of a 720 px viewport past 76 px rows
    assert up["text"] == top["text"]


def test_coordinates_mode_clicks_and_types_at_box_centres(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/far"), 10)
        tree = await h.ac_tree(iid, "coordinates", False)
        outside = await h.execute(iid, {"type": "click", "x": 5000, "y": 10}, 10)
        clicked = await h.execute(iid, {"type": "click", "x": 650, "y": 420}, 10)
        await h.navigate(iid, pages.url("/form"), 10)
        form = await h.ac_tree(iid, "coordinates", False)
        x, y, w, hh = next(e["box"] for e in form["elements"] if e["role"] == "textbox")
        typed = await h.execute(iid, {"type": "type", "x": x + w // 2, "y": y + hh // 2, "text": "red mug",
                                      "submit": True}, 10)
        return tree, outside, clicked, typed
    tree, outside, clicked, typed = run(host, body)
    assert tree["text"].splitlines() == ['button "Jump to B" @(650,420)']
    assert "[" not in tree["text"]  # no marks in coordinates mode
    assert outside["ok"] is False and "outside the 1280x720 viewport" in outside["error"]
    assert clicked["ok"] and clicked["url"] == pages.url("/b")
    assert typed["ok"] and typed["url"].endswith("/result?q=red+mug")


def test_rich_tree_is_fuller_and_keeps_marks(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/"), 10)
        return await h.ac_tree(iid, "set_of_marks", False), await h.ac_tree(iid, "set_of_marks", True)
    plain, rich = run(host, body)
    assert len(rich["text"].splitlines()) > len(plain["text"].splitlines())
    assert rich["text"].startswith('RootWebArea "Test Home"')
    assert '[1] link "Go to page A"' in rich["text"] and "listitem" in rich["text"]
    assert rich["elements"] == plain["elements"]


def test_screenshot_is_a_viewport_png_and_metadata(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/"), 10)
        return (await h.screenshot(iid, False), await h.screenshot(iid, True), await h.metadata(iid),
                await h.page_metadata(iid), await h.ac_tree(iid, "set_of_marks", False))
    plain, marked, meta, page_meta, tree = run(host, body)
    for png in (plain, marked):
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", png[16:24]) == (1280, 720)  # IHDR width, height
    assert plain != marked  # the marks are drawn ...
    assert ("__rlinf_overlay" not in tree["text"]
            and tree["text"].startswith('heading "Welcome Home"'))  # ... and removed
    assert meta == {"width": 1280, "height": 720}
    assert page_meta == {"url": pages.url("/"), "title": "Test Home"}


def test_hung_load_is_stopped_within_the_timeout(host, pages):
    async def body(h, iid):
        start = time.monotonic()
        hung = await h.navigate(iid, pages.url("/hang"), 2.0)
        took = time.monotonic() - start
        tree = await h.ac_tree(iid, "set_of_marks", False)
        return hung, took, tree, await h.navigate(iid, pages.url("/a"), 10)
    hung, took, tree, after = run(host, body)
    assert took < 2.0 + 2.0
    assert hung["ok"] is False and "did not finish loading" in hung["error"] and hung["title"] == "Hanging page"
    assert '[1] link "Escape link"' in tree["text"]  # what did arrive is usable
    assert after["ok"] and after["title"] == "Page A"


@pytest.mark.slow
def test_script_loop_times_out_and_the_instance_recovers(host, pages):
    async def body(h, iid):
        await h.navigate(iid, pages.url("/spin"), 10)
        await asyncio.sleep(0.3)  # the loop starts 100 ms after load
        start = time.monotonic()
        with pytest.raises(OperationTimeout, match="ac_tree .* exceeded 1.5s"):
            await h.ac_tree(iid, "set_of_marks", False, timeout_s=1.5)
        took = time.monotonic() - start
        tree = await h.ac_tree(iid, "set_of_marks", False, timeout_s=10.0)
        await h.navigate(iid, pages.url("/freeze"), 10)
        await h.ac_tree(iid, "set_of_marks", False)
        try:  # the click never returns: reported, or cut by the bound; either way the page is reset
            frozen = await h.execute(iid, {"type": "click", "id": 1}, 2.5)
        except OperationTimeout as err:
            frozen = {"ok": False, "error": str(err)}
        return took, tree, frozen, await h.navigate(iid, pages.url("/a"), 10)
    took, tree, frozen, after = run(host, body, limit_s=40.0)
    assert took < 2.0
    assert tree["text"] == 'heading "Spin"'
    assert frozen["ok"] is False
    assert after["ok"] and after["title"] == "Page A"


def test_unknown_instance(host):
    with pytest.raises(UnknownInstance, match="unknown instance id 'nope'"):
        host.loop.run_until_complete(host.page_metadata("nope"))


def test_killed_browser_loses_instances_and_the_next_allocate_restarts_it(host, pages):
    """Last in the module: it kills the module's Chromium."""
    async def body():
        first, second = await host.allocate(), await host.allocate()
        await host.navigate(first, pages.url("/a"), 10)
        old_pid, restarts = host.browser_pid, host.restarts
        os.kill(old_pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while host.connected and time.monotonic() < deadline:  # the driver notices the closed pipe
            await asyncio.sleep(0.05)
        for iid in (first, second):
            with pytest.raises(InstanceLost, match="lost"):
                await asyncio.wait_for(host.page_metadata(iid), 10)
        with pytest.raises(InstanceLost):  # and it stays lost
            await host.navigate(first, pages.url("/"), 5)
        await host.release(first)
        await host.release(second)
        start = time.monotonic()
        fresh = await host.allocate()
        took = time.monotonic() - start
        page = await host.navigate(fresh, pages.url("/b"), 10)
        await host.release(fresh)
        return old_pid, restarts, took, page
    old_pid, restarts, took, page = host.loop.run_until_complete(asyncio.wait_for(body(), 60))
    assert host.restarts == restarts + 1 and host.browser_pid not in (None, old_pid)
    assert took < 15.0
    assert page["ok"] and page["title"] == "Page B"
    assert host.lost == {}


def test_chromium_sends_the_site_token_to_the_site_origin_only(pages):
    """``origin_tokens``: the shipped sites (which answer 401 without the token) work through
    Chromium, cookies and a POST's 303 included; another origin, and the same server under another
    name, never see the token."""
    from rlinf.envs.web_sites import SiteServer, shop_catalog

    product = shop_catalog(0).products[2]
    with SiteServer(seed=0) as site:
        async def body():
            host = BrowserHost(executable_path=CHROMIUM, origin_tokens={site.base_url: site.token})
            await host.start()
            try:
                iid = await host.allocate()
                page = await host.navigate(iid, site.base_url + f"/shop/product/{product.id}", timeout_s=10)
                tree = await host.ac_tree(iid, "set_of_marks", False, timeout_s=10)
                added = await host.execute(iid, {"type": "click", "id": mark_of(tree, "Add to cart")}, timeout_s=10)
                await host.navigate(iid, site.base_url + "/wiki/", timeout_s=10)
                await host.navigate(iid, site.base_url + "/shop/cart", timeout_s=10)
                cart = (await host.ac_tree(iid, "set_of_marks", False, timeout_s=10))["text"]
                before = len(pages.authorization_seen)
                other = await host.navigate(iid, pages.url("/a"), timeout_s=10)
                alias = await host.navigate(iid, site.base_url.replace("127.0.0.1", "localhost") + "/shop/",
                                            timeout_s=10)
                return page, added, cart, other, alias, pages.authorization_seen[before:]
            finally:
                await host.close()
        page, added, cart, other, alias, seen = asyncio.run(asyncio.wait_for(body(), 60))
    assert page["status"] == 200 and page["title"] == f"{product.name} | Shop"
    assert added["ok"] and added["url"].endswith("/shop/cart")  # the POST and its 303 carried the token
    assert product.name in cart  # the cart cookie came back on a later request
    assert other["ok"] and other["title"] == "Page A" and seen == [None]  # no token to another origin
    assert alias["status"] == 401  # the same server under another name is another origin: no token
