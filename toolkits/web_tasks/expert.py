"""A scripted expert for the shipped task families: it reads the page the way the policy does.

:func:`expert_action` returns the next action string (docs/web_agent.md grammar) from the task,
the current observation (``{"url", "title", "text"}``, set-of-marks text with ``[n] role "name"``
element lines) and the actions taken so far. It is an oracle: it may use the task's reference
answer and the site catalogs, but it finds every element by reading the observation's marks, so
it works from any page an episode can reach (demonstrations start it after random actions).

Families:

* ``shop_price`` / ``shop_stock``: on the target product's page ``answer "<reference>"``; on a
  page that lists the product click its link; on another page of the product's category,
  ``Next page`` / ``Previous page``; where there is a search box (shop home, search results),
  search for the name (``shop_price`` goes back instead once it has left its start page);
  anywhere else ``Shop home`` (``shop_price``: ``goback``). That is the ``browse`` strategy;
  with ``strategy="search"`` the expert leaves every category page by ``Shop home`` and
  searches for the name there (``click [1]``, ``type [3] "<name>" enter``, click the one result,
  answer): four steps whatever the page lists, which a policy that copies the name from the
  task can follow on products it never saw.
* ``shop_category``: on the product's page click ``Back to category``; on that category's
  listing answer its title; anywhere else find the product as ``shop_stock`` does.
* ``wiki_fact``: the same with the city article (search box on the wiki pages, ``Wiki index``).
* ``wiki_hop``: person article -> click the birthplace link -> answer on the city page.

The entity names (product, city, person, birthplace) come from the task generator's
:func:`~toolkits.web_tasks.make_tasks.describe_task`.

A page scrolled down by earlier actions is scrolled back up before the expert gives up on it
(only visible elements carry marks).

Example:
    >>> task = {"task_id": "t", "family": "shop_price", "reference_answer": "$146.99",
    ...         "instruction": "What is the price of the Olive Kettle?"}
    >>> page = {"url": "http://h/shop/category/kitchen", "title": "Kitchen - page 1 of 2 | Shop",
    ...         "text": '[1] link "Shop home"\\n[2] link "Red Toaster"\\n[3] link "Olive Kettle"'}
    >>> expert_action(task, page, [])
    'click [3]'
    >>> expert_action(task, {"url": "http://h/shop/product/1", "title": "Olive Kettle | Shop",
    ...                      "text": "Olive Kettle\\nPrice: $146.99"}, ["click [3]"])
    'answer "$146.99"'
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from rlinf.engines.web.actions import format_action

_ELEMENT = re.compile(r'^\s*\[(\d+)\]\s+([\w-]+)\s*"((?:[^"\\]|\\.)*)"')
_SEARCH_ROLES = ("searchbox", "textbox", "combobox")
FAMILIES = ("shop_price", "shop_stock", "shop_category", "wiki_fact", "wiki_hop")
#: how the shop families find a product: walk the category's pages, or search from the shop home
STRATEGIES = ("browse", "search")


@dataclass(frozen=True)
class Element:
    """One marked element line of an observation: ``[mark] role "name"``."""

    mark: int
    role: str
    name: str


@dataclass(frozen=True)
class Page:
    """An observation, read: the URL path, title, marked elements and plain text lines.

    Example:
        >>> p = Page.read({"url": "http://h:1/shop/", "title": "Shop home",
        ...                "text": '[1] link "Cart"\\nShop\\n[2] searchbox "Search products"'})
        >>> p.path, [e.mark for e in p.elements], p.lines
        ('/shop/', [1, 2], ('Shop',))
    """

    path: str
    title: str
    elements: tuple[Element, ...]
    lines: tuple[str, ...]
    text: str

    @classmethod
    def read(cls, observation: dict) -> Page:
        """Parse an observation dict (``url``, ``title``, ``text``)."""
        text = observation.get("text") or ""
        elements, lines = [], []
        for line in text.splitlines():
            match = _ELEMENT.match(line)
            if match:
                name = match.group(3).replace('\\"', '"').replace("\\\\", "\\")
                elements.append(Element(int(match.group(1)), match.group(2).lower(), name))
            elif line.strip():
                lines.append(line.strip())
        url = observation.get("url") or ""
        path = urlsplit(url).path if "://" in url else url.split("?")[0]
        return cls(path, observation.get("title") or "", tuple(elements), tuple(lines), text)

    def link(self, name: str) -> Element | None:
        """The first link (or button) whose name equals ``name`` (case and spacing ignored)."""
        key = _norm(name)
        return next((e for e in self.elements if e.role in ("link", "button") and _norm(e.name) == key), None)

    def search_box(self) -> Element | None:
        """The first text entry element (search box), or None."""
        return next((e for e in self.elements if e.role in _SEARCH_ROLES), None)

    def shows_title(self, name: str) -> bool:
        """True when the page is about ``name``: its title starts with it."""
        return _norm(self.title).startswith(_norm(name))


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def target_name(task: dict, site_seed: int = 0) -> str:
    """The entity a task is about (product, city or person), read from its instruction by the
    task generator's :func:`~toolkits.web_tasks.make_tasks.describe_task`.

    Example:
        >>> target_name({"task_id": "t", "family": "shop_price",
        ...              "instruction": "What is the price of the Olive Kettle?"})
        'Olive Kettle'
    """
    from toolkits.web_tasks.make_tasks import describe_task

    info = describe_task(task, site_seed)
    for key in ("product", "person", "city"):
        if key in info:
            return info[key]
    raise ValueError(f"expert: task {task.get('task_id')!r} names no product, city or person")


def _scrolled_down(history: list[str]) -> bool:
    """True when the scrolls since the last page change leave the page below its top."""
    net = 0
    for action in reversed(history):
        if action.startswith("scroll"):
            net += 1 if action.endswith("down") else -1
        else:
            break
    return net > 0


def _answer(reference) -> str:
    value = reference[0] if isinstance(reference, (list, tuple)) else reference
    return format_action({"type": "answer", "text": str(value)})


def _find_article(page: Page, name: str, history: list[str], answer: str, on_target: bool, *,
                  right_listing: bool = False, back_first: bool = False, home: str | None = None) -> str:
    """The shared walk: answer on the target, click its link, else page / scroll / search / back.

    ``right_listing``: the page is a listing that holds the target on another of its pages;
    ``back_first``: once the episode has left its start page, go back rather than search;
    ``home``: the name of the site's home link, taken when lost on a page without a search box.
    """
    if on_target:
        return answer
    hit = page.link(name)
    if hit is not None:
        return f"click [{hit.mark}]"
    if right_listing:
        turn = page.link("Next page") or page.link("Previous page")
        if turn is not None:
            return f"click [{turn.mark}]"
    if _scrolled_down(history):
        return "scroll up"
    box = page.search_box()
    if box is not None and not (back_first and history):
        return format_action({"type": "type", "id": box.mark, "text": name, "submit": True})
    if back_first or home is None or page.link(home) is None:
        return "goback"
    return f"click [{page.link(home).mark}]"


def _shop(task: dict, page: Page, history: list[str], site_seed: int, strategy: str) -> str:
    from toolkits.web_tasks.make_tasks import describe_task

    info = describe_task(task, site_seed)
    name = info["product"]
    on_target = page.path.startswith("/shop/product/") and page.shows_title(name)
    if strategy == "search" and page.path.startswith("/shop/category/") and page.link("Shop home") is not None:
        return f"click [{page.link('Shop home').mark}]"
    right_listing = page.path.startswith("/shop/category/") and page.shows_title(info["category"])
    return _find_article(page, name, history, _answer(task["reference_answer"]), on_target,
                         right_listing=right_listing,
                         back_first=task.get("family") == "shop_price" and strategy == "browse", home="Shop home")


def _shop_category(task: dict, page: Page, history: list[str], site_seed: int) -> str:
    from toolkits.web_tasks.make_tasks import describe_task

    info = describe_task(task, site_seed)
    if page.path.startswith("/shop/category/") and page.shows_title(info["category"]):
        return _answer(info["category"])
    back = page.link("Back to category")
    if page.path.startswith("/shop/product/") and page.shows_title(info["product"]) and back is not None:
        return f"click [{back.mark}]"
    return _find_article(page, info["product"], history, "", False, home="Shop home")


def _wiki_fact(task: dict, page: Page, history: list[str], site_seed: int) -> str:
    name = target_name(task, site_seed)
    on_target = page.path.startswith("/wiki/") and page.shows_title(name)
    return _find_article(page, name, history, _answer(task["reference_answer"]), on_target, home="Wiki index")


def _wiki_hop(task: dict, page: Page, history: list[str], site_seed: int) -> str:
    from toolkits.web_tasks.make_tasks import describe_task

    info = describe_task(task, site_seed)
    if page.path.startswith("/wiki/") and page.shows_title(info["city"]):
        return _answer(task["reference_answer"])
    if page.path.startswith("/wiki/") and page.shows_title(info["person"]):
        hit = page.link(info["city"])
        return f"click [{hit.mark}]" if hit is not None else "scroll down"
    return _find_article(page, info["person"], history, "", False, home="Wiki index")


def expert_action(task: dict, observation: dict, history: list[str], *, site_seed: int = 0,
                  strategy: str = "browse") -> str:
    """The expert's next action string for ``task`` on the page ``observation``.

    Args:
        task: A task dict (``family``, ``instruction``, ``reference_answer``).
        observation: ``{"url", "title", "text"}`` in set_of_marks mode.
        history: Action strings taken so far in the episode (oldest first).
        site_seed: Seed of the shipped sites (``wiki_hop`` looks up the birthplace).
        strategy: ``browse`` or ``search`` (:data:`STRATEGIES`; shop families only).

    Raises:
        ValueError: a family without a script, an instruction the expert cannot read, or an
            unknown strategy.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"expert: strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    family = task.get("family")
    page = Page.read(observation)
    if family in ("shop_price", "shop_stock"):
        return _shop(task, page, history, site_seed, strategy)
    if family == "shop_category":
        return _shop_category(task, page, history, site_seed)
    if family == "wiki_fact":
        return _wiki_fact(task, page, history, site_seed)
    if family == "wiki_hop":
        return _wiki_hop(task, page, history, site_seed)
    raise ValueError(f"expert: no script for task family {family!r} (task {task.get('task_id')!r}); "
                     f"expected one of {', '.join(FAMILIES)}")
