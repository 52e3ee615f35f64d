"""Local assets for the tool-using agent (examples/tool_agent): a synthetic corpus of invented
facts for the ``search`` tool and questions answerable only from it (:mod:`.make_corpus`)."""
