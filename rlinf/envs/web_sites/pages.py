"""What the shipped sites share: the request and response objects and the page layout.

A site is a plain object with ``handle(request) -> Response``; it never touches sockets, so the
server (:mod:`.server`) owns every byte on the wire. Pages are small, self-contained HTML: inline
CSS only, no scripts, no external resources, real ``<a>`` / ``<button>`` / ``<input>`` /
``<label>`` elements so that Chromium's accessibility tree reads them well.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from urllib.parse import urlencode

STYLE = (
    "body{font-family:sans-serif;max-width:46rem;margin:1rem auto;padding:0 1rem;line-height:1.4}"
    "nav a{margin-right:1rem}ul{padding-left:1.2rem}dt{font-weight:bold}dd{margin:0 0 .4rem 0}"
    ".error{color:#a00}.box{border:2px solid #444;padding:1rem;width:18rem}"
)


@dataclass(frozen=True)
class Request:
    """One HTTP request as a site sees it.

    Attributes:
        method: ``GET``, ``HEAD`` or ``POST``.
        path: The path below the site's prefix, always starting with ``/`` (``/product/3``).
        query: Query-string parameters, first value of each name.
        form: Fields of an ``application/x-www-form-urlencoded`` POST body.
        cookies: Request cookies by name.

    Example:
        >>> Request("GET", "/search", {"q": "kettle"}).param("q")
        'kettle'
    """

    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    form: dict[str, str] = field(default_factory=dict)
    cookies: dict[str, str] = field(default_factory=dict)

    def param(self, name: str, default: str = "") -> str:
        """A form field (POST) or else a query parameter, stripped of surrounding spaces."""
        return (self.form.get(name) if name in self.form else self.query.get(name, default)).strip()


@dataclass
class Response:
    """What a site answers: status, HTML body and extra headers (``Location``, ``Set-Cookie``).

    Example:
        >>> r = Response.redirect("/shop/cart")
        >>> r.status, r.headers["Location"]
        (303, '/shop/cart')
    """

    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def redirect(location: str) -> Response:
        """A ``303 See Other`` to ``location`` (after a POST, the browser then GETs it). Only a
        root-relative ``location`` is taken: a redirect never leaves the site's origin, so the
        bearer token Chromium adds for the site is never carried elsewhere.

        >>> Response.redirect("//elsewhere.example/x")
        Traceback (most recent call last):
        ...
        ValueError: a site redirects within its origin only (a path starting with one '/'), got '//elsewhere.example/x'
        """
        if not location.startswith("/") or location.startswith("//") or "\\" in location:
            raise ValueError("a site redirects within its origin only (a path starting with one '/'), "
                             f"got {location!r}")
        body = f'<p>Continue to <a href="{esc(location)}">the next page</a>.</p>'
        return Response(303, page("Redirect", body), {"Location": location})


def esc(text: object) -> str:
    """HTML-escapes ``text`` (quotes included).

    Example:
        >>> esc('<b> & "x"')
        '&lt;b&gt; &amp; &quot;x&quot;'
    """
    return html.escape(str(text), quote=True)


def link(href: str, text: str, params: dict[str, str] | None = None) -> str:
    """An ``<a>`` element; ``params`` are URL-encoded into its query string.

    Example:
        >>> link("/shop/search", "Find", {"q": "blue kettle"})
        '<a href="/shop/search?q=blue+kettle">Find</a>'
    """
    url = href + ("?" + urlencode(params) if params else "")
    return f'<a href="{esc(url)}">{esc(text)}</a>'


def link_list(items: list[tuple[str, str]]) -> str:
    """A ``<ul>`` of links from ``(href, text)`` pairs.

    Example:
        >>> link_list([("/a", "A")])
        '<ul><li><a href="/a">A</a></li></ul>'
    """
    return "<ul>" + "".join(f"<li>{link(h, t)}</li>" for h, t in items) + "</ul>"


def search_form(action: str, label: str, value: str = "") -> str:
    """A GET search form with one labelled ``q`` box and a Search button.

    Example:
        >>> 'name="q"' in search_form("/wiki/search", "Search articles")
        True
    """
    return (f'<form role="search" action="{esc(action)}" method="get">'
            f'<label for="q">{esc(label)}</label> '
            f'<input id="q" name="q" type="search" value="{esc(value)}"> '
            '<button type="submit">Search</button></form>')


def page(title: str, body: str, nav: list[tuple[str, str]] | None = None, lang: str = "en") -> str:
    """A whole HTML document: ``<title>``, an optional site navigation bar and a ``<main>``.

    Example:
        >>> doc = page("Shop", "<h1>Shop</h1>", nav=[("/shop/", "Shop home")])
        >>> "<title>Shop</title>" in doc and 'aria-label="Site"' in doc
        True
    """
    bar = ""
    if nav:
        bar = '<header><nav aria-label="Site">' + "".join(link(h, t) for h, t in nav) + "</nav></header>"
    return (f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>"
            f"<body>{bar}<main>{body}</main></body></html>")


def not_found(what: str, nav: list[tuple[str, str]] | None = None) -> Response:
    """A 404 page naming what was not found.

    Example:
        >>> not_found("No product with id 99").status
        404
    """
    return Response(404, page("Page not found", f"<h1>Page not found</h1><p>{esc(what)}</p>", nav))


def bad_request(what: str, nav: list[tuple[str, str]] | None = None) -> Response:
    """A 400 page naming the bad field and what was expected.

    Example:
        >>> bad_request("qty must be a whole number from 1 to 99, got 'x'").status
        400
    """
    return Response(400, page("Bad request", f"<h1>Bad request</h1><p class=\"error\">{esc(what)}</p>", nav))
