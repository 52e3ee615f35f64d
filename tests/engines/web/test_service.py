"""The browser server (service.py) and its client (client.py) over real HTTP and real Chromium.

Two servers for the module: ``main`` (3 instances, 3 s operation timeout, 1.5 s wait timeout)
and ``short_lived`` (instances recycled after 1.8 s). Tests needing Chromium skip without it.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rlinf.engines.web.client import BrowserClient, InstanceLost, OperationFailed, check_pools, split_for_rank
from rlinf.utils.web_auth import bearer

from .pages import PageServer

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "service-token-" + "7" * 32
AUTH = bearer(TOKEN)


def _chromium_missing() -> str | None:
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (scripts/setup_system_browser.sh)"
    from rlinf.engines.web.browser import BrowserStartError, find_chromium
    try:
        find_chromium()
    except BrowserStartError as err:
        return str(err)
    return None


needs_chromium = pytest.mark.skipif(_chromium_missing() is not None, reason=str(_chromium_missing()))


@pytest.fixture(scope="module")
def pages():
    with PageServer() as server:
        yield server


def _service(**kwargs):
    from rlinf.engines.web.service import start_service_thread
    url, stop = start_service_thread(token=TOKEN, **kwargs)
    return url, stop


@pytest.fixture(scope="module")
def main_url():
    url, stop = _service(server_size=3, operation_timeout=3.0, wait_timeout=1.5)
    yield url
    stop()


@pytest.fixture(scope="module")
def short_lived_url():
    url, stop = _service(server_size=2, operation_timeout=3.0, wait_timeout=1.5,
                         instance_lifetime_max_minutes=0.03)
    yield url
    stop()


def client(url: str, **kwargs) -> BrowserClient:
    kwargs.setdefault("operation_timeout", 3.0)
    kwargs.setdefault("wait_timeout", 1.5)
    kwargs.setdefault("max_retries", 2)
    kwargs.setdefault("backoff_s", 0.1)
    kwargs.setdefault("token", TOKEN)
    return BrowserClient(url, kwargs.pop("http_pools", None), **kwargs)


def run(coro, limit_s: float = 30.0):
    return asyncio.run(asyncio.wait_for(coro, limit_s))


@pytest.mark.slow
@needs_chromium
def test_every_operation_over_http(main_url, pages):
    async def body():
        async with client(main_url) as c:
            iid = await c.allocate()
            nav = await c.navigate(iid, pages.url("/"))
            tree = await c.ac_tree(iid, "set_of_marks", False)
            rich = await c.ac_tree(iid, "coordinates", True)
            png = await c.screenshot(iid, marks=True)
            size, meta = await c.metadata(iid), await c.page_metadata(iid)
            link = next(e["id"] for e in tree["elements"] if e["name"] == "Go to page A")
            done = await c.execute(iid, {"type": "click", "id": link})
            released = await c.release(iid)
            with pytest.raises(OperationFailed, match="release failed: HTTP 404: unknown instance_id"):
                await c.release(iid)  # twice
            return nav, tree, rich, png, size, meta, done, released, await c.stats(), await c.health()
    nav, tree, rich, png, size, meta, done, released, stats, health = run(body())
    assert nav["ok"] and nav["title"] == "Test Home" and nav["status"] == 200
    assert '[1] link "Go to page A"' in tree["text"]
    assert 'link "Go to page A" @(' in rich["text"] and "[1]" not in rich["text"]
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert size == {"width": 1280, "height": 720} and meta["title"] == "Test Home"
    assert done == {"ok": True, "error": None, "url": pages.url("/a"), "title": "Page A"}
    assert released == {"released": True}
    assert stats["live"] == 0 and stats["requests"]["ac_tree"] >= 2
    assert health == {"ok": True, "browser_connected": True}


@needs_chromium
def test_bad_requests_get_one_clear_line(main_url):
    async def body():
        async with httpx.AsyncClient(base_url=main_url, timeout=10, headers=AUTH) as raw:
            iid = (await raw.post("/allocate")).json()["instance_id"]
            answers = [await raw.post("/navigate", content=b"{not json"),
                       await raw.post("/navigate", json={"url": "http://x/"}),
                       await raw.post("/navigate", json={"instance_id": iid, "url": 5}),
                       await raw.post("/ac_tree", json={"instance_id": iid, "mode": "pixels"}),
                       await raw.post("/execute", json={"instance_id": iid, "action": {"type": "hover"}}),
                       await raw.post("/screenshot", json={"instance_id": iid, "marks": "yes"}),
                       await raw.post("/metadata", json={"instance_id": iid, "extra": 1}),
                       await raw.post("/metadata", json={"instance_id": "nope"}),
                       await raw.post("/release", json={"instance_id": "nope"})]
            await raw.post("/release", json={"instance_id": iid})
        async with client(main_url) as c:
            with pytest.raises(OperationFailed, match="HTTP 404: unknown instance_id 'nope'"):
                await c.page_metadata("nope")
            retries = c.retries["page_metadata"]
        return [(a.status_code, a.json()["error"]) for a in answers], retries
    answers, retries = run(body())
    expected = [(400, "request body is not valid JSON"), (400, "field 'instance_id' is missing"),
                (400, "field 'url': expected a URL string, got 5"), (400, "field 'mode': expected set_of_marks"),
                (400, "field action.type: expected one of"), (400, "field 'marks': expected true or false"),
                (400, "unknown field 'extra' for metadata"), (404, "unknown instance_id 'nope'"),
                (404, "unknown instance_id 'nope'")]
    for (status, error), (want_status, want_text) in zip(answers, expected):
        assert status == want_status and want_text in error and "\n" not in error
    assert retries == 0  # 4xx is never retried


@needs_chromium
def test_pool_size_bounds_requests_in_flight(main_url, pages):
    async def body():
        async with client(main_url, http_pools={"navigate": 2}) as c:
            ids = [await c.allocate() for _ in range(3)]
            before = (await c.stats())["peak_in_flight"]["navigate"]
            start = time.monotonic()
            results = await asyncio.gather(*(c.navigate(i, pages.url("/hang"), timeout_s=1.2) for i in ids))
            took = time.monotonic() - start
            stats = await c.stats()
            for iid in ids:
                await c.release(iid)
            return before, results, took, stats
    before, results, took, stats = run(body())
    assert before <= 1
    assert all(r["ok"] is False and "did not finish loading" in r["error"] for r in results)
    assert stats["peak_in_flight"]["navigate"] == 2  # two connections: never three at once
    assert took >= 1.5  # the third waited for a free connection


@needs_chromium
def test_allocate_waits_for_a_slot_then_503(main_url):
    async def body():
        async with client(main_url, max_retries=0) as c:
            ids = [await c.allocate() for _ in range(3)]
            start = time.monotonic()
            with pytest.raises(OperationFailed, match="HTTP 503: no free browser instance within wait_timeout=1.5s"):
                await c.allocate()
            refused_after = time.monotonic() - start
            waiter = asyncio.ensure_future(c.allocate())
            await asyncio.sleep(0.4)
            assert not waiter.done()
            await c.release(ids[0])
            start = time.monotonic()
            reused = await waiter
            served_after = time.monotonic() - start
            stats = await c.stats()
            for iid in ids[1:] + [reused]:
                await c.release(iid)
            return refused_after, served_after, reused, ids, stats
    refused_after, served_after, reused, ids, stats = run(body())
    assert 1.4 <= refused_after < 4.0
    assert served_after < 1.0 and reused not in ids
    assert stats["live"] == 3 and stats["rejected_allocations"] >= 1 and stats["waiting"] == 0


@pytest.mark.slow
@needs_chromium
def test_operation_timeout_gives_504_and_the_client_retries(main_url, pages):
    async def body():
        async with client(main_url, max_retries=2) as c:
            iid = await c.allocate()
            timeouts = (await c.stats())["timeouts"]
            await c.navigate(iid, pages.url("/freeze"))
            await c.ac_tree(iid)
            start = time.monotonic()
            with pytest.raises(OperationFailed, match=r"execute failed: after 3 attempts: HTTP 504: execute did not "
                                                      r"finish within 1s \(operation_timeout=3s\); "
                                                      r"the instance was reset"):
                await c.execute(iid, {"type": "click", "id": 1}, timeout_s=1.0)  # the click never returns
            took = time.monotonic() - start
            after = await c.navigate(iid, pages.url("/a"))  # reset: usable again
            stats = await c.stats()
            await c.release(iid)
            return timeouts, took, after, c.retries["execute"], stats
    timeouts, took, after, retries, stats = run(body())
    assert retries == 2 and stats["timeouts"] == timeouts + 3
    assert 3.0 <= took < 10.0
    assert after["ok"] and after["title"] == "Page A"


@needs_chromium
def test_recycled_instance_answers_410(short_lived_url, pages):
    async def body():
        async with client(short_lived_url) as c:
            iid = await c.allocate()
            first = await c.navigate(iid, pages.url("/a"))
            deadline = time.monotonic() + 10
            while (await c.stats())["recycles"] < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            with pytest.raises(InstanceLost, match="lost: recycled after instance_lifetime_max \\(0.03 minutes\\)"):
                await c.page_metadata(iid)
            async with httpx.AsyncClient(base_url=short_lived_url, headers=AUTH) as raw:
                answer = await raw.post("/page_metadata", json={"instance_id": iid})
            return iid, first, answer, await c.release(iid), await c.stats(), c.retries["page_metadata"]
    iid, first, answer, released, stats, retries = run(body())
    why = "recycled after instance_lifetime_max (0.03 minutes)"
    assert answer.status_code == 410
    assert answer.json() == {"error": f"instance {iid} is gone: {why}", "op": "page_metadata", "reason": why}
    assert first["ok"]
    assert released["released"] is False and "recycled" in released["note"]
    assert stats["recycles"] == 1 and stats["live"] == 0 and retries == 0


def test_client_retries_connection_errors_then_fails():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    async def body():
        async with client(f"http://127.0.0.1:{port}", max_retries=2, backoff_s=0.01) as c:
            with pytest.raises(OperationFailed, match="allocate failed: after 3 attempts: ConnectError"):
                await c.allocate()
            return c.retries["allocate"]
    assert run(body()) == 2


def test_split_for_rank_is_proportional_and_complete():
    pools = {"metadata": 128, "navigate": 128, "allocate": 4, "release": 4, "screenshot": 128,
             "ac_tree": 128, "page_metadata": 128, "execute": 128}
    weights = [1.0, 2.0, 1.0]
    shares = [split_for_rank(pools, 64, weights, rank) for rank in range(3)]
    for op, total in pools.items():
        assert sum(s[0][op] for s in shares) == total
        for rank, (rank_pools, _) in enumerate(shares):
            assert abs(rank_pools[op] - total * weights[rank] / 4) < 1
    assert [s[1] for s in shares] == [16, 32, 16]
    assert [s[0]["allocate"] for s in shares] == [1, 2, 1]
    tiny = [split_for_rank({"allocate": 4}, 3, [10, 1, 1], r) for r in range(3)]
    assert [t[0]["allocate"] for t in tiny] == [2, 1, 1] and [t[1] for t in tiny] == [1, 1, 1]
    with pytest.raises(ValueError, match="rank: expected 0..2, got 3"):
        split_for_rank(pools, 64, weights, 3)
    with pytest.raises(ValueError, match="rank_load_weight"):
        split_for_rank(pools, 64, [0, 0], 0)
    with pytest.raises(ValueError, match="http_pools.exec: unknown operation"):
        check_pools({"exec": 1})
    with pytest.raises(ValueError, match="http_pools.execute: expected an integer >= 1, got 0"):
        check_pools({"execute": 0})


def test_cli_refuses_bad_arguments_in_one_line(capsys):
    from rlinf.engines.web.service import main
    assert main(["--server-size", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: server_size: expected an integer >= 1, got 0"
    assert main(["--viewport", "wide"]) == 2
    assert capsys.readouterr().err.strip() == "error: --viewport: expected WIDTHxHEIGHT like 1280x720, got 'wide'"


@needs_chromium
def test_cli_serves_until_terminated_with_a_token_file_it_made():
    """On loopback without a token the CLI writes a fresh one to a 0600 file, prints the file's
    path (never the token), serves with it, and removes the file when it stops."""
    env = {k: v for k, v in os.environ.items() if k != "RLINF_WEB_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "rlinf.engines.web.service", "--port", "0", "--server-size", "2"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)  # the lines come once Chromium is up
        assert ready, "the service printed nothing within 60 s"
        first, line = proc.stdout.readline(), proc.stdout.readline()
        path = first.split("bearer token written to ", 1)[1].split(" ", 1)[0]
        assert os.stat(path).st_mode & 0o777 == 0o600
        token = Path(path).read_text().strip()
        assert len(token) == 64 and token not in first + line
        assert line.startswith("browser service listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1].strip()
        assert httpx.get(url + "/health", timeout=10).status_code == 401
        assert httpx.get(url + "/health", headers=bearer(token), timeout=10).json() == {
            "ok": True, "browser_connected": True}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert not os.path.exists(path)
        assert token not in proc.stdout.read() + proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_cli_refuses_a_non_loopback_host_without_a_usable_token(capsys, monkeypatch, tmp_path):
    from rlinf.engines.web.service import main

    monkeypatch.delenv("RLINF_WEB_TOKEN", raising=False)
    loose = tmp_path / "loose"
    loose.write_text(TOKEN)
    loose.chmod(0o644)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    cases = [([], "error: --host 0.0.0.0 is not a loopback address: the browser service needs a token there "
                  "(set RLINF_WEB_TOKEN or pass --token-file PATH)"),
             (["--token-file", str(loose)], f"error: --token-file {loose}: other users may read it (mode 0644); "
                                             "chmod 600 it"),
             (["--token-file", str(tmp_path / "nope")], f"error: --token-file {tmp_path / 'nope'}: cannot read it "
                                                          "(FileNotFoundError: No such file or directory)"),
             (["--token-file", str(empty)], f"error: --token-file {empty}: expected at least 16 printable ASCII "
                                             "characters without spaces")]
    for extra, line in cases:
        assert main(["--host", "0.0.0.0", *extra]) == 2
        captured = capsys.readouterr()
        assert captured.err.strip() == line and captured.out == "" and TOKEN not in captured.err
    monkeypatch.setenv("RLINF_WEB_TOKEN", "short")
    assert main(["--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err.strip() == ("error: $RLINF_WEB_TOKEN: expected at least 16 printable ASCII "
                                               "characters without spaces")


def test_where_a_hand_started_server_takes_its_token(tmp_path):
    from rlinf.utils.web_auth import server_token

    good = tmp_path / "token"
    good.write_text(TOKEN + "\n")
    good.chmod(0o600)
    assert server_token("0.0.0.0", str(good), name="x", environ={"RLINF_WEB_TOKEN": "e" * 32}) == (TOKEN, None)
    assert server_token("10.1.2.3", None, name="x", environ={"RLINF_WEB_TOKEN": "e" * 32}) == ("e" * 32, None)
    token, path = server_token("::1", None, name="x", environ={})
    try:
        assert os.stat(path).st_mode & 0o777 == 0o600 and Path(path).read_text() == token + "\n"
    finally:
        os.unlink(path)
    other, other_path = server_token("localhost", None, name="x", environ={})
    os.unlink(other_path)
    assert other != token and other_path != path


def _routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the service's application (read from its router, so an
    endpoint added later is covered), and a path it does not have."""
    from rlinf.engines.web.service import BrowserService

    app = BrowserService(token=TOKEN).app()  # built, not started: no Chromium
    routes = sorted({(r.method, r.resource.canonical) for r in app.router.routes()})
    return routes + [("GET", "/no-such-endpoint"), ("POST", "/no-such-endpoint"), ("DELETE", "/allocate")]


@needs_chromium
def test_every_endpoint_answers_401_without_the_token(main_url):
    from rlinf.engines.web.client import OPERATIONS

    routes = _routes()
    assert {path for _, path in routes} >= {f"/{op}" for op in OPERATIONS} | {"/health", "/stats"}
    wrong = [{}, bearer("not-the-token-" + "0" * 32), {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"},
             bearer(TOKEN + "x"), bearer(TOKEN[:-1])]

    async def body():
        async with httpx.AsyncClient(base_url=main_url, timeout=10) as raw:
            before = (await raw.get("/stats", headers=AUTH)).json()
            answers = [(method, path, await raw.request(method, path, headers=headers,
                                                        json={} if method == "POST" else None))
                       for headers in wrong for method, path in routes]
            after = (await raw.get("/stats", headers=AUTH)).json()
        async with client(main_url, token="not-the-token-" + "0" * 32) as c:
            with pytest.raises(OperationFailed, match="allocate failed: HTTP 401: missing or wrong bearer token"):
                await c.allocate()
            retries = c.retries["allocate"]
        return before, answers, after, retries
    before, answers, after, retries = run(body())
    assert len(answers) == len(wrong) * len(routes)
    for method, path, answer in answers:
        assert answer.status_code == 401, (method, path, answer.status_code)
        assert answer.headers["www-authenticate"] == "Bearer" and TOKEN not in answer.text
        if method != "HEAD":
            assert answer.json() == {"error": "missing or wrong bearer token (send Authorization: Bearer <token>)"}
    # nothing of those requests was processed: no allocation, no request counted
    assert after["requests"] == {**before["requests"]} and after["live"] == before["live"] == 0
    assert retries == 0  # a 401 is never retried


@needs_chromium
def test_lost_instance_answers_410_and_allocate_restarts_the_browser(main_url, pages):
    """Last of the main server's tests: it kills that server's Chromium."""
    async def body():
        async with client(main_url) as c:
            iid = await c.allocate()
            await c.navigate(iid, pages.url("/a"))
            before = await c.stats()
            os.kill(before["browser_pid"], signal.SIGKILL)
            deadline = time.monotonic() + 10
            while (await c.health())["browser_connected"] and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            with pytest.raises(InstanceLost, match="lost: the browser process exited"):
                await c.page_metadata(iid)
            released = await c.release(iid)
            fresh = await c.allocate()
            page = await c.navigate(fresh, pages.url("/b"))
            after = await c.stats()
            await c.release(fresh)
            return before, released, page, after, c.retries["page_metadata"]
    before, released, page, after, retries = run(body())
    assert released == {"released": False, "note": "the browser process exited"}
    assert page["ok"] and page["title"] == "Page B"
    assert after["lost"] == before["lost"] + 1 and after["browser_restarts"] == before["browser_restarts"] + 1
    assert after["browser_pid"] != before["browser_pid"] and retries == 0
