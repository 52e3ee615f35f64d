"""Reward workers: score responses (rule-based math verification for now)."""
