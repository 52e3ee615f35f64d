"""Task files and samplers: every bad line is named file:line and field; samplers give exact sizes,
counts, filters and repeat indices, and the same seed gives the same sample."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from rlinf.data.web_tasks import TaskFileError, load_tasks, ratio_counts, resolve_url, sample_tasks

GOOD = {"task_id": "shop-price-0001", "instruction": "What is the price of the Blue Kettle?",
        "start_url": "/shop/category/kitchen", "difficulty": "easy", "reference_answer": "$12.50", "domain": "shop"}


def _write(tmp_path, lines, name="train.jsonl"):
    path = tmp_path / name
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines), encoding="utf-8")
    return path


def _pool(counts: dict[str, int], domain_of=lambda i: "shop") -> list[dict]:
    out = []
    for difficulty, n in counts.items():
        for i in range(n):
            out.append({**GOOD, "task_id": f"{difficulty}-{i}", "difficulty": difficulty, "domain": domain_of(i)})
    return out


def test_load_fills_defaults_and_skips_blank_lines(tmp_path):
    second = {**GOOD, "task_id": "b", "answer_type": "number", "reference_answer": "17", "family": "shop_stock"}
    tasks = load_tasks(_write(tmp_path, [GOOD, "", second]))
    assert [t["task_id"] for t in tasks] == ["shop-price-0001", "b"]
    assert tasks[0]["answer_type"] == "exact" and tasks[0]["family"] is None
    assert tasks[1]["answer_type"] == "number" and tasks[1]["family"] == "shop_stock"


@pytest.mark.parametrize("line, message", [
    ('{"task_id": "x",', r"train\.jsonl:2: not valid JSON"),
    ({k: v for k, v in GOOD.items() if k != "start_url"} | {"task_id": "x"},
     r"train\.jsonl:2: missing field 'start_url'"),
    ({**GOOD, "task_id": "x", "difficulty": "xhard"},
     r"train\.jsonl:2: difficulty must be easy, medium or hard, got 'xhard'$"),
    (GOOD, r"train\.jsonl:2: duplicate task_id 'shop-price-0001' \(first on line 1\)"),
    ({**GOOD, "task_id": "x", "answer_typ": "number"}, r"train\.jsonl:2: unknown field 'answer_typ'"),
    ({**GOOD, "task_id": "x", "answer_type": "fuzzy"},
     r"train\.jsonl:2: answer_type must be exact, number or contains"),
    ({**GOOD, "task_id": "x", "answer_type": "number"}, r"train\.jsonl:2: reference_answer must be a number"),
    ({**GOOD, "task_id": "x", "start_url": "shop/"}, r"train\.jsonl:2: start_url must be an http\(s\) URL or a path"),
    ({**GOOD, "task_id": "x", "instruction": ""}, r"train\.jsonl:2: instruction must be a non-empty string"),
    ({**GOOD, "task_id": 3}, r"train\.jsonl:2: task_id must be a non-empty string, got 3"),
    ("[1, 2]", r"train\.jsonl:2: a task must be a JSON object, got list"),
])
def test_bad_lines_name_file_line_and_field(tmp_path, line, message):
    with pytest.raises(TaskFileError, match=message) as info:
        load_tasks(_write(tmp_path, [GOOD, line]))
    assert "\n" not in str(info.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl does not exist"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(TaskFileError, match=r"^empty\.jsonl: no tasks in the file$"):
        load_tasks(_write(tmp_path, [""], "empty.jsonl"))


def test_resolve_url():
    assert resolve_url("/wiki/", "http://127.0.0.1:9000/") == "http://127.0.0.1:9000/wiki/"
    assert resolve_url("/shop/search?q=a b", "http://h:1") == "http://h:1/shop/search?q=a b"
    assert resolve_url("http://other:2/x", "http://h:1") == "http://other:2/x"
    with pytest.raises(ValueError, match="base_url is empty"):
        resolve_url("/x", "")


def test_uniform_sizes_without_duplicates_and_cycling_beyond_the_pool():
    pool = _pool({"easy": 10})
    got = sample_tasks(pool, "train", size=7, seed=3)
    ids = [t["task_id"] for t in got]
    assert len(ids) == 7 and len(set(ids)) == 7 and all(t["repeat"] == 0 for t in got)
    assert [t["task_id"] for t in sample_tasks(pool, "train", size=-1, seed=3)] == [t["task_id"] for t in pool]
    assert sample_tasks(pool, "train", size=0, seed=3) == []
    big = Counter(t["task_id"] for t in sample_tasks(pool, "train", size=25, seed=3))
    assert len(big) == 10 and set(big.values()) == {2, 3}
    first_round = [t["task_id"] for t in sample_tasks(pool, "train", size=25, seed=3)][:10]
    assert len(set(first_round)) == 10  # no task twice before all once


def test_same_seed_same_sample_and_copies_not_aliases():
    pool = _pool({"easy": 20, "medium": 20})
    a = sample_tasks(pool, "train", size=8, seed=11)
    b = sample_tasks(pool, "train", size=8, rng=random.Random(11))
    assert a == b and a != sample_tasks(pool, "train", size=8, seed=12)
    a[0]["instruction"] = "changed"
    assert all(t["instruction"] == GOOD["instruction"] for t in pool)


def test_ratio_counts_are_exact():
    pool = _pool({"easy": 30, "medium": 30, "hard": 30})
    got = sample_tasks(pool, "train", size=10, sampler="ratio", seed=0,
                       ratios={"easy": 0.5, "medium": 0.3, "hard": 0.2})
    assert Counter(t["difficulty"] for t in got) == {"easy": 5, "medium": 3, "hard": 2}
    assert len({t["task_id"] for t in got}) == 10
    assert ratio_counts(11, {"easy": 0.5, "medium": 0.3, "hard": 0.2}) == {"easy": 6, "medium": 3, "hard": 2}
    assert ratio_counts(3, {"easy": 2, "hard": 1}) == {"easy": 2, "medium": 0, "hard": 1}
    assert sum(ratio_counts(1023, {"easy": 1, "medium": 1, "hard": 1}).values()) == 1023


def test_ratio_errors_name_the_difficulty():
    pool = _pool({"easy": 5})
    with pytest.raises(TaskFileError, match=r"ratios\.hard = 0\.5 asks for 2 hard tasks, but the train pool has none"):
        sample_tasks(pool, "train", size=4, sampler="ratio", seed=0, ratios={"easy": 0.5, "hard": 0.5})
    with pytest.raises(TaskFileError, match="ratios: unknown difficulty 'expert'"):
        sample_tasks(pool, "train", size=4, sampler="ratio", seed=0, ratios={"expert": 1})
    with pytest.raises(TaskFileError, match="the ratio sampler needs ratios"):
        sample_tasks(pool, "train", size=4, sampler="ratio", seed=0)
    with pytest.raises(TaskFileError, match=r"ratios\.easy must be a number >= 0, got -1"):
        ratio_counts(4, {"easy": -1, "hard": 1})


def test_blocked_domains_filter_train_only():
    pool = _pool({"easy": 10}, domain_of=lambda i: "wiki" if i % 2 else "shop")
    pool.append({**GOOD, "task_id": "remote", "domain": "web", "start_url": "https://www.blocked.example/a"})
    train = sample_tasks(pool, "train", size=-1, seed=0, blocked_domains=["wiki", "blocked.example"])
    assert {t["domain"] for t in train} == {"shop"} and len(train) == 5
    test = sample_tasks(pool, "test", size=-1, seed=0, blocked_domains=["wiki", "blocked.example"])
    assert len(test) == 11
    with pytest.raises(TaskFileError, match=r"no train tasks to sample from \(1 given, all in blocked domains\)"):
        sample_tasks(pool[-1:], "train", size=2, seed=0, blocked_domains=["blocked.example"])


def test_repeat_times_gives_rounds_with_indices():
    pool = _pool({"hard": 3})
    got = sample_tasks(pool, "test", size=-1, seed=0, repeat_times=3)
    assert [(t["task_id"], t["repeat"]) for t in got] == [
        (f"hard-{i}", r) for r in range(3) for i in range(3)]
    assert len(sample_tasks(pool, "test", size=2, seed=0, repeat_times=2)) == 4


@pytest.mark.parametrize("kwargs, message", [
    ({"split": "valid"}, "split must be train or test, got 'valid'"),
    ({"sampler": "greedy"}, "train_tasks_sampler must be uniform or ratio, got 'greedy'"),
    ({"size": -2}, r"train_tasks_rollout_size must be -1 \(all\) or a whole number >= 0, got -2"),
    ({"repeat_times": 0}, "test_tasks_repeat_times must be a whole number >= 1, got 0"),
    ({"seed": None}, "pass exactly one of seed= or rng="),
    ({"rng": random.Random(0)}, "pass exactly one of seed= or rng="),
])
def test_sampler_argument_errors(kwargs, message):
    args = {"split": "train", "size": 2, "seed": 0, **kwargs}
    split = args.pop("split")
    with pytest.raises(TaskFileError, match=message):
        sample_tasks(_pool({"easy": 3}), split, **args)
