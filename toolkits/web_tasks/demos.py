"""Demonstrations for the tiny web policy: the scripted expert, run in the real browser.

Each train task of the demo family is run ``repeats`` times through the runner's own episode
function (:func:`rlinf.runners.web_agent.episode.run_episode`) on the shipped sites in headless
Chromium, so every recorded prompt is exactly what a training episode renders (``vanilla``,
``set_of_marks``, 4 actions of history, the tiny step budget). The "policy" of an episode is
:class:`ExpertPolicy`: it reads the page the episode just observed and answers with
:func:`~toolkits.web_tasks.expert.expert_action`. Repeat 0 is clean; in the other repeats each
step, while at least ``3`` steps are left and no noise was taken yet, is with probability
``noise`` a random valid action instead (a click on a random mark, or a scroll), so the
demonstrations also cover recovering from a wrong page. Each episode of a shop family follows
one of the expert's two strategies (:data:`~toolkits.web_tasks.expert.STRATEGIES`): ``search``
with probability ``search_share`` (leave the category page for the shop home and search for the
name), else ``browse`` (find the link on the category's pages). Families whose answer is one of a
few known values (``shop_category``: the 8 category titles) also get ``guess`` episodes, with
probability ``guess_share``: the first action answers a value drawn uniformly at random, the way
a weak agent answers without looking (1 in 8 is right by chance). The mix is what the warm
policy starts from: RL can then move it towards the strategy that succeeds. For the shop
families, more clean episodes start on search pages that list the product among others
(:func:`search_starts`), so the product's link is seen at many positions: the policy has to
find it by its name rather than remember where it sits. Only the expert's steps (and the
guesses) are recorded.

The choices are seeded from ``(seed, task_id, repeat)``, so the file is the same on every run.
Rows (JSONL): ``task_id``, ``repeat``, ``step``, ``strategy``, ``start`` (start URL),
``prompt`` (the user message), ``response`` (the action text), ``after_noise`` (a random action
came earlier in the episode) and ``observation`` (the page the prompt shows).

Example:
    python -m toolkits.web_tasks.demos --out /tmp/web_demos.jsonl --family shop_category \
        --tasks examples/web_agent/data/train_shop_category.jsonl --noise 0 --guess-share 0.75
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from pathlib import Path

from rlinf.engines.web.actions import format_action, parse_action
from rlinf.runners.web_agent.episode import EpisodeSettings
from rlinf.runners.web_agent.policy import Reply
from toolkits.web_tasks.evaluate import TRAIN_TASKS, Web, open_web, run_tasks, select_tasks, tiny_settings
from toolkits.web_tasks.expert import Page, expert_action

#: a noisy step needs this many steps left (noise, recovery, click, answer); a searching
#: episode needs the noise and its four steps (home, type, click, answer)
NOISE_MIN_STEPS_LEFT = {"browse": 3, "search": 5, "guess": 1_000}


def guess_answers(task: dict, site_seed: int = 0) -> list[str]:
    """The values a ``guess`` episode of ``task``'s family draws from (empty: the family has no
    closed answer set).

    Example:
        >>> guess_answers({"family": "shop_category"})[:3], guess_answers({"family": "shop_price"})
        (['Bath', 'Electronics', 'Garden'], [])
    """
    if task.get("family") != "shop_category":
        return []
    from rlinf.envs.web_sites.catalog import shop_catalog

    return sorted(shop_catalog(site_seed).categories.values())


class _Recorder:
    """The browser of one episode, as seen by its policy: remembers the last observation."""

    def __init__(self, web: Web):
        self.web = web
        self.meta: dict = {}
        self.tree: dict = {}

    def __getattr__(self, name):
        return getattr(self.web, name)

    async def page_metadata(self, iid: str) -> dict:
        self.meta = await self.web.page_metadata(iid)
        return self.meta

    async def ac_tree(self, iid: str, mode: str = "set_of_marks", rich: bool = False) -> dict:
        self.tree = await self.web.ac_tree(iid, mode=mode, rich=rich)
        return self.tree

    def observation(self) -> dict:
        return {"url": self.meta.get("url", ""), "title": self.meta.get("title", ""), "text": self.tree.get("text", "")}


class ExpertPolicy:
    """The expert as an episode policy (``await generate(prompt)``), one per episode.

    Args:
        task: The episode's task.
        recorder: The episode's browser view (its last observation is the page the prompt shows).
        budget: The episode's step budget.
        rng: Random source of the noise; ``noise`` the per-step probability of a random action.
        strategy: The expert's strategy (``browse`` or ``search``), or ``guess``: answer a value
            of :func:`guess_answers` at the first step.
    """

    def __init__(self, task: dict, recorder: _Recorder, budget: int, rng: random.Random, noise: float,
                 site_seed: int = 0, strategy: str = "browse"):
        self.task, self.recorder, self.budget, self.rng, self.noise = task, recorder, budget, rng, noise
        self.site_seed, self.strategy = site_seed, strategy
        self.history: list[str] = []
        self.rows: list[dict] = []
        self.noisy = False

    def random_action(self, page: Page) -> str:
        """A random valid action on ``page``: a click on one of its marks, or a scroll."""
        marks = [e.mark for e in page.elements if e.role in ("link", "button")]
        if not marks or self.rng.random() < 0.15:
            return "scroll down"
        return f"click [{self.rng.choice(marks)}]"

    async def generate(self, prompt: str) -> Reply:
        observation = self.recorder.observation()
        index = len(self.history)
        if (not self.noisy and self.noise > 0 and self.budget - index >= NOISE_MIN_STEPS_LEFT[self.strategy]
                and self.rng.random() < self.noise):
            self.noisy = True
            text = self.random_action(Page.read(observation))
        else:
            if self.strategy == "guess":  # never noisy: the budget rule keeps guesses clean
                text = format_action({"type": "answer",
                                      "text": self.rng.choice(guess_answers(self.task, self.site_seed))})
            else:
                text = expert_action(self.task, observation, self.history, site_seed=self.site_seed,
                                     strategy=self.strategy)
            self.rows.append({"task_id": self.task["task_id"], "repeat": self.task.get("repeat", 0), "step": index,
                              "strategy": self.strategy, "prompt": prompt, "response": text, "after_noise": self.noisy,
                              "observation": observation})
        self.history.append(format_action(parse_action(text, "set_of_marks")))
        return Reply(text=text)


def search_starts(task: dict, count: int, seed: int = 0, site_seed: int = 0) -> list[str]:
    """Up to ``count`` shop search pages (``/shop/search?q=...``) that list the task's product
    among 3 to 8 results, for queries that are 2-4 letter pieces of its name; chosen at random
    (seeded by ``seed`` and the task id). Other families: none.

    Example:
        >>> task = {"task_id": "t", "family": "shop_price", "instruction": "What is the price of the Olive Kettle?"}
        >>> starts = search_starts(task, 2)
        >>> len(starts), all(s.startswith("/shop/search?q=") for s in starts)
        (2, True)
    """
    from urllib.parse import quote

    from rlinf.envs.web_sites.catalog import shop_catalog
    from toolkits.web_tasks.make_tasks import describe_task

    if task.get("family") not in ("shop_price", "shop_stock") or count <= 0:
        return []
    name = describe_task(task, site_seed)["product"].lower()
    shop = shop_catalog(site_seed)
    pieces = sorted({name[i:i + k] for k in (2, 3, 4) for i in range(len(name) - k + 1)} - {""})
    usable = [q for q in pieces if q.strip() == q and 3 <= len(shop.search(q)) <= 8]
    random.Random(f"{seed}:search:{task['task_id']}").shuffle(usable)
    return [f"/shop/search?q={quote(q)}" for q in usable[:count]]


async def collect_demos(tasks: list[dict], *, repeats: int = 4, noise: float = 0.5, searches: int = 0,
                        seed: int = 0, settings: EpisodeSettings | None = None, concurrency: int = 4,
                        site_seed: int = 0, search_share: float = 0.0,
                        guess_share: float = 0.0) -> tuple[list[dict], dict]:
    """Run the expert on ``tasks`` ``repeats`` times from their start pages, and once from each
    of up to ``searches`` search pages that list the product (:func:`search_starts`, clean
    episodes); returns ``(rows, stats)``. Each start-page episode uses the ``search`` strategy
    with probability ``search_share``, ``guess`` with probability ``guess_share`` (families with
    :func:`guess_answers` only), else ``browse`` (seeded per task and repeat).

    ``stats``: episodes, expert success rate (clean repeats and all, guesses left out), rows,
    rows after noise, episodes that searched and that guessed, guess success rate.
    """
    for name, share in (("search_share", search_share), ("guess_share", guess_share)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {share}")
    if search_share + guess_share > 1.0:
        raise ValueError(f"search_share + guess_share must be at most 1, got {search_share + guess_share}")
    settings = settings or tiny_settings()
    policies: dict[tuple[str, int], ExpertPolicy] = {}
    runs = [dict(t, repeat=r) for t in tasks for r in range(repeats)]
    runs += [dict(t, repeat=repeats + j, start_url=url) for t in tasks
             for j, url in enumerate(search_starts(t, searches, seed, site_seed))]
    async with open_web(site_seed) as web:
        def episode_for(task: dict, repeat: int) -> tuple[_Recorder, ExpertPolicy]:
            rng = random.Random(f"{seed}:{task['task_id']}:{repeat}")
            pick = random.Random(f"{seed}:strategy:{task['task_id']}:{repeat}").random()
            strategy = "browse"
            if repeat < repeats and guess_answers(task, site_seed) and pick < guess_share:
                strategy = "guess"
            elif repeat < repeats and guess_share <= pick < guess_share + search_share:
                strategy = "search"
            recorder = _Recorder(web)
            policy = ExpertPolicy(task, recorder, settings.max_steps[task["difficulty"]], rng,
                                  noise if 0 < repeat < repeats else 0.0, site_seed, strategy)
            policies[(task["task_id"], repeat)] = policy
            return recorder, policy

        trajectories = await run_tasks(web, runs, episode_for, settings, concurrency)
    rows = [dict(row, start=run["start_url"]) for run in runs
            for row in policies[(run["task_id"], run["repeat"])].rows]
    guessed = [t for t in trajectories if policies[(t["task"]["task_id"], t["repeat"])].strategy == "guess"]
    expert = [t for t in trajectories if policies[(t["task"]["task_id"], t["repeat"])].strategy != "guess"]
    clean = [t for t in expert if t["repeat"] == 0 or t["repeat"] >= repeats]
    stats = {"episodes": len(trajectories), "rows": len(rows),
             "rows_after_noise": sum(r["after_noise"] for r in rows),
             "search_episodes": sum(p.strategy == "search" for p in policies.values()),
             "guess_episodes": len(guessed),
             "guess_success": sum(t["judge"]["success"] for t in guessed) / max(len(guessed), 1),
             "expert_success_clean": sum(t["judge"]["success"] for t in clean) / max(len(clean), 1),
             "expert_success_all": sum(t["judge"]["success"] for t in expert) / max(len(expert), 1),
             "failed": [(t["task"]["task_id"], t["repeat"], t["status"], t["answer"])
                        for t in expert if not t["judge"]["success"]]}
    return rows, stats


_PRICE_LINE = re.compile(r"^Price: \$\d+\.\d\d$", re.MULTILINE)
_CENTS = (0, 25, 49, 50, 75, 95, 99)


def _random_price(rng: random.Random) -> str:
    """A price drawn like the shop catalog draws them (``$3.00`` to ``$180.99``)."""
    return f"${rng.randint(3, 180)}.{rng.choice(_CENTS):02d}"


def _relist(row: dict, rng: random.Random, products: set[str], targets: set[str]) -> dict | None:
    """``row`` (a click on a product link) with the product links' names shuffled over the same
    marks and, half of the time, the task asking for another listed product of ``targets``; the
    click follows the asked product. A searching episode's click away from a listing (``Shop
    home``) gets the shuffled names and keeps its click, so the copies keep the strategies'
    shares. None when the page lists fewer than two products."""
    page = Page.read(row["observation"])
    slots = [e for e in page.elements if e.role == "link" and e.name in products]
    clicked = next((e.name for e in slots if f"click [{e.mark}]" == row["response"]), None)
    leaves = clicked is None and row.get("strategy") == "search"
    if (clicked is None and not leaves) or len(slots) < 2:
        return None
    names = [e.name for e in slots]
    rng.shuffle(names)
    renamed = {e.mark: name for e, name in zip(slots, names)}
    lines = []
    for line in row["observation"]["text"].splitlines():
        element = Page.read({"text": line}).elements
        if element and element[0].mark in renamed:
            line = line.replace(f'"{element[0].name}"', f'"{renamed[element[0].mark]}"', 1)
        lines.append(line)
    others = sorted(n for n in names if n in targets and n != clicked)
    asked = rng.choice(others) if others and rng.random() < 0.5 else clicked
    if leaves:
        return _with_text(row, "\n".join(lines), row["response"])
    mark = next(m for m, name in renamed.items() if name == asked)
    new = _with_text(row, "\n".join(lines), f"click [{mark}]")
    if new is None or asked == clicked:
        return new
    prompt = [line.replace(clicked, asked) if line.startswith("Task: ") else line for line in new["prompt"].split("\n")]
    return dict(new, prompt="\n".join(prompt), asked=asked)


def _reprice(row: dict, rng: random.Random) -> dict | None:
    """``row`` (the answer on a product page) with another price on the page and in the answer;
    None unless the row answers the one price its page shows."""
    text = row["observation"]["text"]
    found = _PRICE_LINE.findall(text)
    if len(found) != 1 or row["response"] != format_action({"type": "answer", "text": found[0][len("Price: "):]}):
        return None
    price = _random_price(rng)
    return _with_text(row, _PRICE_LINE.sub(f"Price: {price}", text), format_action({"type": "answer", "text": price}))


_TYPED = re.compile(r'^type \[(\d+)\] "((?:[^"\\]|\\.)*)"( enter)?$')
_SYLLABLES = ("ba", "ren", "to", "lis", "mor", "ka", "ve", "dun", "sel", "pi", "gra", "hol", "nu", "fe", "zar",
              "qui", "lo", "tem", "wy", "cor", "ash", "bel", "rin", "os")


def _pseudo_word(rng: random.Random) -> str:
    """A made-up capitalised word of 2-3 syllables (``Renlis``)."""
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _random_name(rng: random.Random, known: list[str], forbidden: set[str], made_up: bool = True) -> str:
    """A product-like name that is not in ``forbidden``: an adjective of ``known``'s names with
    another known name's noun, or with one or two made-up words; ``made_up=False``: one of
    ``known`` (for a tokenizer that spells each product name as one token)."""
    if not made_up:
        return rng.choice(known)
    for _ in range(100):
        adjective = rng.choice(known).split()[0]
        if rng.random() < 0.5:
            noun = " ".join(rng.choice(known).split()[1:])
        else:
            noun = " ".join(_pseudo_word(rng) for _ in range(rng.randint(1, 2)))
        name = f"{adjective} {noun}".strip()
        if name not in forbidden:
            return name
    raise RuntimeError("no product-like name outside the forbidden set")


def _rename(row: dict, rng: random.Random, known: list[str], forbidden: set[str], made_up: bool = True) -> dict | None:
    """``row`` (a typed search for the task's product) with another name in the task line and in
    the typed text; None when the name is not in the task line."""
    match = _TYPED.match(row["response"])
    lines = row["prompt"].split("\n")
    task_at = next((i for i, line in enumerate(lines) if line.startswith("Task: ")), None)
    if match is None or task_at is None or match.group(2) not in lines[task_at]:
        return None
    old, new = match.group(2), _random_name(rng, known, forbidden, made_up)
    lines[task_at] = lines[task_at].replace(old, new)
    response = format_action({"type": "type", "id": int(match.group(1)), "text": new, "submit": bool(match.group(3))})
    return dict(row, prompt="\n".join(lines), response=response, asked=new, augmented=True)


def _recategorise(row: dict, rng: random.Random, categories: dict[str, str]) -> dict | None:
    """``row`` (the answer on a category listing) with another category's title in the page
    line, the heading and the URL, and in the answer; the listed products stay. None when the
    row is not such an answer."""
    url = row["observation"].get("url") or ""
    slug = url.split("/shop/category/", 1)[1].split("?")[0] if "/shop/category/" in url else ""
    title = categories.get(slug)
    if title is None or row["response"] != format_action({"type": "answer", "text": title}):
        return None
    new_slug = rng.choice(sorted(s for s in categories if s != slug))
    new_title = categories[new_slug]
    swaps = ((f"{title} - page", f"{new_title} - page"), (f"/shop/category/{slug}", f"/shop/category/{new_slug}"),
             (f'heading "{title}"', f'heading "{new_title}"'))

    def swap(text: str) -> str:
        for old, new in swaps:
            text = text.replace(old, new)
        return text

    observation = {key: swap(value) if isinstance(value, str) else value for key, value in row["observation"].items()}
    return dict(row, prompt=swap(row["prompt"]), observation=observation, augmented=True,
                response=format_action({"type": "answer", "text": new_title}))


def _with_text(row: dict, text: str, response: str) -> dict | None:
    old = row["observation"]["text"]
    if old not in row["prompt"]:  # a truncated observation: leave it alone
        return None
    return dict(row, prompt=row["prompt"].replace(old, text, 1), response=response,
                observation=dict(row["observation"], text=text), augmented=True)


def augment_rows(rows: list[dict], clicks: int = 4, answers: int = 1, seed: int = 0,
                 site_seed: int = 0, types: int = 0, made_up: bool = True) -> list[dict]:
    """Counterfactual copies of demonstration steps, so the policy learns to read the page rather
    than remember the catalog: ``clicks`` copies of each click on a product listing, with the
    product links shuffled over the same marks and half of the time the task asking for another
    listed product (the click follows the asked product), and ``answers`` copies of each answer
    on a product page, with a random price on the page and in the answer (an answer on a
    category listing: another category's title on the page and in the answer), and ``types`` copies
    of each typed search with another name in the task line and the typed text (an adjective of
    a train product with another train product's noun or with made-up words; ``made_up=False``:
    another train product's name), so the policy
    learns to copy the name rather than remember it. Everything else in the prompt stays as the
    browser rendered it. Only products the expert clicked or typed in ``rows`` (the train
    products) are ever asked for, and no copy names another product, so held-out products stay
    held out.

    Example:
        >>> row = {"task_id": "t", "repeat": 0, "step": 1, "response": 'answer "$5.00"',
        ...        "observation": {"url": "/shop/product/1", "title": "A | Shop", "text": "Price: $5.00"},
        ...        "prompt": "Task: price?\\nPage: A | Shop (/shop/product/1)\\nPrice: $5.00\\nAction:"}
        >>> new = augment_rows([row], answers=1, seed=1)[0]
        >>> new["response"] == f'answer "{new["observation"]["text"][7:]}"' and new["augmented"]
        True
    """
    from rlinf.envs.web_sites.catalog import shop_catalog

    products = {p.name for p in shop_catalog(site_seed).products}
    categories = shop_catalog(site_seed).categories
    targets = {e.name for row in rows for e in Page.read(row["observation"]).elements
               if e.name in products and row["response"] == f"click [{e.mark}]"}
    typed = {m.group(2) for row in rows if (m := _TYPED.match(row["response"])) and m.group(2) in products}
    known = sorted(targets | typed)
    forbidden = products - set(known)
    out = []
    for i, row in enumerate(rows):
        rng = random.Random(f"{seed}:augment:{i}")
        is_click = re.fullmatch(r"click \[\d+\]", row["response"]) is not None
        is_answer = row["response"].startswith("answer ")
        is_type = _TYPED.match(row["response"]) is not None and bool(known)
        for _ in range(clicks if is_click else answers if is_answer else types if is_type else 0):
            if is_type:
                new = _rename(row, rng, known, forbidden, made_up)
            else:
                new = (_relist(row, rng, products, targets) if is_click
                       else _recategorise(row, rng, categories) or _reprice(row, rng))
            if new is not None:
                out.append(new)
    return out


def write_jsonl(rows: list[dict], path: str | Path) -> Path:
    """Write rows as JSONL (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a JSONL file; a bad line raises ``ValueError`` naming file and line."""
    rows = []
    with Path(path).open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc.msg}") from None
    return rows


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="Record expert demonstrations in the real browser.")
    p.add_argument("--out", required=True, help="output JSONL")
    p.add_argument("--tasks", default=str(TRAIN_TASKS))
    p.add_argument("--family", default="shop_price")
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--noise", type=float, default=0.5)
    p.add_argument("--searches", type=int, default=0)
    p.add_argument("--search-share", type=float, default=0.0)
    p.add_argument("--guess-share", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    started = time.perf_counter()
    rows, stats = asyncio.run(collect_demos(select_tasks(a.tasks, a.family), repeats=a.repeats, noise=a.noise,
                                            searches=a.searches, seed=a.seed, search_share=a.search_share,
                                            guess_share=a.guess_share))
    write_jsonl(rows, a.out)
    print(json.dumps({**stats, "seconds": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
