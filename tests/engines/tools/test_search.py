"""The search tool (BM25 over a JSONL corpus) and the shipped synthetic corpus with its questions."""

from __future__ import annotations

import json
import pickle
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from rlinf.engines.tools.base import ToolSession
from rlinf.engines.tools.search import CorpusError, SearchTool, load_corpus
from rlinf.utils.typed_config import ConfigError, parse_section
from toolkits.tool_agent.make_corpus import build

DATA = Path(__file__).resolve().parents[3] / "examples" / "tool_agent" / "data"
ROWS = [
    {"id": "a", "title": "Velmora", "text": "Velmora is a city founded in 1742 on the Quell river."},
    {"id": "b", "title": "Zorvex", "text": "Zorvex is a planet with twelve moons; its capital is Ardun."},
    {"id": "c", "title": "Ardun", "text": "Ardun is the capital city of Zorvex. " + "Long text here. " * 60},
]


def write(tmp_path: Path, lines: list[str], name: str = "corpus.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make(tmp_path: Path, rows=ROWS, **options) -> SearchTool:
    path = write(tmp_path, [json.dumps(r) for r in rows])
    tool = SearchTool(parse_section(SearchTool.Options, {"corpus_path": str(path), **options}, "tools.search"))
    tool.check("tools.search")
    return tool


def ask(tool: SearchTool, query: str):
    return tool.call({"query": query}, ToolSession())


def test_result_lines_rank_and_top_k(tmp_path):
    tool = make(tmp_path, top_k=2)
    result = ask(tool, "capital of Zorvex")
    lines = result.text.split("\n")
    assert result.status == "ok" and len(lines) == 2 and result.info["hits"] == 2.0
    assert lines[0].startswith("Doc 1 (Title: ") and lines[1].startswith("Doc 2 (Title: ")
    assert {line.split(")")[0] for line in lines} == {"Doc 1 (Title: Zorvex", "Doc 2 (Title: Ardun"}
    velmora = ask(tool, "When was Velmora founded?")
    assert velmora.text == "Doc 1 (Title: Velmora) Velmora is a city founded in 1742 on the Quell river."


def test_passages_are_cut_to_the_limit(tmp_path):
    tool = make(tmp_path, max_chars_per_passage=40)
    text = ask(tool, "Ardun long text").text.split("\n")[0]
    shown = text.split(") ", 1)[1]
    assert shown.endswith("...") and len(shown) <= 40
    assert shown == "Ardun is the capital city of Zorvex..."


def test_empty_query_and_no_hit(tmp_path):
    tool = make(tmp_path)
    empty = ask(tool, "   ")
    assert empty.status == "error" and "query is empty" in empty.text
    for query in ("unrelated gibberish", "the of and", "?!"):
        result = ask(tool, query)
        assert (result.text, result.status) == ("No results.", "ok")


@pytest.mark.parametrize("lines, problem", [
    (['{"title": "A", "text": "x"}', "{not json"], "line 2: not JSON"),
    (['{"title": "A"}'], "line 1: 'text' is missing"),
    (['{"title": 3, "text": "x"}'], "line 1: 'title' must be a string, got int"),
    (['[1, 2]'], "line 1: expected an object"),
    (['{"title": "A", "text": "x", "id": true}'], "line 1: 'id' must be a string or an integer"),
    (["", "  "], "no passages (the file is empty)"),
])
def test_check_names_key_file_and_line(tmp_path, lines, problem):
    path = write(tmp_path, lines)
    tool = SearchTool(SearchTool.Options(corpus_path=str(path)))
    with pytest.raises(ConfigError) as info:
        tool.check("tools.search")
    assert info.value.key == "tools.search.corpus_path"
    message = str(info.value)
    assert message.startswith(f"tools.search.corpus_path: {path}") and problem in message
    assert "\n" not in message


def test_missing_corpus(tmp_path):
    tool = SearchTool(SearchTool.Options(corpus_path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(ConfigError, match=r"^tools\.search\.corpus_path: .*nope\.jsonl: no such file"):
        tool.check("tools.search")
    result = ask(tool, "anything")  # unchecked: the call answers with the same line
    assert result.status == "error" and "no such file" in result.text


def test_options_are_checked(tmp_path, monkeypatch):
    def options(**raw):
        return parse_section(SearchTool.Options, raw, "tools.search")

    with pytest.raises(ConfigError, match=r"^tools\.search\.corpus_path: missing \(required\)$"):
        options()
    with pytest.raises(ConfigError, match=r"^tools\.search\.top_k: must be at least 1"):
        options(corpus_path="c.jsonl", top_k=0)
    with pytest.raises(ConfigError, match=r"^tools\.search\.stopwords: 'klingon' is not a stopword list"):
        options(corpus_path="c.jsonl", stopwords="klingon")
    monkeypatch.setitem(sys.modules, "Stemmer", None)  # PyStemmer absent
    with pytest.raises(ConfigError, match=r"^tools\.search\.stemmer: stemmer 'english' needs PyStemmer"):
        options(corpus_path="c.jsonl", stemmer="english")
    assert options(corpus_path="c.jsonl", stopwords="none").stemmer == "none"


def test_stopwords_none_keeps_common_words(tmp_path):
    rows = [{"title": "T", "text": "the cat"}, {"title": "U", "text": "a dog"}]
    assert ask(make(tmp_path, rows), "the").text == "No results."
    assert ask(make(tmp_path, rows, stopwords="none"), "the").text == "Doc 1 (Title: T) the cat"


def test_threads_pickle_and_close(tmp_path):
    tool = make(tmp_path)
    queries = ["Velmora", "Zorvex moons", "capital", "Quell river", "nothing here"] * 20
    serial = [ask(make(tmp_path), q).text for q in queries]  # a second tool, built serially
    with ThreadPoolExecutor(8) as executor:  # the first calls race to build the index
        assert list(executor.map(lambda q: ask(tool, q).text, queries)) == serial
    copy = pickle.loads(pickle.dumps(tool))
    assert ask(copy, "Velmora").text == serial[0]
    tool.close()
    assert ask(tool, "Velmora").text == serial[0]  # rebuilt


# --- the shipped corpus and questions ---------------------------------------------------------

def read_jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines()]


def test_shipped_files_are_the_generator_output_and_small():
    passages, train, val = build()
    assert read_jsonl("corpus.jsonl") == passages
    assert read_jsonl("search_qa_train.jsonl") == train
    assert read_jsonl("search_qa_val.jsonl") == val
    assert (len(passages), len(train), len(val)) == (300, 600, 100)
    names = ("corpus.jsonl", "search_qa_train.jsonl", "search_qa_val.jsonl")
    assert sum((DATA / name).stat().st_size for name in names) < 300_000


def test_every_answer_is_in_its_passage_and_val_entities_are_held_out():
    passages = {p.id: p for p in load_corpus(DATA / "corpus.jsonl")}
    train, val = read_jsonl("search_qa_train.jsonl"), read_jsonl("search_qa_val.jsonl")
    for row in train + val:
        assert set(row) == {"prompt", "answer", "doc_id"}
        assert row["answer"] and row["answer"] in passages[row["doc_id"]].text, row
    assert not {r["doc_id"] for r in train} & {r["doc_id"] for r in val}
    assert len({r["prompt"] for r in train + val}) == len(train) + len(val)
    assert len({p.title for p in passages.values()}) == 300


def test_bm25_top3_finds_the_passage_of_nearly_every_question():
    tool = SearchTool(SearchTool.Options(corpus_path=str(DATA / "corpus.jsonl")))
    tool.check("tools.search")
    rows = read_jsonl("search_qa_train.jsonl") + read_jsonl("search_qa_val.jsonl")
    found = sum(row["doc_id"] in [p.id for p, _ in tool.search(row["prompt"])] for row in rows)
    rate = found / len(rows)
    assert rate > 0.9
    assert rate == 1.0  # measured: 700 of 700 (every invented name is in one passage only)
    with pytest.raises(CorpusError):
        load_corpus(DATA / "missing.jsonl")
