"""The site server: one real HTTP server (stdlib, a thread per connection) for all shipped sites.

Paths: ``/`` (a list of the sites), ``/shop/``, ``/wiki/``, ``/forms/`` and the fault routes under
``/_test/``. Every page is a pure function of the seed and the request, so two servers started
with the same seed serve byte-identical pages. Links are root-relative (``/shop/product/3``), so
the server works at any host and port.

Every request, whatever its method or path, carries ``Authorization: Bearer <token>``
(:mod:`rlinf.utils.web_auth`); one without it, or with a wrong token, is answered 401 and its
connection closed before anything else of it is read (body, cookies, path). In a run the browsers
of the same env rank send the token (the browser host's ``origin_tokens``); the server binds
127.0.0.1 there. ``open_access=True`` drops the check, on a loopback address only, for a person
browsing the sites by hand.

The server speaks HTTP/1.1 with keep-alive; an idle connection is closed after
:data:`IDLE_TIMEOUT_S`. ``stop()`` closes the listening socket and every open connection, and
wakes every handler that is waiting (``/_test/hang``, ``/_test/slow``), so it never hangs.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from http.cookies import CookieError, SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from rlinf.envs.web_sites.catalog import shop_catalog, wiki_catalog
from rlinf.envs.web_sites.faults import fault_response
from rlinf.envs.web_sites.forms import FormsSite
from rlinf.envs.web_sites.pages import Request, Response, link_list, not_found, page
from rlinf.envs.web_sites.shop import ShopSite
from rlinf.envs.web_sites.wiki import WikiSite
from rlinf.utils.web_auth import UNAUTHORIZED, authorized, check_token, is_loopback, new_token

logger = logging.getLogger(__name__)
IDLE_TIMEOUT_S = 30.0
MAX_BODY = 64 * 1024
#: how often a waiting handler checks its client and the server's stop flag
POLL_S = 0.1


class SiteApp:
    """Routes a request to the site that owns its first path segment (no sockets here).

    Example:
        >>> app = SiteApp(seed=0)
        >>> app.dispatch(Request("GET", "/shop/")).status, app.dispatch(Request("GET", "/nope")).status
        (200, 404)
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        wiki = wiki_catalog(seed)
        self.sites = {"shop": ShopSite(shop_catalog(seed)), "wiki": WikiSite(wiki), "forms": FormsSite(wiki)}

    def dispatch(self, request: Request, wait: Callable[[float], bool] = lambda seconds: True) -> Response | None:
        """The response to ``request`` (its path is the full path, ``/shop/...``); None: send nothing.

        ``wait(seconds) -> bool`` sleeps for the fault routes and says whether to go on.
        """
        head, _, rest = request.path.lstrip("/").partition("/")
        sub = Request(request.method, "/" + rest, request.query, request.form, request.cookies)
        if head == "":
            sites = [("/shop/", "Shop"), ("/wiki/", "Wiki"), ("/forms/", "Sign-up forms")]
            body = "<h1>Sites</h1>" + link_list(sites)
            return Response(200, page("Site index", body))
        if head in self.sites:
            return self.sites[head].handle(sub)
        if head == "_test":
            return fault_response(sub, wait)
        return not_found(f"No page at {request.path}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() wakes handlers itself; never join them

    def __init__(self, address: tuple[str, int], app: SiteApp, token: str | None) -> None:
        self.app, self.token = app, token
        self.stopping = threading.Event()
        self.connections: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    timeout = IDLE_TIMEOUT_S
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.lock:
            self.server.connections.discard(self.connection)
        try:
            super().finish()
        except OSError:
            pass

    def parse_request(self) -> bool:
        """The stdlib's parsing of the request line and headers, then the bearer check: a request
        that fails it is answered 401 and goes no further (no method handler runs)."""
        return super().parse_request() and self._authenticated()

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue``: no ``100 Continue`` (the body) without the token."""
        return self._authenticated() and super().handle_expect_100()

    def _authenticated(self) -> bool:
        token = self.server.token
        if token is None or authorized(self.headers.get("Authorization"), token):
            return True
        data = (UNAUTHORIZED + "\n").encode()
        self.close_connection = True  # the body (if any) is never read
        try:
            self.send_response(401)
            self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            pass
        return False

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (stdlib signature)
        logger.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        self._serve("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def _client_waits(self, seconds: float) -> bool:
        """Sleeps up to ``seconds``; False at once if the client hung up or the server stops."""
        remaining = seconds
        while remaining > 0:
            if self.server.stopping.is_set():
                return False
            step = min(POLL_S, remaining)
            try:
                readable, _, _ = select.select([self.connection], [], [], step)
                if readable and not self.connection.recv(1, socket.MSG_PEEK):
                    return False  # orderly close by the client
                if readable:
                    time.sleep(step)  # pipelined bytes: not a hang-up; do not spin
            except (OSError, ValueError):
                return False
            remaining -= step
        return not self.server.stopping.is_set()

    def _request(self, method: str) -> Request | Response:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        form: dict[str, str] = {}
        if method == "POST":
            raw_len = self.headers.get("Content-Length", "0").strip()
            if not raw_len.isdigit():
                return Response(400, page("Bad request", f"<h1>Bad request</h1><p>Content-Length must be a "
                                                         f"whole number, got {raw_len!r}</p>"))
            if int(raw_len) > MAX_BODY:
                self.close_connection = True
                return Response(413, page("Request too large", f"<h1>Request too large</h1><p>Bodies are "
                                                              f"limited to {MAX_BODY} bytes.</p>"))
            body = self.rfile.read(int(raw_len)).decode("utf-8", errors="replace")
            if self.headers.get_content_type() == "application/x-www-form-urlencoded":
                form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
        cookies: dict[str, str] = {}
        try:
            jar = SimpleCookie(self.headers.get("Cookie", ""))
            cookies = {k: m.value for k, m in jar.items()}
        except CookieError:
            pass
        return Request(method, unquote(parts.path) or "/", query, form, cookies)

    def _serve(self, method: str) -> None:
        try:
            request = self._request(method)
            response = request if isinstance(request, Response) else self.server.app.dispatch(
                request, self._client_waits)
        except Exception as exc:  # a bug in a page must not take the server down
            logger.exception("site server: %s %s failed", method, self.path)
            response = Response(500, page("Server error", f"<h1>Server error</h1><p>{type(exc).__name__}</p>"))
        if response is None:
            self.close_connection = True
            return
        data = response.body.encode("utf-8")
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            for key, value in response.headers.items():
                self.send_header(key, value)
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True


class SiteServer:
    """Serves the shop, wiki, forms and fault routes on ``host:port`` (0: a free port) from a thread.

    Args:
        token: the bearer token every request must carry; None: a fresh random one
            (:attr:`token` tells it).
        open_access: serve without any token (a person browsing by hand); loopback hosts only.

    Example:
        >>> import urllib.request
        >>> from rlinf.utils.web_auth import bearer
        >>> with SiteServer(port=0, seed=0) as server:
        ...     ask = urllib.request.Request(server.base_url + "/shop/", headers=bearer(server.token))
        ...     html = urllib.request.urlopen(ask, timeout=10).read().decode()
        >>> "<title>Shop home</title>" in html
        True
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, seed: int = 0, token: str | None = None,
                 open_access: bool = False) -> None:
        if open_access and not is_loopback(host):
            raise ValueError(f"SiteServer: open access (no token) is for a loopback host only, not {host}")
        self.token = None if open_access else check_token(token, "the site token") if token else new_token()
        self.host, self.requested_port, self.seed = host, port, seed
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port listened on (known once started)."""
        if self._server is None:
            raise RuntimeError("SiteServer is not running: call start() first")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://host:port`` without a trailing slash (known once started)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> str:
        """Binds, starts serving in a daemon thread and returns :attr:`base_url`."""
        if self._server is not None:
            raise RuntimeError(f"SiteServer already running at {self.base_url}")
        try:
            self._server = _Server((self.host, self.requested_port), SiteApp(self.seed), self.token)
        except OSError as exc:
            raise RuntimeError(f"SiteServer: cannot listen on {self.host}:{self.requested_port}: {exc}") from exc
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"site-server-{self.port}", daemon=True)
        self._thread.start()
        return self.base_url

    def stop(self, timeout: float = 5.0) -> None:
        """Stops serving, closes every connection and wakes waiting handlers; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        with server.lock:
            conns = list(server.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def __enter__(self) -> SiteServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
