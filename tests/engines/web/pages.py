"""A tiny local HTTP server (port 0, its own thread) serving the test pages of the browser tests.

Pages: ``/`` (heading, paragraph, links, a button, a checkbox), ``/a`` and ``/b`` (plain pages),
``/form`` (a search box with a submit button, GET to ``/result?q=...``), ``/result``,
``/long`` (a page several viewports tall), ``/hang`` (its image never arrives, so ``load``
never fires), ``/spin`` (a JS infinite loop starting 100 ms after load), ``/freeze`` (a button
whose click runs a JS infinite loop) and ``/far`` (a button placed at a known point).

Example::

    with PageServer() as pages:              # doctest: +SKIP
        print(pages.url("/form"))
"""

from __future__ import annotations

import html
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

INDEX = """<!doctype html><html><head><title>Test Home</title></head><body>
<h1>Welcome Home</h1>
<p>This is the test home page.</p>
<ul><li><a href="/a">Go to page A</a></li><li><a href="/b">Go to page B</a></li>
<li><a href="/form">Search form</a></li></ul>
<button id="hello" onclick="document.getElementById('out').textContent='Clicked!'">Say hello</button>
<p id="out">Not clicked</p>
<label><input type="checkbox" id="agree"> I agree</label>
<div style="display:none"><a href="/hidden">Hidden link</a></div>
</body></html>"""

PLAIN = """<!doctype html><html><head><title>{title}</title></head><body>
<h1>{title}</h1><p>You are on {title}.</p><a href="/">Back home</a></body></html>"""

FORM = """<!doctype html><html><head><title>Search</title></head><body>
<h1>Search the catalog</h1>
<form action="/result" method="get">
<input type="text" name="q" aria-label="Search" placeholder="Type here">
<button type="submit">Find</button></form></body></html>"""

RESULT = """<!doctype html><html><head><title>Results</title></head><body>
<h1>Results</h1><p>You searched for: {q}</p></body></html>"""

LONG = """<!doctype html><html><head><title>Long page</title></head><body>
<h1>Long page</h1>{rows}<a href="/a">Link at the bottom</a></body></html>"""

HANG = """<!doctype html><html><head><title>Hanging page</title></head><body>
<h1>Still loading</h1><p>The picture below never arrives.</p>
<img src="/slow.png" alt="never"><a href="/a">Escape link</a></body></html>"""

SPIN = """<!doctype html><html><head><title>Spinning page</title></head><body>
<h1>Spin</h1><script>window.addEventListener('load', () =>
  setTimeout(() => { while (true) {} }, 100));</script></body></html>"""

FREEZE = """<!doctype html><html><head><title>Freeze page</title></head><body>
<h1>Freeze</h1><button onclick="while (true) {}">Freeze now</button></body></html>"""

FAR = """<!doctype html><html><head><title>Far button</title></head><body style="margin:0">
<button style="position:absolute; left:600px; top:400px; width:100px; height:40px"
 onclick="location.href='/b'">Jump to B</button></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        """Quiet: the tests read the pages, not the log."""

    def _send(self, body: str, status: int = 200, content_type: str = "text/html; charset=utf-8") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - the base's name
        self.server.authorization_seen.append(self.headers.get("Authorization"))
        parsed = urlparse(self.path)
        path = parsed.path
        if path == "/":
            self._send(INDEX)
        elif path in ("/a", "/b"):
            self._send(PLAIN.format(title="Page " + path[1:].upper()))
        elif path == "/form":
            self._send(FORM)
        elif path == "/result":
            query = parse_qs(parsed.query).get("q", [""])[0]
            self._send(RESULT.format(q=html.escape(query)))
        elif path == "/long":
            rows = "".join(f'<p style="height:60px">Row number {i}</p>' for i in range(80))
            self._send(LONG.format(rows=rows))
        elif path == "/hang":
            self._send(HANG)
        elif path == "/slow.png":
            self.server.stop.wait(60.0)  # never answers while the test runs
        elif path == "/spin":
            self._send(SPIN)
        elif path == "/freeze":
            self._send(FREEZE)
        elif path == "/far":
            self._send(FAR)
        else:
            self._send("<html><head><title>Not found</title></head><body>404</body></html>", 404)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    stop: threading.Event
    authorization_seen: list  # the Authorization header of each GET (None: none sent)


class PageServer:
    """The test pages on ``127.0.0.1:<free port>`` while the ``with`` block lasts."""

    def __init__(self) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stop = threading.Event()
        self._server.authorization_seen = []
        self.authorization_seen = self._server.authorization_seen
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="test-pages", daemon=True)

    def url(self, path: str) -> str:
        """The absolute URL of a test page."""
        return self.base_url + path

    def __enter__(self) -> PageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)


def wait_until(predicate, timeout_s: float = 5.0, every_s: float = 0.05) -> bool:
    """Poll ``predicate`` until it is true or ``timeout_s`` passes; returns its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = bool(predicate())
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every_s)
