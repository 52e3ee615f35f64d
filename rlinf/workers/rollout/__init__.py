"""Rollout workers: generate responses with a rollout engine; take weights from the actor."""
