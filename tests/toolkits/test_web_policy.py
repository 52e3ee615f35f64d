"""Tests of the tiny web policy toolkit: expert, demonstrations, tokenizer, model, warm start,
evaluation and the cached one-command build, against the real sites in real headless Chromium.

Tests that need Chromium skip cleanly when Playwright or the binary is missing.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
import torch

from rlinf.engines.web.actions import parse_action
from rlinf.runners.web_agent.policy import chat_ids
from rlinf.runners.web_agent.prompts import render_prompt
from toolkits.web_tasks.expert import Page, expert_action
from toolkits.web_tasks.tokenizer import chat_text, tokenizer_from_demos

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "web_agent" / "data" / "train.jsonl"
TEST = ROOT / "examples" / "web_agent" / "data" / "test.jsonl"
DEMO_TRAIN = ROOT / "examples" / "web_agent" / "data" / "train_shop_category.jsonl"
DEMO_TEST = ROOT / "examples" / "web_agent" / "data" / "test_shop_category.jsonl"


def _need_chromium() -> None:
    pytest.importorskip("playwright.async_api", reason="playwright is not installed (scripts/setup_system_browser.sh)")
    from rlinf.engines.web.browser import find_chromium

    try:
        find_chromium(None)
    except Exception as err:  # noqa: BLE001 - any reason the binary is unusable skips
        pytest.skip(f"no Chromium: {err}")


def _tasks(path: Path, family: str, count: int) -> list[dict]:
    from toolkits.web_tasks.evaluate import select_tasks

    return select_tasks(path, family, count)


@pytest.fixture(scope="module")
def settings():
    from toolkits.web_tasks.evaluate import tiny_settings

    return tiny_settings()


@pytest.fixture(scope="module")
def demos(settings):
    """Expert demonstrations on 4 shop_price train tasks: a clean run, a noisy run and one search
    start each (seeded; 5 of the 8 start-page episodes follow the search strategy), plus the
    collection stats."""
    _need_chromium()
    from toolkits.web_tasks.demos import collect_demos

    rows, stats = asyncio.run(collect_demos(_tasks(TRAIN, "shop_price", 4), repeats=2, noise=1.0, searches=1,
                                            seed=3, settings=settings, search_share=0.35))
    return rows, stats


@pytest.fixture(scope="module")
def tokenizer(demos):
    return tokenizer_from_demos(demos[0], vocab_size=512)


# ----------------------------------------------------------------------------- expert


def test_expert_reads_marks_and_answers_offline():
    task = json.loads(TRAIN.read_text().splitlines()[0])
    from toolkits.web_tasks.make_tasks import describe_task

    name = describe_task(task)["product"]
    listing = {"url": "http://h/shop/category/x", "title": "X - page 1 of 2 | Shop",
               "text": f'[1] link "Shop home"\n[2] link "Cart"\n[3] link "Other Thing"\n[7] link "{name}"\n'
                       '[9] link "Next page"'}
    assert expert_action(task, listing, []) == "click [7]"
    product = {"url": "http://h/shop/product/3", "title": f"{name} | Shop", "text": f'heading "{name}"'}
    assert expert_action(task, product, ["click [7]"]) == f'answer "{task["reference_answer"]}"'
    wrong = {"url": "http://h/shop/product/4", "title": "Other Thing | Shop", "text": ""}
    assert expert_action(task, wrong, ["click [3]"]) == "goback"
    assert expert_action(task, dict(listing, text='[1] link "Shop home"'), ["scroll down"]) == "scroll up"
    with pytest.raises(ValueError, match="no script for task family 'form_code'"):
        expert_action({"family": "form_code", "task_id": "f"}, listing, [])


def test_expert_search_strategy_goes_home_types_the_name_and_clicks_the_result():
    task = json.loads(TRAIN.read_text().splitlines()[0])
    from toolkits.web_tasks.make_tasks import describe_task

    name = describe_task(task)["product"]
    listing = {"url": "http://h/shop/category/x", "title": "X - page 1 of 2 | Shop",
               "text": f'[1] link "Shop home"\n[2] link "Cart"\n[7] link "{name}"\n[9] link "Next page"'}
    assert expert_action(task, listing, [], strategy="search") == "click [1]"  # even with the product listed
    assert expert_action(task, listing, [], strategy="browse") == "click [7]"
    home = {"url": "http://h/shop/", "title": "Shop home",
            "text": '[1] link "Shop home"\n[2] link "Cart"\n[3] searchbox "Search products" value=""\n'
                    '[5] link "Kitchen"'}
    assert expert_action(task, home, ["click [1]"], strategy="search") == f'type [3] "{name}" enter'
    assert expert_action(task, home, ["click [1]"], strategy="browse") == "goback"  # shop_price browses back
    results = {"url": "http://h/shop/search?q=x", "title": f"Search: {name} | Shop",
               "text": f'[1] link "Shop home"\n[3] searchbox "Search products"\n[5] link "{name}"'}
    assert expert_action(task, results, ["click [1]", "type"], strategy="search") == "click [5]"
    wrong = {"url": "http://h/shop/product/4", "title": "Other Thing | Shop", "text": '[1] link "Shop home"'}
    assert expert_action(task, wrong, ["click [5]"], strategy="search") == "click [1]"
    with pytest.raises(ValueError, match="strategy must be one of browse, search, got 'walk'"):
        expert_action(task, listing, [], strategy="walk")


def test_page_reads_escaped_names():
    page = Page.read({"url": "http://h:9/a?b=1", "title": "T", "text": '[12] button "Say \\"hi\\""\nplain'})
    assert page.path == "/a" and page.elements[0].mark == 12 and page.elements[0].name == 'Say "hi"'
    assert page.link('say "HI"').mark == 12 and page.lines == ("plain",)


@pytest.mark.slow
def test_expert_solves_every_demo_episode_in_the_browser(demos):
    rows, stats = demos
    assert stats["episodes"] == 4 * 2 + 4
    assert stats["expert_success_clean"] == 1.0 and stats["expert_success_all"] == 1.0, stats["failed"]
    assert stats["rows_after_noise"] > 0
    assert stats["search_episodes"] == 5  # drawn with share 0.35 from seed 3
    by_strategy = {s: [r for r in rows if r["strategy"] == s] for s in ("browse", "search")}
    assert sum(r["response"].startswith("type [") for r in by_strategy["search"]) >= stats["search_episodes"] - 1
    assert not any(r["response"].startswith("type [") for r in by_strategy["browse"]
                   if r["start"].startswith("/shop/category"))
    firsts = [r for r in by_strategy["search"] if r["step"] == 0 and not r["after_noise"]]
    assert firsts and all(r["response"] == "click [1]" for r in firsts)  # "Shop home" is mark 1


@pytest.mark.parametrize("family", ["shop_stock", "wiki_fact", "wiki_hop"])
def test_expert_solves_other_families(family, settings):
    _need_chromium()
    from toolkits.web_tasks.demos import collect_demos

    _, stats = asyncio.run(collect_demos(_tasks(TEST, family, 2), repeats=1, noise=0.0, settings=settings))
    assert stats["expert_success_clean"] == 1.0, stats["failed"]


# ----------------------------------------------------------------------------- demonstrations


def test_demo_prompts_are_the_episode_rendering(demos, settings):
    rows, _ = demos
    by_id = {t["task_id"]: t for t in _tasks(TRAIN, "shop_price", 4)}
    for row in rows:
        task = by_id[row["task_id"]]
        history = [r["response"] for r in rows
                   if (r["task_id"], r["repeat"]) == (row["task_id"], row["repeat"]) and r["step"] < row["step"]]
        site_base = "/".join(row["observation"]["url"].split("/")[:3])
        expected = render_prompt(settings.prompt_version, task["instruction"], row["observation"],
                                 history[-settings.history_length:], settings.max_steps["easy"] - row["step"],
                                 mode=settings.mode, site_base=site_base,
                                 max_observation_chars=settings.max_observation_chars)
        if row["after_noise"]:  # the random action is in the history but not in the rows
            def keep(text):
                return [line for line in text.splitlines() if not line.startswith("Previous actions:")]

            assert keep(row["prompt"]) == keep(expected)
            assert "none" not in row["prompt"].split("Previous actions:")[1].splitlines()[0]
        else:
            assert row["prompt"] == expected
        assert row["prompt"].endswith(f"Steps left: {settings.max_steps['easy'] - row['step']}\nAction:")
        assert "(/shop/" in row["prompt"] and "http://" not in row["prompt"]
        assert parse_action(row["response"]).type in ("click", "answer", "goback", "scroll", "type")
    for task_id, task in by_id.items():  # clean runs: browse (2 steps here) or search (4 steps)
        clean = [r for r in rows if (r["task_id"], r["repeat"]) == (task_id, 0)]
        want = (["click [1]", "type [3] ", "click [5]"] if clean[0]["strategy"] == "search" else ["click ["])
        assert [r["step"] for r in clean] == list(range(len(want) + 1))
        assert all(r["response"].startswith(w) for r, w in zip(clean, want))
        assert clean[-1]["response"] == f'answer "{task["reference_answer"]}"'
    assert {r["strategy"] for r in rows if r["repeat"] == 0} == {"browse", "search"}
    searched = [r for r in rows if "/shop/search?q=" in r["start"]]
    assert len(searched) == 8 and all('heading "Search results"' in r["prompt"] for r in searched[::2])


@pytest.mark.slow
def test_demos_are_deterministic_and_round_trip_jsonl(demos, tmp_path, settings):
    from toolkits.web_tasks.demos import collect_demos, read_jsonl, write_jsonl

    rows, _ = demos
    again, _ = asyncio.run(collect_demos(_tasks(TRAIN, "shop_price", 4), repeats=2, noise=1.0, searches=1, seed=3,
                                         settings=settings, search_share=0.35))
    strip = [(r["task_id"], r["repeat"], r["step"], r["strategy"], r["response"], r["prompt"].split("Page:")[0])
             for r in rows]
    assert strip == [(r["task_id"], r["repeat"], r["step"], r["strategy"], r["response"],
                      r["prompt"].split("Page:")[0]) for r in again]
    path = write_jsonl(rows, tmp_path / "d" / "demos.jsonl")
    assert read_jsonl(path) == rows
    path.write_text(path.read_text() + "{oops\n")
    with pytest.raises(ValueError, match=rf"demos.jsonl:{len(rows) + 1}: not JSON"):
        read_jsonl(path)
def test_counterfactual_copies_follow_the_page(demos):
    from rlinf.envs.web_sites.catalog import shop_catalog
    from toolkits.web_tasks.demos import augment_rows

    rows, _ = demos
    extra = augment_rows(rows, clicks=3, answers=2, seed=5)
    assert extra == augment_rows(rows, clicks=3, answers=2, seed=5)
    products = {p.name for p in shop_catalog(0).products}

    def product_click(row) -> bool:  # a click on one of at least two listed products
        listed = [e for e in Page.read(row["observation"]).elements if e.name in products]
        return len(listed) >= 2 and any(row["response"] == f"click [{e.mark}]" for e in listed)

    clicks = [r for r in rows if product_click(r)]
    answers = [r for r in rows if r["response"].startswith("answer ")]
    leaves = [r for r in rows if r["strategy"] == "search" and r["response"] == "click [1]"  # to the shop home
              and sum(e.name in products for e in Page.read(r["observation"]).elements) >= 2]
    assert len(clicks) >= 4 and len(answers) >= 8 and len(leaves) >= 2
    assert len(extra) == 3 * (len(clicks) + len(leaves)) + 2 * len(answers)
    train_names = {shop_catalog(0).product_by_name(r["prompt"].split("price of the ")[1].split("?")[0]).name
                   for r in rows}
    prices = set()
    for new in extra:
        page = Page.read(new["observation"])
        task_line = next(line for line in new["prompt"].splitlines() if line.startswith("Task: "))
        asked = task_line.split("price of the ")[1].rstrip("?")
        assert asked in train_names  # held-out products are never asked for
        assert new["observation"]["text"] in new["prompt"] and new["augmented"]
        if new["strategy"] == "search" and new["response"].startswith("click"):
            assert new["response"] == "click [1]" and page.link("Shop home").mark == 1  # the strategy's click stays
        elif new["response"].startswith("click"):
            assert page.link(asked) is not None and new["response"] == f"click [{page.link(asked).mark}]"
        else:
            price = new["response"][len('answer "'):-1]
            assert f"Price: {price}" in new["observation"]["text"]
            prices.add(price)
        original = next(r for r in rows if (r["task_id"], r["repeat"], r["step"]) ==
                        (new["task_id"], new["repeat"], new["step"]))
        assert new["prompt"].splitlines()[-3:] == original["prompt"].splitlines()[-3:]
    assert len(prices) > len(answers)  # prices are redrawn, not copied from the catalog


def test_typed_search_copies_ask_for_another_name_and_type_it(demos):
    import re

    from rlinf.envs.web_sites.catalog import shop_catalog
    from toolkits.web_tasks.demos import augment_rows

    rows, _ = demos
    typed = [r for r in rows if r["response"].startswith("type [")]
    extra = augment_rows(rows, clicks=0, answers=0, seed=5, types=3)
    assert len(typed) >= 2 and len(extra) == 3 * len(typed)
    train = {r["prompt"].split("price of the ")[1].split("?")[0] for r in rows}
    held_out = {p.name for p in shop_catalog(0).products} - train
    for new in extra:
        asked = re.fullmatch(r'type \[3\] "(.+)" enter', new["response"]).group(1)
        task_line = next(line for line in new["prompt"].splitlines() if line.startswith("Task: "))
        assert task_line == f"Task: What is the price of the {asked}?" and asked == new["asked"]
        assert asked not in held_out
        original = next(r for r in typed if (r["task_id"], r["repeat"], r["step"]) ==
                        (new["task_id"], new["repeat"], new["step"]))
        kept = [line for line in original["prompt"].splitlines() if not line.startswith("Task: ")]
        assert [line for line in new["prompt"].splitlines() if not line.startswith("Task: ")] == kept
    assert len({n["asked"] for n in extra}) > len(train)  # names are made up, not only the train ones


@pytest.mark.slow
def test_category_demos_mix_guesses_with_looking_and_copies_swap_the_category():
    _need_chromium()
    from rlinf.envs.web_sites.catalog import shop_catalog
    from toolkits.web_tasks.demos import augment_rows, collect_demos, guess_answers

    tasks = _tasks(DEMO_TRAIN, "shop_category", 3)
    rows, stats = asyncio.run(collect_demos(tasks, repeats=4, noise=0.0, guess_share=0.5, seed=1))
    titles = sorted(shop_catalog(0).categories.values())
    assert guess_answers(tasks[0]) == titles and len(titles) == 8
    guesses = [r for r in rows if r["strategy"] == "guess"]
    assert stats["guess_episodes"] == len(guesses) and 2 <= len(guesses) <= 10
    assert all(r["step"] == 0 and r["response"] in {f'answer "{t}"' for t in titles} for r in guesses)
    assert stats["expert_success_all"] == 1.0, stats["failed"]  # the guesses are left out of the expert's rate
    looked = [r for r in rows if r["strategy"] == "browse"]
    by_id = {t["task_id"]: t for t in tasks}
    assert [r["response"] for r in looked if r["step"] == 0] == ["click [5]"] * (12 - len(guesses))
    assert all(r["response"] == f'answer "{by_id[r["task_id"]]["reference_answer"]}"' for r in looked if r["step"] == 1)
    extra = augment_rows(rows, clicks=0, answers=2, seed=0)
    assert len(extra) == 2 * (12 - len(guesses))  # only answers on a listing are copied; guesses never
    for new in extra:
        title = new["response"][len('answer "'):-1]
        assert f'heading "{title}"' in new["prompt"] and f"Page: {title} - page" in new["prompt"]
        assert new["observation"]["title"].startswith(f"{title} - page")
        assert title != by_id[new["task_id"]]["reference_answer"]


# ----------------------------------------------------------------------------- tokenizer + model


def test_tokenizer_round_trips_and_matches_the_policys_chat_ids(demos, tokenizer):
    rows, _ = demos
    prompt = rows[0]["prompt"]
    assert tokenizer.decode(tokenizer(prompt, add_special_tokens=False).input_ids) == prompt
    ids = chat_ids(tokenizer, prompt)
    assert ids == tokenizer(chat_text(prompt), add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == chat_text(prompt)
    assert len(tokenizer) == 512 and tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    digits = tokenizer.convert_ids_to_tokens(tokenizer("click [12]", add_special_tokens=False).input_ids)
    assert digits[-3:] == ["1", "2", "]"]
    again = tokenizer_from_demos(rows, vocab_size=512)
    assert again.get_vocab() == tokenizer.get_vocab()
    with pytest.raises(ValueError, match="vocab_size must be at least 259"):
        tokenizer_from_demos(rows, vocab_size=100)


def test_model_folder_loads_with_auto_classes(tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM, GenerationConfig

    from rlinf.data.tokenizer import load_tokenizer
    from toolkits.web_tasks.make_model import make_model

    out = make_model(tokenizer, tmp_path / "base", "tiny", seed=1, max_positions=512)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert (model.config.hidden_size, model.config.num_hidden_layers, model.config.vocab_size,
            model.config.max_position_embeddings) == (128, 3, 512, 512)
    assert GenerationConfig.from_pretrained(out).max_new_tokens == 24
    loaded = load_tokenizer(str(out))
    assert loaded.get_vocab() == tokenizer.get_vocab() and loaded.chat_template == tokenizer.chat_template
    with pytest.raises(ValueError, match="size: unknown model size 'huge'"):
        make_model(tokenizer, tmp_path / "x", "huge")


def test_a_short_warm_start_lowers_the_loss_and_is_deterministic(demos, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    from toolkits.web_tasks.make_model import make_model
    from toolkits.web_tasks.warm_start import encode_demos, mean_loss, warm_start

    rows, _ = demos
    base = make_model(tokenizer, tmp_path / "base", "tiny", seed=0, max_positions=512)
    before = mean_loss(AutoModelForCausalLM.from_pretrained(base), tokenizer, rows)
    res = warm_start(base, rows, tmp_path / "warm", steps=12, batch_size=8, lr=3e-3, warmup=2, log_every=0)
    after = mean_loss(AutoModelForCausalLM.from_pretrained(tmp_path / "warm"), tokenizer, rows)
    assert after < 0.75 * before, (before, after)
    assert res["rows"] == len(rows) and len(res["losses"]) == 12
    again = warm_start(base, rows, None, steps=1, batch_size=8, lr=3e-3, warmup=2, log_every=0)
    assert again["losses"][0] == res["losses"][0]  # same initial weights, same first batch
    ids, n = encode_demos(tokenizer, rows[:1])[0]
    assert ids[:n] == chat_ids(tokenizer, rows[0]["prompt"]) and ids[-1] == tokenizer.eos_token_id
    small = AutoModelForCausalLM.from_pretrained(base)
    small.config.max_position_embeddings = 16
    small.save_pretrained(tmp_path / "short")
    tokenizer.save_pretrained(tmp_path / "short")
    with pytest.raises(ValueError, match="more than the model's max_position_embeddings 16"):
        warm_start(tmp_path / "short", rows, None, steps=1)


# ----------------------------------------------------------------------------- evaluation + prepare


def test_evaluate_runs_the_policy_in_the_browser(tokenizer, tmp_path):
    _need_chromium()
    from toolkits.web_tasks.evaluate import evaluate_model, judge
    from toolkits.web_tasks.make_model import make_model

    out = make_model(tokenizer, tmp_path / "base", "tiny", seed=0, max_positions=512)
    tasks = _tasks(TEST, "shop_price", 2)
    res = asyncio.run(evaluate_model(out, tasks))
    assert res["tasks"] == 2 and len(res["trajectories"]) == 2
    for traj in res["trajectories"]:
        assert 1 <= len(traj["steps"]) <= 4 and traj["status"] in ("answered", "max_steps")
        assert traj["reward"] == float(judge(traj["task"], traj["answer"])["success"])
        assert traj["steps"][0]["observation"]["url"].endswith(traj["task"]["start_url"])
    assert 0.0 <= res["success_rate"] <= 1.0 and sum(res["statuses"].values()) == 2
    assert judge({"reference_answer": "$5.00"}, " $5.00 ") == {"success": True, "exact": True}
    assert judge({"reference_answer": "$5.00"}, None) == {"success": False, "exact": False}


@pytest.mark.slow
def test_prepare_builds_once_and_then_returns_at_once(tmp_path):
    _need_chromium()
    from toolkits.web_tasks.prepare import Settings, prepare

    lines = DEMO_TRAIN.read_text().splitlines()[:3]
    (tmp_path / "train.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "test.jsonl").write_text("\n".join(DEMO_TEST.read_text().splitlines()[:2]) + "\n")
    s = Settings(train_tasks=str(tmp_path / "train.jsonl"), test_tasks=str(tmp_path / "test.jsonl"), repeats=1,
                 guess_share=0.0, size="tiny", vocab_size=400, max_positions=512, steps=2, batch_size=4)
    logs: list[str] = []
    stamp = prepare(tmp_path / "out", s, log=logs.append)
    assert (tmp_path / "out" / "warm" / "config.json").is_file() and (tmp_path / "out" / "demos.jsonl").is_file()
    r = stamp["results"]
    assert r["held_out"]["tasks"] == 2 and r["demo_rows"] == 6 and r["lengths"]["prompt_max"] < 512
    assert r["held_out_sampled"]["tasks"] == 2 * 4 and r["augmented_rows"] == 3 * 3  # 3 answers x 3 copies
    started = time.perf_counter()
    assert prepare(tmp_path / "out", s, log=logs.append) == stamp
    assert time.perf_counter() - started < 2.0
    with pytest.raises(ValueError, match="max_positions 64 is less than the longest prompt"):
        prepare(tmp_path / "out2", Settings(**{**s.__dict__, "max_positions": 64}), log=logs.append)
    torch.set_num_threads(2)
