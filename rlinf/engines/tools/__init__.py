"""Tools for LLM agents: the interface and registry (:mod:`.base`), the call pool (:mod:`.pool`),
the tool-call formats (:mod:`.formats`) and the shipped tools: ``calculator``, ``python`` (a
sandboxed interpreter) and ``search`` (BM25 over a local corpus)."""
