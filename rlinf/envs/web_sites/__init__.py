"""The shipped websites (shop, wiki, sign-up forms) and fault routes, served by :class:`SiteServer`.

Everything is generated from a seed (:mod:`.catalog`), so the task generator computes reference
answers from the same data the pages show. Serve them by hand with
``python -m rlinf.envs.web_sites --port 8080 --seed 0``.

Example:
    >>> from rlinf.envs.web_sites import SiteServer, shop_catalog
    >>> shop_catalog(0).products[0].price.startswith("$")
    True
"""

from rlinf.envs.web_sites.catalog import (
    PAGE_SIZE,
    City,
    Person,
    Product,
    ShopCatalog,
    WikiCatalog,
    shop_catalog,
    wiki_catalog,
)
from rlinf.envs.web_sites.forms import PLANS, confirmation_code, form_cities
from rlinf.envs.web_sites.server import SiteApp, SiteServer

__all__ = ["PAGE_SIZE", "PLANS", "City", "Person", "Product", "ShopCatalog", "SiteApp", "SiteServer",
           "WikiCatalog", "confirmation_code", "form_cities", "shop_catalog", "wiki_catalog"]
