"""Generates the web-agent task files (``train.jsonl``, ``test.jsonl``) from the sites' catalogs.

Every task is answerable by browsing the shipped sites (``rlinf.envs.web_sites``) served with
the same seed; reference answers are computed from the catalogs. Families:

* ``shop_price`` (easy): start on the category page that lists the product; "What is the price of
  the Blue Kettle?" -> ``$12.50``. An expert clicks the product link, then answers.
* ``shop_stock`` (medium): start at ``/shop/``; search the product, open it, answer its stock
  (``answer_type`` number).
* ``wiki_fact`` (medium): start at ``/wiki/``; the founding year of a city (number).
* ``wiki_hop`` (hard): start at ``/wiki/``; the country a person was born in (person page ->
  city page -> country).
* ``form_code`` (hard): start at ``/forms/``; sign up with given name, city and plan and answer the
  confirmation code.

The CPU learning demo's family has files of its own (``train_shop_category.jsonl``,
``test_shop_category.jsonl``; the main files keep the five families above):

* ``shop_category`` (easy): start on the product's page, which does not name its category in a
  heading; "In which category is the Blue Kettle?" -> ``Kitchen``. An expert clicks ``Back to
  category`` and answers the category page's heading (the product's description mentions the
  category in lower case, which a reader could also use).

Train and test use disjoint products, cities, people and sign-up names, so the test split is
held out; test people are born in test cities. The output depends only on the seed: the same seed
gives byte-identical files.

Example:
    python -m toolkits.web_tasks.make_tasks --out examples/web_agent/data --seed 0
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from rlinf.envs.web_sites import PLANS, confirmation_code, form_cities, shop_catalog, wiki_catalog

PRICE_TEMPLATE = "What is the price of the {name}?"
STOCK_TEMPLATE = "How many units of the {name} are in stock?"
FOUNDED_TEMPLATE = "In which year was {city} founded?"
COUNTRY_TEMPLATE = "In which country was {person} born?"
CATEGORY_TEMPLATE = "In which category is the {name}?"
FORM_TEMPLATE = "Sign up with the name {name}, the city {city} and the {plan} plan, then give the confirmation code."
FORM_FIRST = ("Alma", "Birk", "Cora", "Dag", "Edda", "Falk", "Gry", "Haldor", "Iben", "Jarl", "Kari", "Leif")
FORM_LAST = ("Aune", "Berge", "Dalen", "Fjeld", "Haug", "Lunde", "Moen", "Skog")
DIFFICULTY = {"shop_price": "easy", "shop_stock": "medium", "wiki_fact": "medium", "wiki_hop": "hard",
              "form_code": "hard", "shop_category": "easy"}
DOMAIN = {"shop_price": "shop", "shop_stock": "shop", "wiki_fact": "wiki", "wiki_hop": "wiki", "form_code": "forms",
          "shop_category": "shop"}
ANSWER_TYPE = {"shop_price": "exact", "shop_stock": "number", "wiki_fact": "number", "wiki_hop": "exact",
               "form_code": "exact", "shop_category": "exact"}
FAMILIES = tuple(DIFFICULTY)
#: the families of ``train.jsonl`` / ``test.jsonl``
MAIN_FAMILIES = FAMILIES[:5]


@dataclass(frozen=True)
class SplitSpec:
    """How many entities go to the test split; the rest of the catalog is train.

    Attributes:
        test_products: Products held out for test (of 80).
        min_test_cities: At least this many cities for test (more if needed for ``min_test_people``).
        min_test_people: At least this many people for test, all born in test cities.
        train_forms: Sign-up tasks in train (distinct names).
        test_forms: Sign-up tasks in test (names unused in train).
    """

    test_products: int = 16
    min_test_cities: int = 4
    min_test_people: int = 4
    train_forms: int = 64
    test_forms: int = 16


def split_entities(seed: int = 0, spec: SplitSpec = SplitSpec()) -> dict[str, dict[str, list]]:
    """Disjoint train / test entities: ``products``, ``cities``, ``people`` (catalog objects) and
    ``forms`` (``(name, city, plan key)`` triples).

    Example:
        >>> parts = split_entities(0)
        >>> len(parts["test"]["products"]), len(parts["train"]["products"])
        (16, 64)
        >>> set(p.name for p in parts["test"]["products"]) & set(p.name for p in parts["train"]["products"])
        set()
    """
    rng = random.Random(seed * 104729 + 5)
    shop, wiki = shop_catalog(seed), wiki_catalog(seed)
    products = list(shop.products)
    rng.shuffle(products)
    cities = list(wiki.cities)
    rng.shuffle(cities)
    test_cities: list = []
    for city in cities:
        people_in = sum(len(wiki.born_in(c.slug)) for c in test_cities)
        if len(test_cities) >= spec.min_test_cities and people_in >= spec.min_test_people:
            break
        test_cities.append(city)
    test_slugs = {c.slug for c in test_cities}
    names = [f"{first} {last}" for first in FORM_FIRST for last in FORM_LAST]
    rng.shuffle(names)
    if spec.train_forms + spec.test_forms > len(names):
        raise ValueError(f"train_forms + test_forms must be at most {len(names)}, got "
                         f"{spec.train_forms + spec.test_forms}")
    offered = form_cities(wiki)
    forms = [(name, rng.choice(offered), rng.choice(list(PLANS))) for name in names]
    return {
        "train": {"products": products[spec.test_products:], "cities": [c for c in cities if c not in test_cities],
                  "people": [p for p in wiki.people if p.born_in not in test_slugs],
                  "forms": forms[spec.test_forms: spec.test_forms + spec.train_forms]},
        "test": {"products": products[:spec.test_products], "cities": test_cities,
                 "people": [p for p in wiki.people if p.born_in in test_slugs], "forms": forms[:spec.test_forms]},
    }


def _task(family: str, number: int, split: str, instruction: str, start_url: str, answer: str) -> dict:
    return {"task_id": f"{family.replace('_', '-')}-{split}-{number:04d}", "instruction": instruction,
            "start_url": start_url, "difficulty": DIFFICULTY[family], "reference_answer": answer,
            "domain": DOMAIN[family], "family": family, "answer_type": ANSWER_TYPE[family]}


def build_tasks(seed: int = 0, spec: SplitSpec = SplitSpec()) -> dict[str, list[dict]]:
    """The tasks of both splits, ``{"train": [...], "test": [...]}``, grouped by family.

    Example:
        >>> tasks = build_tasks(0)
        >>> len(tasks["train"]), len(tasks["test"])
        (227, 57)
        >>> tasks["train"][0]["family"], tasks["train"][0]["difficulty"]
        ('shop_price', 'easy')
    """
    shop, wiki = shop_catalog(seed), wiki_catalog(seed)
    out: dict[str, list[dict]] = {}
    for split, parts in split_entities(seed, spec).items():
        tasks: list[dict] = []
        count = {f: 0 for f in FAMILIES}

        def add(family: str, instruction: str, start_url: str, answer: str) -> None:
            tasks.append(_task(family, count[family], split, instruction, start_url, answer))  # noqa: B023 - called within the iteration
            count[family] += 1  # noqa: B023 - called within the iteration

        for p in parts["products"]:
            add("shop_price", PRICE_TEMPLATE.format(name=p.name),
                shop.category_url(p.category, shop.category_page_of(p)), p.price)
        for p in parts["products"]:
            add("shop_stock", STOCK_TEMPLATE.format(name=p.name), "/shop/", str(p.stock))
        for c in parts["cities"]:
            add("wiki_fact", FOUNDED_TEMPLATE.format(city=c.name), "/wiki/", str(c.founded))
        for person in parts["people"]:
            add("wiki_hop", COUNTRY_TEMPLATE.format(person=person.name), "/wiki/",
                wiki.city(person.born_in).country)
        for name, city, plan in parts["forms"]:
            add("form_code", FORM_TEMPLATE.format(name=name, city=city, plan=PLANS[plan]), "/forms/",
                confirmation_code(name, city, plan))
        out[split] = tasks
    return out


def build_demo_tasks(seed: int = 0, spec: SplitSpec = SplitSpec()) -> dict[str, list[dict]]:
    """The learning demo's family (``shop_category``) for both splits, on the same product split
    as :func:`build_tasks`: ``{"train": [...], "test": [...]}``.

    Example:
        >>> demo = build_demo_tasks(0)
        >>> len(demo["train"]), len(demo["test"]), demo["test"][0]["start_url"].startswith("/shop/product/")
        (64, 16, True)
    """
    shop = shop_catalog(seed)
    return {split: [_task(DEMO_FAMILY, i, split, CATEGORY_TEMPLATE.format(name=p.name), f"/shop/product/{p.id}",
                          shop.categories[p.category])
                    for i, p in enumerate(parts["products"])]
            for split, parts in split_entities(seed, spec).items()}


def _pattern(template: str) -> re.Pattern[str]:
    """A regex matching ``template`` with each ``{field}`` as a named group."""
    parts = re.split(r"\{(\w+)\}", template)
    body = "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
    return re.compile(f"^{body}$")


def describe_task(task: dict, seed: int = 0) -> dict[str, str]:
    """What an expert needs to solve ``task``: the names to look for, the path, the answer.

    Keys by family: shop_* ``product``, ``category``, ``price``, ``stock``; wiki_fact ``city``,
    ``founded``; wiki_hop ``person``, ``city``, ``country``; form_code ``name``, ``city``, ``plan``
    (as the radio label shows it), ``code``. Always ``family`` and ``answer``.

    Example:
        >>> t = build_tasks(0)["train"][0]
        >>> d = describe_task(t)
        >>> d["answer"] == t["reference_answer"] == d["price"] and d["product"] in t["instruction"]
        True
    """
    family = task.get("family")
    shop, wiki = shop_catalog(seed), wiki_catalog(seed)
    templates = {"shop_price": (PRICE_TEMPLATE,), "shop_stock": (STOCK_TEMPLATE,), "wiki_fact": (FOUNDED_TEMPLATE,),
                 "wiki_hop": (COUNTRY_TEMPLATE,), "form_code": (FORM_TEMPLATE,), "shop_category": (CATEGORY_TEMPLATE,)}
    if family not in templates:
        raise ValueError(f"task {task.get('task_id')!r}: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    match = next((m for t in templates[family] if (m := _pattern(t).match(task["instruction"]))), None)
    if match is None:
        raise ValueError(f"task {task['task_id']!r}: instruction does not follow the {family} template")
    got = match.groupdict()
    if family in ("shop_price", "shop_stock", "shop_category"):
        p = shop.product_by_name(got["name"])
        if p is None:
            raise ValueError(f"task {task['task_id']!r}: no product named {got['name']!r} for seed {seed}")
        info = {"product": p.name, "category": shop.categories[p.category], "price": p.price, "stock": str(p.stock)}
        answer = {"shop_price": p.price, "shop_stock": str(p.stock), "shop_category": info["category"]}[family]
    elif family == "wiki_fact":
        c = wiki.by_title(got["city"])
        if c is None:
            raise ValueError(f"task {task['task_id']!r}: no city named {got['city']!r} for seed {seed}")
        info, answer = {"city": c.name, "founded": str(c.founded)}, str(c.founded)
    elif family == "wiki_hop":
        person = wiki.by_title(got["person"])
        if person is None or not hasattr(person, "born_in"):
            raise ValueError(f"task {task['task_id']!r}: no person named {got['person']!r} for seed {seed}")
        city = wiki.city(person.born_in)
        info, answer = {"person": person.name, "city": city.name, "country": city.country}, city.country
    else:
        plan_key = next(k for k, label in PLANS.items() if label == got["plan"])
        answer = confirmation_code(got["name"], got["city"], plan_key)
        info = {"name": got["name"], "city": got["city"], "plan": got["plan"], "code": answer}
    return {"family": family, "answer": answer, **info}


#: the family of the CPU learning demo (files ``train_<family>.jsonl`` / ``test_<family>.jsonl``)
DEMO_FAMILY = "shop_category"
#: held-out tasks of this family also get a file of their own (a small easy test set)
EASY_TEST_FAMILY = "shop_price"


def write_tasks(out_dir: str | Path, seed: int = 0, spec: SplitSpec = SplitSpec()) -> list[Path]:
    """Writes ``train.jsonl`` and ``test.jsonl`` under ``out_dir`` (created if missing),
    ``test_shop_price.jsonl`` (that family's held-out tasks) and the learning demo's
    ``train_shop_category.jsonl`` / ``test_shop_category.jsonl`` (what the tiny CPU config trains
    and evaluates on); returns the paths.

    Example:
        >>> import tempfile
        >>> [p.name for p in write_tasks(tempfile.mkdtemp(), seed=0)]  # doctest: +NORMALIZE_WHITESPACE
        ['train.jsonl', 'test.jsonl', 'test_shop_price.jsonl', 'train_shop_category.jsonl',
         'test_shop_category.jsonl']
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file, expected a folder")
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    splits = build_tasks(seed, spec)
    splits[f"test_{EASY_TEST_FAMILY}"] = [t for t in splits["test"] if t["family"] == EASY_TEST_FAMILY]
    demo = build_demo_tasks(seed, spec)
    splits[f"train_{DEMO_FAMILY}"], splits[f"test_{DEMO_FAMILY}"] = demo["train"], demo["test"]
    for split, tasks in splits.items():
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in tasks), encoding="utf-8")
        paths.append(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """CLI: ``--out`` folder, ``--seed``; prints one line per file written.

    Example:
        >>> import tempfile
        >>> main(["--out", tempfile.mkdtemp(), "--seed", "0"])  # doctest: +ELLIPSIS
        wrote .../train.jsonl (227 tasks)
        wrote .../test.jsonl (57 tasks)
        wrote .../test_shop_price.jsonl (16 tasks)
        wrote .../train_shop_category.jsonl (64 tasks)
        wrote .../test_shop_category.jsonl (16 tasks)
        0
    """
    parser = argparse.ArgumentParser(prog="python -m toolkits.web_tasks.make_tasks",
                                     description="Write train.jsonl and test.jsonl for the shipped web sites.")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="catalog seed; serve the sites with the same seed")
    args = parser.parse_args(argv)
    try:
        paths = write_tasks(args.out, args.seed)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        n = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
        print(f"wrote {path} ({n} tasks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
