"""The ``search`` tool: BM25 retrieval over a local passage corpus, with ``bm25s``.

The corpus is a JSON Lines file, one passage a line: ``{"title": str, "text": str}`` and an
optional ``id`` (string or integer; blank lines are skipped). :meth:`SearchTool.check` (before
Ray) reads it all and refuses a missing file, a bad line or an empty corpus with one line naming
``tools.search.corpus_path``, the file and the line number.

The index is built lazily, by the first call (or earlier by :meth:`SearchTool.load`, e.g. when a
worker starts): building a tool (:func:`~.base.make_tool` runs ``check`` on the driver) stays
cheap and does not import ``bm25s`` (about 1 s of numba import). Reading and indexing take
0.02 s for the shipped 300-passage corpus and about 13 s of CPU (0.5 GB peak) for 100 000
passages of 60 words, measured on a 2-core machine; a large corpus therefore wants :meth:`load`
at start-up, or the first call spends its time limit there (later calls wait on the lock).

Passages and queries are tokenized the same way: lower-cased words of two or more letters,
``stopwords`` removed (a ``bm25s`` language name such as ``en``, or ``none``), optionally stemmed
(``stemmer``: ``none``, or a Snowball language such as ``english`` when PyStemmer is installed).
A call tokenizes the query and scores it under one lock: ``bm25s`` scoring only reads the index,
but a PyStemmer object is not safe to share between threads, and a call takes well under a
millisecond on the shipped corpus, so serialising calls costs nothing that matters.

Result: the ``top_k`` passages with a positive score, best first, one line each:
``Doc 1 (Title: <title>) <text>`` with the text cut to ``max_chars_per_passage`` (ending in
``...`` when cut). No passage shares a word with the query: ``No results.`` (status ``ok``); an
empty query: an error result.

Example:
    >>> import json, os, tempfile
    >>> rows = [{"title": "Velmora", "text": "Velmora is a city founded in 1742."},
    ...         {"title": "Zorvex", "text": "Zorvex is a planet with 12 moons."}]
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write("\\n".join(json.dumps(r) for r in rows))
    >>> tool = SearchTool(SearchTool.Options(corpus_path=f.name, top_k=2))
    >>> tool.check("tools.search")
    >>> print(tool.call({"query": "When was Velmora founded?"}, ToolSession()).text)
    Doc 1 (Title: Velmora) Velmora is a city founded in 1742.
    >>> tool.call({"query": "the of and"}, ToolSession()).text
    'No results.'
    >>> os.unlink(f.name)
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlinf.engines.tools.base import Tool, ToolResult, ToolSession, register_tool
from rlinf.utils.typed_config import ConfigError

__all__ = ["SearchTool", "SearchOptions", "Passage", "CorpusError", "load_corpus"]

#: stopword lists bm25s knows (short and long names), plus "none"
STOPWORDS = ("none", "en", "english", "en_plus", "english_plus", "de", "german", "nl", "dutch", "fr", "french",
             "es", "spanish", "pt", "portuguese", "it", "italian", "ru", "russian", "sv", "swedish", "no",
             "norwegian", "zh", "chinese", "tr", "turkish", "ko", "korean", "da", "danish")


class CorpusError(ValueError):
    """The corpus file is missing, empty or has a bad line (the message names file and line)."""


@dataclass(frozen=True)
class Passage:
    """One passage of the corpus."""

    id: str
    title: str
    text: str


def load_corpus(path: str | Path) -> list[Passage]:
    """The passages of JSON Lines file ``path``; :class:`CorpusError` names the file and line of a
    problem. A passage without ``id`` gets its line number.

    >>> import os, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
    ...     _ = f.write('{"title": "A", "text": "alpha"}\\n\\n{"title": "B"}\\n')
    >>> try:
    ...     load_corpus(f.name)
    ... except CorpusError as exc:
    ...     print(str(exc).replace(f.name, "corpus.jsonl"))
    corpus.jsonl line 3: 'text' is missing; each line needs "title" and "text" strings
    >>> os.unlink(f.name)
    """
    file = Path(path)
    if not file.is_file():
        raise CorpusError(f"{file}: no such file (a JSON Lines corpus, one {{\"title\", \"text\"}} a line)")
    passages = []
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{file}: cannot read ({type(exc).__name__}: {exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{file} line {number}"
        try:
            row: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(row, dict):
            raise CorpusError(f"{where}: expected an object with \"title\" and \"text\", got {type(row).__name__}")
        for key in ("title", "text"):
            if key not in row:
                raise CorpusError(f"{where}: {key!r} is missing; each line needs \"title\" and \"text\" strings")
            if not isinstance(row[key], str):
                raise CorpusError(f"{where}: {key!r} must be a string, got {type(row[key]).__name__}")
        doc_id = row.get("id", number)
        if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
            raise CorpusError(f"{where}: 'id' must be a string or an integer, got {type(doc_id).__name__}")
        passages.append(Passage(str(doc_id), row["title"], row["text"]))
    if not passages:
        raise CorpusError(f"{file}: no passages (the file is empty)")
    return passages


@dataclass(frozen=True)
class SearchOptions:
    """YAML keys under ``tools.search``.

    Attributes:
        corpus_path: the JSON Lines corpus (required; see the module docstring).
        top_k: most passages a call returns.
        max_chars_per_passage: longest passage text shown (cut with ``...``).
        stemmer: ``none``, or a Snowball language (``english``, ...) which needs PyStemmer.
        stopwords: a bm25s stopword list (``en``, ``de``, ... see :data:`STOPWORDS`) or ``none``.
    """

    corpus_path: str
    top_k: int = 3
    max_chars_per_passage: int = 500
    stemmer: str = "none"
    stopwords: str = "en"

    def validate(self, path: str) -> None:
        if self.top_k < 1:
            raise ConfigError(f"{path}.top_k", f"must be at least 1, got {self.top_k}")
        if self.max_chars_per_passage < 20:
            raise ConfigError(f"{path}.max_chars_per_passage", f"must be at least 20, got {self.max_chars_per_passage}")
        if self.stopwords not in STOPWORDS:
            raise ConfigError(f"{path}.stopwords", f"{self.stopwords!r} is not a stopword list bm25s knows; "
                              f"expected one of {', '.join(STOPWORDS)}")
        if self.stemmer != "none":
            _make_stemmer(self.stemmer, f"{path}.stemmer")


def _make_stemmer(language: str, key: str):
    """A PyStemmer stemmer for ``language`` (``stemWord`` per token), or a ConfigError at ``key``."""
    try:
        # lazy: optional extra (agent: bm25s, PyStemmer); a missing one is a ConfigError
        import Stemmer
    except ImportError:
        raise ConfigError(key, f"stemmer {language!r} needs PyStemmer, which is not installed "
                          "(pip install PyStemmer), or use stemmer: none") from None
    if language not in Stemmer.algorithms():
        raise ConfigError(key, f"unknown stemmer {language!r}; PyStemmer has {', '.join(Stemmer.algorithms())}")
    return Stemmer.Stemmer(language).stemWords


def _import_bm25s(key: str):
    try:
        # lazy: optional extra (agent: bm25s, PyStemmer); a missing one is a ConfigError
        import bm25s
    except ImportError:
        raise ConfigError(key, "the search tool needs bm25s, which is not installed "
                          "(pip install 'rlinf[agent]')") from None
    return bm25s


def _cut(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, ending in ``...`` when cut (at a space if one is near)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[:limit - 3]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" .,;:") + "..."


@register_tool
class SearchTool(Tool):
    """BM25 search over a local corpus (see the module docstring)."""

    name = "search"
    description = ("Search a local encyclopedia of passages with keywords and return the best matching "
                   "passages with their titles. Use it for facts you do not know.")
    parameters = {"type": "object",
                  "properties": {"query": {"type": "string", "description": "keywords or a question"}},
                  "required": ["query"], "additionalProperties": False}
    Options = SearchOptions

    def __init__(self, options: SearchOptions):
        super().__init__(options)
        self._lock = threading.Lock()
        self._passages: list[Passage] | None = None
        self._index = None
        self._stem = None

    def __getstate__(self) -> dict:  # a copy (e.g. shipped to a Ray worker) rebuilds its index
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])

    def check(self, path: str) -> None:
        """The corpus reads and has passages; bm25s (and PyStemmer, when asked for) import."""
        _import_bm25s(path)
        try:
            self._passages = load_corpus(self.options.corpus_path)
        except CorpusError as exc:
            raise ConfigError(f"{path}.corpus_path", str(exc)) from None

    def _tokenize(self, bm25s, texts: list[str], ids: bool = False):
        """Token lists of ``texts`` (or, with ``ids``, bm25s's ids and vocabulary: faster to index)."""
        stopwords = None if self.options.stopwords == "none" else self.options.stopwords
        return bm25s.tokenize(texts, stopwords=stopwords, stemmer=self._stem, return_ids=ids, show_progress=False)

    def load(self) -> None:
        """Read the corpus and build the index now (a no-op once built); raises
        :class:`CorpusError` when the corpus is bad."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._index is not None:
            return
        bm25s = _import_bm25s("tools.search")
        if self.options.stemmer != "none":
            self._stem = _make_stemmer(self.options.stemmer, "tools.search.stemmer")
        if self._passages is None:
            self._passages = load_corpus(self.options.corpus_path)
        index = bm25s.BM25()
        index.index(self._tokenize(bm25s, [f"{p.title} {p.text}" for p in self._passages], ids=True),
                    show_progress=False)
        self._index = index

    def search(self, query: str, k: int | None = None) -> list[tuple[Passage, float]]:
        """The best ``k`` (default ``top_k``) passages for ``query`` with a positive score, best first.

        Safe to call from many threads (one lock; see the module docstring).
        """
        # lazy: numpy (~0.1 s) only when searching (bm25s has loaded it then); registering the tool does not
        import numpy as np

        k = self.options.top_k if k is None else k
        with self._lock:
            self._load_locked()
            bm25s = _import_bm25s("tools.search")
            ids = self._index.get_tokens_ids(self._tokenize(bm25s, [query])[0])
            if not ids:
                return []
            scores = self._index.get_scores_from_ids(ids)
        best = np.argsort(-scores, kind="stable")[:k]
        return [(self._passages[i], float(scores[i])) for i in best if scores[i] > 0]

    def start(self) -> None:
        """Build the index in the worker at start (not in the first call's time limit)."""
        self.load()

    def call(self, arguments: dict, session: ToolSession) -> ToolResult:
        query = arguments["query"].strip()
        if not query:
            return ToolResult("Error: the query is empty; give a few keywords.", "error")
        try:
            hits = self.search(query)
        except (CorpusError, ConfigError) as exc:
            return ToolResult(f"Error: search is unavailable: {exc}", "error")
        if not hits:
            return ToolResult("No results.", info={"hits": 0.0})
        limit = self.options.max_chars_per_passage
        lines = [f"Doc {n} (Title: {p.title}) {_cut(p.text, limit)}" for n, (p, _) in enumerate(hits, 1)]
        return ToolResult("\n".join(lines), info={"hits": float(len(hits))})

    def close(self) -> None:
        """Drop the index (a later call builds it again)."""
        with self._lock:
            self._index = None
