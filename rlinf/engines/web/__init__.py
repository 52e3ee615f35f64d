"""Web-agent engine: the action grammar, the browser host over Playwright / Chromium, its HTTP
server and client (docs/web_agent.md). The sites it browses in tests and demos are shipped in
:mod:`rlinf.envs.web_sites`, the task files are read by :mod:`rlinf.data.web_tasks`, and the
judges of trajectories live in :mod:`rlinf.rewards`."""
