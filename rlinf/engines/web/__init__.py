"""Web-agent engine: shipped sites, task files, the action grammar, the browser host, its HTTP
server and client (docs/web_agent.md)."""
