"""The shipped sites over a real socket: pages, values from the catalogs, search, pagination, the
cart, the sign-up flow, fault routes, determinism, the CLI, and (when present) headless Chromium."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from html.parser import HTMLParser

import httpx
import pytest

from rlinf.envs.web_sites import PAGE_SIZE, SiteServer, confirmation_code, form_cities, shop_catalog, wiki_catalog
from rlinf.envs.web_sites.__main__ import main as sites_main
from rlinf.utils.web_auth import bearer

CHROMIUM = "/usr/lib/chromium/chromium-headless-shell"
TOKEN = "site-token-" + "5" * 32
AUTH = bearer(TOKEN)


class _Page(HTMLParser):
    """Title, links (text -> href), forms (action, method, hidden fields) and visible text of a page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.title, self.links, self.forms, self.text = "", {}, [], []
        self._in, self._href, self._link_text = None, None, []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "title":
            self._in = "title"
        elif tag == "a":
            self._href, self._link_text = a.get("href"), []
        elif tag == "form":
            self.forms.append({"action": a.get("action"), "method": a.get("method", "get"), "hidden": {}})
        elif tag == "input" and a.get("type") == "hidden" and self.forms:
            self.forms[-1]["hidden"][a["name"]] = a.get("value", "")

    def handle_endtag(self, tag):
        if tag == "title":
            self._in = None
        elif tag == "a" and self._href is not None:
            self.links["".join(self._link_text).strip()] = self._href
            self._href = None

    def handle_data(self, data):
        if self._in == "title":
            self.title += data
        elif self._href is not None:
            self._link_text.append(data)
        self.text.append(data)

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())


@pytest.fixture(scope="module")
def server():
    with SiteServer(port=0, seed=0, token=TOKEN) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.base_url, timeout=5.0, headers=AUTH) as c:
        yield c


def _get(client, path: str, status: int = 200) -> _Page:
    r = client.get(path)
    assert r.status_code == status, f"{path}: {r.status_code} {r.text[:200]}"
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    return _Page(r.text)


def test_every_page_kind_answers_with_a_distinct_title_and_no_external_resources(client):
    shop, wiki = shop_catalog(0), wiki_catalog(0)
    paths = ["/", "/shop/", "/shop/category/kitchen", "/shop/category/kitchen?page=2", "/shop/product/1",
             "/shop/search?q=kettle", "/shop/cart", "/wiki/", f"/wiki/article/{wiki.cities[0].slug}",
             f"/wiki/article/{wiki.people[0].slug}", "/wiki/search?q=a", "/forms/", "/forms/signup/name",
             "/_test/captcha", "/_test/slow?ms=5", f"/shop/product/{shop.products[1].id}"]
    titles = []
    for path in paths:
        r = client.get(path)
        assert r.status_code == 200, path
        assert not re.search(r"https?://|\bsrc=", r.text), f"{path} refers to an external resource"
        titles.append(_Page(r.text).title)
    assert all(titles) and len(set(titles)) == len(titles), titles
    assert _get(client, "/_test/captcha").title == "Verify you are human"


def test_product_pages_show_the_catalog_values_and_link_back(client):
    shop = shop_catalog(0)
    for p in shop.products:
        page = _get(client, f"/shop/product/{p.id}")
        assert page.title == f"{p.name} | Shop"
        assert f"Price: {p.price}" in page.plain and f"In stock: {p.stock}" in page.plain
        assert f"Rating: {p.rating:.1f} out of 5" in page.plain
        back = _get(client, page.links["Back to category"])
        assert back.links[p.name] == f"/shop/product/{p.id}"


def test_category_pages_paginate_every_product_once(client):
    shop = shop_catalog(0)
    for slug in shop.categories:
        listed, path, pages = [], shop.category_url(slug), 0
        while path:
            page = _get(client, path)
            names = [n for n in page.links if n not in ("Shop home", "Cart", "Next page", "Previous page")]
            assert 1 <= len(names) <= PAGE_SIZE
            listed += names
            pages += 1
            path = page.links.get("Next page")
            if pages > 1:
                assert "Previous page" in page.links
        assert listed == [p.name for p in shop.in_category(slug)]
        assert pages == 2
    assert client.get("/shop/category/kitchen?page=3").status_code == 404
    bad = client.get("/shop/category/kitchen?page=two")
    assert bad.status_code == 400 and "page must be a whole number from 1 to 2, got &#x27;two&#x27;" in bad.text
    assert client.get("/shop/category/nope").status_code == 404


def test_search_finds_products_and_articles_case_insensitively(client):
    product = shop_catalog(0).products[5]
    page = _get(client, "/shop/search?q=" + product.name.upper().replace(" ", "+"))
    assert page.links[product.name] == f"/shop/product/{product.id}" and "1 product found." in page.plain
    assert "No products match" in _get(client, "/shop/search?q=zzzz").plain
    home = _get(client, "/shop/")
    assert home.forms[0]["action"] == "/shop/search" and home.forms[0]["method"] == "get"
    city = wiki_catalog(0).cities[3]
    assert _get(client, f"/wiki/search?q={city.name.lower()}").links[city.name] == f"/wiki/article/{city.slug}"


def test_cart_cookie_round_trip(client):
    p = shop_catalog(0).products[2]
    with httpx.Client(base_url=str(client.base_url), timeout=5.0, headers=AUTH) as own:
        r = own.post("/shop/cart/add", data={"id": str(p.id), "qty": "2"})
        assert r.status_code == 303 and r.headers["location"] == "/shop/cart"
        assert r.headers["set-cookie"].startswith(f"cart={p.id}x2;")
        cart = _Page(own.get("/shop/cart").text).plain
        total = f"${p.price_cents * 2 // 100}.{p.price_cents * 2 % 100:02d}"
        assert f"{p.name} : 2 x {p.price}" in cart and f"Total: {total}" in cart
        assert own.post("/shop/cart/clear").status_code == 303
        assert "Your cart is empty." in _Page(own.get("/shop/cart").text).plain
    bad = client.post("/shop/cart/add", data={"id": str(p.id), "qty": "0"})
    assert bad.status_code == 400 and "qty must be a whole number from 1 to 99" in bad.text
    assert client.get("/shop/cart/add").status_code == 405


def test_wiki_person_page_needs_a_hop_for_the_country(client):
    wiki = wiki_catalog(0)
    for person in wiki.people:
        city = wiki.city(person.born_in)
        page = _get(client, f"/wiki/article/{person.slug}")
        assert city.country not in page.plain
        city_page = _get(client, page.links[city.name])
        assert f"Country {city.country}" in city_page.plain and f"Founded {city.founded}" in city_page.plain
        assert city_page.links[person.name] == f"/wiki/article/{person.slug}"
    index = _get(client, "/wiki/")
    assert len([n for n in index.links if n != "Wiki index"]) == len(wiki.cities) + len(wiki.people)


def _submit(client, page: _Page, **fields) -> _Page:
    form = page.forms[0]
    return _get(client, form["action"] + "?" + httpx.QueryParams({**form["hidden"], **fields}).__str__())


def test_signup_flow_ends_with_the_confirmation_code(client):
    city = form_cities(wiki_catalog(0))[2]
    page = _get(client, _get(client, "/forms/").links["Start sign-up"])
    page = _submit(client, page, name="  Ada   Lind ")
    assert page.title.startswith("Your city") and page.forms[0]["hidden"] == {"name": "Ada Lind"}
    page = _submit(client, page, city=city)
    page = _submit(client, page, plan="standard")
    assert "Name Ada Lind City " + city + " Plan Standard" in page.plain
    done = _submit(client, page)
    assert done.title.startswith("Sign-up complete")
    assert f"Your confirmation code is: {confirmation_code('Ada Lind', city, 'standard')}" in done.plain
    # a missing or unknown value goes back to the step that asks for it
    assert "Please enter your full name." in _get(client, "/forms/signup/plan?name=&city=" + city).plain
    assert "Please choose a city" in _get(client, "/forms/signup/plan?name=Ada&city=Atlantis").plain
    assert "Please choose a plan." in _get(client, f"/forms/signup/done?name=Ada&city={city}&plan=gold").plain


def test_fault_routes_and_unknown_paths(client):
    assert client.get("/_test/error").status_code == 500
    assert client.get("/no/such/page").status_code == 404
    assert client.get("/shop/product/9999").status_code == 404
    assert client.get("/_test/slow?ms=x").status_code == 400
    started = time.monotonic()
    assert client.get("/_test/slow?ms=300").status_code == 200
    assert time.monotonic() - started >= 0.3


def test_hang_does_not_block_other_requests(server):
    outcome = {}

    def hang():
        try:
            httpx.get(server.base_url + "/_test/hang", timeout=2.0, headers=AUTH)
            outcome["hang"] = "answered"
        except httpx.TimeoutException:
            outcome["hang"] = "timeout"

    worker = threading.Thread(target=hang)
    worker.start()
    time.sleep(0.3)
    r = httpx.get(server.base_url + "/shop/", timeout=2.0, headers=AUTH)
    assert r.status_code == 200 and outcome == {}, "answered only after the hanging request ended"
    worker.join(10)
    assert outcome == {"hang": "timeout"}


def test_stop_is_prompt_with_a_hang_open_and_same_seed_serves_identical_pages():
    paths = ["/shop/", "/shop/product/7", "/shop/category/toys?page=2", "/wiki/", "/forms/signup/city?name=A"]
    with SiteServer(seed=0) as a, SiteServer(seed=0) as b, SiteServer(seed=1) as c:
        assert a.base_url != b.base_url and len({a.token, b.token, c.token}) == 3  # each made its own

        def get(server, path):
            return httpx.get(server.base_url + path, headers=bearer(server.token)).text
        for path in paths:
            assert get(a, path) == get(b, path)
        assert get(a, "/shop/product/7") != get(c, "/shop/product/7")
        sock = socket.create_connection(("127.0.0.1", a.port), timeout=5)
        sock.sendall(f"GET /_test/hang HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {a.token}\r\n\r\n".encode())
        time.sleep(0.3)
        started = time.monotonic()
        a.stop()
        assert time.monotonic() - started < 3.0
        assert sock.recv(100) == b""  # closed without an answer
        sock.close()
        with pytest.raises(RuntimeError, match="not running"):
            _ = a.base_url


def test_busy_port_is_one_error_line(server, capsys):
    assert sites_main(["--port", str(server.port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"cannot listen on 127.0.0.1:{server.port}" in err


@contextlib.contextmanager
def _cli_serving(args: list[str], capsys):
    """``python -m rlinf.envs.web_sites ARGS`` on a thread: yields (base URL, what it printed),
    then stops it and checks it exited 0."""
    stop = threading.Event()
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("rc", sites_main(args, stop)))
    worker.start()
    try:
        out, deadline = "", time.monotonic() + 10
        while "serving" not in out and time.monotonic() < deadline:
            time.sleep(0.05)
            out += capsys.readouterr().out
        url = re.search(r"at (http://\S+)/ ", out)
        assert url, f"no serving line from the CLI: {out!r}"
        yield url.group(1), out
    finally:
        stop.set()
        worker.join(10)
    assert result == {"rc": 0}


def test_cli_serves_until_stopped(capsys, monkeypatch):
    monkeypatch.setenv("RLINF_WEB_TOKEN", TOKEN)
    with _cli_serving(["--port", "0", "--seed", "0"], capsys) as (url, out):
        assert httpx.get(url + "/wiki/", timeout=5).status_code == 401
        assert httpx.get(url + "/wiki/", headers=AUTH, timeout=5).status_code == 200
        assert "bearer token written" not in out and TOKEN not in out  # the user's token: no file


def _site_routes(server) -> list[tuple[str, str]]:
    """(method, path) of every request kind the site server has: each method its handler serves
    (its ``do_*`` methods, read from the class, so a new one is covered) and some it does not, on
    the index, every site's pages one link away from its home (read from the sites, so a new site
    or page is covered), the fault routes and a missing path."""
    from rlinf.envs.web_sites.server import SiteApp, _Handler

    methods = sorted(name[3:] for name in dir(_Handler) if name.startswith("do_")) + ["PUT"]
    paths = {"/", "/no-such-page", "/_test/hang", "/_test/slow?ms=5000", "/_test/error"}
    with httpx.Client(base_url=server.base_url, headers=AUTH, timeout=5.0) as c:
        for home in ["/", "/_test/"] + [f"/{name}/" for name in SiteApp(0).sites]:
            page = _Page(c.get(home).text)
            paths |= {home} | {href for href in page.links.values() if href.startswith("/")}
            paths |= {form["action"] for form in page.forms if form["action"].startswith("/")}
    return [(method, path) for method in methods for path in sorted(paths)]


def test_every_request_without_the_token_gets_401_and_nothing_else(server):
    routes = _site_routes(server)
    assert {"GET", "POST", "HEAD"} <= {m for m, _ in routes} and len({p for _, p in routes}) > 20
    wrong = [{}, bearer("not-the-token-" + "0" * 32), {"Authorization": TOKEN}, bearer(TOKEN + "0"),
             {"Authorization": f"bearer {TOKEN}"}]
    with httpx.Client(base_url=server.base_url, timeout=5.0) as c:
        answers = [(method, path, c.request(method, path, headers=wrong[i % len(wrong)],
                                            data={"id": "1", "qty": "1"} if method == "POST" else None))
                   for i, (method, path) in enumerate(routes)]
        big = c.post("/shop/cart/add", content=b"x" * (1 << 20), headers=bearer("not-the-token-" + "0" * 32))
        right = c.post("/shop/cart/add", data={"id": "1", "qty": "1"}, headers=AUTH)
    for method, path, answer in answers + [("POST", "big body", big)]:
        assert answer.status_code == 401, (method, path, answer.status_code)
        assert answer.elapsed.total_seconds() < 2.0  # the hang and slow routes answer at once: they never ran
        assert answer.headers["www-authenticate"] == "Bearer" and "set-cookie" not in answer.headers
        assert answer.headers["connection"] == "close" and TOKEN not in answer.text
        if method != "HEAD":
            assert answer.text == "missing or wrong bearer token (send Authorization: Bearer <token>)\n"
    assert right.status_code == 303 and right.headers["set-cookie"].startswith("cart=1x1;")  # the token works


def test_expect_100_continue_without_the_token_gets_401_not_100(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"POST /shop/cart/add HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n"
                     b"Content-Type: application/x-www-form-urlencoded\r\nExpect: 100-continue\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 401 ") and b"100 Continue" not in reply


def test_open_access_is_for_loopback_only_and_the_cli_says_so(capsys, monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="open access \\(no token\\) is for a loopback host only, not 0.0.0.0"):
        SiteServer(host="0.0.0.0", open_access=True)
    with SiteServer(open_access=True) as open_server:
        assert open_server.token is None and httpx.get(open_server.base_url + "/shop/").status_code == 200
    monkeypatch.delenv("RLINF_WEB_TOKEN", raising=False)
    assert sites_main(["--host", "0.0.0.0", "--no-auth"]) == 2
    assert capsys.readouterr().err.strip() == "error: --no-auth serves a loopback --host only, not 0.0.0.0"
    assert sites_main(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --host 0.0.0.0 is not a loopback address: the site server "
                                               "needs a token there (set RLINF_WEB_TOKEN or pass --token-file PATH)")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    with _cli_serving(["--port", "0", "--token-file", str(token_file)], capsys) as (url, out):
        assert httpx.get(url + "/shop/", headers=AUTH).status_code == 200 and TOKEN not in out
        assert httpx.get(url + "/shop/").status_code == 401
    assert token_file.read_text() == TOKEN  # the user's file is left alone


def _chromium():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (bash scripts/setup_system_browser.sh installs it)")
    return sync_api


def test_chromium_reads_and_navigates_the_shop(server):
    sync_api = _chromium()
    shop = shop_catalog(0)
    product = shop.in_category("garden")[1]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(extra_http_headers=AUTH)  # one origin in this test: no need to scope it
            page.set_default_timeout(10_000)
            page.goto(server.base_url + shop.category_url("garden"))
            tree = page.aria_snapshot()
            assert f'link "{product.name}"' in tree and 'heading "Garden" [level=1]' in tree
            page.get_by_role("link", name=product.name, exact=True).click()
            page.wait_for_url(f"**/shop/product/{product.id}")
            tree = page.aria_snapshot()
            assert f'heading "{product.name}" [level=1]' in tree and f"Price: {product.price}" in tree
            assert page.title() == f"{product.name} | Shop"
            # the sign-up's city list box is clickable option by option
            page.goto(server.base_url + "/forms/signup/city?name=Ada")
            city = form_cities(wiki_catalog(0))[3]
            page.get_by_role("option", name=city).click()
            page.get_by_role("button", name="Next").click()
            page.wait_for_url("**/forms/signup/plan*")
            assert f"city={city}" in page.url
        finally:
            browser.close()
