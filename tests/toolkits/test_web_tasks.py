"""The shipped web task files: valid, reproducible byte for byte, held out by entity, and every
reference answer checked against the live site server by walking the pages an agent would."""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from rlinf.data.web_tasks import load_tasks
from rlinf.envs.web_sites import SiteServer
from toolkits.web_tasks import make_tasks as mt

DATA = Path(__file__).resolve().parents[2] / "examples" / "web_agent" / "data"


class _Links(HTMLParser):
    """Link text -> href, and the visible text, of one page."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.html, self.links, self.text, self._href, self._buf = html, {}, [], None, []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href, self._buf = dict(attrs).get("href"), []

    def handle_endtag(self, tag):
        if tag == "a" and self._href is not None:
            self.links["".join(self._buf).strip()] = self._href
            self._href = None

    def handle_data(self, data):
        if self._href is not None:
            self._buf.append(data)
        self.text.append(data)

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())


@pytest.fixture(scope="module")
def shipped():
    return {split: load_tasks(DATA / f"{split}.jsonl") for split in ("train", "test")}


@pytest.fixture(scope="module")
def client():
    with SiteServer(seed=0) as server, httpx.Client(base_url=server.base_url, timeout=5.0,
                                                    headers={"Authorization": f"Bearer {server.token}"}) as c:
        yield c


def _page(client, path: str, **params) -> _Links:
    r = client.get(path, params=params or None)
    assert r.status_code == 200, f"{path} {params}: {r.status_code}"
    return _Links(r.text)


def _walk(client, task: dict) -> str:
    """The answer found on the site by following links from the task's start page."""
    family, info = task["family"], mt.describe_task(task)
    start = _page(client, task["start_url"])
    if family == "shop_price":
        return re.search(r"Price: (\$\d+\.\d\d)", _page(client, start.links[info["product"]]).plain).group(1)
    if family == "shop_category":  # the product page, then "Back to category": the listing's heading
        assert start.links.get(info["category"]) is None and f"<h1>{info['product']}</h1>" in start.html
        return re.search(r"<h1>([^<]+)</h1>", _page(client, start.links["Back to category"]).html).group(1)
    if family == "shop_stock":
        found = _page(client, "/shop/search", q=info["product"])
        return re.search(r"In stock: (\d+)", _page(client, found.links[info["product"]]).plain).group(1)
    if family == "wiki_fact":
        return re.search(r"Founded (\d+)", _page(client, start.links[info["city"]]).plain).group(1)
    if family == "wiki_hop":
        person = _page(client, start.links[info["person"]])
        return re.search(r"Country (\w+)", _page(client, person.links[info["city"]]).plain).group(1)
    step = _page(client, start.links["Start sign-up"])
    plan = {label: key for key, label in mt.PLANS.items()}[info["plan"]]
    for url, params in (("/forms/signup/city", {"name": info["name"]}), ("/forms/signup/plan", {"city": info["city"]}),
                        ("/forms/signup/confirm", {"plan": plan}), ("/forms/signup/done", {})):
        carried = dict(re.findall(r'type="hidden" name="(\w+)" value="([^"]*)"', step.html))
        step = _page(client, url, **{**carried, **params})
    return re.search(r"confirmation code is: (\w+)", step.plain).group(1)


def test_shipped_files_are_valid_and_mixed(shipped):
    train, test = shipped["train"], shipped["test"]
    assert 200 <= len(train) <= 260 and 50 <= len(test) <= 70
    for tasks in (train, test):
        families = Counter(t["family"] for t in tasks)
        assert set(families) == set(mt.MAIN_FAMILIES)
        assert families["shop_price"] == max(families.values())
        assert {t["difficulty"] for t in tasks} == {"easy", "medium", "hard"}
    assert not {t["task_id"] for t in train} & {t["task_id"] for t in test}


def test_regenerating_with_the_same_seed_is_byte_identical(tmp_path):
    paths = mt.write_tasks(tmp_path, seed=0)
    for path in paths:
        assert path.read_bytes() == (DATA / path.name).read_bytes(), f"{path.name} differs: rerun make_tasks"
    other = mt.write_tasks(tmp_path / "s1", seed=1)
    assert other[0].read_bytes() != paths[0].read_bytes()


def test_train_and_test_entities_are_disjoint(shipped):
    keys = {"shop_price": "product", "shop_stock": "product", "wiki_fact": "city", "wiki_hop": "person",
            "form_code": "name"}
    seen = {}
    for split, tasks in shipped.items():
        seen[split] = {(t["family"], mt.describe_task(t)[keys[t["family"]]]) for t in tasks}
    assert not seen["train"] & seen["test"]
    test_birth_cities = {mt.describe_task(t)["city"] for t in shipped["test"] if t["family"] == "wiki_hop"}
    train_cities = {mt.describe_task(t)["city"] for t in shipped["train"] if t["family"] == "wiki_fact"}
    assert not test_birth_cities & train_cities  # test people are born in held-out cities


def test_reference_answers_match_the_live_site(shipped, client):
    # every task of both files (a few hundred local requests, well under a second)
    for task in shipped["train"] + shipped["test"]:
        assert _walk(client, task) == task["reference_answer"], task["task_id"]


def test_demo_family_files_hold_the_shop_price_products_and_answer_on_the_site(shipped, client):
    demo = {split: load_tasks(DATA / f"{split}_{mt.DEMO_FAMILY}.jsonl") for split in ("train", "test")}
    for split, tasks in demo.items():
        assert {t["family"] for t in tasks} == {"shop_category"} and {t["difficulty"] for t in tasks} == {"easy"}
        priced = {mt.describe_task(t)["product"] for t in shipped[split] if t["family"] == "shop_price"}
        assert {mt.describe_task(t)["product"] for t in tasks} == priced  # same held-out products
        for task in tasks:
            assert _walk(client, task) == task["reference_answer"], task["task_id"]
    assert len(demo["train"]) == 64 and len(demo["test"]) == 16
    assert len({t["reference_answer"] for t in demo["test"]}) >= 6  # held-out answers span the categories


def test_a_wrong_reference_is_caught(shipped, client):
    task = next(t for t in shipped["test"] if t["family"] == "shop_price")
    assert _walk(client, {**task, "reference_answer": "$0.00"}) != "$0.00"


def test_describe_task_refuses_foreign_instructions():
    task = {"task_id": "x", "family": "shop_price", "instruction": "Buy a boat."}
    with pytest.raises(ValueError, match="instruction does not follow the shop_price template"):
        mt.describe_task(task)
    with pytest.raises(ValueError, match="no product named 'Gold Boat'"):
        mt.describe_task({**task, "instruction": "What is the price of the Gold Boat?"})


def test_cli_refuses_a_file_as_output_folder(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert mt.main(["--out", str(target)]) == 2
    assert "--out " in capsys.readouterr().err
