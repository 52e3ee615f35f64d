"""Tests of the web-agent engine (docs/web_agent.md)."""
