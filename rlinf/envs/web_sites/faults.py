"""Fault routes for robustness tests (``/_test/``): pages that hang, are slow, block or fail.

* ``/hang``: never answers; the handler waits until the client goes away or the server stops, and
  holds only its own thread, so other requests are served meanwhile.
* ``/slow?ms=N``: answers after ``N`` milliseconds (0 to :data:`MAX_SLOW_MS`).
* ``/captcha``: a blocking page titled "Verify you are human" with a CAPTCHA-like box.
* ``/error``: HTTP 500.

Waiting goes through a ``wait(seconds) -> bool`` callable from the server: it returns False as
soon as the client disconnects or the server is stopping, so no wait outlives either.
"""

from __future__ import annotations

from collections.abc import Callable

from rlinf.envs.web_sites.pages import Request, Response, bad_request, esc, not_found, page

NAV = [("/_test/", "Test pages")]
MAX_SLOW_MS = 300_000
#: how long one wait slice of the hang route is; the callable checks the client between slices
HANG_SLICE_S = 0.5


def captcha_page() -> Response:
    """The blocking page a bot detector would show.

    Example:
        >>> "<title>Verify you are human</title>" in captcha_page().body
        True
    """
    body = ('<h1>Verify you are human</h1><div class="box" role="group" aria-label="CAPTCHA">'
            '<p>Complete the security check to continue.</p>'
            '<label><input type="checkbox" name="not_robot"> I am not a robot</label>'
            '<p><button type="button">Verify</button></p></div>')
    return Response(200, page("Verify you are human", body))


def fault_response(request: Request, wait: Callable[[float], bool]) -> Response | None:
    """Answers one ``/_test/...`` request; None means "send nothing" (the client left).

    Example:
        >>> fault_response(Request("GET", "/error"), lambda s: True).status
        500
        >>> fault_response(Request("GET", "/hang"), lambda s: False) is None
        True
    """
    path = request.path.rstrip("/") or "/"
    if path == "/":
        items = "".join(f"<li>{esc(p)}</li>" for p in ("/_test/hang", "/_test/slow?ms=500", "/_test/captcha",
                                                       "/_test/error"))
        return Response(200, page("Test pages", f"<h1>Test pages</h1><ul>{items}</ul>", NAV))
    if path == "/hang":
        while wait(HANG_SLICE_S):
            pass
        return None
    if path == "/slow":
        raw = request.query.get("ms", "1000").strip()
        if not raw.isdigit() or int(raw) > MAX_SLOW_MS:
            return bad_request(f"ms must be a whole number of milliseconds from 0 to {MAX_SLOW_MS}, got {raw!r}",
                               NAV)
        if not wait(int(raw) / 1000.0):
            return None
        return Response(200, page(f"Slow page ({raw} ms)", f"<h1>Slow page</h1><p>Answered after {raw} ms.</p>",
                                  NAV))
    if path == "/captcha":
        return captcha_page()
    if path == "/error":
        return Response(500, page("Server error", "<h1>Server error</h1><p>Something went wrong on our side.</p>",
                                  NAV))
    return not_found(f"No test page at /_test{request.path}", NAV)
