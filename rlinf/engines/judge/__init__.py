"""Clients of OpenAI-compatible chat endpoints used as judges (LLM-as-a-judge rewards)."""
