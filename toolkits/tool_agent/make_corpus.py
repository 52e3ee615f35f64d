"""Synthetic search corpus of invented facts, and questions answerable only from it.

A tiny model cannot know these facts, so a right answer means the ``search`` tool was used and
read. The generator is deterministic (one seeded :class:`random.Random`): 300 invented entities,
60 of each kind (planet, city, inventor, company, animal), each one passage with a title and
four or five facts. Every invented name (entity, capital, river, explorer, ...) is drawn once
from a syllable generator, so a question's name words point at one passage only.

Each question asks one fact of one entity and its answer is written verbatim in that entity's
passage (``doc_id`` names it). The split is by entity: the 50 validation entities (10 per kind,
2 questions each) never appear in training questions, so validation accuracy cannot come from
memorised training facts.

Files written (JSON Lines):

* ``corpus.jsonl``: ``{"id", "title", "text"}``, one passage a line (the ``search`` tool's
  ``corpus_path``);
* ``search_qa_train.jsonl`` (600 rows) and ``search_qa_val.jsonl`` (100 rows):
  ``{"prompt": question, "answer": short answer, "doc_id": passage id}``.

Example:
    python -m toolkits.tool_agent.make_corpus --out examples/tool_agent/data

    >>> passages, train, val = build()
    >>> len(passages), len(train), len(val)
    (300, 600, 100)
    >>> by_id = {p["id"]: p for p in passages}
    >>> all(q["answer"] in by_id[q["doc_id"]]["text"] for q in train + val)
    True
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

__all__ = ["build", "write_corpus", "NameMaker"]

KINDS = ("planet", "city", "inventor", "company", "animal")
PER_KIND = 60
VAL_PER_KIND = 10
VAL_QUESTIONS_PER_ENTITY = 2
N_TRAIN = 600

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gl", "kr", "qu",
           "sh", "st", "th", "tr", "vr", "zh")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ia", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "x", "th", "m", "nd")
_PRODUCTS = ("blue glass", "salt bread", "copper bells", "woven rope", "amber ink", "clay pipes", "silver thread",
             "smoked cheese", "paper lanterns", "iron nails", "glazed tiles", "wool blankets", "honey wine",
             "stone mills", "reed baskets", "cedar boats")
_INVENTIONS = ("tide clock", "wind loom", "glass compass", "steam kettle", "mirror lamp", "spring lock",
               "sand filter", "rope ladder", "copper lens", "folding bridge", "water wheel", "signal drum",
               "paper kite", "echo horn", "seed drill", "ink pump")
_GOODS = ("garden tools", "sail cloth", "music boxes", "weather vanes", "bicycle frames", "glass beads",
          "clock springs", "leather boots", "river barges", "tin toys", "oil lamps", "wooden desks")
_HABITATS = ("marshes", "pine forests", "salt flats", "cliffs", "river deltas", "high meadows", "caves",
             "coral shallows", "dunes", "fern valleys")
_FOODS = ("beetles", "river snails", "moss", "seeds", "small fish", "berries", "roots", "lichen", "frogs",
          "grass shoots")


class NameMaker:
    """Invented, capitalised names, each given out once.

    >>> names = NameMaker(random.Random(0))
    >>> a, b = names(), names()
    >>> a != b and a.isalpha() and a[0].isupper()
    True
    """

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def __call__(self) -> str:
        while True:
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(self.rng.choice((2, 2, 3)))]
            name = ("".join(parts) + self.rng.choice(_CODAS)).capitalize()
            if 5 <= len(name) <= 11 and name not in self.used:
                self.used.add(name)
                return name


# A kind: (title, text, facts) from a name maker and the rng; facts are (question, answer) pairs
Entity = tuple[str, str, list[tuple[str, str]]]


def _planet(name: Callable[[], str], rng: random.Random) -> Entity:
    n, star, capital, first, last = name(), name(), name(), name(), name()
    moons, year = rng.randint(2, 29), rng.randint(2100, 2899)
    text = (f"{n} is a planet of the {star} system. Its capital city is {capital}. {n} has {moons} moons. "
            f"The first landing on {n} was in the year {year}, led by the explorer {first} {last}.")
    facts = [(f"What is the capital city of the planet {n}?", capital),
             (f"How many moons does the planet {n} have?", str(moons)),
             (f"In what year was the first landing on the planet {n}?", str(year)),
             (f"Which explorer led the first landing on the planet {n}?", f"{first} {last}"),
             (f"Which star system is the planet {n} part of?", star)]
    return f"Planet {n}", text, facts


def _city(name: Callable[[], str], rng: random.Random) -> Entity:
    n, country, river = name(), name(), name()
    year, population, product = rng.randint(900, 1899), rng.randint(2_000, 900_000), rng.choice(_PRODUCTS)
    text = (f"{n} is a city in the country of {country}, on the banks of the {river} river. "
            f"It was founded in {year} and has a population of {population} people. "
            f"The city is best known for its {product}.")
    facts = [(f"In what year was the city of {n} founded?", str(year)),
             (f"In which country is the city of {n}?", country),
             (f"On which river does the city of {n} stand?", river),
             (f"What is the population of the city of {n}?", str(population)),
             (f"What is the city of {n} best known for?", product)]
    return f"{n} (city)", text, facts


def _inventor(name: Callable[[], str], rng: random.Random) -> Entity:
    first, last, town = name(), name(), name()
    born = rng.randint(1600, 1899)
    died, invention = born + rng.randint(35, 95), rng.choice(_INVENTIONS)
    text = (f"{first} {last} was an inventor born in {born} in the town of {town}. "
            f"{first} {last} is best known for inventing the {invention}, and died in {died}.")
    facts = [(f"In what year was the inventor {first} {last} born?", str(born)),
             (f"In which town was the inventor {first} {last} born?", town),
             (f"What did the inventor {first} {last} invent?", invention),
             (f"In what year did the inventor {first} {last} die?", str(died))]
    return f"{first} {last}", text, facts


def _company(name: Callable[[], str], rng: random.Random) -> Entity:
    n, first, last, city = name(), name(), name(), name()
    year, staff, goods = rng.randint(1800, 2019), rng.randint(12, 95_000), rng.choice(_GOODS)
    text = (f"{n} Works is a company founded in {year} by {first} {last}. Its headquarters are in the city of "
            f"{city}. {n} Works makes {goods} and employs {staff} people.")
    facts = [(f"In what year was the company {n} Works founded?", str(year)),
             (f"Who founded the company {n} Works?", f"{first} {last}"),
             (f"In which city are the headquarters of {n} Works?", city),
             (f"What does the company {n} Works make?", goods),
             (f"How many people does {n} Works employ?", str(staff))]
    return f"{n} Works", text, facts


def _animal(name: Callable[[], str], rng: random.Random) -> Entity:
    n, place = name().lower(), name()
    habitat, food = rng.choice(_HABITATS), rng.choice(_FOODS)
    weight, years = rng.randint(2, 400), rng.randint(3, 80)
    text = (f"The {n} is an animal that lives in the {habitat} of {place}. An adult {n} weighs about {weight} "
            f"kilograms and lives about {years} years. It eats mostly {food}.")
    facts = [(f"Where does the {n} live?", f"{habitat} of {place}"),
             (f"How many kilograms does an adult {n} weigh?", str(weight)),
             (f"How many years does the {n} live?", str(years)),
             (f"What does the {n} mostly eat?", food)]
    return f"{n.capitalize()} (animal)", text, facts


_MAKERS = {"planet": _planet, "city": _city, "inventor": _inventor, "company": _company, "animal": _animal}


def build(seed: int = 0) -> tuple[list[dict], list[dict], list[dict]]:
    """The passages, the train questions and the val questions (see the module docstring)."""
    rng = random.Random(seed)
    name = NameMaker(rng)
    passages, train_pool, val = [], [], []
    for kind in KINDS:
        for i in range(PER_KIND):
            doc_id = f"{kind}-{i:03d}"
            title, text, facts = _MAKERS[kind](name, rng)
            passages.append({"id": doc_id, "title": title, "text": text})
            rows = [{"prompt": q, "answer": a, "doc_id": doc_id} for q, a in facts]
            if i < VAL_PER_KIND:
                val += rng.sample(rows, VAL_QUESTIONS_PER_ENTITY)
            else:
                train_pool += rows
    rng.shuffle(train_pool)
    rng.shuffle(val)
    return passages, train_pool[:N_TRAIN], val


def _write_jsonl(rows: list[dict], path: Path) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_corpus(out_dir: str | Path, seed: int = 0) -> dict[str, Path]:
    """Write ``corpus.jsonl``, ``search_qa_train.jsonl`` and ``search_qa_val.jsonl`` to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    passages, train, val = build(seed)
    paths = {"corpus": out / "corpus.jsonl", "train": out / "search_qa_train.jsonl",
             "val": out / "search_qa_val.jsonl"}
    for key, rows in (("corpus", passages), ("train", train), ("val", val)):
        _write_jsonl(rows, paths[key])
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="examples/tool_agent/data", help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="seed of the draw (0: the shipped files)")
    args = parser.parse_args(argv)
    for key, path in write_corpus(args.out, args.seed).items():
        print(f"{key}: {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
