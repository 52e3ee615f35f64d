"""The seeded image task (toolkits.vlm.make_vlm_task) and the image row reader
(rlinf.data.image_rows): same seed -> same bytes, disjoint splits, answers balanced per question
text and recoverable from the pixels, bad images -> one line, a row rendered by a tiny VLM's
processor."""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from rlinf.data.image_rows import read_image_rows
from toolkits.vlm.make_vlm_task import BACKGROUND, CHANCE, COLOURS, SPLITS, main, make_rows, write_task

COUNTS = {"train": 72, "val": 24, "heldout": 36}


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("vlm_task"), COUNTS, seed=5)


def _tree(folder) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_other_task(task, tmp_path):
    again = write_task(tmp_path / "again", COUNTS, seed=5)
    assert _tree(again) == _tree(task)
    assert len(_tree(task)) == sum(COUNTS.values()) + 4  # PNGs, three JSONL files, task.json
    other = write_task(tmp_path / "other", COUNTS, seed=6)
    assert (other / "train.jsonl").read_bytes() != (task / "train.jsonl").read_bytes()


def test_splits_disjoint_and_answers_balanced_per_question():
    rows = make_rows({"train": 216, "val": 36, "heldout": 72}, seed=1)
    keys = {s: {(hashlib.sha256(r["images"][0]).hexdigest(), r["prompt"]) for r in rows[s]} for s in SPLITS}
    assert [len(keys[s]) for s in SPLITS] == [216, 36, 72]  # no repeat inside a split either
    assert not (keys["train"] & keys["val"] or keys["train"] & keys["heldout"] or keys["val"] & keys["heldout"])
    train = rows["train"]
    assert Counter(r["template"] for r in train) == {"count": 72, "colour_of": 72, "shape_of": 72}
    by_prompt: dict[str, Counter] = {}
    for r in train:
        by_prompt.setdefault(r["prompt"], Counter())[r["answer"]] += 1
    assert len(by_prompt) == 1 + 3 + 4  # one count question, one per shape, one per colour
    for prompt, answers in by_prompt.items():
        assert len(set(answers.values())) == 1, (prompt, answers)  # every answer equally often
    # the best text-only guess (the commonest answer for the question) scores the chance level
    best = sum(max(a.values()) for a in by_prompt.values()) / len(train)
    assert best == pytest.approx(float(CHANCE["mix"])) and CHANCE["mix"] == Fraction(11, 36)


def test_answer_is_in_the_pixels(task):
    got = read_image_rows([str(task / f"{s}.jsonl") for s in SPLITS], image_key="images")
    meta = [json.loads(line) for s in SPLITS for line in (task / f"{s}.jsonl").read_text().splitlines()]
    assert len(got.rows) == len(meta) == sum(COUNTS.values()) and not got.skipped
    for row, m in zip(got.rows, meta):
        pixels = np.asarray(row["images"][0])
        assert pixels.shape == (56, 56, 3)
        colours = {tuple(int(v) for v in c) for c in np.unique(pixels.reshape(-1, 3), axis=0)} - {BACKGROUND}
        assert colours == {COLOURS[o["colour"]] for o in m["objects"]}  # one colour per shape drawn
        for o in m["objects"]:  # each shape's colour is at its centre (centroid for a triangle)
            x0, y0, x1, y1 = o["box"]
            cy = (y0 + 2 * y1) // 3 if o["shape"] == "triangle" else (y0 + y1) // 2
            assert tuple(pixels[cy, (x0 + x1) // 2]) == COLOURS[o["colour"]]
        asked = {"count": str(len(m["objects"])),
                 "colour_of": next((o["colour"] for o in m["objects"] if f"the {o['shape']}?" in m["prompt"]), None),
                 "shape_of": next((o["shape"] for o in m["objects"] if f"is {o['colour']}?" in m["prompt"]), None)}
        assert row["answer"] == asked[m["template"]], m


def test_inline_base64_reads_the_same_pixels(task, tmp_path):
    inline = write_task(tmp_path / "inline", COUNTS, seed=5, inline=True)
    assert not list((inline / "images").iterdir())
    first = json.loads((inline / "val.jsonl").read_text().splitlines()[0])
    assert first["images"][0].startswith("data:image/png;base64,")
    a = read_image_rows([str(inline / "val.jsonl")], image_key="images").rows
    b = read_image_rows([str(task / "val.jsonl")], image_key="images").rows
    assert [np.asarray(r["images"][0]).tobytes() for r in a] == [np.asarray(r["images"][0]).tobytes() for r in b]


def test_bad_images_one_line_naming_file_and_row(task, tmp_path):
    png = (task / "images" / "val_00000.png").read_bytes()
    (tmp_path / "ok.png").write_bytes(png)
    (tmp_path / "junk.png").write_bytes(b"not a png")
    rows = [{"prompt": "a", "answer": "1", "images": ["ok.png"]},
            {"prompt": "b", "answer": "1", "images": [str(tmp_path / "ok.png"), "gone.png"]},
            {"prompt": "c", "answer": "1", "images": ["junk.png"]},
            {"prompt": "d", "answer": "1", "images": ["data:image/png;base64,@@@"]},
            {"prompt": "e", "answer": "1", "images": [{"bytes": base64.b64encode(png).decode()}]},
            {"prompt": "f", "answer": "1"}]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(ValueError) as info:
        read_image_rows([str(data)], image_key="images")
    assert str(info.value) == f"{data}:2: images[1]: image file {tmp_path / 'gone.png'} not found"
    got = read_image_rows([str(data)], image_key="images", skip_bad=True)
    assert [r["prompt"] for r in got.rows] == ["a", "e", "f"]
    assert [len(r["images"]) for r in got.rows] == [1, 1, 0]
    assert got.skipped[1:] == [f"{data}:3: images[0]: image file {tmp_path / 'junk.png'} is not a readable image "
                               "(UnidentifiedImageError)",
                               f"{data}:4: images[0]: data URI 'data:image/png;base64' is not valid base64"]
    assert all("\n" not in line for line in got.skipped)
    with pytest.raises(ValueError, match=r"rows.jsonl:1: row has no 'question' key \(data.prompt_key\)"):
        read_image_rows([str(data)], image_key="images", prompt_key="question")


def test_cli_writes_the_task_and_refuses_bad_counts(tmp_path, capsys):
    main(["--out", str(tmp_path / "t"), "--seed", "2", "--train", "6", "--val", "3", "--heldout", "3"])
    assert "wrote 12 rows" in capsys.readouterr().out
    assert json.loads((tmp_path / "t" / "task.json").read_text())["chance"]["mix"] == "11/36 = 0.306"
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "u"), "--train", "-1"])
    assert "--train must be >= 0" in capsys.readouterr().err


def test_a_row_renders_through_a_tiny_vlm_processor(task, tmp_path):
    from rlinf.models.vlm import load_processor, render_prompt
    from toolkits.vlm.make_tiny_vlm import make_tiny_vlm

    processor = load_processor(make_tiny_vlm("qwen2_5_vl", tmp_path / "vlm", seed=3))
    row = read_image_rows([str(task / "heldout.jsonl")], image_key="images").rows[0]
    batch = render_prompt(processor, row["prompt"], row["images"])
    ids = batch["input_ids"][0].tolist()
    tok = processor.tokenizer
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4]]  # 56 x 56 at patch 14: 4 x 4 patches
    assert ids.count(pad) == 4  # merged 2 x 2: four image tokens, one per quarter of the picture
    start = ids.index(tok.convert_tokens_to_ids("<|vision_start|>"))
    assert ids[start + 1:start + 5] == [pad] * 4
    assert ids[start + 5] == tok.convert_tokens_to_ids("<|vision_end|>")
    assert row["prompt"] in tok.decode(ids[start + 6:])


def test_the_warm_start_trains_on_the_answers_and_writes_a_loadable_vlm(tmp_path):
    """Two supervised steps on a 12-row task (evaluated after each): the record, the held-out
    accuracy in [0, 1], a folder that loads with the base's processor files and other weights."""
    import torch
    from safetensors.torch import load_file

    from rlinf.models.vlm import load_vlm
    from toolkits.vlm.make_tiny_vlm import make_tiny_vlm
    from toolkits.vlm.make_vlm_task import write_task
    from toolkits.vlm.warm_start import warm_start

    base = make_tiny_vlm("qwen2_5_vl", tmp_path / "base", seed=0)
    task = write_task(tmp_path / "task", {"train": 12, "val": 0, "heldout": 6}, seed=0)
    rec = warm_start(str(base), str(task), str(tmp_path / "warm"), target=2.0, max_steps=2, batch=4, eval_every=1,
                     print_fn=lambda *_: None)
    assert rec["steps"] == 2 and [h["step"] for h in rec["history"]] == [0, 1, 2]
    assert all(0.0 <= h["heldout"] <= 1.0 for h in rec["history"])
    before = load_file(str(base / "model.safetensors"))
    after = load_file(str(tmp_path / "warm" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert (tmp_path / "warm" / "preprocessor_config.json").is_file()
    load_vlm(tmp_path / "warm")
