"""The shop site (``/shop/``): home, category pages, product pages, search and a cookie cart.

Routes below the prefix: ``/`` (categories + search box), ``/category/<slug>?page=N`` (product
links, ``PAGE_SIZE`` per page, "Next page" / "Previous page"), ``/product/<id>`` (name, price,
rating, stock, add-to-cart form, "Back to category"), ``/search?q=`` (case-insensitive substring
of the product name), ``/cart`` (GET) and ``/cart/add``, ``/cart/clear`` (POST, then 303 to the
cart). The cart lives in a ``cart`` cookie (``3x1.7x2``: product id x quantity), so every browser
context has its own and the server keeps no state.
"""

from __future__ import annotations

from rlinf.envs.web_sites.catalog import PAGE_SIZE, ShopCatalog, format_price
from rlinf.envs.web_sites.pages import (
    Request,
    Response,
    bad_request,
    esc,
    link,
    link_list,
    not_found,
    page,
    search_form,
)

NAV = [("/shop/", "Shop home"), ("/shop/cart", "Cart")]
MAX_QTY = 99


def parse_cart(cookie: str) -> dict[int, int]:
    """The cart cookie as ``{product id: quantity}``; malformed entries are skipped.

    Example:
        >>> parse_cart("3x1.7x2.junk.5x0")
        {3: 1, 7: 2}
    """
    out: dict[int, int] = {}
    for part in cookie.split("."):
        pid, _, qty = part.partition("x")
        if pid.isdigit() and qty.isdigit() and 0 < int(qty) <= MAX_QTY:
            out[int(pid)] = int(qty)
    return out


def format_cart(cart: dict[int, int]) -> str:
    """The inverse of :func:`parse_cart`.

    Example:
        >>> format_cart({3: 1, 7: 2})
        '3x1.7x2'
    """
    return ".".join(f"{pid}x{qty}" for pid, qty in sorted(cart.items()))


class ShopSite:
    """The shop, answering requests whose path is relative to ``/shop``.

    Example:
        >>> from rlinf.envs.web_sites.catalog import shop_catalog
        >>> site = ShopSite(shop_catalog(0))
        >>> p = shop_catalog(0).products[0]
        >>> r = site.handle(Request("GET", f"/product/{p.id}"))
        >>> r.status, f"Price: {p.price}" in r.body
        (200, True)
    """

    def __init__(self, catalog: ShopCatalog) -> None:
        self.catalog = catalog

    def handle(self, request: Request) -> Response:
        """Routes one request; unknown paths are 404."""
        path = request.path.rstrip("/") or "/"
        parts = path.strip("/").split("/")
        if path == "/":
            return self._home()
        if parts[0] == "category" and len(parts) == 2:
            return self._category(parts[1], request.query.get("page", "1"))
        if parts[0] == "product" and len(parts) == 2:
            return self._product(parts[1])
        if path == "/search":
            return self._search(request.query.get("q", ""))
        if path == "/cart":
            return self._cart(parse_cart(request.cookies.get("cart", "")))
        if path in ("/cart/add", "/cart/clear"):
            if request.method != "POST":
                return Response(405, page("Method not allowed", "<h1>Method not allowed</h1>"
                                          "<p>Use the buttons on the product and cart pages.</p>", NAV),
                                {"Allow": "POST"})
            return self._cart_add(request) if path == "/cart/add" else self._cart_set({})
        return not_found(f"No shop page at /shop{request.path}", NAV)

    def _home(self) -> Response:
        cats = [(self.catalog.category_url(slug), title) for slug, title in self.catalog.categories.items()]
        body = ("<h1>Shop</h1>" + search_form("/shop/search", "Search products")
                + "<h2>Categories</h2>" + link_list(cats))
        return Response(200, page("Shop home", body, NAV))

    def _category(self, slug: str, page_param: str) -> Response:
        if slug not in self.catalog.categories:
            return not_found(f"No category named {slug!r}", NAV)
        items = self.catalog.in_category(slug)
        pages = max(1, -(-len(items) // PAGE_SIZE))
        if not page_param.strip().isdigit():
            return bad_request(f"page must be a whole number from 1 to {pages}, got {page_param!r}", NAV)
        number = int(page_param)
        if not 1 <= number <= pages:
            return not_found(f"Category {slug!r} has pages 1 to {pages}, not {number}", NAV)
        title = self.catalog.categories[slug]
        shown = items[(number - 1) * PAGE_SIZE: number * PAGE_SIZE]
        pager = []
        if number > 1:
            pager.append(link(self.catalog.category_url(slug, number - 1), "Previous page"))
        if number < pages:
            pager.append(link(self.catalog.category_url(slug, number + 1), "Next page"))
        body = (f"<h1>{esc(title)}</h1><p>Page {number} of {pages}</p>"
                + link_list([(f"/shop/product/{p.id}", p.name) for p in shown])
                + (f"<p>{' '.join(pager)}</p>" if pager else ""))
        return Response(200, page(f"{title} - page {number} of {pages} | Shop", body, NAV))

    def _product(self, raw_id: str) -> Response:
        product = self.catalog.product_by_id(int(raw_id)) if raw_id.isdigit() else None
        if product is None:
            return not_found(f"No product with id {raw_id!r}", NAV)
        back = self.catalog.category_url(product.category, self.catalog.category_page_of(product))
        body = (f"<h1>{esc(product.name)}</h1>"
                f"<p>Price: {esc(product.price)}</p>"
                f"<p>Rating: {product.rating:.1f} out of 5</p>"
                f"<p>In stock: {product.stock}</p>"
                f"<p>{esc(product.description)}</p>"
                '<form action="/shop/cart/add" method="post">'
                f'<input type="hidden" name="id" value="{product.id}">'
                f'<label for="qty">Quantity</label> <input id="qty" name="qty" type="number" min="1" '
                f'max="{MAX_QTY}" value="1"> <button type="submit">Add to cart</button></form>'
                f"<p>{link(back, 'Back to category')}</p>")
        return Response(200, page(f"{product.name} | Shop", body, NAV))

    def _search(self, query: str) -> Response:
        found = self.catalog.search(query)
        if not query.strip():
            result = "<p>Type a product name and press Search.</p>"
        elif not found:
            result = f"<p>No products match &quot;{esc(query.strip())}&quot;.</p>"
        else:
            result = (f"<p>{len(found)} product{'s' if len(found) != 1 else ''} found.</p>"
                      + link_list([(f"/shop/product/{p.id}", p.name) for p in found]))
        body = "<h1>Search results</h1>" + search_form("/shop/search", "Search products", query.strip()) + result
        title = f"Search: {query.strip()} | Shop" if query.strip() else "Search | Shop"
        return Response(200, page(title, body, NAV))

    def _cart(self, cart: dict[int, int]) -> Response:
        rows, total = [], 0
        for pid, qty in sorted(cart.items()):
            product = self.catalog.product_by_id(pid)
            if product is None:
                continue
            total += product.price_cents * qty
            rows.append(f"<li>{link(f'/shop/product/{pid}', product.name)}: {qty} x {esc(product.price)}</li>")
        if rows:
            body = ("<h1>Your cart</h1><ul>" + "".join(rows) + f"</ul><p>Total: {format_price(total)}</p>"
                    '<form action="/shop/cart/clear" method="post"><button type="submit">Empty cart</button></form>')
        else:
            body = "<h1>Your cart</h1><p>Your cart is empty.</p>"
        return Response(200, page("Your cart | Shop", body, NAV))

    def _cart_add(self, request: Request) -> Response:
        raw_id, raw_qty = request.param("id"), request.param("qty", "1") or "1"
        if not raw_id.isdigit() or self.catalog.product_by_id(int(raw_id)) is None:
            return bad_request(f"id must be the id of a product, got {raw_id!r}", NAV)
        if not raw_qty.isdigit() or not 1 <= int(raw_qty) <= MAX_QTY:
            return bad_request(f"qty must be a whole number from 1 to {MAX_QTY}, got {raw_qty!r}", NAV)
        cart = parse_cart(request.cookies.get("cart", ""))
        cart[int(raw_id)] = min(MAX_QTY, cart.get(int(raw_id), 0) + int(raw_qty))
        return self._cart_set(cart)

    @staticmethod
    def _cart_set(cart: dict[int, int]) -> Response:
        response = Response.redirect("/shop/cart")
        value = format_cart(cart)
        response.headers["Set-Cookie"] = (f"cart={value}; Path=/shop; SameSite=Lax"
                                          + ("" if value else "; Max-Age=0"))
        return response
