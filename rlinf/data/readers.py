"""Prompt data files: JSONL, JSON, CSV and parquet rows -> ``{"prompt", "answer"}`` dicts.

The format follows the file's extension: ``.jsonl`` (one object per line), ``.json`` (a list of
objects, or an object holding one such list), ``.csv`` (a header row), ``.parquet`` (needs
pyarrow). The prompt is ``prompt_key``'s text, or, with ``messages_key``, a chat: a list of
``{"role", "content"}`` turns that the tokenizer's chat template renders (seed 001's
``data_args.messages``). A row without the key it needs, or a file in another format, raises
``ValueError`` naming the file (and line or row).

Example:
    >>> import json, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> _ = open(os.path.join(d, "a.json"), "w").write(json.dumps([{"q": "1+1", "a": 2}]))
    >>> read_rows([os.path.join(d, "a.json")], prompt_key="q", answer_key="a")
    [{'prompt': '1+1', 'answer': '2'}]
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator, Sequence
from typing import Any

FORMATS = (".jsonl", ".json", ".csv", ".parquet")


def _records(path: str) -> Iterator[tuple[str, dict]]:
    """``(where, row)`` of every record of ``path``."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".jsonl":
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield f"{path}:{line_no}", json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{path}:{line_no}: not JSON ({exc.msg})") from None
    elif ext == ".json":
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
        if isinstance(data, dict):
            lists = [v for v in data.values() if isinstance(v, list)]
            if len(lists) != 1:
                raise ValueError(f"{path}: a JSON object must hold exactly one list of rows")
            data = lists[0]
        if not isinstance(data, list):
            raise ValueError(f"{path}: expected a list of rows")
        for i, row in enumerate(data):
            yield f"{path}[{i}]", row
    elif ext == ".csv":
        with open(path, encoding="utf-8", newline="") as f:
            for i, row in enumerate(csv.DictReader(f), 2):
                yield f"{path}:{i}", row
    elif ext == ".parquet":
        try:
            # lazy: optional (math extra): pyarrow only for .parquet files
            import pyarrow.parquet as pq
        except ImportError:
            raise ValueError(f"{path}: reading parquet needs pyarrow") from None
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}[{i}]", row
    else:
        raise ValueError(f"{path}: unknown data format {ext!r}; expected one of {', '.join(FORMATS)}")


def _messages(value: Any, where: str, key: str) -> list[dict]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise ValueError(f"{where}: {key!r} is text, not a list of chat turns") from None
    ok = isinstance(value, list) and value and all(
        isinstance(t, dict) and isinstance(t.get("role"), str) and isinstance(t.get("content"), str) for t in value)
    if not ok:
        raise ValueError(f"{where}: {key!r} must be a non-empty list of {{role, content}} turns")
    return [{"role": t["role"], "content": t["content"]} for t in value]


def read_rows(paths: Sequence[str], prompt_key: str, answer_key: str,
              messages_key: str | None = None) -> list[dict]:
    """All rows of ``paths``: ``prompt`` (text, or a list of chat turns with ``messages_key``)
    and ``answer`` (text)."""
    rows = []
    for path in paths:
        for where, row in _records(path):
            if not isinstance(row, dict):
                raise ValueError(f"{where}: a row must be an object, got {type(row).__name__}")
            key = messages_key or prompt_key
            for k in (key, answer_key):
                if k not in row:
                    name = "data.messages_key" if k == messages_key else (
                        "data.prompt_key" if k == prompt_key else "data.answer_key")
                    raise ValueError(f"{where}: row has no {k!r} key ({name})")
            prompt = _messages(row[key], where, key) if messages_key else str(row[key])
            rows.append({"prompt": prompt, "answer": str(row[answer_key])})
    return rows


def prompt_text(prompt: str | list[dict]) -> str:
    """The text a judge or reward model reads for a prompt: the text itself, or the last user
    turn of a chat.

    >>> prompt_text([{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}])
    '2+2?'
    """
    if isinstance(prompt, str):
        return prompt
    users = [t["content"] for t in prompt if t["role"] == "user"]
    return users[-1] if users else prompt[-1]["content"]
