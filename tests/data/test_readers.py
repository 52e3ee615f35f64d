"""Prompt data in JSONL, JSON, CSV and parquet, text or chat prompts; errors name file and row."""

from __future__ import annotations

import json

import pytest

from rlinf.data.readers import prompt_text, read_rows

ROWS = [{"question": "1+1", "answer": 2}, {"question": "2+3", "answer": "5"}]
EXPECTED = [{"prompt": "1+1", "answer": "2"}, {"prompt": "2+3", "answer": "5"}]


def test_every_format_gives_the_same_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    (tmp_path / "a.json").write_text(json.dumps(ROWS))
    (tmp_path / "b.json").write_text(json.dumps({"data": ROWS}))
    (tmp_path / "a.csv").write_text("question,answer\n1+1,2\n2+3,5\n")
    pq.write_table(pa.Table.from_pylist([{"question": r["question"], "answer": str(r["answer"])} for r in ROWS]),
                   tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.json", "b.json", "a.csv", "a.parquet"):
        assert read_rows([str(tmp_path / name)], "question", "answer") == EXPECTED, name


def test_chat_messages_rows(tmp_path):
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1?"}]
    (tmp_path / "c.jsonl").write_text(json.dumps({"messages": chat, "answer": "2"}) + "\n")
    rows = read_rows([str(tmp_path / "c.jsonl")], "prompt", "answer", messages_key="messages")
    assert rows == [{"prompt": chat, "answer": "2"}] and prompt_text(rows[0]["prompt"]) == "1+1?"
    (tmp_path / "bad.jsonl").write_text(json.dumps({"messages": [{"role": "user"}], "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: 'messages' must be a non-empty list"):
        read_rows([str(tmp_path / "bad.jsonl")], "prompt", "answer", messages_key="messages")


def test_errors_name_the_file_and_row(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"prompt": "x", "answer": "1"}\n{"prompt": "y"}\n')
    with pytest.raises(ValueError, match=r"a.jsonl:2: row has no 'answer' key \(data.answer_key\)"):
        read_rows([str(tmp_path / "a.jsonl")], "prompt", "answer")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="unknown data format '.txt'"):
        read_rows([str(tmp_path / "a.txt")], "prompt", "answer")
    (tmp_path / "broken.json").write_text('[{"prompt": ')
    with pytest.raises(ValueError, match=r"broken.json:1: not JSON"):
        read_rows([str(tmp_path / "broken.json")], "prompt", "answer")
