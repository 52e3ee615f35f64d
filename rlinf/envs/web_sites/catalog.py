"""The data behind the shipped sites, generated from a seed: shop products, wiki cities and people.

The same seed always gives the same catalog (``random.Random`` seeded with an integer is stable
across Python runs and machines), so a site server and the task generator that computes reference
answers agree without sharing state. Names are unique, and no name is a substring of another, so
a search for a full name finds exactly one entry.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

#: shop categories: slug -> (title, product nouns); 8 x 10 = 80 products
CATEGORIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "kitchen": ("Kitchen", ("Kettle", "Toaster", "Teapot", "Skillet", "Colander", "Whisk", "Blender", "Spatula",
                            "Cutting Board", "Pepper Mill")),
    "office": ("Office", ("Desk Lamp", "Stapler", "Notebook", "Pen Holder", "Desk Chair", "Filing Tray",
                          "Bookend", "Clipboard", "Whiteboard", "Paper Shredder")),
    "garden": ("Garden", ("Watering Can", "Trowel", "Planter", "Rake", "Hose Reel", "Bird Feeder", "Pruner",
                          "Seed Tray", "Garden Gloves", "Wheelbarrow")),
    "outdoor": ("Outdoor", ("Tent", "Sleeping Bag", "Lantern", "Camp Stove", "Backpack", "Hammock",
                            "Water Bottle", "Compass", "Cooler Box", "Fishing Rod")),
    "bath": ("Bath", ("Towel", "Bath Mat", "Soap Dish", "Shower Caddy", "Toothbrush Cup", "Laundry Basket",
                      "Mirror", "Bathrobe", "Shower Curtain", "Bath Salts")),
    "toys": ("Toys", ("Kite", "Puzzle", "Yo-Yo", "Teddy Bear", "Toy Train", "Jump Rope", "Marble Set",
                      "Spinning Top", "Rubber Duck", "Board Game")),
    "electronics": ("Electronics", ("Headphones", "Desk Fan", "Power Bank", "Radio", "Alarm Clock", "Speaker",
                                    "Webcam", "Keyboard", "Tablet Stand", "Smart Plug")),
    "home": ("Home", ("Throw Pillow", "Blanket", "Candle", "Vase", "Picture Frame", "Wall Clock", "Rug",
                      "Bookshelf", "Doormat", "Coat Hook")),
}
ADJECTIVES = ("Blue", "Red", "Green", "Oak", "Walnut", "Steel", "Copper", "Ivory", "Slate", "Amber", "Coral",
              "Maple", "Silver", "Teal", "Olive", "Cedar", "Pearl", "Navy", "Crimson", "Bamboo")
FEATURES = ("Built to last.", "Easy to clean.", "A customer favourite.", "Light and sturdy.",
            "Made from recycled materials.", "Comes with a one-year warranty.")
#: products listed per category page
PAGE_SIZE = 6

COUNTRIES = ("Norvania", "Estmark", "Calderra", "Velland", "Ostravia", "Pellmoor")
CITY_HEADS = ("Bren", "Mar", "Tal", "Os", "Kel", "Dun", "Ash", "Vel", "Cor", "Lin", "Hal", "Rav", "Sel", "Tor",
              "Wyn", "Ard", "Bel", "Fen", "Gal", "Mor")
CITY_TAILS = ("wick", "haven", "ford", "mere", "stad", "burg", "holm", "port", "dale", "crest", "field", "gate")
FIRST_NAMES = ("Ada", "Bram", "Clea", "Dorin", "Elsa", "Finn", "Greta", "Hugo", "Ilse", "Jonas", "Kaja", "Lev",
               "Mira", "Nils", "Oda", "Piet", "Rhea", "Sven", "Tova", "Ulf", "Vera", "Wim", "Yara", "Zeno")
LAST_NAMES = ("Lind", "Marsk", "Oberg", "Pell", "Quist", "Rask", "Strand", "Tolle", "Ulvang", "Varga", "Wessel",
              "Yttre", "Arnfeld", "Brask", "Colby", "Dahl", "Eklund", "Frey")
PROFESSIONS = ("painter", "engineer", "poet", "botanist", "architect", "composer", "cartographer", "physician",
               "astronomer", "sculptor")
N_CITIES = 24
N_PEOPLE = 20


@dataclass(frozen=True)
class Product:
    """One shop product. ``price`` is the display string (``"$12.50"``), ``price_cents`` its value."""

    id: int
    name: str
    category: str
    price_cents: int
    rating: float
    stock: int
    description: str

    @property
    def price(self) -> str:
        """The price as the site prints it, e.g. ``$12.50``."""
        return format_price(self.price_cents)


@dataclass(frozen=True)
class ShopCatalog:
    """All products and categories of the shop, with the lookups the sites and tasks need.

    Example:
        >>> shop = shop_catalog(0)
        >>> p = shop.products[0]
        >>> shop.product_by_name(p.name.upper()) == p and shop.product_by_id(p.id) == p
        True
        >>> shop.category_page_of(p) >= 1
        True
    """

    products: tuple[Product, ...]
    categories: dict[str, str]  # slug -> title

    def product_by_id(self, product_id: int) -> Product | None:
        """The product with ``product_id``, or None."""
        return next((p for p in self.products if p.id == product_id), None)

    def product_by_name(self, name: str) -> Product | None:
        """The product whose name equals ``name`` (case and surrounding spaces ignored), or None."""
        key = " ".join(name.split()).lower()
        return next((p for p in self.products if p.name.lower() == key), None)

    def in_category(self, slug: str) -> list[Product]:
        """The products of category ``slug`` in the order its pages list them."""
        return [p for p in self.products if p.category == slug]

    def category_page_of(self, product: Product) -> int:
        """The 1-based page of its category's listing that shows ``product``."""
        return self.in_category(product.category).index(product) // PAGE_SIZE + 1

    def category_url(self, slug: str, page_no: int = 1) -> str:
        """The path of one category page (``/shop/category/kitchen?page=2``)."""
        return f"/shop/category/{slug}" + (f"?page={page_no}" if page_no > 1 else "")

    def search(self, query: str) -> list[Product]:
        """Products whose name contains ``query`` (case-insensitive); empty query, no results."""
        key = " ".join(query.split()).lower()
        return [p for p in self.products if key and key in p.name.lower()] if key else []


@dataclass(frozen=True)
class City:
    """A fictional city article."""

    slug: str
    name: str
    country: str
    founded: int
    population: int


@dataclass(frozen=True)
class Person:
    """A fictional person article; ``born_in`` is a city slug."""

    slug: str
    name: str
    born_in: str
    birth_year: int
    profession: str


@dataclass(frozen=True)
class WikiCatalog:
    """All wiki articles: cities and people, with lookups.

    Example:
        >>> wiki = wiki_catalog(0)
        >>> person = wiki.people[0]
        >>> wiki.city(person.born_in).country in COUNTRIES
        True
        >>> wiki.by_title(person.name.lower()) == person
        True
    """

    cities: tuple[City, ...]
    people: tuple[Person, ...]

    def city(self, slug: str) -> City | None:
        """The city with ``slug``, or None."""
        return next((c for c in self.cities if c.slug == slug), None)

    def person(self, slug: str) -> Person | None:
        """The person with ``slug``, or None."""
        return next((p for p in self.people if p.slug == slug), None)

    def by_title(self, title: str) -> City | Person | None:
        """The article titled ``title`` (case and surrounding spaces ignored), or None."""
        key = " ".join(title.split()).lower()
        return next((a for a in (*self.cities, *self.people) if a.name.lower() == key), None)

    def born_in(self, city_slug: str) -> list[Person]:
        """The people born in the city ``city_slug``."""
        return [p for p in self.people if p.born_in == city_slug]

    def search(self, query: str) -> list[City | Person]:
        """Articles whose title contains ``query`` (case-insensitive); empty query, no results."""
        key = " ".join(query.split()).lower()
        return [a for a in (*self.cities, *self.people) if a.name.lower().find(key) >= 0] if key else []


def format_price(cents: int) -> str:
    """Cents as a dollar string.

    Example:
        >>> format_price(1250), format_price(7)
        ('$12.50', '$0.07')
    """
    return f"${cents // 100}.{cents % 100:02d}"


def slugify(name: str) -> str:
    """A URL slug: lower case, words joined by ``-``.

    Example:
        >>> slugify("Ada Lind")
        'ada-lind'
    """
    return "-".join(name.lower().replace("-", " ").split())


def _no_substrings(names: list[str], what: str) -> None:
    """Raises if one name is contained in another (searches would then be ambiguous)."""
    low = [n.lower() for n in names]
    for i, a in enumerate(low):
        for j, b in enumerate(low):
            if i != j and a in b:
                raise AssertionError(f"{what}: {names[i]!r} is part of {names[j]!r}")


@lru_cache(maxsize=8)
def shop_catalog(seed: int) -> ShopCatalog:
    """The shop's 80 products (8 categories of 10), deterministic in ``seed``.

    Example:
        >>> shop_catalog(0) == shop_catalog(0) and len(shop_catalog(0).products)
        80
    """
    rng = random.Random(seed * 7919 + 11)
    products = []
    for slug, (title, nouns) in CATEGORIES.items():
        for noun in nouns:
            adjective = rng.choice(ADJECTIVES)
            dollars = rng.randint(3, 180)
            cents = dollars * 100 + rng.choice((0, 25, 49, 50, 75, 95, 99))
            products.append(Product(
                id=len(products) + 1, name=f"{adjective} {noun}", category=slug, price_cents=cents,
                rating=round(rng.uniform(2.5, 5.0), 1), stock=rng.randint(1, 150),
                description=f"{'An' if adjective[0] in 'AEIOU' else 'A'} {adjective.lower()} {noun.lower()} "
                            f"for your {title.lower()}. {rng.choice(FEATURES)}"))
    _no_substrings([p.name for p in products], "shop_catalog")
    return ShopCatalog(tuple(products), {slug: title for slug, (title, _) in CATEGORIES.items()})


@lru_cache(maxsize=8)
def wiki_catalog(seed: int) -> WikiCatalog:
    """The wiki's 24 cities and 20 people, deterministic in ``seed``.

    Example:
        >>> w = wiki_catalog(0)
        >>> len(w.cities), len(w.people), w == wiki_catalog(0)
        (24, 20, True)
    """
    rng = random.Random(seed * 7919 + 23)
    names: list[str] = []
    while len(names) < N_CITIES:
        name = rng.choice(CITY_HEADS) + rng.choice(CITY_TAILS)
        if all(name.lower() not in n.lower() and n.lower() not in name.lower() for n in names):
            names.append(name)
    cities = tuple(City(slug=slugify(n), name=n, country=rng.choice(COUNTRIES), founded=rng.randint(820, 1890),
                        population=rng.randint(8_000, 2_500_000)) for n in names)
    full: list[str] = []
    while len(full) < N_PEOPLE:
        name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
        if all(name.lower() not in n.lower() and n.lower() not in name.lower() for n in full):
            full.append(name)
    people = []
    for name in full:
        city = rng.choice(cities)
        people.append(Person(slug=slugify(name), name=name, born_in=city.slug,
                             birth_year=rng.randint(max(city.founded + 1, 1850), 1995),
                             profession=rng.choice(PROFESSIONS)))
    _no_substrings([a.name for a in (*cities, *people)], "wiki_catalog")
    return WikiCatalog(cities, tuple(people))
