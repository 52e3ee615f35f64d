"""Local assets for the web-agent job: the task-file generator (:mod:`.make_tasks`), and beside it
the tiny web policy's helpers (docs/web_agent.md)."""
