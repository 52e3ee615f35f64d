"""A seeded image question task whose answers are only in the image (issue 47, VLM reasoning RL).

Each row is a small picture (default 56 x 56 pixels, white background) with one to three
coloured shapes, at most one per quarter of the picture, no two of the same shape or colour,
and a question about it:

=================  ===============================================================  ==========
template           question                                                         answers
=================  ===============================================================  ==========
``count``          ``How many shapes are in the picture? Answer with a number.``    1, 2, 3
``colour_of``      ``What colour is the {shape}? Answer with one word.``            4 colours
``shape_of``       ``Which shape is {colour}? Answer with one word.``               3 shapes
=================  ===============================================================  ==========

Shapes are ``circle``, ``square``, ``triangle``; colours ``red``, ``green``, ``blue``,
``yellow`` (pure RGB values, drawn without anti-aliasing, so the picture holds exactly the
background and the shapes' colours). Within each split the templates take turns and every
template cycles through all (question, answer) pairs in a seeded order, so for every question
text the answers are balanced: a reader of the text alone is right with probability 1/3
(``count``), 1/4 (``colour_of``), 1/3 (``shape_of``), 11/36 = 30.6 % over the mix
(:data:`CHANCE`). No (picture, question) pair occurs twice, within or across splits.

Files written under ``--out``: ``train.jsonl``, ``val.jsonl``, ``heldout.jsonl`` with rows
``{"prompt", "answer", "images", "template", "objects"}``: ``images`` is a list of one PNG path
relative to the JSONL file (``images/<split>_<n>.png``), or with ``--inline`` one
``data:image/png;base64,...`` string; ``objects`` lists each shape's ``shape``, ``colour`` and
``box`` ``[x0, y0, x1, y1]``. ``task.json`` records the arguments and the chance levels.
The same seed writes the same bytes.

Example:
    python -m toolkits.vlm.make_vlm_task --out /tmp/vlm_task --seed 0 --train 600 --val 60 --heldout 120
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import random
from fractions import Fraction
from pathlib import Path

from PIL import Image, ImageDraw

COLOURS = {"red": (220, 20, 20), "green": (20, 160, 40), "blue": (20, 60, 220), "yellow": (235, 200, 0)}
SHAPES = ("circle", "square", "triangle")
BACKGROUND = (255, 255, 255)
TEMPLATES = {
    "count": "How many shapes are in the picture? Answer with a number.",
    "colour_of": "What colour is the {shape}? Answer with one word.",
    "shape_of": "Which shape is {colour}? Answer with one word.",
}
SPLITS = ("train", "val", "heldout")
#: probability that the best text-only answer is right, per template and over the equal mix
CHANCE = {"count": Fraction(1, 3), "colour_of": Fraction(1, 4), "shape_of": Fraction(1, 3)}
CHANCE["mix"] = sum(CHANCE.values(), Fraction(0)) / 3


def _pairs(template: str) -> list[tuple[dict, str]]:
    """Every (question fields, answer) pair of ``template``."""
    if template == "count":
        return [({}, str(n)) for n in (1, 2, 3)]
    if template == "colour_of":
        return [({"shape": s}, c) for s in SHAPES for c in COLOURS]
    return [({"colour": c}, s) for c in COLOURS for s in SHAPES]


def _objects(template: str, fields: dict, answer: str, rng: random.Random) -> list[tuple[str, str]]:
    """(shape, colour) of every object: distinct shapes, distinct colours, the asked one included."""
    if template == "count":
        n, fixed = int(answer), []
    else:
        n = rng.randint(1, 3)
        fixed = [(fields["shape"], answer)] if template == "colour_of" else [(answer, fields["colour"])]
    shapes = [s for s in SHAPES if s not in {f[0] for f in fixed}]
    colours = [c for c in COLOURS if c not in {f[1] for f in fixed}]
    rng.shuffle(shapes)
    rng.shuffle(colours)
    return fixed + list(zip(shapes, colours))[: n - len(fixed)]


def draw(objects: list[tuple[str, str]], size: int, rng: random.Random) -> tuple[Image.Image, list[dict]]:
    """The picture of ``objects`` (each in its own quarter, random size and offset) and their boxes."""
    image = Image.new("RGB", (size, size), BACKGROUND)
    pen = ImageDraw.Draw(image)
    cell = size // 2
    cells = rng.sample([(0, 0), (1, 0), (0, 1), (1, 1)], len(objects))
    placed = []
    for (shape, colour), (cx, cy) in zip(objects, cells):
        side = rng.randint(int(cell * 0.55), int(cell * 0.85))
        x0 = cx * cell + rng.randint(1, cell - side - 1)
        y0 = cy * cell + rng.randint(1, cell - side - 1)
        box = [x0, y0, x0 + side - 1, y0 + side - 1]
        rgb = COLOURS[colour]
        if shape == "circle":
            pen.ellipse(box, fill=rgb)
        elif shape == "square":
            pen.rectangle(box, fill=rgb)
        else:
            pen.polygon([(x0 + (side - 1) / 2, y0), (box[2], box[3]), (x0, box[3])], fill=rgb)
        placed.append({"shape": shape, "colour": colour, "box": box})
    return image, placed


def png_bytes(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=False, compress_level=6)
    return out.getvalue()


def make_rows(counts: dict[str, int], seed: int, size: int = 56) -> dict[str, list[dict]]:
    """Rows of every split (``images`` holds the PNG bytes); no (picture, question) twice.

    Example:
        >>> rows = make_rows({"train": 6, "val": 3, "heldout": 3}, seed=0)
        >>> sorted(rows["train"][0]) == ["answer", "images", "objects", "prompt", "template"]
        True
    """
    if size < 24:
        raise ValueError(f"--size {size}: pictures smaller than 24 pixels leave no room for the shapes")
    rng = random.Random(f"vlm-task-{seed}")
    seen: set[tuple[str, str]] = set()
    out: dict[str, list[dict]] = {}
    for split in SPLITS:
        names = list(TEMPLATES)
        queues: dict[str, list] = {t: [] for t in names}
        rows = []
        for i in range(counts[split]):
            template = names[i % len(names)]
            if not queues[template]:  # a fresh seeded cycle through every (question, answer) pair
                queues[template] = _pairs(template)
                rng.shuffle(queues[template])
            fields, answer = queues[template].pop()
            prompt = TEMPLATES[template].format(**fields)
            for _ in range(1000):
                image, placed = draw(_objects(template, fields, answer, rng), size, rng)
                data = png_bytes(image)
                key = (hashlib.sha256(data).hexdigest(), prompt)
                if key not in seen:
                    break
            else:
                raise ValueError(f"could not draw a new picture for {prompt!r}; ask for fewer rows")
            seen.add(key)
            rows.append({"prompt": prompt, "answer": answer, "images": [data], "template": template,
                         "objects": placed})
        rng.shuffle(rows)
        out[split] = rows
    return out


def write_task(out: str | Path, counts: dict[str, int], seed: int, size: int = 56,
               inline: bool = False) -> Path:
    """Write the task's JSONL files (and PNGs unless ``inline``) under ``out``; returns ``out``."""
    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    for split, rows in make_rows(counts, seed, size).items():
        lines = []
        for n, row in enumerate(rows):
            data = row["images"][0]
            if inline:
                ref = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
            else:
                ref = f"images/{split}_{n:05d}.png"
                (out / ref).write_bytes(data)
            lines.append(json.dumps({**row, "images": [ref]}, sort_keys=True))
        (out / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    meta = {"seed": seed, "size": size, "inline": inline, "counts": counts, "templates": TEMPLATES,
            "chance": {k: f"{v} = {float(v):.3f}" for k, v in CHANCE.items()}}
    (out / "task.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder to write the task into")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=600)
    parser.add_argument("--val", type=int, default=60)
    parser.add_argument("--heldout", type=int, default=120)
    parser.add_argument("--size", type=int, default=56, help="picture side in pixels (default 56)")
    parser.add_argument("--inline", action="store_true", help="images as base64 data URIs in the JSONL")
    args = parser.parse_args(argv)
    for name in ("train", "val", "heldout"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must be >= 0")
    counts = {"train": args.train, "val": args.val, "heldout": args.heldout}
    try:
        out = write_task(args.out, counts, args.seed, args.size, args.inline)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"wrote {sum(counts.values())} rows ({counts}) to {out}; text-only chance {float(CHANCE['mix']):.3f}")


if __name__ == "__main__":
    main()
